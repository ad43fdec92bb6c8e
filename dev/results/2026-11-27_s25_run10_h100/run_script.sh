#!/bin/bash
# session 25 run 10 (H100): the attention backward's block order, one harness binary (main + an XP_ORDER switch):
# 0 = head-major (main: block L -> head L / Nc, key chunk L % Nc), 1 = key-chunk-major (key chunk L / (B·NH), head
# L % (B·NH): every head's longest blocks first). small with order 1, then `time` alternating 0, 1 twice
L=$OUT/logs; mkdir -p $L
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv > $L/gpu.txt
XP_ORDER=1 timeout 40 stdbuf -oL _cmp/fb_order small > $L/small_1.log 2>&1; rc=$?; echo "small order 1 rc=$rc"; tail -n 1 $L/small_1.log
if [ $rc -eq 0 ]; then
  for r in 1 2; do for o in 0 1; do XP_ORDER=$o timeout 40 stdbuf -oL _cmp/fb_order time > $L/time_${o}_$r.log 2>&1; echo "time order $o $r rc=$?"; done; done
  for o in 0 1; do echo "== order $o"; grep -h "B8 T4096\|B1 T32768" $L/time_${o}_*.log | sed 's/active.*fwd/fwd/; s/ fwd .*bwd/ bwd/; s/total.*//'; done
fi
tar -czf $OUT/logs.tgz -C $OUT logs
