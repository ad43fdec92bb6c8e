#!/bin/bash
# session 28 run 6 (H100): main's head (the weight copies): the four patterns' 340m steps (bench_gpu step's default:
# natsl-hybrid, gdn, gdn-hybrid, transformer; bf16, B=8, T=4096) and the tiny main job on the GPU (issue 11: no slower
# than 4 ms/step), 300 steps.
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/device.txt
t0=$(date +%s)
timeout 300 ./bench_gpu step -p bf16 > $L/step_all.log 2>&1; echo "step rc=$?"
grep RESULT $L/step_all.log | sed 's/ \+/ /g' | cut -c1-200
timeout 150 ./train_natsl_cu -x 300 -v 300 -s 0 > $L/main_job.log 2>&1; echo "main job rc=$?"
grep -E "^step +(1|100|200|300)/|val loss" $L/main_job.log | cut -c1-160 | tail -8
echo "total $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs
