#!/bin/bash
# session 21 run 2 (part 1): the GDN op's dO in bf16 (the gated norm's backward stores it, GdnArgs.out_mp). Builds this
# tree, HEAD 432ad13's bench_gpu (_cmp/base) and 4fcfadb's trainer (_cmp/base0, for part 3's loss curves); the GDN
# harness's bf16 checks; ./test_natsl gpu. Part 2 (run_script2.sh): steps alternating base / new twice, the profile,
# memcheck. Part 3 (run_script3.sh): loss curves of 4fcfadb against this tree (items 15 and 16 of doc/model.md §12.1).
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee $L/device.txt
NV="nvcc -O3 -arch=compute_90a -code=sm_90a -std=c++17 -I."
t0=$(date +%s)
make -j8 train_natsl test_natsl train_natsl_cu > $L/build.log 2>&1 &
$NV dev/bench_gpu.cu -o bench_gpu -lcublasLt -lcublas -lnccl > $L/build_bench.log 2>&1 &
$NV -Xcompiler -fopenmp dev/cuda/gdn/gdn_chunk.cu -o gdn_chunk -lcublasLt -lcublas -lnccl > $L/build_gdn.log 2>&1 &
(cd _cmp/base && $NV dev/bench_gpu.cu -o bench_gpu -lcublasLt -lcublas -lnccl > $L/build_bench_base.log 2>&1) &
(cd _cmp/base0 && make train_natsl_cu > $L/build_base0.log 2>&1) &
wait; echo "build: $(( $(date +%s) - t0 )) s"; ls -la train_natsl_cu bench_gpu gdn_chunk _cmp/base/bench_gpu _cmp/base0/train_natsl_cu | cut -c30-
timeout 150 ./gdn_chunk test bf16 > $L/gdn_test.log 2>&1; echo "gdn_chunk rc=$?"; grep -E "CORRECTNESS|FAIL" $L/gdn_test.log | cut -c1-230
grep -E "dk128 dv256 m01 |grads bf16|dk192 dv384 m01 \(" $L/gdn_test.log | cut -c1-200
echo "t: $(( $(date +%s) - t0 )) s"
timeout 250 ./test_natsl gpu > $L/test_gpu.log 2>&1; echo "test_natsl gpu rc=$?"; grep -iE "passed|fail" $L/test_gpu.log | tail -n 6; grep -E "GNA bf16:|760m GN bf16:" $L/test_gpu.log | cut -c1-250
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs && rm -rf $L
