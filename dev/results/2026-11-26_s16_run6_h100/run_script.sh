#!/bin/bash
# session 16 run 6 (same machine as run 5, its builds kept; nothing carried): bench_gpu step, all four patterns, with
# NATSL_PROFILE=1. Logs in logs.tgz.
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
t0=$(date +%s)
timeout 400 env NATSL_PROFILE=1 ./bench_gpu step -p bf16 -n 5 > $L/step.log 2>&1; echo "bench step rc=$?"
grep -E "RESULT|memory:" $L/step.log | cut -c1-230
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs && rm -rf $L
