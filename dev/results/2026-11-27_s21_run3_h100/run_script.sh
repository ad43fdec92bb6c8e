#!/bin/bash
# session 21 run 3: the GDN op's dO in bf16 with bwd_local_bf16 keeping its dO tile as raw bf16 (no widen-and-pack),
# against HEAD 432ad13 (_cmp/base): gdn_chunk test bf16 (new), kernel times alternating, steps alternating twice.
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee $L/device.txt
NV="nvcc -O3 -arch=compute_90a -code=sm_90a -std=c++17 -I."
t0=$(date +%s)
$NV dev/bench_gpu.cu -o /tmp/bench_new -lcublasLt -lcublas -lnccl > $L/build_bench.log 2>&1 &
$NV -Xcompiler -fopenmp dev/cuda/gdn/gdn_chunk.cu -o /tmp/gdn_new -lcublasLt -lcublas -lnccl > $L/build_gdn.log 2>&1 &
(cd _cmp/base && $NV dev/bench_gpu.cu -o /tmp/bench_base -lcublasLt -lcublas -lnccl > $L/build_bench_base.log 2>&1) &
(cd _cmp/base && $NV -Xcompiler -fopenmp dev/cuda/gdn/gdn_chunk.cu -o /tmp/gdn_base -lcublasLt -lcublas -lnccl > $L/build_gdn_base.log 2>&1) &
wait; echo "build: $(( $(date +%s) - t0 )) s"; ls -la /tmp/bench_new /tmp/gdn_new /tmp/bench_base /tmp/gdn_base | cut -c30-
timeout 100 /tmp/gdn_new test bf16 > $L/gdn_test.log 2>&1; echo "gdn_chunk test rc=$?"; grep -E "CORRECTNESS|FAIL" $L/gdn_test.log
for v in base new base new; do timeout 60 /tmp/gdn_$v time bf16 >> $L/gdn_time_$v.log 2>&1; echo "gdn time $v rc=$?"; grep -E "kernels" $L/gdn_time_$v.log | tail -n 4 | head -n 1 | cut -c1-250; done
echo "t: $(( $(date +%s) - t0 )) s"
for v in base new base new; do timeout 80 /tmp/bench_$v step -a natsl-hybrid,gdn -p bf16 -n 5 >> $L/step_$v.log 2>&1; echo "step $v rc=$?"; grep RESULT $L/step_$v.log | tail -n 2 | cut -c1-200; done
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs && rm -rf $L
