#!/bin/bash
# session 21 run 1 (part 1): a G layer's dQ, dK, dV stored in bf16 (GdnArgs.grads_mp). Builds this tree and HEAD 4fcfadb
# (_cmp/base)'s bench_gpu, the GDN harness's bf16 checks (the new grads-bf16 cases among them), ./test_natsl gpu.
# Part 2 (run_script2.sh, same machine): steps natsl-hybrid and gdn alternating base / new twice, the profile.
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee $L/device.txt
NV="nvcc -O3 -arch=compute_90a -code=sm_90a -std=c++17 -I."
t0=$(date +%s)
make -j8 train_natsl test_natsl train_natsl_cu > $L/build.log 2>&1 &
$NV dev/bench_gpu.cu -o bench_gpu -lcublasLt -lcublas -lnccl > $L/build_bench.log 2>&1 &
$NV -Xcompiler -fopenmp dev/cuda/gdn/gdn_chunk.cu -o gdn_chunk -lcublasLt -lcublas -lnccl > $L/build_gdn.log 2>&1 &
(cd _cmp/base && $NV dev/bench_gpu.cu -o bench_gpu -lcublasLt -lcublas -lnccl > $L/build_bench_base.log 2>&1) &
wait; echo "build: $(( $(date +%s) - t0 )) s"; ls -la train_natsl_cu bench_gpu gdn_chunk _cmp/base/bench_gpu | cut -c30-
timeout 150 ./gdn_chunk test bf16 > $L/gdn_test.log 2>&1; echo "gdn_chunk rc=$?"; grep -E "grads bf16|CORRECTNESS|FAIL" $L/gdn_test.log | cut -c1-230
echo "t: $(( $(date +%s) - t0 )) s"
timeout 250 ./test_natsl gpu > $L/test_gpu.log 2>&1; echo "test_natsl gpu rc=$?"; grep -iE "passed|fail" $L/test_gpu.log | tail -n 6; grep -E "GNA bf16:|760m GN bf16:" $L/test_gpu.log | cut -c1-250
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs && rm -rf $L
