#!/bin/bash
# session 29 run 6 (2 H100): dev/multi_gpu_check.sh's equiv part at 0970034's build (each rank times its products'
# candidates in turns; under ZeRO-1 the gradient norm sums each rank's slices with the runs-of-four dot).
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/device.txt
t0=$(date +%s)
NCCL_NVLS_ENABLE=0 timeout 280 dev/multi_gpu_check.sh $L 2 equiv > $L/check.log 2>&1; echo "check rc=$?"
grep -E "^(PASS|FAIL|INFO)" $L/equiv.log
echo "total $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs
