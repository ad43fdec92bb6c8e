#!/bin/bash
# session 16 run 1: the conv backward's dw partials per block, the GDN op's output in bf16, the gate kept per layer.
# Builds this tree and HEAD's (_cmp/base: 15bd71c) bench_gpu and conv_bench; conv_bench in both; gdn_chunk all bf16;
# ./test_natsl gpu. (The step benchmarks follow in run 2 on the same machine.) Logs in logs.tgz.
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee $L/device.txt
NV="nvcc -O3 -arch=compute_90a -code=sm_90a -std=c++17 -I."
t0=$(date +%s)
make -j8 train_natsl test_natsl train_natsl_cu > $L/build.log 2>&1 &
$NV dev/bench_gpu.cu -o bench_gpu -lcublasLt -lcublas -lnccl > $L/build_bench.log 2>&1 &
$NV -Xcompiler -fopenmp dev/cuda/gdn/gdn_chunk.cu -o /tmp/gdn_chunk -lcublasLt -lcublas -lnccl > $L/build_gdn.log 2>&1 &
$NV dev/cuda/conv/conv_bench.cu -o /tmp/conv_bench -lcublasLt -lcublas -lnccl > $L/build_conv.log 2>&1 &
(cd _cmp/base && $NV dev/bench_gpu.cu -o bench_gpu -lcublasLt -lcublas -lnccl > $L/build_base_bench.log 2>&1) &
(cd _cmp/base && $NV dev/cuda/conv/conv_bench.cu -o /tmp/conv_bench_base -lcublasLt -lcublas -lnccl > $L/build_base_conv.log 2>&1) &
wait; echo "build: $(( $(date +%s) - t0 )) s"; tail -n 2 $L/build*.log | cut -c1-200
/tmp/conv_bench > $L/conv.log 2>&1; echo "conv rc=$?"; /tmp/conv_bench_base > $L/conv_base.log 2>&1; echo "conv base rc=$?"
grep -E "PASS|FAIL|TIME" $L/conv.log $L/conv_base.log | cut -c1-200
OMP_NUM_THREADS=16 timeout 120 /tmp/gdn_chunk all bf16 > $L/gdn.log 2>&1; echo "gdn rc=$?"; grep -E "FAIL|CORRECT|TIME|kernels" $L/gdn.log | cut -c1-220
timeout 240 ./test_natsl gpu > $L/test_gpu.log 2>&1; echo "test_natsl gpu rc=$?"; grep -iE "passed|fail" $L/test_gpu.log | tail -n 8
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs && rm -rf $L
