#!/bin/bash
# session 28 run 4 (2 H100): the weight copies on several GPUs (ZeRO-1 leaves them stale after the gather; the next
# pass remakes them): dev/multi_gpu_check.sh's equiv part (1 GPU against 2, fp32 and bf16, -z 0 and -z 1).
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/device.txt
t0=$(date +%s)
NCCL_NVLS_ENABLE=0 timeout 500 dev/multi_gpu_check.sh $L 2 equiv > $L/check.log 2>&1; echo "check rc=$?"
grep -E "^(PASS|FAIL|INFO)" $L/equiv.log
echo "total $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs
