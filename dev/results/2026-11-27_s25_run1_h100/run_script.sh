#!/bin/bash
# session 25 run 1: the backward as two warpgroups sharing a query-tile ring (branch bwd-2wg) against main's:
# flash_bf16 all for both (checks + timings), racecheck/memcheck small and ncu of the new backward
L=$OUT/logs; mkdir -p $L
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv > $L/gpu.txt
for v in 2wg base; do
  timeout 120 _cmp/fb_$v all > $L/all_$v.log 2>&1; echo "all $v rc=$?"; grep -E "FAIL|PASS" $L/all_$v.log | tail -3
done
for v in base 2wg; do timeout 60 _cmp/fb_$v time > $L/time_$v.log 2>&1; echo "time $v rc=$?"; done
grep -h "bwd" $L/time_*.log | head -30
timeout 120 compute-sanitizer --tool racecheck _cmp/fb_2wg small > $L/racecheck.log 2>&1; echo "racecheck rc=$?"; tail -3 $L/racecheck.log
timeout 120 compute-sanitizer --tool memcheck _cmp/fb_2wg small > $L/memcheck.log 2>&1; echo "memcheck rc=$?"; tail -3 $L/memcheck.log
timeout 90 ncu --section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis \
  -k regex:'fa_bwd_wgmma_kernel' _cmp/fb_2wg prof > $L/ncu_2wg.log 2>&1; echo "ncu rc=$?"
grep -E "Duration|L2 Cache Through|Compute \(SM\)|Issue Slots|Issued Warp|No Eligible|Warp Cycles Per Issued" $L/ncu_2wg.log | head -12
tar -czf $OUT/logs.tgz -C $OUT logs
