#!/bin/bash
# session 19 run 4: the checks of HEAD 8ebe690 (runs 1-3's changes): ./test_natsl gpu (the cross-entropy backward at
# 256 threads is new here), compute-sanitizer memcheck of 2 GN bf16 training steps at the 340m head sizes,
# gdn_chunk all bf16, racecheck of gdn_chunk test bf16 (the staging rows of store_acc_rows), the natsl-hybrid profile.
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee $L/device.txt
NV="nvcc -O3 -arch=compute_90a -code=sm_90a -std=c++17 -I."
t0=$(date +%s)
make -j8 train_natsl test_natsl train_natsl_cu > $L/build.log 2>&1 &
$NV dev/bench_gpu.cu -o bench_gpu -lcublasLt -lcublas -lnccl > $L/build_bench.log 2>&1 &
$NV -Xcompiler -fopenmp dev/cuda/gdn/gdn_chunk.cu -o gdn_chunk -lcublasLt -lcublas -lnccl > $L/build_gdn.log 2>&1 &
wait; echo "build: $(( $(date +%s) - t0 )) s"
timeout 240 ./test_natsl gpu > $L/test_gpu.log 2>&1; echo "test_natsl gpu rc=$?"; grep -iE "passed|fail" $L/test_gpu.log | tail -n 4; grep -E "bf16 vs the fp32" $L/test_gpu.log | cut -c1-200
echo "t: $(( $(date +%s) - t0 )) s"
timeout 100 compute-sanitizer --tool memcheck ./train_natsl_cu -e 340m -a GN -b 1 -t 256 -x 2 -v 0 -s 0 -p bf16 -o /tmp/mc > $L/memcheck.log 2>&1; echo "memcheck rc=$?"; tail -n 3 $L/memcheck.log
echo "t: $(( $(date +%s) - t0 )) s"
./gdn_chunk all bf16 > $L/gdn_bf16.log 2>&1; echo "gdn bf16 rc=$?"; grep -E "FAIL|CORRECTNESS|TIME|kernels" $L/gdn_bf16.log | cut -c1-260
echo "t: $(( $(date +%s) - t0 )) s"
timeout 110 compute-sanitizer --tool racecheck --print-limit 20 ./gdn_chunk test bf16 > $L/racecheck.log 2>&1; echo "racecheck rc=$?"; grep -E "PASS|FAIL|RACECHECK|hazard" $L/racecheck.log | tail -n 8 | cut -c1-200
echo "t: $(( $(date +%s) - t0 )) s"
NATSL_PROFILE=1 timeout 60 ./bench_gpu step -a natsl-hybrid -p bf16 -n 5 > $L/prof.log 2>&1; echo "prof rc=$?"; head -n 40 $L/prof.log | cut -c1-200
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs && rm -rf $L
