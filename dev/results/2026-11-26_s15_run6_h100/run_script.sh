#!/bin/bash
# session 15 run 6: the wgmma backward over two key chunks a block (dQ partials summed in shared memory, one atomic
# add a tile), the wgmma forward's block order (head-major variant timed): flash_bf16 all, ./test_natsl gpu,
# bench_gpu step (transformer, natsl-hybrid), compute-sanitizer memcheck and racecheck of flash_bf16 small.
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee $L/device.txt
NV="nvcc -O3 -arch=compute_90a -code=sm_90a -std=c++17 -I."
t0=$(date +%s)
left() { echo $(( 585 - ($(date +%s) - t0) )); }
make -j8 train_natsl test_natsl train_natsl_cu > $L/build.log 2>&1 &
$NV -Xcompiler -fopenmp dev/cuda/attention/flash_bf16.cu -o /tmp/flash_bf16 -lcublasLt -lcublas -lnccl > $L/build_flash.log 2>&1 &
$NV dev/bench_gpu.cu -o bench_gpu -lcublasLt -lcublas -lnccl > $L/build_bench.log 2>&1 &
wait; echo "build: $(( $(date +%s) - t0 )) s"; tail -n 2 $L/build*.log
OMP_NUM_THREADS=16 timeout 150 /tmp/flash_bf16 all > $L/flash.log 2>&1; echo "flash_bf16 rc=$?"; grep -E "FAIL|CORRECTNESS|TFLOP" $L/flash.log | cut -c1-200
if grep -q "CORRECTNESS ALL PASS" $L/flash.log; then
  timeout 200 ./test_natsl gpu > $L/test_gpu.log 2>&1; echo "test_natsl gpu rc=$?"; grep -iE "passed|fail" $L/test_gpu.log | tail -n 8
  timeout 150 env NATSL_PROFILE=1 ./bench_gpu step -a transformer,natsl-hybrid -p bf16 -n 5 > $L/step.log 2>&1; echo "bench step rc=$?"; grep -E "RESULT|attention_" $L/step.log
fi
timeout 60 compute-sanitizer --tool memcheck /tmp/flash_bf16 small > $L/memcheck.log 2>&1; echo "memcheck rc=$?"; grep -E "ERROR SUMMARY|SMALL" $L/memcheck.log
timeout $(left) compute-sanitizer --tool racecheck --racecheck-report hazard /tmp/flash_bf16 small > $L/racecheck.log 2>&1; echo "racecheck rc=$?"; grep -E "RACECHECK SUMMARY|SMALL" $L/racecheck.log
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs && rm -rf $L
