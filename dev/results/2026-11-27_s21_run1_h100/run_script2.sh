#!/bin/bash
# session 21 run 1 (part 2, the machine of part 1): steps natsl-hybrid and gdn alternating base (HEAD 4fcfadb) / new
# twice, the natsl-hybrid profile.
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
t0=$(date +%s)
for v in base new base new; do d=.; [ $v = base ] && d=_cmp/base
  (cd $d && timeout 80 ./bench_gpu step -a natsl-hybrid,gdn -p bf16 -n 5) >> $L/step_$v.log 2>&1; echo "step $v rc=$?"; grep RESULT $L/step_$v.log | tail -n 2 | cut -c1-220
done
echo "t: $(( $(date +%s) - t0 )) s"
NATSL_PROFILE=1 timeout 60 ./bench_gpu step -a natsl-hybrid -p bf16 -n 5 > $L/prof.log 2>&1; echo "prof rc=$?"; grep -E "conv|gdn_op_backward|step 2|RESULT" $L/prof.log | cut -c1-200
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs && rm -rf $L
