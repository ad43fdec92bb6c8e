#!/bin/bash
# session 27 run 4 (H100, five calls on one machine): main's final attention kernels (cd5b75e, run 2's v2 binaries in
# _cmp/v2): (a) ncu speed of light, occupancy, launch statistics and warp states of both kernels on the A shape
# (`flash_bf16 prof`); (b) racecheck of 2 GNA bf16 340m training steps. compute-sanitizer's kernel filter
# (`--kernel-name kns=fa_`) makes the sanitizer fail inside cuBLAS's kernels ("failed to handle a hardware exception";
# with CUDA_LAUNCH_BLOCKING=1 cublasLtMatmul returns error 13), so the steps run unfiltered, with the GEMM timing off
# (NATSL_GEMM_TIMED=0) and every report printed; the hazards are then listed by kernel.
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/device.txt
t0=$(date +%s)
timeout 150 ncu --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
  -k regex:'fa_(fwd|bwd)_wgmma_kernel' _cmp/v2/fb prof > $L/ncu_sol.log 2>&1; echo "ncu rc=$?"
grep -E "fa_(fwd|bwd)|Duration|Compute \(SM\) Throughput|Memory Throughput|DRAM Throughput|L2 Cache Throughput|Registers Per|Achieved Occupancy|Warp Cycles Per Issued" $L/ncu_sol.log | sed 's/ \+/ /g' | cut -c1-120
cd _cmp/v2
NATSL_GEMM_TIMED=0 CUDA_LAUNCH_BLOCKING=1 timeout 120 compute-sanitizer --tool racecheck --kernel-name kns=fa_ ./train_natsl_cu -e 340m -a GNA -b 1 -t 256 -x 1 -v 0 -s 0 -p bf16 -i data/fineweb_edu_train.bin -j data/fineweb_edu_val.bin -o /tmp/rc_a > $L/racecheck_train_blocking.log 2>&1; echo "racecheck filtered blocking rc=$?"; grep -E "SUMMARY|error|Error" $L/racecheck_train_blocking.log | head -5 | cut -c1-150
NATSL_GEMM_TIMED=0 timeout 400 compute-sanitizer --tool racecheck --print-limit 100000 ./train_natsl_cu -e 340m -a GNA -b 1 -t 256 -x 2 -v 0 -s 0 -p bf16 -i data/fineweb_edu_train.bin -j data/fineweb_edu_val.bin -o /tmp/rc_c > $L/racecheck_train_2steps.log 2>&1; echo "racecheck rc=$? ($(( $(date +%s) - t0 )) s)"
grep SUMMARY $L/racecheck_train_2steps.log; grep -c "Race reported" $L/racecheck_train_2steps.log
grep "Race reported" $L/racecheck_train_2steps.log | sed 's/.*Read access at \([A-Za-z0-9_]*\).*/\1/' | sed 's/+0x.*//' | sort | uniq -c | sort -rn | head; grep "Race reported" $L/racecheck_train_2steps.log | grep -vc nvjet
tar -czf $O/logs.tgz -C $O logs
