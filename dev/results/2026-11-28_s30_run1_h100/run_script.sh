#!/bin/bash
# session 30 run 1 (H100): one product for a G/N layer's input gradients (d proj | d gate | d ab in rows of gdn_in_ld,
# [W_qkv; W_g; W_ab; 0] as one weight): memcheck of 2 GNA bf16 340m training steps; ./test_natsl gpu; natsl-hybrid
# and gdn steps, main's head (4bcd756, _cmp/bin/bench_gpu_head) and this tree alternating, NATSL_GEMM_REPORT=1 on the first.
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/device.txt
t0=$(date +%s)
timeout 150 compute-sanitizer --tool memcheck ./train_natsl_cu -e 340m -a GNA -b 1 -t 256 -x 2 -v 0 -s 0 -p bf16 -i data/fineweb_edu_train.bin -j data/fineweb_edu_val.bin -o /tmp/mc > $L/memcheck_train.log 2>&1; echo "memcheck train rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 2 $L/memcheck_train.log | cut -c1-150
tar -czf $O/logs.tgz -C $O logs
NATSL_GEMM_REPORT=1 timeout 100 ./bench_gpu step -a natsl-hybrid -p bf16 > $L/step_natsl-hybrid_new1.log 2>&1
grep "k=4624\|n=4620\|RESULT" $L/step_natsl-hybrid_new1.log | head -5 | cut -c1-220
timeout 320 ./test_natsl gpu > $L/test_gpu.log 2>&1; echo "test_gpu rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 1 $L/test_gpu.log
tar -czf $O/logs.tgz -C $O logs
for i in 1 2; do
  [ $(( $(date +%s) - t0 )) -gt 500 ] && break
  timeout 100 _cmp/bin/bench_gpu_head step -a natsl-hybrid -p bf16 > $L/step_natsl-hybrid_head$i.log 2>&1
  timeout 100 ./bench_gpu step -a natsl-hybrid -p bf16 > $L/step_natsl-hybrid_new$((i + 1)).log 2>&1
done
for f in $L/step_*.log; do echo "$(basename $f .log): $(grep RESULT $f | sed 's/ \+/ /g' | cut -c1-160)"; done
echo "total $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs
