#!/bin/bash
# session 28 run 9 (H100): the column sums with 32 row-threads a block (was 8): ncu of the gates' column sums and the
# finishes (as run 8); ./test_natsl gpu; one natsl-hybrid step pair, main's head (cdcebf5, _cmp/bin/bench_gpu_head)
# then this tree.
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/device.txt
t0=$(date +%s)
timeout 120 ncu --kernel-name regex:"gdn_gates_backward_kernel|colsum_partial_kernel|colsum_finish_kernel" --launch-count 12 \
  --section SpeedOfLight --section LaunchStats ./bench_gpu step -a natsl-hybrid -p bf16 -n 1 > $L/ncu_gates.log 2>&1
echo "ncu rc=$?"; grep -E "^  [a-z_ ]+.*\(|Duration" $L/ncu_gates.log | sed 's/(float \*.*) (/(/; s/, Context.*//' | paste - - | cut -c1-150
tar -czf $O/logs.tgz -C $O logs
timeout 300 ./test_natsl gpu > $L/test_gpu.log 2>&1; echo "test_gpu rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 1 $L/test_gpu.log
tar -czf $O/logs.tgz -C $O logs
timeout 100 _cmp/bin/bench_gpu_head step -a natsl-hybrid -p bf16 > $L/step_natsl-hybrid_head.log 2>&1
timeout 100 ./bench_gpu step -a natsl-hybrid -p bf16 > $L/step_natsl-hybrid_new.log 2>&1
for f in $L/step_*.log; do echo "$(basename $f .log): $(grep RESULT $f | sed 's/ \+/ /g' | cut -c1-120)"; done
echo "total $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs
