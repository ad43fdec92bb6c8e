#!/bin/bash
# session 13 run 4: the folded bwd_local (one block an SM) + the one-launch conv: make test, memchecks
O=${OUT:-/tmp/o}; mkdir -p $O
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee $O/device.txt
NV="nvcc -O3 -arch=sm_90 -std=c++17 -I."
t0=$(date +%s)
make -j8 train_natsl test_natsl train_natsl_cu > $O/build.log 2>&1 &
$NV dev/bench_gpu.cu -o bench_gpu -lcublasLt -lcublas -lnccl > $O/build_bench.log 2>&1 &
(cd _cmp && $NV dev/bench_gpu.cu -o bench_gpu -lcublasLt -lcublas -lnccl) > $O/build_cmp.log 2>&1 &
$NV dev/cuda/gdn/gdn_chunk.cu -o /tmp/gdn_chunk -lcublasLt -lcublas -lnccl > $O/build_gdn.log 2>&1 &
wait; echo "build: $(( $(date +%s) - t0 )) s"; tail -2 $O/build*.log
timeout 320 make test > $O/test.log 2>&1; echo "make test rc=$?"
grep -iE "^  (tiny|760m)|passed|fail|error" $O/test.log | tail -40
timeout 60 compute-sanitizer --tool memcheck ./train_natsl_cu -x 2 -v 0 -s 0 -b 2 -t 128 -a GSNS -o /tmp/memck > $O/memcheck.log 2>&1
echo "memcheck GSNS bf16 rc=$?"; grep -E "ERROR SUMMARY" $O/memcheck.log
timeout 30 ./train_natsl_cu > $O/main.log 2>&1; echo "main job rc=$?"; grep -E "val loss|step  *300|precision|ms" $O/main.log | tail -3
timeout $(( 590 - ($(date +%s) - t0) )) compute-sanitizer --tool memcheck /tmp/gdn_chunk test bf16 > $O/gdn_memcheck.log 2>&1; echo "gdn memcheck rc=$?"
grep -E "ERROR SUMMARY|CORRECTNESS" $O/gdn_memcheck.log
echo "total: $(( $(date +%s) - t0 )) s"
