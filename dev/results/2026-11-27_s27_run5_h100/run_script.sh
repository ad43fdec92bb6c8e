#!/bin/bash
# session 27 run 5 (H100): (1) `enc`: the embedding's backward sorts the batch's tokens on the host from the host's ids
# (model_backward's inputs) and sends the plan by one asynchronous copy from pinned memory, where it copied the ids back
# from the device and sorted between two kernels (the GPU idle meanwhile): ./test_natsl gpu, natsl-hybrid steps
# alternating v2 / enc three times, transformer steps alternating; (2) `ld`: the attention backward's lse2 and δ
# interleaved by 64-row chunk so that one 512-byte bulk load brings both (one TMA command a tile fewer): harness small,
# check, `time` alternating v2 / ld twice
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/device.txt
t0=$(date +%s)
timeout 60 stdbuf -oL _cmp/ld/fb small > $L/small_ld.log 2>&1; rc=$?; echo "small ld rc=$rc"; tail -n 1 $L/small_ld.log
if [ $rc -eq 0 ]; then
  timeout 120 stdbuf -oL _cmp/ld/fb check > $L/check_ld.log 2>&1; echo "check ld rc=$?"; grep FAIL $L/check_ld.log | head -3; tail -n 1 $L/check_ld.log
  for r in 1 2; do for v in v2 ld; do
    timeout 60 stdbuf -oL _cmp/$v/fb time > $L/time_${v}_$r.log 2>&1; echo "time $v $r rc=$?"
    grep "A causal B8 T4096 16x64  \|A causal B8 T4096 16x64 (bf16\|frac 1.0  \|T4096 12x64/128 frac 0.25\|A causal B1 T32768\|T32768 12x64/128 frac 0.25" $L/time_${v}_$r.log | sed 's/ \+/ /g' | sed 's/active [0-9.]* //' | awk '{for(i=1;i<=NF;i++) if($i=="bwd") print substr($0,1,index($0," fwd")-1), "bwd", $(i+1)}'
  done; done
fi
echo "harness: $(( $(date +%s) - t0 )) s"
(cd _cmp/enc && timeout 300 ./test_natsl gpu) > $L/test_gpu.log 2>&1; echo "test_gpu rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 1 $L/test_gpu.log
for r in 1 2 3; do for v in v2 enc; do
  (cd _cmp/$v && timeout 90 ./bench_gpu step -a natsl-hybrid -p bf16 -n 5) >> $L/step_natsl-hybrid_$v.log 2>&1; echo "step natsl-hybrid $v $r rc=$?"
  grep RESULT $L/step_natsl-hybrid_$v.log | tail -n 1 | cut -c1-120
done; done
for v in v2 enc; do
  (cd _cmp/$v && timeout 90 ./bench_gpu step -a transformer -p bf16 -n 5) >> $L/step_transformer_$v.log 2>&1; echo "step transformer $v rc=$?"
  grep RESULT $L/step_transformer_$v.log | tail -n 1 | cut -c1-120
done
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs
