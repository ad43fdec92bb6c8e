#!/bin/bash
# session 15 run 8: one mixer layer fwd+bwd (bench_gpu layer: A, G, N at T = 4096 / 16384 / 32768) and ncu speed of
# light of the wgmma attention kernels in the A layer's shape (flash_bf16 prof).
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee $L/device.txt
NV="nvcc -O3 -arch=compute_90a -code=sm_90a -std=c++17 -I."
t0=$(date +%s)
$NV -lineinfo -Xcompiler -fopenmp dev/cuda/attention/flash_bf16.cu -o /tmp/flash_bf16 -lcublasLt -lcublas -lnccl > $L/build_flash.log 2>&1 &
$NV dev/bench_gpu.cu -o bench_gpu -lcublasLt -lcublas -lnccl > $L/build_bench.log 2>&1 &
wait; echo "build: $(( $(date +%s) - t0 )) s"; tail -n 2 $L/build*.log
timeout 240 ./bench_gpu layer > $L/layer.log 2>&1; echo "bench layer rc=$?"; grep -E "RESULT|device" $L/layer.log
timeout 120 ncu --section SpeedOfLight --section Occupancy -k regex:"fa_(fwd|bwd)_wgmma" /tmp/flash_bf16 prof > $L/ncu.log 2>&1; echo "ncu rc=$?"
grep -E "^  fa_|Duration|Throughput|Achieved Occupancy" $L/ncu.log | head -30
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs && rm -rf $L
