#!/bin/bash
# session 30 run 4 (H100): why the gated norm's backward took 5.77 ms a step in run 3's profile (5.22 in session 29):
# ncu of gated_norm_backward_kernel and gdn_gates_backward_kernel in a gdn step, main at 4bcd756
# (_cmp/bin/bench_gpu_head: dgate in rows of its own) and at fdfd476 (dgate's rows strided, gdn_in_ld), alternating.
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/device.txt
t0=$(date +%s)
for b in _cmp/bin/bench_gpu_head ./bench_gpu _cmp/bin/bench_gpu_head ./bench_gpu; do
  n=$(basename $b)_$(( $(date +%s) - t0 ))
  timeout 120 ncu --kernel-name regex:"gated_norm_backward_kernel|gdn_gates_backward_kernel" --launch-count 4 --section SpeedOfLight --section LaunchStats --section Occupancy $b step -a gdn -p bf16 -n 1 > $L/ncu_$n.log 2>&1
  echo "ncu $n rc=$?"; grep -E "gated_norm_backward_kernel|gdn_gates_backward_kernel|Duration|DRAM Throughput|Achieved Occupancy|Registers Per" $L/ncu_$n.log | sed 's/ \+/ /g' | cut -c1-110
  tar -czf $O/logs.tgz -C $O logs
done
echo "total $(( $(date +%s) - t0 )) s"
