#!/bin/bash
# session 24 run 1 (H100): the attention backward's dQ by TMA bulk reduce-adds of each warp's 16 rows from a shared
# staging tile (s24-dq-bulk, _cmp/dq) against the float4 atomics of d427f9d (_cmp/base): flash_bf16 all (dq) and
# time (base), ncu of both backward kernels, racecheck and memcheck of flash_bf16 small (dq), the A and N layers,
# transformer and natsl-hybrid steps alternating.
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/device.txt
t0=$(date +%s)
tar -xzf _cmp/pack/bins.tgz
export OMP_NUM_THREADS=16
timeout 200 _cmp/dq/_flash_bf16 all > $L/flash_dq.log 2>&1; echo "flash dq rc=$? ($(( $(date +%s) - t0 )) s)"
grep -E "FAIL|CORRECTNESS|TFLOP" $L/flash_dq.log | cut -c1-190
timeout 100 _cmp/base/_flash_bf16 time > $L/flash_base.log 2>&1; echo "flash base rc=$? ($(( $(date +%s) - t0 )) s)"
grep -E "TFLOP" $L/flash_base.log | cut -c1-190
for v in base dq; do
  timeout 60 ncu --section SpeedOfLight --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis \
    -k regex:'fa_bwd_wgmma_kernel' _cmp/$v/_flash_bf16 prof > $L/ncu_$v.log 2>&1; echo "ncu $v rc=$?"
  grep -E "Duration|Memory Throughput|DRAM Through|L2 Cache Through|Compute \(SM\)|Issue Slots|Achieved Occ" $L/ncu_$v.log | head -12
done
timeout 90 compute-sanitizer --tool racecheck _cmp/dq/_flash_bf16 small > $L/racecheck.log 2>&1; echo "racecheck rc=$?"; tail -n 2 $L/racecheck.log
timeout 90 compute-sanitizer --tool memcheck _cmp/dq/_flash_bf16 small > $L/memcheck.log 2>&1; echo "memcheck rc=$?"; tail -n 2 $L/memcheck.log
echo "($(( $(date +%s) - t0 )) s)"
for v in base dq; do
  (cd _cmp/$v && timeout 60 ./bench_gpu layer -n 10) > $L/layer_$v.log 2>&1; echo "layer $v rc=$?"; grep RESULT $L/layer_$v.log | cut -c1-150
done
for v in base dq base dq; do
  (cd _cmp/$v && timeout 80 ./bench_gpu step -a transformer,natsl-hybrid -p bf16 -n 5) >> $L/step_$v.log 2>&1; echo "step $v rc=$?"
  grep RESULT $L/step_$v.log | tail -n 2 | cut -c1-120
done
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs && rm -rf $L
