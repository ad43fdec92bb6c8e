#!/bin/bash
# build + check + time on the device machine; logs under $OUT
#   run_device.sh [san] ["FLAGS1" ...]: default build: all checks + all timings; "san": compute-sanitizer memcheck and
#   racecheck on the small checks; each FLAGS: a variant build (e.g. "-lineinfo"), its checks + timings
set -o pipefail
cd "$(dirname "$0")"
O=${OUT:-/tmp}
SAN=0; if [ "$1" == "san" ]; then SAN=1; shift; fi
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
nvcc -O3 -arch=compute_90a -code=sm_90a -std=c++17 --default-stream per-thread -o /tmp/ma masked_attention.cu -lcublas -lnccl &
i=0; for v in "$@"; do i=$((i+1)); nvcc -O3 -arch=compute_90a -code=sm_90a -std=c++17 --default-stream per-thread $v -o /tmp/ma_v$i masked_attention.cu -lcublas -lnccl & done
wait
/tmp/ma 2>&1 | tee $O/log.txt
i=0; for v in "$@"; do i=$((i+1));
  echo "--- variant $v"; /tmp/ma_v$i 2>&1 | grep -E "CORRECTNESS|FAIL|ms" | tee $O/log_v$i.txt
done
if [ $SAN == 1 ]; then
  for tool in memcheck racecheck; do
    echo "--- compute-sanitizer $tool"
    timeout 90 compute-sanitizer --tool $tool /tmp/ma tiny > $O/san_$tool.txt 2>&1; echo "rc=$?"
    grep -E "TINY|ERROR SUMMARY|RACECHECK SUMMARY|Error|error" $O/san_$tool.txt | head -8
  done
fi
