#!/bin/bash
# session 28 run 2 (H100): 340m steps alternating main (27f919a, _cmp/bin/bench_gpu_base) and this tree (the weight
# copies, the gate columns' sums batched; run 1's narrow kernels removed): natsl-hybrid three times each, transformer
# twice each; this tree's natsl-hybrid profile with NATSL_PROFILE=2.
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/device.txt
t0=$(date +%s)
for i in 1 2 3; do
  timeout 100 _cmp/bin/bench_gpu_base step -a natsl-hybrid -p bf16 > $L/step_natsl-hybrid_base_$i.log 2>&1
  timeout 100 ./bench_gpu step -a natsl-hybrid -p bf16 > $L/step_natsl-hybrid_new_$i.log 2>&1
done
for i in 1 2; do
  timeout 100 _cmp/bin/bench_gpu_base step -a transformer -p bf16 > $L/step_transformer_base_$i.log 2>&1
  timeout 100 ./bench_gpu step -a transformer -p bf16 > $L/step_transformer_new_$i.log 2>&1
done
for f in $L/step_*.log; do echo "$(basename $f .log): $(grep RESULT $f | sed 's/ \+/ /g' | cut -c1-150)"; done
NATSL_PROFILE=2 timeout 120 ./bench_gpu step -a natsl-hybrid -p bf16 -n 5 > $L/prof2_natsl-hybrid.log 2>&1; echo "prof2 rc=$?"
grep "gdn_gates\|everything\|between\|adamw\|matmul" $L/prof2_natsl-hybrid.log
echo "total $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs
