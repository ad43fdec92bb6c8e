#!/bin/bash
# session 23 run 4: the tree s23-l2 (b078ad2 + the conv's Q | K with their L2 norm in one pass, rows packed, six
# blocks an SM; _cmp/l2) against b078ad2 (_cmp/ce): conv_bench, ./test_natsl gpu, natsl-hybrid steps alternating
# twice, racecheck of the fused cross-entropy's kernel (compute-sanitizer's kernel filter) in 2 tiny GNA bf16 steps.
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/device.txt
t0=$(date +%s)
tar -xzf _cmp/pack/bins.tgz
timeout 100 _cmp/l2/_conv_bench > $L/conv_bench.log 2>&1; echo "conv_bench rc=$? ($(( $(date +%s) - t0 )) s)"
grep -E "d_k|TIME Q|CORRECT" $L/conv_bench.log | cut -c1-170
(cd _cmp/l2 && timeout 280 ./test_natsl gpu) > $L/test_gpu.log 2>&1; echo "test_gpu rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 3 $L/test_gpu.log | cut -c1-200
for v in ce l2 ce l2; do
  (cd _cmp/$v && timeout 80 ./bench_gpu step -a natsl-hybrid -p bf16 -n 5) >> $L/step_$v.log 2>&1; echo "step $v rc=$?"
  grep RESULT $L/step_$v.log | tail -n 1 | cut -c1-120
done
echo "($(( $(date +%s) - t0 )) s)"
(cd _cmp/l2 && timeout 100 compute-sanitizer --tool racecheck --kernel-regex kns=crossentropy --print-limit 20 ./train_natsl_cu -a GNA \
  -b 1 -t 128 -x 2 -v 0 -s 0 -p bf16 -i data/fineweb_edu_train.bin -j data/fineweb_edu_val.bin -o /tmp/rc) > $L/racecheck.log 2>&1
echo "racecheck rc=$?"; tail -n 2 $L/racecheck.log
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs && rm -rf $L
