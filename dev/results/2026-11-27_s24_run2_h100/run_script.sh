#!/bin/bash
# session 24 run 2 (H100): (a) s24-fwd-logw (_cmp/fw: the forward's weight in the exponent, one multiply an element
# fewer) against d427f9d (_cmp/base): flash_bf16 all / time; (b) s24-rope-dkv (_cmp/rope: the A layer's dk rotated back
# by RoPE and dv written in bf16 into W_qkv's operand by the attention backward): flash_bf16 check (a rope case added),
# racecheck and memcheck of flash_bf16 small, ./test_natsl gpu, memcheck of 2 GNA bf16 steps, the layer table and
# transformer steps alternating with base.
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/device.txt
t0=$(date +%s)
tar -xzf _cmp/pack/bins.tgz
export OMP_NUM_THREADS=16
timeout 100 _cmp/fw/_flash_bf16 all > $L/flash_fw.log 2>&1; echo "flash fw rc=$? ($(( $(date +%s) - t0 )) s)"
grep -E "FAIL|CORRECTNESS|TFLOP" $L/flash_fw.log | cut -c1-150
timeout 60 _cmp/base/_flash_bf16 time > $L/flash_base.log 2>&1; echo "flash base rc=$? ($(( $(date +%s) - t0 )) s)"
grep -E "TFLOP" $L/flash_base.log | cut -c1-150
timeout 60 _cmp/rope/_flash_bf16 check > $L/flash_rope.log 2>&1; echo "flash rope rc=$?"; grep -E "FAIL|CORRECTNESS|rope" $L/flash_rope.log | cut -c1-190
timeout 60 compute-sanitizer --tool racecheck _cmp/rope/_flash_bf16 small > $L/racecheck.log 2>&1; echo "racecheck rc=$?"; tail -n 2 $L/racecheck.log
timeout 60 compute-sanitizer --tool memcheck _cmp/rope/_flash_bf16 small > $L/memcheck.log 2>&1; echo "memcheck rc=$?"; tail -n 2 $L/memcheck.log
echo "($(( $(date +%s) - t0 )) s)"
for v in base rope; do
  (cd _cmp/$v && timeout 40 ./bench_gpu layer -n 10) > $L/layer_$v.log 2>&1; echo "layer $v rc=$?"; grep RESULT $L/layer_$v.log | grep "layer A" | cut -c1-150
done
for v in base rope base rope; do
  (cd _cmp/$v && timeout 40 ./bench_gpu step -a transformer -p bf16 -n 5) >> $L/step_$v.log 2>&1; echo "step $v rc=$?"
  grep RESULT $L/step_$v.log | tail -n 1 | cut -c1-150
done
echo "($(( $(date +%s) - t0 )) s)"
(cd _cmp/rope && timeout 100 compute-sanitizer --tool memcheck ./train_natsl_cu -e 340m -a GNA -b 1 -t 256 -x 2 -v 0 -s 0 -p bf16 \
  -i data/fineweb_edu_train.bin -j data/fineweb_edu_val.bin -o /tmp/mc) > $L/memcheck_train.log 2>&1
echo "memcheck train rc=$?"; tail -n 2 $L/memcheck_train.log
(cd _cmp/rope && timeout 230 ./test_natsl gpu) > $L/test_gpu.log 2>&1; echo "test_gpu rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 3 $L/test_gpu.log | cut -c1-200
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs && rm -rf $L
