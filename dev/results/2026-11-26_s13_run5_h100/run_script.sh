#!/bin/bash
# session 13 run 5: the CPU-vs-GPU comparison twice on one build (run 4's 760m check over its bar: the products' timed
# algorithms, or this tree?), then the natsl-hybrid step here and on main (_cmp)
O=${OUT:-/tmp/o}; mkdir -p $O
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee $O/device.txt
NV="nvcc -O3 -arch=sm_90 -std=c++17 -I."
t0=$(date +%s)
make -j8 train_natsl test_natsl train_natsl_cu > $O/build.log 2>&1 &
$NV dev/bench_gpu.cu -o bench_gpu -lcublasLt -lcublas -lnccl > $O/build_bench.log 2>&1 &
(cd _cmp && $NV dev/bench_gpu.cu -o bench_gpu -lcublasLt -lcublas -lnccl) > $O/build_cmp.log 2>&1 &
wait; echo "build: $(( $(date +%s) - t0 )) s"
for i in 1 2; do timeout 200 ./test_natsl cpu_vs_gpu > $O/cvg$i.log 2>&1; echo "cpu_vs_gpu $i rc=$?"
  grep -E "760m GN bf16|check failed|passed" $O/cvg$i.log | cut -c1-200; done
for t in . _cmp; do n=$([ $t = . ] && echo this || echo cmp)
  (cd $t && timeout $(( (590 - ($(date +%s) - t0)) / 2 )) ./bench_gpu step -a natsl-hybrid -p bf16 -n 5) > $O/step_$n.log 2>&1; echo "step $n rc=$?"; grep RESULT $O/step_$n.log; done
echo "total: $(( $(date +%s) - t0 )) s"
