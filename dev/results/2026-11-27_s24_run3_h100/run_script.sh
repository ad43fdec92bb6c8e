#!/bin/bash
# session 24 run 3 (H100): s24-dq-pipe (_cmp/pipe: the attention backward adds tile it−1's dQ while tile it's S^T, dP^T
# run on the tensor cores; dS^T double-buffered) against d0eedbc's kernels (_cmp/rope): flash_bf16 all / time
# alternating, ncu of both backward kernels, racecheck and memcheck of flash_bf16 small.
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/device.txt
t0=$(date +%s)
tar -xzf _cmp/pack/bins.tgz
export OMP_NUM_THREADS=16
timeout 100 _cmp/pipe/_flash_bf16 all > $L/flash_pipe.log 2>&1; echo "flash pipe rc=$? ($(( $(date +%s) - t0 )) s)"
grep -E "FAIL|CORRECTNESS|TFLOP" $L/flash_pipe.log | cut -c1-150
for v in rope pipe rope; do
  timeout 60 _cmp/$v/_flash_bf16 time > $L/flash_time_$v.log 2>&1; echo "time $v rc=$?"; grep -E "TFLOP" $L/flash_time_$v.log | cut -c1-150 | head -7
done
for v in rope pipe; do
  timeout 60 ncu --section SpeedOfLight --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis \
    -k regex:'fa_bwd_wgmma_kernel' _cmp/$v/_flash_bf16 prof > $L/ncu_$v.log 2>&1; echo "ncu $v rc=$?"
  grep -E "Duration|L2 Cache Through|Compute \(SM\)|Achieved Occ|Warp Cycles Per Issued" $L/ncu_$v.log | head -6
done
timeout 60 compute-sanitizer --tool racecheck _cmp/pipe/_flash_bf16 small > $L/racecheck.log 2>&1; echo "racecheck rc=$?"; tail -n 2 $L/racecheck.log
timeout 60 compute-sanitizer --tool memcheck _cmp/pipe/_flash_bf16 small > $L/memcheck.log 2>&1; echo "memcheck rc=$?"; tail -n 2 $L/memcheck.log
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs && rm -rf $L
