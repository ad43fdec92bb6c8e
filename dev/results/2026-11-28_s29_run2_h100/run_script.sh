#!/bin/bash
# session 29 run 2 (H100): the products' algorithms chosen from the heuristic's 8 best-fit candidates and every
# algorithm id's configurations, timed in turns (5 rounds, median), and the router's dx pass in blocks of 16 rows:
# ncu of router_dx_kernel; natsl-hybrid step, main's head (da91726, _cmp/bin/bench_gpu_head) and this tree in
# alternation, three each (NATSL_GEMM_REPORT=1 on this tree's).
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/device.txt
t0=$(date +%s)
: # ncu ran in the first try of this run (ncu_router_dx.log)

tar -czf $O/logs.tgz -C $O logs
for i in 1 2 3; do
  timeout 150 _cmp/bin/bench_gpu_head step -a natsl-hybrid -p bf16 > $L/step_${i}_head.log 2>&1
  NATSL_GEMM_REPORT=1 timeout 150 ./bench_gpu step -a natsl-hybrid -p bf16 > $L/step_${i}_new.log 2>&1
  for f in $L/step_${i}_*.log; do echo "$(basename $f .log): $(grep RESULT $f | sed 's/ \+/ /g' | cut -c1-120)"; done
  tar -czf $O/logs.tgz -C $O logs
done
echo "total $(( $(date +%s) - t0 )) s"
