#!/bin/bash
# session 15 run 1: a5f0078 (main, not yet run on a GPU) and branches wip/prep, wip/state-split:
# gdn_chunk all bf16 in each tree, ./test_natsl gpu on main, memcheck of gdn_chunk test bf16 in state-split.
# Logs in logs.tgz.
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee $L/device.txt
NV="nvcc -O3 -arch=sm_90 -std=c++17 -I."
t0=$(date +%s)
left() { echo $(( 585 - ($(date +%s) - t0) )); }
make -j8 train_natsl test_natsl train_natsl_cu > $L/build.log 2>&1 &
for t in . _cmp/prep _cmp/state-split; do n=$([ $t = . ] && echo main || basename $t)
  $NV $t/dev/cuda/gdn/gdn_chunk.cu -o /tmp/gdn_$n -lcublasLt -lcublas -lnccl > $L/build_gdn_$n.log 2>&1 & done
wait; echo "build: $(( $(date +%s) - t0 )) s"; tail -n 2 $L/build*.log
for n in main prep state-split; do
  timeout 100 /tmp/gdn_$n all bf16 > $L/gdn_$n.log 2>&1; echo "gdn ($n) rc=$?"; grep -E "FAIL|CORRECT|TIME|kernels" $L/gdn_$n.log | cut -c1-220; done
timeout 240 ./test_natsl gpu > $L/test_gpu.log 2>&1; echo "test_natsl gpu rc=$?"; grep -iE "passed|fail" $L/test_gpu.log | tail -n 8
timeout $(left) compute-sanitizer --tool memcheck /tmp/gdn_state-split test bf16 > $L/gdn_memcheck.log 2>&1; echo "gdn memcheck (state-split) rc=$?"
grep -E "ERROR SUMMARY|CORRECTNESS" $L/gdn_memcheck.log
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs && rm -rf $L
