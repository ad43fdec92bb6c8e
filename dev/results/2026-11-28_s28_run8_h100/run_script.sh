#!/bin/bash
# session 28 run 8 (H100): where gdn_gates_backward's ~63 µs a call go (NATSL_PROFILE=2 times the op, not its kernels):
# ncu's duration of its two kernels (the gate gradients, the column sums) in the first calls of a natsl-hybrid step,
# and of colsum_finish_kernel, at main's head.
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/device.txt
t0=$(date +%s)
timeout 240 ncu --kernel-name regex:"gdn_gates_backward_kernel|colsum_partial_kernel|colsum_finish_kernel" --launch-count 12 \
  --section SpeedOfLight --section LaunchStats --section Occupancy ./bench_gpu step -a natsl-hybrid -p bf16 -n 1 > $L/ncu_gates.log 2>&1
echo "ncu rc=$?"
grep -E "^  [a-z_]+.*\(|Duration|Elapsed Cycles|Grid Size|Block Size|Achieved Occupancy|Registers Per" $L/ncu_gates.log | head -90
echo "total $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs
