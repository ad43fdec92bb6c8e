#!/bin/bash
# session 22 run 7 (branch wip/vloop1-in-final): vloop part 1 fused into bwd_final_bf16 as its first phase, against
# 33da6d1's kernels (_cmp/base/gdn_chunk): gdn_chunk test bf16 (stop on a failure), then time bf16 alternating twice.
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/device.txt
tar -xzf _cmp/pack/bins.tgz  # built here: _cmp/gdn_new (this tree), _cmp/base/gdn_chunk (33da6d1)
N=_cmp/gdn_new; B=_cmp/base/gdn_chunk
timeout 100 $N test bf16 > $L/test_bf16.log 2>&1; rc=$?; echo "test rc=$rc"; grep -E "\->" $L/test_bf16.log | sed 's/  */ /g' | cut -c1-170
if [ $rc -ne 0 ] || grep -q FAIL $L/test_bf16.log; then tar -czf $O/logs.tgz -C $O logs; exit 1; fi
for i in 1 2; do
  timeout 40 $B time bf16 > $L/time_base$i.log 2>&1; echo "base rc=$?"; grep -E "TIME|kernels" $L/time_base$i.log | head -2 | cut -c1-200
  timeout 40 $N time bf16 > $L/time_new$i.log 2>&1; echo "new rc=$?"; grep -E "TIME|kernels" $L/time_new$i.log | head -2 | cut -c1-200
done
tar -czf $O/logs.tgz -C $O logs && rm -rf $L
