#!/bin/bash
# session 25 run 9 (H100): more samples of the A layer, 7367a6c (_cmp/base) against the kept change (_cmp/bulk,
# de1694b: same kernels as main's HEAD), alternating three times; one natsl-hybrid step run of each (issue 11)
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/device.txt
for r in 1 2 3; do for v in base bulk; do
  (cd _cmp/$v && timeout 60 ./bench_gpu layer -n 10) >> $L/layer_$v.log 2>&1; echo "layer $v $r rc=$?"
  grep RESULT $L/layer_$v.log | grep "layer A B=8" | tail -n 1 | cut -c1-120
done; done
for v in base bulk; do
  (cd _cmp/$v && timeout 60 ./bench_gpu step -a natsl-hybrid -p bf16 -n 5) >> $L/step_$v.log 2>&1; echo "step $v rc=$?"
  grep RESULT $L/step_$v.log | tail -n 1 | cut -c1-150
done
tar -czf $O/logs.tgz -C $O logs
