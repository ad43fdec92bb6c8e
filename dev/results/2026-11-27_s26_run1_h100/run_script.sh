#!/bin/bash
# session 26 run 1 (H100): the attention forward on a four-stage K/V ring with mbarriers (no block barrier a tile), the
# two warpgroups taking turns issuing their products (pp: FA3's ping-pong) or not (ring), against main 5d71bb1 (base):
# flash_bf16 small + check of each variant, then `time` alternating base / pp / ring twice
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/device.txt
t0=$(date +%s)
for v in pp ring; do
  timeout 60 stdbuf -oL _cmp/fb_$v small > $L/small_$v.log 2>&1; rc=$?; echo "small $v rc=$rc"; tail -n 1 $L/small_$v.log
  [ $rc -ne 0 ] && { tar -czf $O/logs.tgz -C $O logs; exit 1; }
done
for v in pp ring; do
  timeout 120 stdbuf -oL _cmp/fb_$v check > $L/check_$v.log 2>&1; echo "check $v rc=$?"; grep FAIL $L/check_$v.log | head -3; tail -n 1 $L/check_$v.log
done
for r in 1 2; do for v in base pp ring; do
  timeout 60 stdbuf -oL _cmp/fb_$v time > $L/time_${v}_$r.log 2>&1; echo "time $v $r rc=$?"
  grep "A causal B8 T4096 16x64  \|frac 1.0  \|T4096 12x64/128 frac 0.25\|A causal B1 T32768\|T32768 12x64/128 frac 1.0\|T32768 12x64/128 frac 0.25" $L/time_${v}_$r.log | sed 's/ \+/ /g' | cut -c1-120
done; done
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs
