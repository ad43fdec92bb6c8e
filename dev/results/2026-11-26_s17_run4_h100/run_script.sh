#!/bin/bash
# session 17 run 4: the residual stream stored in bf16 in bf16 mode (h^l, r, hL), against main 19e8f4a (_cmp/base,
# carried) on the same machine. Builds (both trees); ./test_natsl gpu; memcheck of GNA and GSNS bf16 steps; bench_gpu
# step natsl-hybrid, gdn, transformer (base, new); bench_gpu mem. Run 5 (same machine) trains the loss curves.
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee $L/device.txt
NV="nvcc -O3 -arch=compute_90a -code=sm_90a -std=c++17 -I."
t0=$(date +%s)
make -j8 train_natsl test_natsl train_natsl_cu > $L/build.log 2>&1 &
$NV dev/bench_gpu.cu -o bench_gpu -lcublasLt -lcublas -lnccl > $L/build_bench.log 2>&1 &
(cd _cmp/base && make train_natsl_cu > $L/build_base_cu.log 2>&1) &
(cd _cmp/base && $NV dev/bench_gpu.cu -o bench_gpu -lcublasLt -lcublas -lnccl > $L/build_base.log 2>&1) &
wait; echo "build: $(( $(date +%s) - t0 )) s"; tail -n 2 $L/build*.log | cut -c1-200
timeout 240 ./test_natsl gpu > $L/test_gpu.log 2>&1; echo "test_natsl gpu rc=$?"; grep -iE "passed|fail" $L/test_gpu.log | tail -n 4; grep -E "bf16 vs the fp32|tiny GNA bf16:|bit-identical|-k" $L/test_gpu.log | cut -c1-220
for a in GNA GSNS; do timeout 90 compute-sanitizer --tool memcheck ./train_natsl_cu -x 2 -v 0 -s 0 -b 2 -t 128 -a $a -p bf16 -o /tmp/memck_$a > $L/memcheck_$a.log 2>&1; echo "memcheck $a bf16 rc=$?"; grep -E "ERROR SUMMARY" $L/memcheck_$a.log; done
for v in base new; do d=.; [ $v = base ] && d=_cmp/base
  (cd $d && timeout 200 ./bench_gpu step -a natsl-hybrid,gdn,transformer -p bf16 -n 5) > $L/step_$v.log 2>&1; echo "step $v rc=$?"; grep -E "RESULT|memory:" $L/step_$v.log | cut -c1-200
done
./bench_gpu mem -p bf16 > $L/mem.log 2>&1; grep -iE "total|plan" $L/mem.log | head -8
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs && rm -rf $L
