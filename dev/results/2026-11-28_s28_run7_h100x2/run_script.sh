#!/bin/bash
# session 28 run 7 (2 H100): dev/multi_gpu_check.sh with the 340m fp32 check's bars from its reordering floor (the
# -b 2 vs -b 1 line), at main's head (8be668c's build): its equiv part.
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/device.txt
t0=$(date +%s)
NCCL_NVLS_ENABLE=0 timeout 500 dev/multi_gpu_check.sh $L 2 equiv > $L/check.log 2>&1; echo "check rc=$?"
grep -E "^(PASS|FAIL|INFO)" $L/equiv.log
echo "total $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs
