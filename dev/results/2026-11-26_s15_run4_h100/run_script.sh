#!/bin/bash
# session 15 run 4: the wgmma forward with three tile buffers (P V waited for with the next S), the wgmma backward at
# 3 blocks an SM for dv = 64 (variant): flash_bf16 all. Logs in logs.tgz.
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee $L/device.txt
t0=$(date +%s)
nvcc -O3 -arch=compute_90a -code=sm_90a -std=c++17 -I. -Xcompiler -fopenmp dev/cuda/attention/flash_bf16.cu -o /tmp/flash_bf16 -lcublasLt -lcublas -lnccl > $L/build_flash.log 2>&1
echo "build: $(( $(date +%s) - t0 )) s"; tail -n 2 $L/build*.log
OMP_NUM_THREADS=16 timeout 200 /tmp/flash_bf16 all > $L/flash.log 2>&1; echo "flash_bf16 rc=$?"; grep -E "FAIL|CORRECTNESS|TFLOP" $L/flash.log | cut -c1-200
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs && rm -rf $L
