#!/bin/bash
# session 23 run 3: conv_bench of s23-l2 (variants of the fused Q | K conv + L2 norm: packed rows, register caps,
# prefetch), then the tree s23-ce (main + the merged branch + the fused cross-entropy with its row in shared memory,
# _cmp/ce): ./test_natsl gpu, natsl-hybrid steps alternating with _cmp/br (main + the merged branch) twice,
# memcheck of 2 GN bf16 steps (FineWeb shards: the fused kernel's 100 KB rows), racecheck of 2 tiny GNA bf16 steps.
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/device.txt
t0=$(date +%s)
tar -xzf _cmp/pack/bins.tgz
timeout 100 _cmp/l2/_conv_bench > $L/conv_bench.log 2>&1; echo "conv_bench rc=$? ($(( $(date +%s) - t0 )) s)"
grep -E "Q \| K|d_k|TIME (Q|  )|CORRECT" $L/conv_bench.log | cut -c1-170
(cd _cmp/ce && timeout 280 ./test_natsl gpu) > $L/test_gpu.log 2>&1; echo "test_gpu rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 3 $L/test_gpu.log | cut -c1-200
for v in br ce br ce; do
  (cd _cmp/$v && timeout 80 ./bench_gpu step -a natsl-hybrid -p bf16 -n 5) >> $L/step_$v.log 2>&1; echo "step $v rc=$?"
  grep RESULT $L/step_$v.log | tail -n 1 | cut -c1-120
done
echo "($(( $(date +%s) - t0 )) s)"
(cd _cmp/ce && timeout 100 compute-sanitizer --tool memcheck ./train_natsl_cu -e 340m -a GN -b 1 -t 256 -x 2 -v 0 -s 0 -p bf16 \
  -i data/fineweb_edu_train.bin -j data/fineweb_edu_val.bin -o /tmp/mc) > $L/memcheck.log 2>&1
echo "memcheck rc=$?"; tail -n 2 $L/memcheck.log
(cd _cmp/ce && timeout 100 compute-sanitizer --tool racecheck --print-limit 20 ./train_natsl_cu -a GNA -b 1 -t 128 -x 2 -v 0 -s 0 \
  -p bf16 -i data/fineweb_edu_train.bin -j data/fineweb_edu_val.bin -o /tmp/rc) > $L/racecheck.log 2>&1
echo "racecheck rc=$?"; tail -n 2 $L/racecheck.log
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs && rm -rf $L
