#!/bin/bash
# session 22 run 4: the norms' runs of two (rows of 64) and SwiGLU a warp a row in runs of four, against 33da6d1
# (_cmp/base): the natsl-hybrid profile of both trees, then racecheck of the reordered GDN backward (gdn_chunk test bf16,
# the T = 256 cases: d_k 48, 64, 128, 192) and memcheck of 2 GN bf16 training steps at the 340m head sizes.
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/device.txt
t0=$(date +%s)
tar -xzf _cmp/pack/bins.tgz  # built here: train_natsl_cu, bench_gpu (this tree), _cmp/base/bench_gpu, _cmp/base/gdn_chunk (33da6d1)
for v in base new; do d=.; [ $v = base ] && d=_cmp/base
  (cd $d && NATSL_PROFILE=1 timeout 60 ./bench_gpu step -a natsl-hybrid -p bf16 -n 5) > $L/prof_$v.log 2>&1; echo "prof $v rc=$?"
  grep -E "RESULT|step 2|swiglu|rmsnorm|gated_norm|l2norm" $L/prof_$v.log | cut -c1-200
done
timeout 240 compute-sanitizer --tool racecheck --print-limit 20 _cmp/base/gdn_chunk test bf16 T256 > $L/racecheck.log 2>&1; echo "racecheck rc=$?"
grep -E "\->|RACECHECK SUMMARY|hazard" $L/racecheck.log | cut -c1-120 | tail -n 14
timeout 150 compute-sanitizer --tool memcheck ./train_natsl_cu -e 340m -a GN -b 1 -t 256 -x 2 -v 0 -s 0 -p bf16 -o /tmp/mc > $L/memcheck.log 2>&1
echo "memcheck rc=$?"; tail -n 3 $L/memcheck.log
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs && rm -rf $L
