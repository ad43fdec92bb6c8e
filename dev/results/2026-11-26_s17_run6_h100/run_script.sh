#!/bin/bash
# session 17 run 6: the second RMSNorm's output xn2 and the gated norm's output y kept per layer (block_rebuild no
# longer reruns them), against main d81b2bc (_cmp/base) on the same machine; also builds 19e8f4a (_cmp/res32: the
# residual stream in fp32) for run 7's second-seed loss curves. ./test_natsl gpu; memcheck of GNA bf16 steps;
# bench_gpu step natsl-hybrid, gdn (base, new) and the new one's profile. Logs in logs.tgz.
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee $L/device.txt
NV="nvcc -O3 -arch=compute_90a -code=sm_90a -std=c++17 -I."
t0=$(date +%s)
make -j8 train_natsl test_natsl train_natsl_cu > $L/build.log 2>&1 &
$NV dev/bench_gpu.cu -o bench_gpu -lcublasLt -lcublas -lnccl > $L/build_bench.log 2>&1 &
(cd _cmp/base && $NV dev/bench_gpu.cu -o bench_gpu -lcublasLt -lcublas -lnccl > $L/build_base.log 2>&1) &
(cd _cmp/res32 && make train_natsl_cu > $L/build_res32.log 2>&1) &
wait; echo "build: $(( $(date +%s) - t0 )) s"; tail -n 2 $L/build*.log | cut -c1-200
timeout 240 ./test_natsl gpu > $L/test_gpu.log 2>&1; echo "test_natsl gpu rc=$?"; grep -iE "passed|fail" $L/test_gpu.log | tail -n 4; grep -E "bf16 vs the fp32|bf16, recompute" $L/test_gpu.log | cut -c1-200
timeout 90 compute-sanitizer --tool memcheck ./train_natsl_cu -x 2 -v 0 -s 0 -b 2 -t 128 -a GNA -p bf16 -o /tmp/memck > $L/memcheck_gna.log 2>&1; echo "memcheck GNA bf16 rc=$?"; grep -E "ERROR SUMMARY" $L/memcheck_gna.log
for v in base new; do d=.; [ $v = base ] && d=_cmp/base
  (cd $d && timeout 150 ./bench_gpu step -a natsl-hybrid,gdn -p bf16 -n 5) > $L/step_$v.log 2>&1; echo "step $v rc=$?"; grep -E "RESULT|memory:" $L/step_$v.log | cut -c1-200
done
timeout 100 env NATSL_PROFILE=1 ./bench_gpu step -a natsl-hybrid -p bf16 -n 5 > $L/prof.log 2>&1; echo "prof rc=$?"; grep -E "RESULT|block_rebuild|gated_norm|rmsnorm" $L/prof.log | cut -c1-200
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs && rm -rf $L
