#!/bin/bash
# session 14 run 1: branch wip/conv (ConvRuns::find by selects, conv_bench harness, bwd_local making each half of
# P^T once) against main in _cmp: GPU tests, gdn_chunk bf16, conv_bench, ncu of the conv, the step on both trees
O=${OUT:-/tmp/o}; mkdir -p $O
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee $O/device.txt
NV="nvcc -O3 -arch=sm_90 -std=c++17 -I."
t0=$(date +%s)
left() { echo $(( 585 - ($(date +%s) - t0) )); }
make -j8 train_natsl test_natsl train_natsl_cu > $O/build.log 2>&1 &
$NV dev/bench_gpu.cu -o bench_gpu -lcublasLt -lcublas -lnccl > $O/build_bench.log 2>&1 &
$NV dev/cuda/gdn/gdn_chunk.cu -o /tmp/gdn_chunk -lcublasLt -lcublas -lnccl > $O/build_gdn.log 2>&1 &
$NV dev/cuda/conv/conv_bench.cu -o /tmp/conv_bench -lcublasLt -lcublas -lnccl > $O/build_conv.log 2>&1 &
(cd _cmp && $NV dev/bench_gpu.cu -o bench_gpu -lcublasLt -lcublas -lnccl) > $O/build_cmp.log 2>&1 &
wait; echo "build: $(( $(date +%s) - t0 )) s"; tail -2 $O/build*.log
timeout 60 /tmp/conv_bench > $O/conv.log 2>&1; echo "conv_bench rc=$?"; cat $O/conv.log | tail -40
timeout 150 /tmp/gdn_chunk all bf16 > $O/gdn.log 2>&1; echo "gdn rc=$?"; grep -E "PASS|FAIL|TIME|kernels" $O/gdn.log | tail -30
for t in . _cmp; do n=$([ $t = . ] && echo this || echo cmp)
  (cd $t && NATSL_PROFILE=1 timeout 100 ./bench_gpu step -a natsl-hybrid -p bf16 -n 5) > $O/step_$n.log 2>&1; echo "step $n rc=$?"
  grep RESULT $O/step_$n.log; sed -n '/^profile/,$p' $O/step_$n.log | grep -E "profile|gdn_op|conv|everything"; done
timeout $(left) ./test_natsl gpu > $O/gpu_tests.log 2>&1; echo "gpu tests rc=$?"; tail -4 $O/gpu_tests.log
timeout $(left) ncu --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats \
  -k regex:"conv_silu" -c 4 ./train_natsl_cu -e 340m -b 8 -t 4096 -x 1 -v 0 -s 0 > $O/ncu_conv.log 2>&1
echo "ncu conv rc=$?"; grep -E "^  [a-z_]+.*\(|Duration|Throughput|Achieved Occupancy|Stall|L2 Hit|Mem Busy" $O/ncu_conv.log | head -60
echo "total: $(( $(date +%s) - t0 )) s"
