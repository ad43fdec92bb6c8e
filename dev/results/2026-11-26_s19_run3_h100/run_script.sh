#!/bin/bash
# session 19 run 3: the state kernels store Vnᵀ / dVnᵀ through stmatrix staging rows and 16-byte stores
# (store_acc_rows), the cross-entropy forward at 256 threads a row; against HEAD (_cmp/base: run 2's dVn change) for
# gdn_chunk; ce_bench (with the backward's block sizes); ./test_natsl gpu; steps natsl-hybrid and gdn alternating
# b84b591 (_cmp/b0, the session's start) and new. Logs in logs.tgz.
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee $L/device.txt
NV="nvcc -O3 -arch=compute_90a -code=sm_90a -std=c++17 -I."
t0=$(date +%s)
make -j8 train_natsl test_natsl train_natsl_cu > $L/build.log 2>&1 &
$NV dev/bench_gpu.cu -o bench_gpu -lcublasLt -lcublas -lnccl > $L/build_bench.log 2>&1 &
$NV -Xcompiler -fopenmp dev/cuda/gdn/gdn_chunk.cu -o gdn_chunk -lcublasLt -lcublas -lnccl > $L/build_gdn.log 2>&1 &
$NV dev/cuda/ce_bench.cu -o ce_bench -lcublasLt -lcublas -lnccl > $L/build_ce.log 2>&1 &
(cd _cmp/b0 && $NV dev/bench_gpu.cu -o bench_gpu -lcublasLt -lcublas -lnccl > $L/build_b0.log 2>&1) &
(cd _cmp/base && $NV -Xcompiler -fopenmp dev/cuda/gdn/gdn_chunk.cu -o gdn_chunk -lcublasLt -lcublas -lnccl > $L/build_gdn_base.log 2>&1) &
wait; echo "build: $(( $(date +%s) - t0 )) s"; grep -il error $L/build*.log
./gdn_chunk all bf16 > $L/gdn_bf16.log 2>&1; echo "gdn bf16 rc=$?"; grep -E "FAIL|CORRECTNESS|TIME|kernels" $L/gdn_bf16.log | cut -c1-260
(cd _cmp/base && ./gdn_chunk time bf16) > $L/gdn_time_base.log 2>&1; echo "gdn time base rc=$?"; grep -E "TIME|kernels" $L/gdn_time_base.log | cut -c1-260
./gdn_chunk test fp32 > $L/gdn_fp32.log 2>&1; echo "gdn fp32 rc=$?"; grep -E "FAIL|CORRECTNESS" $L/gdn_fp32.log | cut -c1-200
./ce_bench > $L/ce_bench.log 2>&1; echo "ce_bench rc=$?"; cat $L/ce_bench.log
echo "t: $(( $(date +%s) - t0 )) s"
timeout 240 ./test_natsl gpu > $L/test_gpu.log 2>&1; echo "test_natsl gpu rc=$?"; grep -iE "passed|fail" $L/test_gpu.log | tail -n 4; grep -E "bf16 vs the fp32" $L/test_gpu.log | cut -c1-200
echo "t: $(( $(date +%s) - t0 )) s"
for v in b0 new b0 new; do d=.; [ $v = b0 ] && d=_cmp/b0
  (cd $d && timeout 100 ./bench_gpu step -a natsl-hybrid,gdn -p bf16 -n 5) >> $L/step_$v.log 2>&1; echo "step $v rc=$?"; grep RESULT $L/step_$v.log | tail -n 2 | cut -c1-200
done
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs && rm -rf $L
