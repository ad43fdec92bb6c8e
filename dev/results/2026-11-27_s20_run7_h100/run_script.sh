#!/bin/bash
# session 20 run 7: SwiGLU's forward moved out of block_forward into model_forward (recompute reruns no longer form hmid,
# which swiglu_backward writes again anyway), against HEAD 3513e66 (_cmp/base): ./test_natsl gpu (-k 1 / -k 2
# bit-identical to -k 0), natsl-hybrid steps at -k 1 base / new / base / new. Logs in logs.tgz.
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee $L/device.txt
NV="nvcc -O3 -arch=compute_90a -code=sm_90a -std=c++17 -I."
t0=$(date +%s)
make -j8 train_natsl test_natsl train_natsl_cu > $L/build.log 2>&1 &
$NV dev/bench_gpu.cu -o bench_gpu -lcublasLt -lcublas -lnccl > $L/build_bench.log 2>&1 &
(cd _cmp/base && $NV dev/bench_gpu.cu -o bench_gpu -lcublasLt -lcublas -lnccl > $L/build_bench_base.log 2>&1) &
wait; echo "build: $(( $(date +%s) - t0 )) s"
timeout 240 ./test_natsl gpu > $L/test_gpu.log 2>&1; echo "test_natsl gpu rc=$?"; grep -iE "passed|fail" $L/test_gpu.log | tail -n 4; grep -E "recompute" $L/test_gpu.log | grep -v "activations" | cut -c1-200
echo "t: $(( $(date +%s) - t0 )) s"
for v in base new base new; do d=.; [ $v = base ] && d=_cmp/base
  (cd $d && timeout 80 ./bench_gpu step -a natsl-hybrid -k 1 -p bf16 -n 5) >> $L/step_$v.log 2>&1; echo "step $v rc=$?"; grep RESULT $L/step_$v.log | tail -n 1 | cut -c1-220
done
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs && rm -rf $L
