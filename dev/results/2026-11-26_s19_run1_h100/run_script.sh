#!/bin/bash
# session 19 run 1: the cross-entropy forward in two passes (max, then Σ exp: the row read from DRAM once) and the
# GDN backward's local dVn part formed in bwd_state_bf16 from bwd_local's bf16 s Pᵀ (no fp32 dVn_local round trip);
# against main b84b591 (_cmp/base) on the same machine. Builds; gdn_chunk all bf16 (new), time bf16 (base), test fp32
# (new); ./test_natsl gpu; steps (base, new); the new step's profile; nsys's kernel table of 3 new steps. Logs in logs.tgz.
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
./gdn_chunk all bf16 > $L/gdn_bf16.log 2>&1; echo "gdn bf16 rc=$?"; grep -E "FAIL|CORRECTNESS|TIME|kernels" $L/gdn_bf16.log | cut -c1-260
(cd _cmp/base && ./gdn_chunk time bf16) > $L/gdn_time_base.log 2>&1; echo "gdn time base rc=$?"; grep -E "TIME|kernels" $L/gdn_time_base.log | cut -c1-260
./gdn_chunk test fp32 > $L/gdn_fp32.log 2>&1; echo "gdn fp32 rc=$?"; grep -E "FAIL|CORRECTNESS" $L/gdn_fp32.log | cut -c1-200
echo "t: $(( $(date +%s) - t0 )) s"
timeout 240 ./test_natsl gpu > $L/test_gpu.log 2>&1; echo "test_natsl gpu rc=$?"; grep -iE "passed|fail" $L/test_gpu.log | tail -n 4; grep -E "bf16 vs the fp32" $L/test_gpu.log | cut -c1-200
echo "t: $(( $(date +%s) - t0 )) s"
for v in base new; do d=.; [ $v = base ] && d=_cmp/base
  (cd $d && timeout 100 ./bench_gpu step -a natsl-hybrid,gdn -p bf16 -n 5) > $L/step_$v.log 2>&1; echo "step $v rc=$?"; grep RESULT $L/step_$v.log | cut -c1-200
done
echo "t: $(( $(date +%s) - t0 )) s"
NATSL_PROFILE=1 timeout 60 ./bench_gpu step -a natsl-hybrid -p bf16 -n 5 > $L/prof.log 2>&1; echo "prof rc=$?"; grep -E "crossentropy|gdn_op|step " $L/prof.log | cut -c1-120
if command -v nsys > /dev/null; then
  timeout 120 nsys profile -o $L/nsys_step --force-overwrite true ./bench_gpu step -a natsl-hybrid -p bf16 -n 3 > $L/nsys_run.log 2>&1; echo "nsys rc=$?"
  timeout 90 nsys stats -r cuda_gpu_kern_sum,cuda_gpu_trace --format csv -o $L/nsys $L/nsys_step.nsys-rep > $L/nsys_stats.log 2>&1; echo "nsys stats rc=$?"
  rm -f $L/nsys_step.nsys-rep $L/nsys_step.sqlite; gzip -f $L/nsys*.csv; ls -la $L | grep nsys
else echo "no nsys"; fi
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs && rm -rf $L
