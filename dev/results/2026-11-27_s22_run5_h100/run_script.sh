#!/bin/bash
# session 22 run 5: SwiGLU's forward a warp a row in runs of four (its backward and the norms as in 33da6d1), against
# 33da6d1 (_cmp/base): the natsl-hybrid profile of both trees, then the natsl-hybrid and gdn steps of both.
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/device.txt
t0=$(date +%s)
tar -xzf _cmp/pack/bins.tgz  # built here: train_natsl_cu, bench_gpu (this tree), _cmp/base/bench_gpu (33da6d1)
for v in base new; do d=.; [ $v = base ] && d=_cmp/base
  (cd $d && NATSL_PROFILE=1 timeout 60 ./bench_gpu step -a natsl-hybrid -p bf16 -n 5) > $L/prof_$v.log 2>&1; echo "prof $v rc=$?"
  grep -E "RESULT|step 2|swiglu|rmsnorm" $L/prof_$v.log | cut -c1-200
done
for v in base new; do d=.; [ $v = base ] && d=_cmp/base
  (cd $d && timeout 80 ./bench_gpu step -a natsl-hybrid,gdn -p bf16 -n 5) >> $L/step_$v.log 2>&1; echo "step $v rc=$?"; grep RESULT $L/step_$v.log | tail -n 2 | cut -c1-200
done
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs && rm -rf $L
