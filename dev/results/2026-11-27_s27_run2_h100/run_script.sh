#!/bin/bash
# session 27 run 2 (H100): v2 (the dQ adds as 2-D TMA reduce-adds at dv = 64 and 128; the float4 atomics removed) in
# the harness and the trainer, against base (main 91db857): harness small, check, racecheck and memcheck of small,
# `time` alternating base / v2 twice; ./test_natsl gpu; memcheck of 2 GNA bf16 340m training steps
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/device.txt
t0=$(date +%s)
timeout 60 stdbuf -oL _cmp/v2/fb small > $L/small.log 2>&1; rc=$?; echo "small rc=$rc"; tail -n 1 $L/small.log
[ $rc -ne 0 ] && { tar -czf $O/logs.tgz -C $O logs; exit 1; }
timeout 120 stdbuf -oL _cmp/v2/fb check > $L/check.log 2>&1; echo "check rc=$?"; grep FAIL $L/check.log | head -3; tail -n 1 $L/check.log
timeout 150 compute-sanitizer --tool racecheck _cmp/v2/fb small > $L/racecheck_small.log 2>&1; echo "racecheck rc=$?"; tail -n 1 $L/racecheck_small.log
timeout 150 compute-sanitizer --tool memcheck _cmp/v2/fb small > $L/memcheck_small.log 2>&1; echo "memcheck small rc=$?"; tail -n 1 $L/memcheck_small.log
for r in 1 2; do for v in base v2; do
  timeout 60 stdbuf -oL _cmp/$v/fb time > $L/time_${v}_$r.log 2>&1; echo "time $v $r rc=$?"
  grep "A causal B8 T4096 16x64  \|frac 1.0  \|T4096 12x64/128 frac 0.25\|A causal B1 T32768\|760m" $L/time_${v}_$r.log | sed 's/ \+/ /g' | sed 's/active [0-9.]* //' | cut -c1-100
done; done
echo "harness: $(( $(date +%s) - t0 )) s"
(cd _cmp/v2 && timeout 300 ./test_natsl gpu) > $L/test_gpu.log 2>&1; echo "test_gpu rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 1 $L/test_gpu.log
(cd _cmp/v2 && timeout 150 compute-sanitizer --tool memcheck ./train_natsl_cu -e 340m -a GNA -b 1 -t 256 -x 2 -v 0 -s 0 -p bf16 -i data/fineweb_edu_train.bin -j data/fineweb_edu_val.bin -o /tmp/mc) > $L/memcheck_train.log 2>&1; echo "memcheck train rc=$?"; tail -n 2 $L/memcheck_train.log | cut -c1-150
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs
