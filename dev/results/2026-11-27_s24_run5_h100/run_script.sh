#!/bin/bash
# session 24 run 5 (H100): s24-rope-pairs (_cmp/rv: RoPE's pass on two adjacent pairs a thread, 8- and 4-byte loads
# and stores) against 5de5f7f (_cmp/fin): ./test_natsl gpu (rv), transformer steps alternating twice, the layer
# tables, a profile of rv's transformer step.
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/device.txt
t0=$(date +%s)
tar -xzf _cmp/pack/bins.tgz
(cd _cmp/rv && timeout 230 ./test_natsl gpu) > $L/test_gpu.log 2>&1; echo "test_gpu rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 3 $L/test_gpu.log | cut -c1-200
for v in fin rv fin rv; do
  (cd _cmp/$v && timeout 40 ./bench_gpu step -a transformer -p bf16 -n 5) >> $L/step_$v.log 2>&1; echo "step $v rc=$?"
  grep RESULT $L/step_$v.log | tail -n 1 | cut -c1-150
done
for v in fin rv; do
  (cd _cmp/$v && timeout 40 ./bench_gpu layer -n 10) > $L/layer_$v.log 2>&1; echo "layer $v rc=$?"; grep RESULT $L/layer_$v.log | grep "layer A\|layer N.*router" | cut -c1-150
done
(cd _cmp/rv && NATSL_PROFILE=1 timeout 60 ./bench_gpu step -a transformer -p bf16 -n 5) > $L/prof_rv.log 2>&1; echo "prof rc=$?"
grep -E "RESULT|rope|attention" $L/prof_rv.log | cut -c1-200
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs && rm -rf $L
