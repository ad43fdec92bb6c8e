#!/bin/bash
# session 30 run 6: run 5 came on an H200, with no baseline for the gated norm: ncu of gated_norm_backward_kernel in a
# gdn step, fdfd476 (_cmp/bin/bench_gpu_fdfd476: rows of 4624) and this tree (rows of 4672) alternating, one machine.
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/device.txt
t0=$(date +%s)
for b in _cmp/bin/bench_gpu_fdfd476 ./bench_gpu; do
  n=$(basename $b)
  timeout 80 ncu --kernel-name regex:"gated_norm_backward_kernel" --launch-count 2 --section SpeedOfLight $b step -a gdn -p bf16 -n 1 > $L/ncu_$n.log 2>&1
  echo "ncu $n rc=$?"; grep -E "Duration|DRAM Throughput" $L/ncu_$n.log | sed 's/ \+/ /g'
  tar -czf $O/logs.tgz -C $O logs
done
echo "total $(( $(date +%s) - t0 )) s"
