#!/bin/bash
# session 20 run 2: the residual stream's gradient in bf16 (rmsnorm_backward's dx_mp) and hmid formed again by
# swiglu_backward (block_rebuild no longer reruns SwiGLU), on top of HEAD 80b936a (_cmp/base; run 1's bwd_state
# change): ./test_natsl gpu, steps natsl-hybrid and gdn alternating base / new twice, the natsl-hybrid profile.
# Builds are kept for run 3 (same machine). Logs in logs.tgz.
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee $L/device.txt
NV="nvcc -O3 -arch=compute_90a -code=sm_90a -std=c++17 -I."
t0=$(date +%s)
make -j8 train_natsl test_natsl train_natsl_cu > $L/build.log 2>&1 &
$NV dev/bench_gpu.cu -o bench_gpu -lcublasLt -lcublas -lnccl > $L/build_bench.log 2>&1 &
$NV -Xcompiler -fopenmp dev/cuda/gdn/gdn_chunk.cu -o gdn_chunk -lcublasLt -lcublas -lnccl > $L/build_gdn.log 2>&1 &
(cd _cmp/base && make train_natsl_cu > $L/build_base.log 2>&1) &
(cd _cmp/base && $NV dev/bench_gpu.cu -o bench_gpu -lcublasLt -lcublas -lnccl > $L/build_bench_base.log 2>&1) &
wait; echo "build: $(( $(date +%s) - t0 )) s"; grep -il error $L/build*.log
timeout 240 ./test_natsl gpu > $L/test_gpu.log 2>&1; echo "test_natsl gpu rc=$?"; grep -iE "passed|fail" $L/test_gpu.log | tail -n 4; grep -E "bf16 vs the fp32|GNA bf16:|760m GN bf16:" $L/test_gpu.log | cut -c1-250
echo "t: $(( $(date +%s) - t0 )) s"
for v in base new base new; do d=.; [ $v = base ] && d=_cmp/base
  (cd $d && timeout 80 ./bench_gpu step -a natsl-hybrid,gdn -p bf16 -n 5) >> $L/step_$v.log 2>&1; echo "step $v rc=$?"; grep RESULT $L/step_$v.log | tail -n 2 | cut -c1-220
done
echo "t: $(( $(date +%s) - t0 )) s"
NATSL_PROFILE=1 timeout 60 ./bench_gpu step -a natsl-hybrid -p bf16 -n 5 > $L/prof.log 2>&1; echo "prof rc=$?"; head -n 24 $L/prof.log | cut -c1-200
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs && rm -rf $L
