#!/bin/bash
# session 26 run 10 (H100): dq128: the backward's dQ by bulk reduce-adds from the shared staging tile at dv = 128 too
# (the N layers; after run 9's change the dv = 128 kernels take it at 242 registers without spills), against main
# (smem = run 9's harness): small, check, `time` alternating twice
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/device.txt
t0=$(date +%s)
timeout 60 stdbuf -oL _cmp/fb_dq128 small > $L/small.log 2>&1; rc=$?; echo "small rc=$rc"; tail -n 1 $L/small.log
[ $rc -ne 0 ] && { tar -czf $O/logs.tgz -C $O logs; exit 1; }
timeout 120 stdbuf -oL _cmp/fb_dq128 check > $L/check.log 2>&1; echo "check rc=$?"; grep FAIL $L/check.log | head -3; tail -n 1 $L/check.log
for r in 1 2; do for v in smem dq128; do
  timeout 60 stdbuf -oL _cmp/fb_$v time > $L/time_${v}_$r.log 2>&1; echo "time $v $r rc=$?"
  grep "A causal B8 T4096 16x64  \|frac 1.0  \|T4096 12x64/128 frac 0.25\|T4096 12x64/128 frac 0.1\|T32768 12x64/128 frac 1.0\|T32768 12x64/128 frac 0.25\|T32768 12x64/128 frac 0.1\|760m" $L/time_${v}_$r.log | sed 's/ \+/ /g' | sed 's/active [0-9.]* //' | cut -c1-100
done; done
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs
