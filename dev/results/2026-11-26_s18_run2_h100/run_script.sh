#!/bin/bash
# session 18 run 2: run 1's merged input projection (OC = 4620) ran at 190 TFLOP/s: which shape of the merged product
# cuBLASLt runs fast. dev/cuda/gemm_tune with the separate and merged shapes (fp32 output).
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee $L/device.txt
nvcc -O3 -arch=compute_90a -code=sm_90a -std=c++17 dev/cuda/gemm_tune.cu -o /tmp/gemm_tune -lcublasLt -lcublas
/tmp/gemm_tune > $L/gemm_tune.log 2>&1; echo "rc=$?"; cut -c1-200 $L/gemm_tune.log
tar -czf $O/logs.tgz -C $O logs && rm -rf $L
