#!/bin/bash
# session 20 run 4 (run 2's machine; run 3's carry of _cmp had replaced its builds there, so the base trainer and
# gdn_chunk are built again): the base curves run 3 could not run (the residual stream's gradient in fp32, _cmp/base
# 80b936a; same arguments and seeds as run 3's bf16 ones), then the racecheck of gdn_chunk test bf16. Logs in logs.tgz.
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
NV="nvcc -O3 -arch=compute_90a -code=sm_90a -std=c++17 -I."
t0=$(date +%s)
(cd _cmp/base && make train_natsl_cu > $L/build_base.log 2>&1) &
$NV -Xcompiler -fopenmp dev/cuda/gdn/gdn_chunk.cu -o gdn_chunk -lcublasLt -lcublas -lnccl > $L/build_gdn.log 2>&1 &
wait; echo "build: $(( $(date +%s) - t0 )) s"
ARGS="-e 340m -a natsl-hybrid -i data/fineweb_edu_train.bin -j data/fineweb_edu_val.bin -b 8 -t 1024 -x 300 -u 30 -l 6e-4 -v 25 -m 4 -s 0 -p bf16"
for r in 42 7; do
  (cd _cmp/base && timeout 100 ./train_natsl_cu $ARGS -r $r) > $L/curve_dres32_r$r.log 2>&1; echo "dres32 r$r rc=$?"
done
for f in $L/curve_*.log; do echo "$(basename $f): $(grep '^step 25:' $f | cut -c1-30) | $(grep 'val loss' $f | tail -n 1 | cut -c1-30) | last: $(grep '^step .*| loss' $f | tail -n 1 | cut -c1-40)"; done
echo "t: $(( $(date +%s) - t0 )) s"
timeout 150 compute-sanitizer --tool racecheck --print-limit 20 ./gdn_chunk test bf16 > $L/racecheck.log 2>&1; echo "racecheck rc=$?"; grep -E "PASS|FAIL|RACECHECK|hazard" $L/racecheck.log | tail -n 8 | cut -c1-200
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs && rm -rf $L
