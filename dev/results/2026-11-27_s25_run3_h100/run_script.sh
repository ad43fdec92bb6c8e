#!/bin/bash
# session 25 run 3: what the backward waits on. Timings of main's harness against two probes that change only the dQ
# adds (NODQ: none; STDQ: plain float4 stores instead of atomics; both give wrong dq, timing only), and ncu's
# stall reasons of main's backward and of the two-warpgroup one (run 2)
L=$OUT/logs; mkdir -p $L
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv > $L/gpu.txt
for r in 1 2; do for v in base NODQ STDQ; do timeout 40 stdbuf -oL _cmp/fb_$v time > $L/time_${v}_$r.log 2>&1; echo "time $v $r rc=$?"; done; done
for v in base NODQ STDQ; do echo "== $v"; grep -h "B8 T4096\|B1 T32768 16x64" $L/time_${v}_*.log | sed 's/active.*fwd/fwd/'; done
for v in base 2wg NODQ; do
  timeout 60 ncu --metrics regex:'smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio',smsp__inst_executed.sum,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,gpu__time_duration.sum \
    -k regex:'fa_bwd_wgmma_kernel' _cmp/fb_$v prof > $L/ncu_stall_$v.log 2>&1; echo "ncu $v rc=$?"
  grep -E "stalled|inst_executed|gmma|duration" $L/ncu_stall_$v.log | awk '$NF+0 > 0.05 || /inst|gmma|duration/' | sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//'
done
tar -czf $OUT/logs.tgz -C $OUT logs
