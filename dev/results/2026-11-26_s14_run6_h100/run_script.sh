#!/bin/bash
# session 14 run 6: the bf16 state kernels taking their per-warp U (forward) and dVn, dO (backward) slices by cp.async
# (uncommitted on b69d7b9), against b69d7b9 (_cmp/old): gdn_chunk all bf16 here, time bf16 there; ./test_natsl gpu;
# the four patterns' 340m steps with their profiles. Logs in logs.tgz.
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee $L/device.txt
NV="nvcc -O3 -arch=sm_90 -std=c++17 -I."
t0=$(date +%s)
left() { echo $(( 585 - ($(date +%s) - t0) )); }
make -j8 train_natsl test_natsl train_natsl_cu > $L/build.log 2>&1 &
$NV dev/bench_gpu.cu -o bench_gpu -lcublasLt -lcublas -lnccl > $L/build_bench.log 2>&1 &
$NV dev/cuda/gdn/gdn_chunk.cu -o /tmp/gdn_chunk -lcublasLt -lcublas -lnccl > $L/build_gdn.log 2>&1 &
$NV _cmp/old/dev/cuda/gdn/gdn_chunk.cu -o /tmp/gdn_old -lcublasLt -lcublas -lnccl > $L/build_old.log 2>&1 &
wait; echo "build: $(( $(date +%s) - t0 )) s"; tail -n 2 $L/build*.log
timeout 150 /tmp/gdn_chunk all bf16 > $L/gdn.log 2>&1; echo "gdn rc=$?"; grep -E "FAIL|CORRECT|TIME|kernels" $L/gdn.log | cut -c1-200
timeout 60 /tmp/gdn_old time bf16 > $L/gdn_old.log 2>&1; echo "gdn_old rc=$?"; grep -E "TIME|kernels" $L/gdn_old.log
timeout 160 ./test_natsl gpu > $L/gpu_tests.log 2>&1; echo "gpu tests rc=$?"; grep -E "^ok|FAIL|passed|bf16 vs" $L/gpu_tests.log | tail -n 12
(NATSL_PROFILE=1 timeout $(left) ./bench_gpu step -a natsl-hybrid,gdn,gdn-hybrid,transformer -p bf16 -n 5) > $L/step.log 2>&1; echo "step rc=$?"
grep -E "RESULT|^profile|gdn_op|attention_|matmul_|everything" $L/step.log
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs && rm -rf $L
