#!/bin/bash
# session 16 run 7: main (the softmax op's dout in bf16 committed) plus the conv backward's interior loads four rows
# ahead. Builds; conv_bench; ./test_natsl gpu;
# compute-sanitizer memcheck of 2 GNA bf16 training steps. The step benchmarks follow in run 8 on the
# same machine. Logs in logs.tgz.
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee $L/device.txt
NV="nvcc -O3 -arch=compute_90a -code=sm_90a -std=c++17 -I."
t0=$(date +%s)
make -j8 train_natsl test_natsl train_natsl_cu > $L/build.log 2>&1 &
$NV dev/bench_gpu.cu -o bench_gpu -lcublasLt -lcublas -lnccl > $L/build_bench.log 2>&1 &
$NV dev/cuda/conv/conv_bench.cu -o /tmp/conv_bench -lcublasLt -lcublas -lnccl > $L/build_conv.log 2>&1 &
wait; echo "build: $(( $(date +%s) - t0 )) s"; tail -n 2 $L/build*.log | cut -c1-200
/tmp/conv_bench > $L/conv.log 2>&1; echo "conv rc=$?"; grep -E "PASS|FAIL|TIME" $L/conv.log | cut -c1-200
timeout 240 ./test_natsl gpu > $L/test_gpu.log 2>&1; echo "test_natsl gpu rc=$?"; grep -iE "passed|fail" $L/test_gpu.log | tail -n 4; grep -E "tiny GNA bf16:|bf16 vs the fp32" $L/test_gpu.log | cut -c1-200
timeout 90 compute-sanitizer --tool memcheck ./train_natsl_cu -x 2 -v 0 -s 0 -b 2 -t 128 -a GNA -p bf16 -o /tmp/memck > $L/memcheck_gna.log 2>&1; echo "memcheck GNA bf16 rc=$?"; grep -E "ERROR SUMMARY" $L/memcheck_gna.log
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs && rm -rf $L
