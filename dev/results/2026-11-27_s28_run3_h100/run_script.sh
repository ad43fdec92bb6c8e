#!/bin/bash
# session 28 run 3 (H100): the checks of this tree: ./test_natsl gpu; memcheck of 2 GNA bf16 340m training steps (the
# second forward takes the copies AdamW wrote); the attention harness (27f919a's kernels: small, check).
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/device.txt
t0=$(date +%s)
timeout 60 stdbuf -oL _cmp/bin/fb small > $L/fb_small.log 2>&1; echo "fb small rc=$?"; tail -n 1 $L/fb_small.log
timeout 120 stdbuf -oL _cmp/bin/fb check > $L/fb_check.log 2>&1; echo "fb check rc=$?"; grep FAIL $L/fb_check.log | head -3; tail -n 1 $L/fb_check.log
timeout 300 ./test_natsl gpu > $L/test_gpu.log 2>&1; echo "test_gpu rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 1 $L/test_gpu.log
timeout 150 compute-sanitizer --tool memcheck ./train_natsl_cu -e 340m -a GNA -b 1 -t 256 -x 2 -v 0 -s 0 -p bf16 -i data/fineweb_edu_train.bin -j data/fineweb_edu_val.bin -o /tmp/mc > $L/memcheck_train.log 2>&1; echo "memcheck train rc=$?"; tail -n 2 $L/memcheck_train.log | cut -c1-150
echo "total $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs
