#!/bin/bash
# session 15 run 7: the A layer's RoPE backward writing the bf16 operand of W_qkv's product (no fp32 rotation in
# place, no to_bf16 of dq|dk|dv); the final attention kernels: ./test_natsl gpu, bench_gpu step of all four patterns
# (bf16, profile), compute-sanitizer memcheck and racecheck of flash_bf16 small and memcheck of GNA bf16 steps.
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee $L/device.txt
NV="nvcc -O3 -arch=compute_90a -code=sm_90a -std=c++17 -I."
t0=$(date +%s)
left() { echo $(( 590 - ($(date +%s) - t0) )); }
make -j8 train_natsl test_natsl train_natsl_cu > $L/build.log 2>&1 &
$NV -Xcompiler -fopenmp dev/cuda/attention/flash_bf16.cu -o /tmp/flash_bf16 -lcublasLt -lcublas -lnccl > $L/build_flash.log 2>&1 &
$NV dev/bench_gpu.cu -o bench_gpu -lcublasLt -lcublas -lnccl > $L/build_bench.log 2>&1 &
wait; echo "build: $(( $(date +%s) - t0 )) s"; tail -n 2 $L/build*.log
timeout 200 ./test_natsl gpu > $L/test_gpu.log 2>&1; echo "test_natsl gpu rc=$?"; grep -iE "passed|fail" $L/test_gpu.log | tail -n 4; grep -E "tiny GNA bf16:|bf16 vs the fp32" $L/test_gpu.log | cut -c1-200
timeout 200 env NATSL_PROFILE=1 ./bench_gpu step -p bf16 -n 5 > $L/step.log 2>&1; echo "bench step rc=$?"; grep -E "RESULT|attention_|rope|to_bf16" $L/step.log
timeout 60 compute-sanitizer --tool memcheck /tmp/flash_bf16 small > $L/memcheck.log 2>&1; echo "memcheck flash rc=$?"; grep -E "ERROR SUMMARY|SMALL" $L/memcheck.log
timeout 60 compute-sanitizer --tool memcheck ./train_natsl_cu -x 2 -v 0 -s 0 -b 2 -t 128 -a GNA -o /tmp/memck > $L/memcheck_gna.log 2>&1; echo "memcheck GNA bf16 rc=$?"; grep -E "ERROR SUMMARY" $L/memcheck_gna.log
timeout $(left) compute-sanitizer --tool racecheck --racecheck-report hazard /tmp/flash_bf16 small > $L/racecheck.log 2>&1; echo "racecheck rc=$?"; grep -E "RACECHECK SUMMARY|SMALL" $L/racecheck.log
grep -E "^=========     (Read|Write) Thread" $L/racecheck.log | sed -E 's/.* at //; s/\(.*//' | sort | uniq -c | sort -rn | head -5
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs && rm -rf $L
