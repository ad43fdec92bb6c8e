#!/bin/bash
# session 27 run 1 (H100): the attention backward's dQ adds as 2-D TMA reduce-adds (two [16][32] fp32 boxes a warp and
# tile, 128-byte swizzled staging) where one 256-byte bulk reduce-add a row took 16 commands a warp: v1 (dv = 64 only,
# as before), v23 (v1 at dv = 128 too, and three query-tile buffers at dv = 64: loads two tiles ahead), against base
# (main 91db857): small + check of each, `time` alternating base / v1 / v23 twice, ncu stall reasons of the A shape's
# backward of base and v23
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/device.txt
t0=$(date +%s)
for v in v1 v23; do
  timeout 60 stdbuf -oL _cmp/$v/fb small > $L/small_$v.log 2>&1; rc=$?; echo "small $v rc=$rc"; tail -n 1 $L/small_$v.log
  [ $rc -ne 0 ] && { tar -czf $O/logs.tgz -C $O logs; exit 1; }
done
for v in v1 v23; do
  timeout 120 stdbuf -oL _cmp/$v/fb check > $L/check_$v.log 2>&1; echo "check $v rc=$?"; grep FAIL $L/check_$v.log | head -3; tail -n 1 $L/check_$v.log
done
for r in 1 2; do for v in base v1 v23; do
  timeout 60 stdbuf -oL _cmp/$v/fb time > $L/time_${v}_$r.log 2>&1; echo "time $v $r rc=$?"
  grep "A causal B8 T4096 16x64  \|A causal B8 T4096 16x64 (bf16\|frac 1.0  \|T4096 12x64/128 frac 0.25\|A causal B1 T32768\|T32768 12x64/128 frac 1.0\|T32768 12x64/128 frac 0.25" $L/time_${v}_$r.log | sed 's/ \+/ /g' | sed 's/active [0-9.]* //' | cut -c1-100
done; done
for v in base v23; do
  timeout 90 ncu --metrics regex:'smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio',smsp__inst_executed.sum,gpu__time_duration.sum,lts__t_sector_hit_rate.pct,lts__throughput.avg.pct_of_peak_sustained_elapsed \
    -k regex:'fa_bwd_wgmma_kernel' _cmp/$v/fb prof > $L/ncu_stall_bwd_$v.log 2>&1; echo "ncu $v rc=$?"
  grep -E "stalled|inst_executed|duration|lts" $L/ncu_stall_bwd_$v.log | awk '$NF+0 > 0.05 || /inst|duration|lts/' | sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' | awk '{print $1, $NF}' | tr '\n' ';'; echo
done
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs
