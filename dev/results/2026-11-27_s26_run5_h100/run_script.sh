#!/bin/bash
# session 26 run 5 (H100): the merged attention change (s26-bwd: TMA loads in both kernels, the forward's four-stage
# ring, rescale past 2^8, descriptor low words, causal forward head by head) in the trainer (_cmp/fin) against main
# 5d71bb1 (_cmp/base, bench_gpu only): flash_bf16 small (fail fast), check, racecheck + memcheck of small,
# ./test_natsl gpu, bench_gpu layer alternating twice, transformer and natsl-hybrid steps alternating
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/device.txt
t0=$(date +%s)
timeout 60 stdbuf -oL _cmp/fin/fb_fin small > $L/small.log 2>&1; rc=$?; echo "small rc=$rc"; tail -n 1 $L/small.log
[ $rc -ne 0 ] && { tar -czf $O/logs.tgz -C $O logs; exit 1; }
timeout 120 stdbuf -oL _cmp/fin/fb_fin check > $L/check.log 2>&1; echo "check rc=$?"; grep FAIL $L/check.log | head -3; tail -n 1 $L/check.log
timeout 150 compute-sanitizer --tool racecheck _cmp/fin/fb_fin small > $L/racecheck.log 2>&1; echo "racecheck rc=$?"; tail -n 2 $L/racecheck.log
timeout 150 compute-sanitizer --tool memcheck _cmp/fin/fb_fin small > $L/memcheck.log 2>&1; echo "memcheck rc=$?"; tail -n 2 $L/memcheck.log
(cd _cmp/fin && timeout 300 ./test_natsl gpu) > $L/test_gpu.log 2>&1; echo "test_gpu rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 2 $L/test_gpu.log
for r in 1 2; do for v in base fin; do
  (cd _cmp/$v && timeout 60 ./bench_gpu layer -n 10) >> $L/layer_$v.log 2>&1; echo "layer $v $r rc=$?"
  grep RESULT $L/layer_$v.log | grep "layer A B=8\|T=32768 softmax-frac 0.25\|T=32768 softmax-frac 0.11\|T=32768 softmax-frac 1.00\|layer A B=1\|ratio T=32768" | tail -n 6 | cut -c1-130
done; done
for a in transformer natsl-hybrid; do for v in base fin; do
  (cd _cmp/$v && timeout 90 ./bench_gpu step -a $a -p bf16 -n 5) >> $L/step_${a}_$v.log 2>&1; echo "step $a $v rc=$?"
  grep RESULT $L/step_${a}_$v.log | tail -n 1 | cut -c1-160
done; done
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs
