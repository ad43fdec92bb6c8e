#!/bin/bash
# session 14 run 4: bwd_local_bf16 taking its U tiles by cp.async and bwd_vloop1_bf16 its dVn and V tiles (uncommitted
# on 08ce264), against 2f863c2 (_cmp: the same GDN kernels as 08ce264): gdn_chunk all bf16 on this tree, time bf16
# on both, memcheck of gdn_chunk test bf16, the 340m step with its profile. Logs in logs.tgz.
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee $L/device.txt
NV="nvcc -O3 -arch=sm_90 -std=c++17 -I."
t0=$(date +%s)
left() { echo $(( 585 - ($(date +%s) - t0) )); }
$NV dev/bench_gpu.cu -o bench_gpu -lcublasLt -lcublas -lnccl > $L/build_bench.log 2>&1 &
$NV dev/cuda/gdn/gdn_chunk.cu -o /tmp/gdn_chunk -lcublasLt -lcublas -lnccl > $L/build_gdn.log 2>&1 &
(cd _cmp && $NV dev/cuda/gdn/gdn_chunk.cu -o /tmp/gdn_old -lcublasLt -lcublas -lnccl) > $L/build_cmp.log 2>&1 &
wait; echo "build: $(( $(date +%s) - t0 )) s"; tail -n 2 $L/build*.log
timeout 150 /tmp/gdn_chunk all bf16 > $L/gdn.log 2>&1; echo "gdn rc=$?"; grep -E "FAIL|CORRECT|TIME|kernels" $L/gdn.log | cut -c1-200
grep -E "PASS" $L/gdn.log | tail -n 3 | cut -c1-200
timeout 60 /tmp/gdn_old time bf16 > $L/gdn_old.log 2>&1; echo "gdn_old rc=$?"; grep -E "TIME|kernels" $L/gdn_old.log
(NATSL_PROFILE=1 timeout 100 ./bench_gpu step -a natsl-hybrid -p bf16 -n 5) > $L/step.log 2>&1; echo "step rc=$?"
grep RESULT $L/step.log; sed -n '/^profile/,$p' $L/step.log | grep -E "profile|gdn_op|conv|everything"
timeout $(left) compute-sanitizer --tool memcheck /tmp/gdn_chunk test bf16 > $L/gdn_memcheck.log 2>&1; echo "gdn memcheck rc=$?"
grep -E "ERROR SUMMARY|CORRECTNESS" $L/gdn_memcheck.log
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs && rm -rf $L
