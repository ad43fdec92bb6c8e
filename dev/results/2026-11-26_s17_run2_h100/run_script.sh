#!/bin/bash
# session 17 run 2: bwd_final_bf16's L2-norm fold reworked (dq̂ read back into registers before use, the row strip's two
# warps meeting at a named barrier, ρ in shared memory); the fp32 post-pass on the op's fp32 q̂, k̂. gdn_chunk all bf16,
# test fp32. Logs in logs.tgz.
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee $L/device.txt
NV="nvcc -O3 -arch=compute_90a -code=sm_90a -std=c++17 -I."
t0=$(date +%s)
$NV -Xcompiler -fopenmp dev/cuda/gdn/gdn_chunk.cu -o gdn_chunk -lcublasLt -lcublas -lnccl > $L/build_gdn.log 2>&1
echo "build: $(( $(date +%s) - t0 )) s"; tail -n 2 $L/build*.log | cut -c1-200
./gdn_chunk all bf16 > $L/gdn_bf16.log 2>&1; echo "gdn bf16 rc=$?"; grep -E "FAIL|CORRECTNESS|TIME|kernels" $L/gdn_bf16.log | cut -c1-260
./gdn_chunk test fp32 > $L/gdn_fp32.log 2>&1; echo "gdn fp32 rc=$?"; grep -E "FAIL|CORRECTNESS" $L/gdn_fp32.log | cut -c1-200
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs && rm -rf $L
