#!/bin/bash
# session 25 run 8 (H100): ./test_natsl gpu on s25-bwd-bulk64 (run 7's pack lacked the CPU trainer the comparison runs)
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/device.txt
t0=$(date +%s)
tar -xzf _cmp/pack/bins.tgz
(cd _cmp/bulk && timeout 280 ./test_natsl gpu) > $L/test_gpu.log 2>&1; echo "test_gpu rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 3 $L/test_gpu.log | cut -c1-200
grep -E "worst|mismatch|bf16 as trained|PASS|FAIL" $L/test_gpu.log | head -20 | cut -c1-200
tar -czf $O/logs.tgz -C $O logs
