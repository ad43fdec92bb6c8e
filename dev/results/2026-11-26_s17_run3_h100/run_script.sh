#!/bin/bash
# session 17 run 3: the L2 norm's backward folded into bwd_final_bf16 with dQ computed last, its dq̂ parked in shared
# memory (run 2 read it back from global memory), against main bed4c06 (_cmp/base, carried) on the same machine.
# Builds; gdn_chunk all (bf16, fp32); ./test_natsl gpu; memcheck of 340m-head GN steps;
# bench_gpu step natsl-hybrid, gdn (base, new), profile of the new. Logs in logs.tgz.
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee $L/device.txt
NV="nvcc -O3 -arch=compute_90a -code=sm_90a -std=c++17 -I."
t0=$(date +%s)
make -j8 train_natsl test_natsl train_natsl_cu > $L/build.log 2>&1 &
$NV dev/bench_gpu.cu -o bench_gpu -lcublasLt -lcublas -lnccl > $L/build_bench.log 2>&1 &
$NV -Xcompiler -fopenmp dev/cuda/gdn/gdn_chunk.cu -o gdn_chunk -lcublasLt -lcublas -lnccl > $L/build_gdn.log 2>&1 &
(cd _cmp/base && $NV dev/bench_gpu.cu -o bench_gpu -lcublasLt -lcublas -lnccl > $L/build_base.log 2>&1) &
wait; echo "build: $(( $(date +%s) - t0 )) s"; tail -n 2 $L/build*.log | cut -c1-200
./gdn_chunk all bf16 > $L/gdn_bf16.log 2>&1; echo "gdn bf16 rc=$?"; grep -E "FAIL|CORRECTNESS|TIME|kernels" $L/gdn_bf16.log | cut -c1-260
./gdn_chunk test fp32 > $L/gdn_fp32.log 2>&1; echo "gdn fp32 rc=$?"; grep -E "FAIL|CORRECTNESS" $L/gdn_fp32.log | cut -c1-200
timeout 240 ./test_natsl gpu > $L/test_gpu.log 2>&1; echo "test_natsl gpu rc=$?"; grep -iE "passed|fail" $L/test_gpu.log | tail -n 4; grep -E "tiny GNA bf16:|bf16 vs the fp32" $L/test_gpu.log | cut -c1-200
timeout 120 compute-sanitizer --tool memcheck ./train_natsl_cu -e 340m -a GN -b 1 -t 256 -x 2 -v 0 -s 0 -p bf16 -o /tmp/memck > $L/memcheck_gn340.log 2>&1; echo "memcheck 340m GN bf16 rc=$?"; grep -E "ERROR SUMMARY" $L/memcheck_gn340.log
for v in base new; do d=.; [ $v = base ] && d=_cmp/base
  (cd $d && timeout 150 ./bench_gpu step -a natsl-hybrid,gdn -p bf16 -n 5) > $L/step_$v.log 2>&1; echo "step $v rc=$?"; grep RESULT $L/step_$v.log | cut -c1-200
done
timeout 100 env NATSL_PROFILE=1 ./bench_gpu step -a natsl-hybrid -p bf16 -n 5 > $L/prof.log 2>&1; echo "prof rc=$?"; grep -E "RESULT|gdn_op|l2norm|conv" $L/prof.log | cut -c1-200
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs && rm -rf $L
