#!/bin/bash
# session 23 run 1: three trees, built here: _cmp/main (fd4975f: bench_gpu), _cmp/br (main + the branch
# wip/vloop1-in-final merged: bench_gpu, gdn_chunk), _cmp/ce (that merge + the fused cross-entropy: every binary).
# ce_bench (the fused kernel against the oracle and the pair), the natsl-hybrid step of the three, racecheck of the
# merged GDN backward (gdn_chunk test bf16 T256), memcheck of 2 GN bf16 steps at the 340m head sizes on the FineWeb
# shards (vocabulary 50304: the fused kernel's 16 runs a thread).
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/device.txt
t0=$(date +%s)
tar -xzf _cmp/pack/bins.tgz
(cd _cmp/ce && timeout 150 ./_ce_bench) > $L/ce_bench.log 2>&1; echo "ce_bench rc=$? ($(( $(date +%s) - t0 )) s)"
grep -E "^--|fused|trainer|ALL|FAIL" $L/ce_bench.log | cut -c1-160
for v in main br ce; do
  (cd _cmp/$v && timeout 80 ./bench_gpu step -a natsl-hybrid -p bf16 -n 5) > $L/step_$v.log 2>&1; echo "step $v rc=$?"
  grep RESULT $L/step_$v.log | cut -c1-200
done
echo "($(( $(date +%s) - t0 )) s)"
timeout 200 compute-sanitizer --tool racecheck --print-limit 20 _cmp/br/_gdn_chunk test bf16 T256 > $L/racecheck.log 2>&1; echo "racecheck rc=$?"
grep -E "\->|RACECHECK SUMMARY|hazard" $L/racecheck.log | cut -c1-120 | tail -n 14
echo "($(( $(date +%s) - t0 )) s)"
(cd _cmp/ce && timeout 150 compute-sanitizer --tool memcheck ./train_natsl_cu -e 340m -a GN -b 1 -t 256 -x 2 -v 0 -s 0 -p bf16 \
  -i data/fineweb_edu_train.bin -j data/fineweb_edu_val.bin -o /tmp/mc) > $L/memcheck.log 2>&1
echo "memcheck rc=$?"; tail -n 3 $L/memcheck.log
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs && rm -rf $L
