#!/bin/bash
# session 26 run 12 (H100): the review's mend (the bulk-dQ choice named once, the dead wgmma_desc gone; the attention
# kernels' PTX identical, one GDN kernel's PTX moved a shared load): flash_bf16 small + check, ./test_natsl gpu
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/device.txt
t0=$(date +%s)
timeout 60 stdbuf -oL _cmp/m/fb_m small > $L/small.log 2>&1; rc=$?; echo "small rc=$rc"; tail -n 1 $L/small.log
[ $rc -ne 0 ] && { tar -czf $O/logs.tgz -C $O logs; exit 1; }
timeout 120 stdbuf -oL _cmp/m/fb_m check > $L/check.log 2>&1; echo "check rc=$?"; tail -n 1 $L/check.log
(cd _cmp/m && timeout 300 ./test_natsl gpu) > $L/test_gpu.log 2>&1; echo "test_gpu rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 1 $L/test_gpu.log
tar -czf $O/logs.tgz -C $O logs
