#!/bin/bash
# session 14 run 7: the final tree (fwd_state_bf16 back to its b69d7b9 form): make test, gdn_chunk test + time bf16,
# the tiny main job, compute-sanitizer memcheck of a few GSNS bf16 training steps and of gdn_chunk test bf16.
# Logs in logs.tgz.
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee $L/device.txt
NV="nvcc -O3 -arch=sm_90 -std=c++17 -I."
t0=$(date +%s)
left() { echo $(( 585 - ($(date +%s) - t0) )); }
make -j8 train_natsl test_natsl train_natsl_cu > $L/build.log 2>&1 &
$NV dev/cuda/gdn/gdn_chunk.cu -o /tmp/gdn_chunk -lcublasLt -lcublas -lnccl > $L/build_gdn.log 2>&1 &
wait; echo "build: $(( $(date +%s) - t0 )) s"; tail -n 2 $L/build*.log
timeout 100 /tmp/gdn_chunk all bf16 > $L/gdn.log 2>&1; echo "gdn rc=$?"; grep -E "FAIL|CORRECT|TIME|kernels" $L/gdn.log | cut -c1-200
timeout 330 make test > $L/test.log 2>&1; echo "make test rc=$?"; grep -iE "passed|fail" $L/test.log | tail -n 8
timeout 30 ./train_natsl_cu > $L/main.log 2>&1; echo "main job rc=$?"; grep -E "val loss|step  *300|precision" $L/main.log | tail -n 3
timeout 60 compute-sanitizer --tool memcheck ./train_natsl_cu -x 2 -v 0 -s 0 -b 2 -t 128 -a GSNS -o /tmp/memck > $L/memcheck.log 2>&1
echo "memcheck GSNS bf16 rc=$?"; grep -E "ERROR SUMMARY" $L/memcheck.log
timeout $(left) compute-sanitizer --tool memcheck /tmp/gdn_chunk test bf16 > $L/gdn_memcheck.log 2>&1; echo "gdn memcheck rc=$?"
grep -E "ERROR SUMMARY|CORRECTNESS" $L/gdn_memcheck.log
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs && rm -rf $L
