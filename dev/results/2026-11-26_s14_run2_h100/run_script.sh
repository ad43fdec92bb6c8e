#!/bin/bash
# session 14 run 2: the conv forward loading eight rows at a time (uncommitted on 2f863c2): conv_bench, GPU tests,
# the step's profile; ncu (speed of light, warp stalls, occupancy, memory) of every bf16 GDN kernel at the 340m size
# and of the conv backward. Every log goes back in logs.tgz.
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee $L/device.txt
NV="nvcc -O3 -arch=sm_90 -std=c++17 -I."
t0=$(date +%s)
left() { echo $(( 580 - ($(date +%s) - t0) )); }
make -j8 train_natsl test_natsl train_natsl_cu > $L/build.log 2>&1 &
$NV dev/bench_gpu.cu -o bench_gpu -lcublasLt -lcublas -lnccl > $L/build_bench.log 2>&1 &
$NV dev/cuda/gdn/gdn_chunk.cu -o /tmp/gdn_chunk -lcublasLt -lcublas -lnccl > $L/build_gdn.log 2>&1 &
$NV dev/cuda/conv/conv_bench.cu -o /tmp/conv_bench -lcublasLt -lcublas -lnccl > $L/build_conv.log 2>&1 &
wait; echo "build: $(( $(date +%s) - t0 )) s"; tail -n 2 $L/build*.log
timeout 60 /tmp/conv_bench > $L/conv.log 2>&1; echo "conv_bench rc=$?"; grep -E "PASS|FAIL|TIME" $L/conv.log
(NATSL_PROFILE=1 timeout 100 ./bench_gpu step -a natsl-hybrid -p bf16 -n 5) > $L/step.log 2>&1; echo "step rc=$?"
grep RESULT $L/step.log; sed -n '/^profile/,$p' $L/step.log | head -34
S="--section SpeedOfLight --section WarpStateStats --section Occupancy --section MemoryWorkloadAnalysis --section LaunchStats"
timeout 150 ncu $S -k regex:"bf16_kernel" -c 9 /tmp/gdn_chunk time bf16 > $L/ncu_gdn.log 2>&1; echo "ncu gdn rc=$?"
timeout 100 ncu $S -k regex:"conv_silu_backward" -c 1 ./train_natsl_cu -e 340m -b 8 -t 4096 -x 1 -v 0 -s 0 > $L/ncu_convb.log 2>&1
echo "ncu conv bwd rc=$?"
for f in ncu_gdn ncu_convb; do grep -E "^  [a-z_]+.*\(|Duration|DRAM Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Registers Per|Stall [A-Z][a-z ]+  |Warp Cycles Per Issued|L2 Hit Rate  " $L/$f.log | cut -c1-110; grep -ohE "spends [0-9.]+ cycles being stalled [a-z ]+" $L/$f.log | head -12; done
timeout $(left) ./test_natsl gpu > $L/gpu_tests.log 2>&1; echo "gpu tests rc=$?"; tail -n 4 $L/gpu_tests.log
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs && rm -rf $L
