#!/bin/bash
# session 30 run 5 (H100): gdn_in_ld a multiple of 64 (rows of whole 128-byte lines in bf16: 4672 at the 340m size)
# instead of 8 (4624): ncu of gated_norm_backward_kernel in a gdn step; natsl-hybrid steps, fdfd476
# (_cmp/bin/bench_gpu_fdfd476) and this tree alternating, NATSL_GEMM_REPORT=1 on the first; memcheck of 2 GNA bf16
# 340m training steps; ./test_natsl gpu.
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/device.txt
t0=$(date +%s)
timeout 120 ncu --kernel-name regex:"gated_norm_backward_kernel" --launch-count 2 --section SpeedOfLight ./bench_gpu step -a gdn -p bf16 -n 1 > $L/ncu_gated_norm.log 2>&1
echo "ncu rc=$?"; grep -E "Duration|DRAM Throughput" $L/ncu_gated_norm.log | sed 's/ \+/ /g'
NATSL_GEMM_REPORT=1 timeout 100 ./bench_gpu step -a natsl-hybrid -p bf16 > $L/step_natsl-hybrid_new1.log 2>&1
grep "k=4672\|n=4620" $L/step_natsl-hybrid_new1.log | head -2 | cut -c1-200
timeout 100 _cmp/bin/bench_gpu_fdfd476 step -a natsl-hybrid -p bf16 > $L/step_natsl-hybrid_fdfd476_1.log 2>&1
timeout 100 ./bench_gpu step -a natsl-hybrid -p bf16 > $L/step_natsl-hybrid_new2.log 2>&1
for f in $L/step_*.log; do echo "$(basename $f .log): $(grep RESULT $f | sed 's/ \+/ /g' | cut -c1-150)"; done
tar -czf $O/logs.tgz -C $O logs
timeout 100 compute-sanitizer --tool memcheck ./train_natsl_cu -e 340m -a GNA -b 1 -t 256 -x 2 -v 0 -s 0 -p bf16 -i data/fineweb_edu_train.bin -j data/fineweb_edu_val.bin -o /tmp/mc > $L/memcheck_train.log 2>&1; echo "memcheck train rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 1 $L/memcheck_train.log | cut -c1-150
timeout 300 ./test_natsl gpu > $L/test_gpu.log 2>&1; echo "test_gpu rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 1 $L/test_gpu.log
echo "total $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs
