#!/bin/bash
# session 23 run 2: the harnesses of the tree s23-l2 (built here): ce_bench (the fused cross-entropy, its row now
# staged in shared memory) and conv_bench (the conv's Q | K with their L2 norm in one pass, conv_silu_l2norm_forward).
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/device.txt
t0=$(date +%s)
tar -xzf _cmp/pack/bins.tgz
timeout 150 _cmp/l2/_ce_bench > $L/ce_bench.log 2>&1; echo "ce_bench rc=$? ($(( $(date +%s) - t0 )) s)"
grep -E "^--|forward \+|fused|ms  .* GB/s \(one|ALL|FAIL" $L/ce_bench.log | cut -c1-170
timeout 200 _cmp/l2/_conv_bench > $L/conv_bench.log 2>&1; echo "conv_bench rc=$? ($(( $(date +%s) - t0 )) s)"
cat $L/conv_bench.log | cut -c1-200
tar -czf $O/logs.tgz -C $O logs && rm -rf $L
