#!/bin/bash
# session 22 run 1: the GDN backward reordered (bwd_state before bwd_local, vloop part 2 folded into bwd_local, s Pᵀ
# from prep) against HEAD a6fa6e4 (_cmp/base): gdn_chunk test bf16 on the new tree, time bf16 alternating twice.
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/device.txt
N=_cmp/new/gdn_chunk; B=_cmp/base/gdn_chunk
t0=$(date +%s)
timeout 200 $N test bf16 > $L/test_bf16.log 2>&1; echo "test rc=$?"; grep -E "\->" $L/test_bf16.log | sed 's/  */ /g' | cut -c1-200
for i in 1 2; do
  timeout 60 $B time bf16 > $L/time_base$i.log 2>&1; echo "base rc=$?"; grep -E "TIME|kernels" $L/time_base$i.log | cut -c1-200
  timeout 60 $N time bf16 > $L/time_new$i.log 2>&1; echo "new rc=$?"; grep -E "TIME|kernels" $L/time_new$i.log | cut -c1-200
done
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs && rm -rf $L
