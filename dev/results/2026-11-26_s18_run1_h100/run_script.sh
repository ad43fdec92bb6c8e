#!/bin/bash
# session 18 run 1: the G and N layers' input projection as one product (W_qkv, W_g, W_ab; proj [BT][cfg_ldin] with
# the gate and a | b as column blocks, a | b now in bf16), against main 152b03e (_cmp/base) on the same machine.
# Builds; bench_gpu step natsl-hybrid, gdn and bench_gpu gemm (base, new); the new one's profile; ./test_natsl gpu;
# memcheck of GNA and 340m-head GN bf16 steps. Logs in logs.tgz.
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee $L/device.txt
NV="nvcc -O3 -arch=compute_90a -code=sm_90a -std=c++17 -I."
t0=$(date +%s)
make -j8 train_natsl test_natsl train_natsl_cu > $L/build.log 2>&1 &
$NV dev/bench_gpu.cu -o bench_gpu -lcublasLt -lcublas -lnccl > $L/build_bench.log 2>&1 &
(cd _cmp/base && $NV dev/bench_gpu.cu -o bench_gpu -lcublasLt -lcublas -lnccl > $L/build_base.log 2>&1) &
wait; echo "build: $(( $(date +%s) - t0 )) s"; tail -n 2 $L/build*.log | cut -c1-200
for v in base new; do d=.; [ $v = base ] && d=_cmp/base
  (cd $d && timeout 150 ./bench_gpu step -a natsl-hybrid,gdn -p bf16 -n 5) > $L/step_$v.log 2>&1; echo "step $v rc=$?"; grep -E "RESULT" $L/step_$v.log | cut -c1-200
  (cd $d && timeout 60 ./bench_gpu gemm -n 10) > $L/gemm_$v.log 2>&1; echo "gemm $v rc=$?"; grep -E "RESULT" $L/gemm_$v.log | tail -n 8 | cut -c1-200
done
timeout 100 env NATSL_PROFILE=1 ./bench_gpu step -a natsl-hybrid -p bf16 -n 5 > $L/prof.log 2>&1; echo "prof rc=$?"; grep -E "RESULT|matmul|gates|gated_norm|conv" $L/prof.log | cut -c1-200
timeout 240 ./test_natsl gpu > $L/test_gpu.log 2>&1; echo "test_natsl gpu rc=$?"; grep -iE "passed|fail" $L/test_gpu.log | tail -n 4; grep -E "bf16 vs the fp32|760m GN bf16, recompute" $L/test_gpu.log | cut -c1-200
timeout 90 compute-sanitizer --tool memcheck ./train_natsl_cu -x 2 -v 0 -s 0 -b 2 -t 128 -a GNA -p bf16 -o /tmp/memck > $L/memcheck_gna.log 2>&1; echo "memcheck GNA bf16 rc=$?"; grep -E "ERROR SUMMARY" $L/memcheck_gna.log
timeout 120 compute-sanitizer --tool memcheck ./train_natsl_cu -e 340m -a GN -b 1 -t 256 -x 2 -v 0 -s 0 -p bf16 -o /tmp/memck2 > $L/memcheck_gn340.log 2>&1; echo "memcheck 340m GN bf16 rc=$?"; grep -E "ERROR SUMMARY" $L/memcheck_gn340.log
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs && rm -rf $L
