#!/bin/bash
# session 25 run 4: the two-warpgroup backward (run 2's ring) where the pair shares each query tile's dQ: one add a
# column from the pair's 128 keys (warpgroup w: columns 32w..32w+31). small (fail fast), check, timings alternating
# with main's harness, ncu stalls
L=$OUT/logs; mkdir -p $L
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv > $L/gpu.txt
timeout 40 stdbuf -oL _cmp/fb_dq2 small > $L/small_dq2.log 2>&1; rc=$?; echo "small dq2 rc=$rc"; grep -c PASS $L/small_dq2.log; grep FAIL $L/small_dq2.log | head -5; tail -1 $L/small_dq2.log
if [ $rc -eq 0 ]; then
  timeout 100 stdbuf -oL _cmp/fb_dq2 check > $L/check_dq2.log 2>&1; echo "check dq2 rc=$?"; grep FAIL $L/check_dq2.log | head; tail -1 $L/check_dq2.log
  for r in 1 2; do for v in base dq2; do timeout 40 stdbuf -oL _cmp/fb_$v time > $L/time_${v}_$r.log 2>&1; echo "time $v $r rc=$?"; done; done
  for v in base dq2; do echo "== $v"; grep -h "B8 T4096\|B1 T32768" $L/time_${v}_*.log | sed 's/active.*fwd/fwd/; s/ fwd .*bwd/ bwd/'; done
  timeout 60 ncu --metrics regex:'smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio',gpu__time_duration.sum,lts__t_sectors_op_red.sum \
    -k regex:'fa_bwd_wgmma_kernel' _cmp/fb_dq2 prof > $L/ncu_stall_dq2.log 2>&1; echo "ncu rc=$?"
  grep -E "stalled|duration|red" $L/ncu_stall_dq2.log | awk '$NF+0 > 0.05 || /red|duration/' | sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//'
fi
tar -czf $OUT/logs.tgz -C $OUT logs
