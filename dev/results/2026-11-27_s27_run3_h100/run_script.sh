#!/bin/bash
# session 27 run 3 (H100, run 2's machine): v2 against base in the trainer: `bench_gpu layer -n 10` alternating twice,
# transformer and natsl-hybrid steps alternating, a profile of v2's natsl-hybrid step
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/device.txt
t0=$(date +%s)
for r in 1 2; do for v in base v2; do
  (cd _cmp/$v && timeout 60 ./bench_gpu layer -n 10) >> $L/layer_$v.log 2>&1; echo "layer $v $r rc=$?"
  grep RESULT $L/layer_$v.log | grep "layer A B=8\|T=32768 softmax-frac 0.25\|T=32768 softmax-frac 0.11\|T=32768 softmax-frac 1.00\|layer A B=1\|B=8 T= 4096 softmax-frac router\|ratio T=32768" | tail -n 7 | cut -c1-130
done; done
for a in transformer natsl-hybrid; do for v in base v2; do
  (cd _cmp/$v && timeout 90 ./bench_gpu step -a $a -p bf16 -n 5) >> $L/step_${a}_$v.log 2>&1; echo "step $a $v rc=$?"
  grep RESULT $L/step_${a}_$v.log | tail -n 1 | cut -c1-160
done; done
(cd _cmp/v2 && NATSL_PROFILE=1 timeout 120 ./bench_gpu step -a natsl-hybrid -p bf16 -n 5) > $L/prof_natsl-hybrid.log 2>&1; echo "prof rc=$?"; grep -A12 "profile" $L/prof_natsl-hybrid.log | cut -c1-80
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs
