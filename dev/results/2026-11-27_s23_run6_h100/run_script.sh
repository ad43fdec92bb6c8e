#!/bin/bash
# session 23 run 6 (H100): the session's final tree (s23-fin: b078ad2 + the conv's Q | K with their L2 norm in one
# pass; _cmp/fin) against the session's start (fd4975f, _cmp/base: bench_gpu): ce_bench small alone and under
# racecheck and memcheck (the fused cross-entropy kernel on 64 rows), conv_bench (both forms of the fused conv against
# the two passes), ./test_natsl gpu, natsl-hybrid steps alternating twice, gdn steps, the layer table.
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/device.txt
t0=$(date +%s)
tar -xzf _cmp/pack/bins.tgz
F=_cmp/fin
timeout 60 $F/_ce_bench small > $L/ce_small.log 2>&1; echo "ce small rc=$?"; grep -E "ALL|FAIL" $L/ce_small.log
timeout 120 compute-sanitizer --tool racecheck --print-limit 20 $F/_ce_bench small > $L/ce_racecheck.log 2>&1; echo "ce racecheck rc=$?"
tail -n 2 $L/ce_racecheck.log
timeout 120 compute-sanitizer --tool memcheck $F/_ce_bench small > $L/ce_memcheck.log 2>&1; echo "ce memcheck rc=$?"
tail -n 2 $L/ce_memcheck.log
timeout 100 $F/_conv_bench > $L/conv_bench.log 2>&1; echo "conv_bench rc=$? ($(( $(date +%s) - t0 )) s)"
grep -E "d_k|TIME Q|CORRECT" $L/conv_bench.log | cut -c1-170
(cd $F && timeout 280 ./test_natsl gpu) > $L/test_gpu.log 2>&1; echo "test_gpu rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 3 $L/test_gpu.log | cut -c1-200
for v in base fin base fin; do
  (cd _cmp/$v && timeout 80 ./bench_gpu step -a natsl-hybrid -p bf16 -n 5) >> $L/step_$v.log 2>&1; echo "step $v rc=$?"
  grep RESULT $L/step_$v.log | tail -n 1 | cut -c1-120
done
for v in base fin; do
  (cd _cmp/$v && timeout 80 ./bench_gpu step -a gdn -p bf16 -n 5) >> $L/step_gdn_$v.log 2>&1; echo "gdn $v rc=$?"
  grep RESULT $L/step_gdn_$v.log | tail -n 1 | cut -c1-120
done
echo "($(( $(date +%s) - t0 )) s)"
(cd $F && timeout 60 ./bench_gpu layer -n 10) > $L/layer.log 2>&1; echo "layer rc=$?"; grep -E "RESULT" $L/layer.log | cut -c1-150 | head -30
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs && rm -rf $L
