#!/bin/bash
# flash_bf16 on the device machine: build, checks + timings, ncu SpeedOfLight, compute-sanitizer; logs under $OUT
set -o pipefail
cd "$(dirname "$0")/../../.."  # the repository root: the harness includes train_natsl.cu
O=${OUT:-/tmp}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version --format=csv,noheader | tee $O/build.log
nvcc -O3 -arch=compute_90a -code=sm_90a -std=c++17 --default-stream per-thread -lineinfo -Xcompiler -fopenmp -Xptxas -v -I. -o /tmp/fb dev/cuda/attention/flash_bf16.cu -lcublas -lnccl >> $O/build.log 2>&1 \
  || { tail -40 $O/build.log; exit 1; }
cuobjdump -sass /tmp/fb > /tmp/fb.sass 2>/dev/null && awk '/Function :/{f=$3} /HMMA|HGMMA/{h[f]++} /STL/{s[f]++} /LDL/{l[f]++} /LDSM/{m[f]++}
  END{for (k in h) printf "SASS %-90s HMMA %5d LDSM %5d STL %4d LDL %4d\n", k, h[k], m[k], s[k], l[k]}' /tmp/fb.sass >> $O/build.log
grep SASS $O/build.log
OMP_NUM_THREADS=16 /tmp/fb ${1:-all} 2>&1 | tee $O/main.log
echo "--- ncu"
timeout 150 ncu --section SpeedOfLight --section LaunchStats --section Occupancy --section ComputeWorkloadAnalysis --section WarpStateStats --section MemoryWorkloadAnalysis -k regex:'fa_(fwd|bwd)_wgmma_kernel' /tmp/fb prof > $O/ncu.log 2>&1
echo "ncu rc=$?"; grep -E "fa_|Duration|Throughput|Achieved Occupancy|Issue Slots Busy|Executed Ipc A|Stall|L2 Hit|Mem Busy" $O/ncu.log | head -50
[ -n "$SDPA" ] && echo "--- sdpa" && timeout 90 python3 dev/cuda/attention/sdpa_ref.py 2>&1 | grep -v Warning | tail -4 | tee $O/sdpa.log
for tool in memcheck racecheck; do
  echo "--- compute-sanitizer $tool"
  timeout 120 compute-sanitizer --tool $tool /tmp/fb small > $O/san_$tool.log 2>&1; echo "rc=$?"
  grep -E "SMALL|ERROR SUMMARY|RACECHECK SUMMARY|Hazard|error" $O/san_$tool.log | head -6
done
