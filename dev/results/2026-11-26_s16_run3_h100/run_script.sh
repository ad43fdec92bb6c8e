#!/bin/bash
# session 16 run 3: run 1's changes plus the GDN op's dout in bf16 (the gated norm writes it so, the bf16 kernels read
# it so). Builds this tree and HEAD's (_cmp/base: 15bd71c) bench_gpu; conv_bench with the fast-silu' variant and an
# ncu of both backward kernels; gdn_chunk test fp32 and all bf16; ./test_natsl gpu. The step benchmarks follow in run 4
# on the same machine. Logs in logs.tgz.
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee $L/device.txt
NV="nvcc -O3 -arch=compute_90a -code=sm_90a -std=c++17 -I."
t0=$(date +%s)
make -j8 train_natsl test_natsl train_natsl_cu > $L/build.log 2>&1 &
$NV dev/bench_gpu.cu -o bench_gpu -lcublasLt -lcublas -lnccl > $L/build_bench.log 2>&1 &
$NV -Xcompiler -fopenmp dev/cuda/gdn/gdn_chunk.cu -o /tmp/gdn_chunk -lcublasLt -lcublas -lnccl > $L/build_gdn.log 2>&1 &
$NV dev/cuda/conv/conv_bench.cu -o /tmp/conv_bench -lcublasLt -lcublas -lnccl > $L/build_conv.log 2>&1 &
(cd _cmp/base && $NV dev/bench_gpu.cu -o bench_gpu -lcublasLt -lcublas -lnccl > $L/build_base_bench.log 2>&1) &
wait; echo "build: $(( $(date +%s) - t0 )) s"; tail -n 2 $L/build*.log | cut -c1-200
/tmp/conv_bench > $L/conv.log 2>&1; echo "conv rc=$?"; grep -E "PASS|FAIL|TIME" $L/conv.log | cut -c1-200
for k in conv_silu_backward_kernel conv_bwd_fast; do
  timeout 90 ncu --section SpeedOfLight --section WarpStateStats --section Occupancy -k regex:$k --launch-skip 1 --launch-count 1 \
    /tmp/conv_bench > $L/ncu_$k.log 2>&1; echo "ncu $k rc=$?"
  grep -E "Duration|Throughput|Achieved Occupancy|Registers|Issue Slots|Executed Ipc|Warp Cycles|No Eligible" $L/ncu_$k.log | head -14
done
OMP_NUM_THREADS=16 timeout 60 /tmp/gdn_chunk test fp32 > $L/gdn_fp32.log 2>&1; echo "gdn fp32 rc=$?"; grep -E "FAIL|CORRECT" $L/gdn_fp32.log
OMP_NUM_THREADS=16 timeout 120 /tmp/gdn_chunk all bf16 > $L/gdn.log 2>&1; echo "gdn rc=$?"; grep -E "FAIL|CORRECT|TIME|kernels" $L/gdn.log | cut -c1-220
timeout 240 ./test_natsl gpu > $L/test_gpu.log 2>&1; echo "test_natsl gpu rc=$?"; grep -iE "passed|fail" $L/test_gpu.log | tail -n 8
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs && rm -rf $L
