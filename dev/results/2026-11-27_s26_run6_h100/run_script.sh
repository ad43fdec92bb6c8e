#!/bin/bash
# session 26 run 6 (H100): main 7f6e23d (_cmp/fin): what limits the backward now (ncu stall reasons of the A shape's
# backward, its SASS) and where the natsl-hybrid step's time goes (NATSL_PROFILE=1 bench_gpu step)
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/device.txt
t0=$(date +%s)
cuobjdump -sass _cmp/k_main.cubin > $L/sass_attention.txt 2>&1; echo "sass rc=$?"; gzip -9 $L/sass_attention.txt
timeout 90 ncu --metrics regex:'smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio',smsp__inst_executed.sum,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,gpu__time_duration.sum,lts__t_sector_hit_rate.pct,lts__throughput.avg.pct_of_peak_sustained_elapsed \
  -k regex:'fa_bwd_wgmma_kernel' _cmp/fin/fb_fin prof > $L/ncu_stall_bwd.log 2>&1; echo "ncu rc=$?"
grep -E "stalled|inst_executed|gmma|duration|lts" $L/ncu_stall_bwd.log | awk '$NF+0 > 0.05 || /inst|gmma|duration|lts/' | sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//'
(cd _cmp/fin && NATSL_PROFILE=1 timeout 120 ./bench_gpu step -a natsl-hybrid -p bf16 -n 5) > $L/prof_natsl-hybrid.log 2>&1; echo "prof rc=$?"
grep -A40 "RESULT" $L/prof_natsl-hybrid.log | head -40 | cut -c1-150
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs
