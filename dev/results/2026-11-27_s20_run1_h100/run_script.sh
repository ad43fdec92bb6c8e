#!/bin/bash
# session 20 run 1: the checks of HEAD d656cf1 (2ae9817's store_acc_rows on acc_to_a fragments was compiled, not run):
# gdn_chunk all bf16 (error lines must match session 19 run 4's), ./test_natsl gpu, bench_gpu layer (the G/N/A layer
# targets, last measured in session 16); and branch wip/bwd-state-ds-staging (_cmp/wip): gdn_chunk all bf16, time
# alternating with HEAD, racecheck of its gdn_chunk test bf16. Logs in logs.tgz.
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee $L/device.txt
NV="nvcc -O3 -arch=compute_90a -code=sm_90a -std=c++17 -I."
t0=$(date +%s)
make -j8 train_natsl test_natsl train_natsl_cu > $L/build.log 2>&1 &
$NV dev/bench_gpu.cu -o bench_gpu -lcublasLt -lcublas -lnccl > $L/build_bench.log 2>&1 &
$NV -Xcompiler -fopenmp dev/cuda/gdn/gdn_chunk.cu -o gdn_chunk -lcublasLt -lcublas -lnccl > $L/build_gdn.log 2>&1 &
(cd _cmp/wip && $NV -Xcompiler -fopenmp dev/cuda/gdn/gdn_chunk.cu -o gdn_chunk -lcublasLt -lcublas -lnccl > $L/build_gdn_wip.log 2>&1) &
wait; echo "build: $(( $(date +%s) - t0 )) s"; grep -il error $L/build*.log
./gdn_chunk all bf16 > $L/gdn_bf16.log 2>&1; echo "gdn bf16 rc=$?"; grep -E "FAIL|CORRECTNESS|TIME|kernels" $L/gdn_bf16.log | cut -c1-260
(cd _cmp/wip && ./gdn_chunk all bf16) > $L/gdn_bf16_wip.log 2>&1; echo "gdn bf16 wip rc=$?"; grep -E "FAIL|CORRECTNESS|TIME|kernels" $L/gdn_bf16_wip.log | cut -c1-260
for v in main wip main wip; do d=.; [ $v = wip ] && d=_cmp/wip
  (cd $d && ./gdn_chunk time bf16) >> $L/gdn_time_$v.log 2>&1; echo "time $v rc=$?"; grep -E "TIME|kernels" $L/gdn_time_$v.log | tail -n 4 | cut -c1-260
done
echo "t: $(( $(date +%s) - t0 )) s"
timeout 240 ./test_natsl gpu > $L/test_gpu.log 2>&1; echo "test_natsl gpu rc=$?"; grep -iE "passed|fail" $L/test_gpu.log | tail -n 4
echo "t: $(( $(date +%s) - t0 )) s"
timeout 150 ./bench_gpu layer -n 10 > $L/layer.log 2>&1; echo "layer rc=$?"; grep RESULT $L/layer.log | cut -c1-200
echo "t: $(( $(date +%s) - t0 )) s"
(cd _cmp/wip && timeout 100 compute-sanitizer --tool racecheck --print-limit 20 ./gdn_chunk test bf16) > $L/racecheck_wip.log 2>&1; echo "racecheck rc=$?"; grep -E "PASS|FAIL|RACECHECK|hazard" $L/racecheck_wip.log | tail -n 8 | cut -c1-200
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs && rm -rf $L
