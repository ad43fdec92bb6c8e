#!/bin/bash
# session 26 run 4 (H100): on run 3's tma forward (s26-tma): (1) hm: the forward's blocks head by head (each head's
# heavy query blocks first), (2) r64: the rescale skipped only at dv = 64, (3) bwd: the backward's loads by the TMA
# unit too (Q, dO, lse2, δ, K, V; two mbarrier buffers, no block barrier at a tile's top) and descriptors from their
# low words: small + check of each, `time` alternating tma / hm / r64 / bwd twice
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/device.txt
t0=$(date +%s)
for v in hm r64 bwd; do
  timeout 60 stdbuf -oL _cmp/fb_$v small > $L/small_$v.log 2>&1; rc=$?; echo "small $v rc=$rc"; tail -n 1 $L/small_$v.log
  [ $rc -ne 0 ] && { tar -czf $O/logs.tgz -C $O logs; exit 1; }
done
for v in hm r64 bwd; do
  timeout 120 stdbuf -oL _cmp/fb_$v check > $L/check_$v.log 2>&1; echo "check $v rc=$?"; grep FAIL $L/check_$v.log | head -3; tail -n 1 $L/check_$v.log
done
for r in 1 2; do for v in tma hm r64 bwd; do
  timeout 60 stdbuf -oL _cmp/fb_$v time > $L/time_${v}_$r.log 2>&1; echo "time $v $r rc=$?"
  grep "A causal B8 T4096 16x64  \|frac 1.0  \|T4096 12x64/128 frac 0.25\|A causal B1 T32768\|T32768 12x64/128 frac 1.0\|T32768 12x64/128 frac 0.25" $L/time_${v}_$r.log | sed 's/ \+/ /g' | sed 's/active [0-9.]* //' | cut -c1-100
done; done
timeout 120 ncu --set full --kernel-name regex:fa_bwd --launch-count 1 _cmp/fb_bwd prof > $L/ncu_bwd.log 2>&1; echo "ncu bwd rc=$?"
grep -E "Duration|Issue Slots Busy|L2 Cache Throughput|Executed Instructions  |Registers Per" $L/ncu_bwd.log | head -6
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs
