#!/bin/bash
# session 25 run 11 (H100): the backward's blocks in groups of G key chunks (XP_ORDER = G: all heads' blocks of key
# chunks [gG, gG + G) before the next group, head-major inside a group; 0 = main's head-major order). small with G = 8
# and G = 1, then `time` for G = 0, 4, 8, 16, 32 and again 0, 8, 16
L=$OUT/logs; mkdir -p $L
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv > $L/gpu.txt
ok=1
for G in 8 1; do XP_ORDER=$G timeout 40 stdbuf -oL _cmp/fb_order small > $L/small_$G.log 2>&1 || ok=0; echo "small G=$G rc=$?"; tail -n 1 $L/small_$G.log; done
if [ $ok -eq 1 ]; then
  for G in 0 4 8 16 32 0 8 16; do XP_ORDER=$G timeout 40 stdbuf -oL _cmp/fb_order time >> $L/time_$G.log 2>&1; echo "time G=$G rc=$?"; done
  for G in 0 4 8 16 32; do echo "== G $G"; grep -h "B8 T4096\|B1 T32768" $L/time_$G.log | sed 's/active.*fwd/fwd/; s/ fwd .*bwd/ bwd/; s/TFLOP.*//'; done
fi
tar -czf $OUT/logs.tgz -C $OUT logs
