#!/bin/bash
# session 28 run 5 (H100): the conv's staged backward: dev/cuda/conv/conv_bench (correctness against the oracle on a
# shape each form takes, fail fast; time against the thread-per-pair form on the same machine); then 340m natsl-hybrid
# steps alternating main's head (0d00fa8: run 2's build, _cmp/bin/bench_gpu_wc) and this tree, twice each, and this
# tree's profile with NATSL_PROFILE=2.
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/device.txt
t0=$(date +%s)
timeout 120 stdbuf -oL _cmp/bin/conv_bench > $L/conv_bench.log 2>&1; rc=$?; echo "conv_bench rc=$rc"
grep -E "PASS|FAIL|TIME|==" $L/conv_bench.log | cut -c1-160
[ $rc -ne 0 ] && { tar -czf $O/logs.tgz -C $O logs; exit 1; }
for i in 1 2; do
  timeout 100 _cmp/bin/bench_gpu_wc step -a natsl-hybrid -p bf16 > $L/step_natsl-hybrid_wc_$i.log 2>&1
  timeout 100 ./bench_gpu step -a natsl-hybrid -p bf16 > $L/step_natsl-hybrid_new_$i.log 2>&1
done
for f in $L/step_*.log; do echo "$(basename $f .log): $(grep RESULT $f | sed 's/ \+/ /g' | cut -c1-140)"; done
NATSL_PROFILE=2 timeout 120 ./bench_gpu step -a natsl-hybrid -p bf16 -n 5 > $L/prof2_natsl-hybrid.log 2>&1; echo "prof2 rc=$?"
grep "conv_silu\|everything\|between" $L/prof2_natsl-hybrid.log
echo "total $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs
