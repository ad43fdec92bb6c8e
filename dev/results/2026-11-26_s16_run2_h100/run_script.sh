#!/bin/bash
# session 16 run 2 (same machine as run 1, its builds kept): bench_gpu step, natsl-hybrid and gdn, this tree and
# HEAD's (_cmp/base), with NATSL_PROFILE=1. Logs in logs.tgz.
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
t0=$(date +%s)
for pat in natsl-hybrid gdn; do
  timeout 140 env NATSL_PROFILE=1 ./bench_gpu step -a $pat -p bf16 -n 5 > $L/step_$pat.log 2>&1; echo "step $pat rc=$?"
  (cd _cmp/base && timeout 140 env NATSL_PROFILE=1 ./bench_gpu step -a $pat -p bf16 -n 5) > $L/step_base_$pat.log 2>&1; echo "base step $pat rc=$?"
done
grep -E "RESULT|block_rebuild|conv_silu|gated_norm|gdn_op" $L/step*.log | cut -c1-220
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs && rm -rf $L
