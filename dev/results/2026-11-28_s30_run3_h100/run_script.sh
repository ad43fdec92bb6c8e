#!/bin/bash
# session 30 run 3 (H100): main at fdfd476 (one product for a G/N layer's input gradients) against 4bcd756
# (_cmp/bin/bench_gpu_head), alternating: gdn twice, natsl-hybrid once; gdn-hybrid and transformer; the natsl-hybrid
# step's profile with NATSL_PROFILE=2; the tiny main job.
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/device.txt
t0=$(date +%s)
for i in 1 2; do
  timeout 100 _cmp/bin/bench_gpu_head step -a gdn -p bf16 > $L/step_gdn_head$i.log 2>&1
  timeout 100 ./bench_gpu step -a gdn -p bf16 > $L/step_gdn_new$i.log 2>&1
done
timeout 100 _cmp/bin/bench_gpu_head step -a natsl-hybrid -p bf16 > $L/step_natsl-hybrid_head1.log 2>&1
timeout 100 ./bench_gpu step -a natsl-hybrid -p bf16 > $L/step_natsl-hybrid_new1.log 2>&1
for a in gdn-hybrid transformer; do timeout 100 ./bench_gpu step -a $a -p bf16 > $L/step_${a}_new1.log 2>&1; done
for f in $L/step_*.log; do echo "$(basename $f .log): $(grep RESULT $f | sed 's/ \+/ /g' | cut -c1-160)"; done
tar -czf $O/logs.tgz -C $O logs
NATSL_PROFILE=2 timeout 150 ./bench_gpu step -a natsl-hybrid -p bf16 -n 5 > $L/prof2_natsl-hybrid.log 2>&1; echo "prof2 rc=$?"
grep -E "RESULT|matmul|gdn_op|between|gates" $L/prof2_natsl-hybrid.log | sed 's/ \+/ /g' | cut -c1-160
tar -czf $O/logs.tgz -C $O logs
timeout 60 ./train_natsl_cu -x 300 -v 300 -s 0 > $L/main_job.log 2>&1; echo "main job rc=$?"
grep -E "^step +(1|100|200|300)/|val loss" $L/main_job.log | cut -c1-160 | tail -8
echo "total $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs
