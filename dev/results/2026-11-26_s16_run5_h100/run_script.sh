#!/bin/bash
# session 16 run 5: main (64d8521) plus the softmax op's dout stored in bf16 by its producers (the A layer's W_o
# backward, the N layer's gated norm). Builds; conv_bench with two more backward variants; ./test_natsl gpu;
# compute-sanitizer memcheck of 2 GNA bf16 training steps; bench_gpu layer. The step benchmarks follow in run 6 on the
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
timeout 150 ./bench_gpu layer > $L/layer.log 2>&1; echo "bench layer rc=$?"; grep -E "RESULT" $L/layer.log | cut -c1-200
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs && rm -rf $L
