#!/bin/bash
# session 21 run 2 (part 2, part 1's machine): steps natsl-hybrid and gdn alternating base (HEAD 432ad13) / new twice,
# the natsl-hybrid profile, memcheck of 2 GN bf16 steps at the 340m head sizes.
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
t0=$(date +%s)
for v in base new base new; do d=.; [ $v = base ] && d=_cmp/base
  (cd $d && timeout 80 ./bench_gpu step -a natsl-hybrid,gdn -p bf16 -n 5) >> $L/step_$v.log 2>&1; echo "step $v rc=$?"; grep RESULT $L/step_$v.log | tail -n 2 | cut -c1-220
done
echo "t: $(( $(date +%s) - t0 )) s"
NATSL_PROFILE=1 timeout 60 ./bench_gpu step -a natsl-hybrid -p bf16 -n 5 > $L/prof.log 2>&1; echo "prof rc=$?"; grep -E "gated_norm|gdn_op_backward|step 2|RESULT" $L/prof.log | cut -c1-200
timeout 100 compute-sanitizer --tool memcheck ./train_natsl_cu -e 340m -a GN -b 1 -t 256 -x 2 -v 0 -s 0 -p bf16 -o /tmp/mc > $L/memcheck.log 2>&1; echo "memcheck rc=$?"; tail -n 3 $L/memcheck.log
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs && rm -rf $L
