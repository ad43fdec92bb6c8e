#!/bin/bash
# session 14 run 5: bwd_final_bf16 variants (uncommitted on 3391d4f): this tree (c: q, k read from shared memory, dTV
# loaded before its product), _cmp/full (also dPm and dQ1 before theirs), _cmp/d (q, k from shared memory only),
# _cmp/old (3391d4f): gdn_chunk test bf16 here, time bf16 on all four; ./test_natsl gpu; the 340m step's profile.
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee $L/device.txt
NV="nvcc -O3 -arch=sm_90 -std=c++17 -I."
t0=$(date +%s)
left() { echo $(( 585 - ($(date +%s) - t0) )); }
make -j8 train_natsl test_natsl train_natsl_cu > $L/build.log 2>&1 &
$NV dev/bench_gpu.cu -o bench_gpu -lcublasLt -lcublas -lnccl > $L/build_bench.log 2>&1 &
$NV dev/cuda/gdn/gdn_chunk.cu -o /tmp/gdn_c -lcublasLt -lcublas -lnccl > $L/build_gdn.log 2>&1 &
for v in full d old; do $NV _cmp/$v/dev/cuda/gdn/gdn_chunk.cu -o /tmp/gdn_$v -lcublasLt -lcublas -lnccl > $L/build_$v.log 2>&1 & done
wait; echo "build: $(( $(date +%s) - t0 )) s"; tail -n 2 $L/build*.log
timeout 100 /tmp/gdn_c test bf16 > $L/gdn.log 2>&1; echo "gdn test rc=$?"; grep -E "FAIL|CORRECT" $L/gdn.log | cut -c1-200
for v in c full d old; do timeout 60 /tmp/gdn_$v time bf16 > $L/gdn_time_$v.log 2>&1; echo "gdn time $v rc=$?"; grep -E "TIME|kernels" $L/gdn_time_$v.log | head -n 2; grep -E "TIME" $L/gdn_time_$v.log | sed -n 3p; done
(NATSL_PROFILE=1 timeout 100 ./bench_gpu step -a natsl-hybrid -p bf16 -n 5) > $L/step.log 2>&1; echo "step rc=$?"
grep RESULT $L/step.log; sed -n '/^profile/,$p' $L/step.log | head -n 34
timeout $(left) ./test_natsl gpu > $L/gpu_tests.log 2>&1; echo "gpu tests rc=$?"; grep -E "^ok|FAIL|passed|bf16 vs" $L/gpu_tests.log | tail -n 12
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs && rm -rf $L
