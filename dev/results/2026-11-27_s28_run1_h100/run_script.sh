#!/bin/bash
# session 28 run 1 (H100): the narrow products' kernels against their oracle and cuBLAS (narrow_bench, fail fast); then
# 340m steps alternating main (27f919a, _cmp/bin/bench_gpu_base) and this tree (the weight copies, the narrow kernels):
# natsl-hybrid twice each, transformer once each; this tree's natsl-hybrid profile with NATSL_PROFILE=2 (no waits: the
# launch gaps) and =1.
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/device.txt
t0=$(date +%s)
timeout 120 stdbuf -oL _cmp/bin/narrow_bench > $L/narrow.log 2>&1; rc=$?; echo "narrow rc=$rc"; cat $L/narrow.log | cut -c1-230
[ $rc -ne 0 ] && { tar -czf $O/logs.tgz -C $O logs; exit 1; }
for i in 1 2; do
  timeout 100 _cmp/bin/bench_gpu_base step -a natsl-hybrid -p bf16 > $L/step_natsl-hybrid_base_$i.log 2>&1
  timeout 100 ./bench_gpu step -a natsl-hybrid -p bf16 > $L/step_natsl-hybrid_new_$i.log 2>&1
done
timeout 100 _cmp/bin/bench_gpu_base step -a transformer -p bf16 > $L/step_transformer_base.log 2>&1
timeout 100 ./bench_gpu step -a transformer -p bf16 > $L/step_transformer_new.log 2>&1
grep -h "RESULT" $L/step_*.log | sed 's/ \+/ /g' | cut -c1-200
NATSL_PROFILE=2 timeout 120 ./bench_gpu step -a natsl-hybrid -p bf16 -n 5 > $L/prof2_natsl-hybrid.log 2>&1; echo "prof2 rc=$?"
NATSL_PROFILE=1 timeout 120 ./bench_gpu step -a natsl-hybrid -p bf16 -n 5 > $L/prof1_natsl-hybrid.log 2>&1; echo "prof1 rc=$?"
head -14 $L/prof2_natsl-hybrid.log | tail -10; grep "everything\|between" $L/prof2_natsl-hybrid.log $L/prof1_natsl-hybrid.log
echo "total $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs
