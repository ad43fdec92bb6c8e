#!/bin/bash
# session 25 run 5: main's backward with the softmax scale folded into δ (f: dd = fma(dP, scale, −scale·δ), no
# scale multiplies on dQ, dK), and the same with the diagonal tile specialized (fp). Checks, alternating timings
L=$OUT/logs; mkdir -p $L
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv > $L/gpu.txt
ok=""
for v in f fp; do
  timeout 40 stdbuf -oL _cmp/fb_$v small > $L/small_$v.log 2>&1; rc=$?; echo "small $v rc=$rc"; tail -1 $L/small_$v.log
  [ $rc -eq 0 ] && { timeout 100 stdbuf -oL _cmp/fb_$v check > $L/check_$v.log 2>&1; echo "check $v rc=$?"; grep FAIL $L/check_$v.log | head -3; tail -1 $L/check_$v.log; ok="$ok $v"; }
done
for r in 1 2; do for v in base $ok; do timeout 40 stdbuf -oL _cmp/fb_$v time > $L/time_${v}_$r.log 2>&1; echo "time $v $r rc=$?"; done; done
for v in base $ok; do echo "== $v"; grep -h "B8 T4096\|B1 T32768" $L/time_${v}_*.log | sed 's/active.*fwd/fwd/; s/ fwd .*bwd/ bwd/; s/total.*//'; done
tar -czf $OUT/logs.tgz -C $OUT logs
