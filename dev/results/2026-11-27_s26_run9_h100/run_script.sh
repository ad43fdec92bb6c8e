#!/bin/bash
# session 26 run 9 (H100): s26-smem: the attention kernels' shared tiles addressed through a pointer the compiler
# knows to be shared (their dS, dQ-staging stores and lse2/δ, key-list loads become STS/LDS, were generic ST/LD),
# against main (fin): harness small, check, racecheck of small, `time` alternating twice; the trainer: ./test_natsl gpu,
# bench_gpu layer alternating twice, transformer and natsl-hybrid steps alternating
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/device.txt
t0=$(date +%s)
timeout 60 stdbuf -oL _cmp/fb_smem small > $L/small.log 2>&1; rc=$?; echo "small rc=$rc"; tail -n 1 $L/small.log
[ $rc -ne 0 ] && { tar -czf $O/logs.tgz -C $O logs; exit 1; }
timeout 120 stdbuf -oL _cmp/fb_smem check > $L/check.log 2>&1; echo "check rc=$?"; grep FAIL $L/check.log | head -3; tail -n 1 $L/check.log
timeout 150 compute-sanitizer --tool racecheck _cmp/fb_smem small > $L/racecheck.log 2>&1; echo "racecheck rc=$?"; tail -n 1 $L/racecheck.log
for r in 1 2; do for v in fin smem; do
  timeout 60 stdbuf -oL _cmp/fb_$v time > $L/time_${v}_$r.log 2>&1; echo "time $v $r rc=$?"
  grep "A causal B8 T4096 16x64  \|A causal B8 T4096 16x64 (bf16\|frac 1.0  \|T4096 12x64/128 frac 0.25\|A causal B1 T32768\|T32768 12x64/128 frac 1.0\|T32768 12x64/128 frac 0.25" $L/time_${v}_$r.log | sed 's/ \+/ /g' | sed 's/active [0-9.]* //' | cut -c1-100
done; done
(cd _cmp/smem && timeout 300 ./test_natsl gpu) > $L/test_gpu.log 2>&1; echo "test_gpu rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 1 $L/test_gpu.log
for r in 1 2; do for v in fin smem; do
  (cd _cmp/$v && timeout 60 ./bench_gpu layer -n 10) >> $L/layer_$v.log 2>&1; echo "layer $v $r rc=$?"
  grep RESULT $L/layer_$v.log | grep "layer A B=8\|T=32768 softmax-frac 0.25\|T=32768 softmax-frac 0.11\|T=32768 softmax-frac 1.00\|layer A B=1\|B=8 T= 4096 softmax-frac router\|ratio T=32768" | tail -n 7 | cut -c1-130
done; done
for a in transformer natsl-hybrid; do for v in fin smem; do
  (cd _cmp/$v && timeout 90 ./bench_gpu step -a $a -p bf16 -n 5) >> $L/step_${a}_$v.log 2>&1; echo "step $a $v rc=$?"
  grep RESULT $L/step_${a}_$v.log | tail -n 1 | cut -c1-160
done; done
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs
