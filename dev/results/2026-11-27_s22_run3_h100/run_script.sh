#!/bin/bash
# session 22 run 3: against 33da6d1 (_cmp/base): the GDN op's dQ1 and forward U in bf16, the norms' runs of two for
# rows of 64, SwiGLU a warp a row in runs of four. gdn_chunk test bf16 (stop on a failure), time bf16 alternating
# twice, ./test_natsl gpu, natsl-hybrid and gdn steps alternating twice.
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/device.txt
t0=$(date +%s)
tar -xzf _cmp/pack/bins.tgz  # the binaries built here (train_natsl_cu, bench_gpu, both trees' gdn_chunk, the base bench_gpu)
N=_cmp/new/gdn_chunk; B=_cmp/base/gdn_chunk
timeout 200 $N test bf16 > $L/test_bf16.log 2>&1; rc=$?; echo "test rc=$rc"; grep -E "\->" $L/test_bf16.log | sed 's/  */ /g' | cut -c1-170
if [ $rc -ne 0 ] || grep -q FAIL $L/test_bf16.log; then tar -czf $O/logs.tgz -C $O logs; exit 1; fi
for i in 1 2; do
  timeout 60 $B time bf16 > $L/time_base$i.log 2>&1; echo "base rc=$?"; grep -E "TIME|kernels" $L/time_base$i.log | head -4 | cut -c1-200
  timeout 60 $N time bf16 > $L/time_new$i.log 2>&1; echo "new rc=$?"; grep -E "TIME|kernels" $L/time_new$i.log | head -4 | cut -c1-200
done
timeout 300 ./test_natsl gpu > $L/test_gpu.log 2>&1; echo "test_gpu rc=$?"; tail -n 3 $L/test_gpu.log | cut -c1-200
for v in base new base new; do d=.; [ $v = base ] && d=_cmp/base
  (cd $d && timeout 80 ./bench_gpu step -a natsl-hybrid,gdn -p bf16 -n 5) >> $L/step_$v.log 2>&1; echo "step $v rc=$?"; grep RESULT $L/step_$v.log | tail -n 2 | cut -c1-200
done
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs && rm -rf $L
