#!/bin/bash
# session 30 run 2 (H100): one product for a G/N layer's input projections in the forward pass too (proj | gate | ab
# in rows of gdn_in_ld, x W_abᵀ now stored in bf16): memcheck of 2 GNA bf16 340m training steps; ./test_natsl gpu;
# natsl-hybrid steps (NATSL_GEMM_REPORT=1 on the first), fdfd476 (_cmp/bin/bench_gpu_fdfd476: the backward's one
# product) and this tree alternating; gdn against 4bcd756 (_cmp/bin/bench_gpu_head); the tiny main job (300 steps).
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/device.txt
t0=$(date +%s)
timeout 150 compute-sanitizer --tool memcheck ./train_natsl_cu -e 340m -a GNA -b 1 -t 256 -x 2 -v 0 -s 0 -p bf16 -i data/fineweb_edu_train.bin -j data/fineweb_edu_val.bin -o /tmp/mc > $L/memcheck_train.log 2>&1; echo "memcheck train rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 2 $L/memcheck_train.log | cut -c1-150
NATSL_GEMM_REPORT=1 timeout 100 ./bench_gpu step -a natsl-hybrid -p bf16 > $L/step_natsl-hybrid_new1.log 2>&1
grep "m=4624\|k=4624\|n=4620" $L/step_natsl-hybrid_new1.log | head -3 | cut -c1-220
tar -czf $O/logs.tgz -C $O logs
timeout 320 ./test_natsl gpu > $L/test_gpu.log 2>&1; echo "test_gpu rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 1 $L/test_gpu.log
tar -czf $O/logs.tgz -C $O logs
timeout 100 _cmp/bin/bench_gpu_fdfd476 step -a natsl-hybrid -p bf16 > $L/step_natsl-hybrid_fdfd476_1.log 2>&1
timeout 100 ./bench_gpu step -a natsl-hybrid -p bf16 > $L/step_natsl-hybrid_new2.log 2>&1
timeout 100 _cmp/bin/bench_gpu_fdfd476 step -a natsl-hybrid -p bf16 > $L/step_natsl-hybrid_fdfd476_2.log 2>&1
timeout 100 ./bench_gpu step -a gdn -p bf16 > $L/step_gdn_new1.log 2>&1
timeout 100 _cmp/bin/bench_gpu_head step -a gdn -p bf16 > $L/step_gdn_head1.log 2>&1
for f in $L/step_*.log; do echo "$(basename $f .log): $(grep RESULT $f | sed 's/ \+/ /g' | cut -c1-160)"; done
tar -czf $O/logs.tgz -C $O logs
if [ $(( $(date +%s) - t0 )) -lt 540 ]; then
  timeout 50 ./train_natsl_cu -x 300 -v 300 -s 0 > $L/main_job.log 2>&1; echo "main job rc=$?"
  grep -E "^step +(1|100|200|300)/|val loss" $L/main_job.log | cut -c1-160 | tail -8
fi
echo "total $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs
