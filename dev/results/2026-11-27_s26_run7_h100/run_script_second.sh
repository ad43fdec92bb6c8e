#!/bin/bash
# session 26 run 7 (H100): on main (fin = run 5's harness, the same kernels): (1) dq2: the backward's dQ staging tile
# double-buffered at dv = 64 (the bulk reduce-add of tile it − 1 may still read while tile it stages), (2) f2: the
# forward at dv = 128 as two blocks an SM (three stages, one tile loaded ahead, 128 registers: 188 bytes of spills);
# small + check of each, `time` alternating fin / dq2 / f2 twice
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/device.txt
t0=$(date +%s)
for v in dq2; do
  timeout 60 stdbuf -oL _cmp/fb_$v small > $L/small_$v.log 2>&1; rc=$?; echo "small $v rc=$rc"; tail -n 1 $L/small_$v.log
  [ $rc -ne 0 ] && { tar -czf $O/logs.tgz -C $O logs; exit 1; }
done
for v in dq2; do
  timeout 120 stdbuf -oL _cmp/fb_$v check > $L/check_$v.log 2>&1; echo "check $v rc=$?"; grep FAIL $L/check_$v.log | head -3; tail -n 1 $L/check_$v.log
done
for r in 1 2; do for v in fin dq2; do
  timeout 60 stdbuf -oL _cmp/fb_$v time > $L/time_${v}_$r.log 2>&1; echo "time $v $r rc=$?"
  grep "A causal B8 T4096 16x64  \|A causal B8 T4096 16x64 (bf16\|frac 1.0  \|T4096 12x64/128 frac 0.25\|A causal B1 T32768\|T32768 12x64/128 frac 1.0\|T32768 12x64/128 frac 0.25" $L/time_${v}_$r.log | sed 's/ \+/ /g' | sed 's/active [0-9.]* //' | cut -c1-100
done; done
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs
