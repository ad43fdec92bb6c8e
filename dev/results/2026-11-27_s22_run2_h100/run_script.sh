#!/bin/bash
# session 22 run 2: the reordered GDN backward in the trainer: ./test_natsl gpu, then the natsl-hybrid and gdn steps
# alternating base (HEAD a6fa6e4, _cmp/base) / new twice, and the natsl-hybrid profile.
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/device.txt
t0=$(date +%s)
timeout 300 ./test_natsl gpu > $L/test_gpu.log 2>&1; echo "test_gpu rc=$?"; tail -n 4 $L/test_gpu.log | cut -c1-200
for v in base new base new; do d=.; [ $v = base ] && d=_cmp/base
  (cd $d && timeout 80 ./bench_gpu step -a natsl-hybrid,gdn -p bf16 -n 5) >> $L/step_$v.log 2>&1; echo "step $v rc=$?"; grep RESULT $L/step_$v.log | tail -n 2 | cut -c1-200
done
NATSL_PROFILE=1 timeout 60 ./bench_gpu step -a natsl-hybrid -p bf16 -n 5 > $L/prof.log 2>&1; echo "prof rc=$?"; grep -E "gdn_op|step 2|RESULT" $L/prof.log | cut -c1-200
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs && rm -rf $L
