#!/bin/bash
# session 25 run 6: main's backward with the dQ adds as bulk reduce-adds at DV = 64 only (session 24's staging tile,
# now kept off the DV = 128 kernels): small (fail fast), check, racecheck/memcheck small, timings alternating with
# main's harness; the GDN op's time at the 340m and 760m sizes on main (issue 10's ≤ 2.5 ms)
L=$OUT/logs; mkdir -p $L
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv > $L/gpu.txt
timeout 40 stdbuf -oL _cmp/fb_bulk small > $L/small_bulk.log 2>&1; rc=$?; echo "small bulk rc=$rc"; tail -1 $L/small_bulk.log
if [ $rc -eq 0 ]; then
  timeout 100 stdbuf -oL _cmp/fb_bulk check > $L/check_bulk.log 2>&1; echo "check bulk rc=$?"; grep FAIL $L/check_bulk.log | head -3; tail -1 $L/check_bulk.log
  timeout 90 compute-sanitizer --tool racecheck _cmp/fb_bulk small > $L/racecheck_bulk.log 2>&1; echo "racecheck rc=$?"; tail -2 $L/racecheck_bulk.log
  timeout 90 compute-sanitizer --tool memcheck _cmp/fb_bulk small > $L/memcheck_bulk.log 2>&1; echo "memcheck rc=$?"; tail -2 $L/memcheck_bulk.log
  for r in 1 2; do for v in base bulk; do timeout 40 stdbuf -oL _cmp/fb_$v time > $L/time_${v}_$r.log 2>&1; echo "time $v $r rc=$?"; done; done
  for v in base bulk; do echo "== $v"; grep -h "B8 T4096\|B1 T32768" $L/time_${v}_*.log | sed 's/active.*fwd/fwd/; s/ fwd .*bwd/ bwd/; s/total.*//'; done
fi
for r in 1 2; do timeout 60 stdbuf -oL _cmp/gdn_chunk time bf16 > $L/gdn_time_$r.log 2>&1; echo "gdn time $r rc=$?"; done
grep -h -i "op\b\|total\|fwd+bwd\|ms" $L/gdn_time_1.log | head -20
tar -czf $OUT/logs.tgz -C $OUT logs
