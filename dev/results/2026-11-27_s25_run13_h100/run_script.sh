#!/bin/bash
# session 25 run 13 (H100): the backward's groups of 16 key chunks for the routed kernels only (causal: head-major as
# on main) (_cmp/grp2) against main cfc3cc8 (_cmp/base): flash_bf16 check, ./test_natsl gpu, bench_gpu layer of each
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/device.txt
t0=$(date +%s)
tar -xzf _cmp/pack/bins.tgz
timeout 100 stdbuf -oL _cmp/fb_grp2 check > $L/check_grp2.log 2>&1; rc=$?; echo "check rc=$rc"; grep FAIL $L/check_grp2.log | head -3; tail -n 1 $L/check_grp2.log
[ $rc -ne 0 ] && { tar -czf $O/logs.tgz -C $O logs; exit 1; }
(cd _cmp/grp2 && timeout 280 ./test_natsl gpu) > $L/test_gpu.log 2>&1; echo "test_gpu rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 1 $L/test_gpu.log
for v in base grp2; do
  (cd _cmp/$v && timeout 60 ./bench_gpu layer -n 10) >> $L/layer_$v.log 2>&1; echo "layer $v rc=$?"
  grep RESULT $L/layer_$v.log | grep "layer A\|softmax-frac 0.25\|softmax-frac 0.11\|ratio T=32768" | cut -c1-120
done
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs
