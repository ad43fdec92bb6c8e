#!/bin/bash
# session 29 run 4 (H100): main's head (e433c48: the products' algorithms from every id's configurations, timed in
# turns; the router's dx pass by blocks of rows): the natsl-hybrid step's profile with NATSL_PROFILE=2, one plain step
# beside it, and the tiny main job.
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/device.txt
t0=$(date +%s)
timeout 150 ./bench_gpu step -a natsl-hybrid -p bf16 > $L/step_natsl-hybrid.log 2>&1; echo "step rc=$?"
grep RESULT $L/step_natsl-hybrid.log | sed 's/ \+/ /g' | cut -c1-200
NATSL_PROFILE=2 timeout 150 ./bench_gpu step -a natsl-hybrid -p bf16 -n 5 > $L/prof2_natsl-hybrid.log 2>&1; echo "prof2 rc=$?"
grep -E "RESULT|matmul|gdn_op|between|everything|router|adamw|grad_norm" $L/prof2_natsl-hybrid.log | sed 's/ \+/ /g' | cut -c1-160
tar -czf $O/logs.tgz -C $O logs
timeout 150 ./train_natsl_cu -x 300 -v 300 -s 0 > $L/main_job.log 2>&1; echo "main job rc=$?"
grep -E "^step +(1|100|200|300)/|val loss" $L/main_job.log | cut -c1-160 | tail -8
echo "total $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs
