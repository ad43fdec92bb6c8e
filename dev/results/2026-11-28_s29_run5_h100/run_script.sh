#!/bin/bash
# session 29 run 5 (H100): the dot products (the gradient norm) in runs of four values a thread: ncu of
# dot_partial_kernel, e433c48's (_cmp/bin/bench_gpu_e433c48) and this tree's; ./test_natsl gpu; one natsl-hybrid step
# pair, e433c48 then this tree.
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/device.txt
t0=$(date +%s)
for b in _cmp/bin/bench_gpu_e433c48 ./bench_gpu; do
  n=$(basename $b)
  timeout 90 ncu --kernel-name regex:"dot_partial_kernel" --launch-count 1 --section SpeedOfLight $b step -a natsl-hybrid -p bf16 -n 1 > $L/ncu_dot_$n.log 2>&1
  echo "ncu $n rc=$?"; grep -E "Duration|DRAM Throughput" $L/ncu_dot_$n.log
done
tar -czf $O/logs.tgz -C $O logs
timeout 320 ./test_natsl gpu > $L/test_gpu.log 2>&1; echo "test_gpu rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 1 $L/test_gpu.log
tar -czf $O/logs.tgz -C $O logs
timeout 100 _cmp/bin/bench_gpu_e433c48 step -a natsl-hybrid -p bf16 > $L/step_natsl-hybrid_e433c48.log 2>&1
timeout 100 ./bench_gpu step -a natsl-hybrid -p bf16 > $L/step_natsl-hybrid_new.log 2>&1
for f in $L/step_*.log; do echo "$(basename $f .log): $(grep RESULT $f | sed 's/ \+/ /g' | cut -c1-120)"; done
echo "total $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs
