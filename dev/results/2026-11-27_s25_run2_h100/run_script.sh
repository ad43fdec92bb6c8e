#!/bin/bash
# session 25 run 2: the two-warpgroup backward with its ring's first refill fixed (run 1 hung: tile NS−1 was never
# issued); fail fast on `small`, then checks, alternating timings against main's harness, ncu of the new backward
L=$OUT/logs; mkdir -p $L
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv > $L/gpu.txt
timeout 40 stdbuf -oL _cmp/fb_2wg small > $L/small_2wg.log 2>&1; rc=$?; echo "small 2wg rc=$rc"; tail -2 $L/small_2wg.log
if [ $rc -eq 0 ]; then
  timeout 100 stdbuf -oL _cmp/fb_2wg check > $L/check_2wg.log 2>&1; echo "check 2wg rc=$?"; grep -E "FAIL|PASS" $L/check_2wg.log | tail -2
  for r in 1 2; do for v in base 2wg; do timeout 40 stdbuf -oL _cmp/fb_$v time > $L/time_${v}_$r.log 2>&1; echo "time $v $r rc=$?"; done; done
  for v in base 2wg; do echo "== $v"; grep -h "bwd" $L/time_${v}_*.log | sed 's/active.*fwd/fwd/'; done
  timeout 60 ncu --section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis \
    -k regex:'fa_bwd_wgmma_kernel' _cmp/fb_2wg prof > $L/ncu_2wg.log 2>&1; echo "ncu rc=$?"
  grep -E "Duration|L2 Cache Through|Compute \(SM\)|Issue Slots|Issued Warp|No Eligible|Warp Cycles Per Issued" $L/ncu_2wg.log | head -12
fi
tar -czf $OUT/logs.tgz -C $OUT logs
