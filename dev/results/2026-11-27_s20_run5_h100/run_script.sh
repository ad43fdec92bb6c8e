#!/bin/bash
# session 20 run 5: dev/cuda/norm_bench (new): the trainer's RMSNorm passes at the 340m step's shapes against variants
# (w in shared memory, w in registers, a block per row). Logs in logs.tgz.
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee $L/device.txt
t0=$(date +%s)
nvcc -O3 -arch=compute_90a -code=sm_90a -std=c++17 -I. dev/cuda/norm_bench.cu -o norm_bench -lcublasLt -lcublas -lnccl > $L/build.log 2>&1
echo "build: $(( $(date +%s) - t0 )) s"
./norm_bench > $L/norm_bench.log 2>&1; echo "norm_bench rc=$?"; cat $L/norm_bench.log
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs && rm -rf $L
