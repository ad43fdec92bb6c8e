#!/bin/bash
# session 18 run 5: run 4 again with fwd_state alone storing its chunk-start states through stmatrix (run 4: bwd_state's
# staging rows outgrew the 760m's 8-warp block, and its SASS shrank by 2% only); against main
# 7f5ea86 (_cmp/base: 152b03e's trainer) on the same machine. Builds; gdn_chunk all bf16 (new), time bf16 (base), test
# fp32 (new); SASS instruction counts of the two kernels; ./test_natsl gpu; steps (base, new). Logs in logs.tgz.
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee $L/device.txt
NV="nvcc -O3 -arch=compute_90a -code=sm_90a -std=c++17 -I."
t0=$(date +%s)
make -j8 train_natsl test_natsl train_natsl_cu > $L/build.log 2>&1 &
$NV dev/bench_gpu.cu -o bench_gpu -lcublasLt -lcublas -lnccl > $L/build_bench.log 2>&1 &
$NV -Xcompiler -fopenmp dev/cuda/gdn/gdn_chunk.cu -o gdn_chunk -lcublasLt -lcublas -lnccl > $L/build_gdn.log 2>&1 &
(cd _cmp/base && $NV dev/bench_gpu.cu -o bench_gpu -lcublasLt -lcublas -lnccl > $L/build_base.log 2>&1) &
(cd _cmp/base && $NV -Xcompiler -fopenmp dev/cuda/gdn/gdn_chunk.cu -o gdn_chunk -lcublasLt -lcublas -lnccl > $L/build_gdn_base.log 2>&1) &
wait; echo "build: $(( $(date +%s) - t0 )) s"; tail -n 2 $L/build*.log | cut -c1-200
for v in base new; do d=.; [ $v = base ] && d=_cmp/base
  for f in _ZN4gdnc21fwd_state_bf16_kernelILi128ELi2EEEvNS_2GAE _ZN4gdnc21bwd_state_bf16_kernelILi128ELi4EEEvNS_2GAE; do
    cuobjdump -sass -fun $f $d/gdn_chunk > $L/sass_${v}_${f:10:14}.txt 2>&1
    echo "SASS $v $f: $(grep -cE '^ +/\*[0-9a-f]{4}\*/' $L/sass_${v}_${f:10:14}.txt) instructions"
  done
done
./gdn_chunk all bf16 > $L/gdn_bf16.log 2>&1; echo "gdn bf16 rc=$?"; grep -E "FAIL|CORRECTNESS|TIME|kernels" $L/gdn_bf16.log | cut -c1-260
(cd _cmp/base && ./gdn_chunk time bf16) > $L/gdn_time_base.log 2>&1; echo "gdn time base rc=$?"; grep -E "TIME|kernels" $L/gdn_time_base.log | cut -c1-260
./gdn_chunk test fp32 > $L/gdn_fp32.log 2>&1; echo "gdn fp32 rc=$?"; grep -E "FAIL|CORRECTNESS" $L/gdn_fp32.log | cut -c1-200
timeout 240 ./test_natsl gpu > $L/test_gpu.log 2>&1; echo "test_natsl gpu rc=$?"; grep -iE "passed|fail" $L/test_gpu.log | tail -n 4; grep -E "bf16 vs the fp32" $L/test_gpu.log | cut -c1-200
for v in base new; do d=.; [ $v = base ] && d=_cmp/base
  (cd $d && timeout 150 ./bench_gpu step -a natsl-hybrid,gdn -p bf16 -n 5) > $L/step_$v.log 2>&1; echo "step $v rc=$?"; grep RESULT $L/step_$v.log | cut -c1-200
done
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs && rm -rf $L
