#!/bin/bash
# session 22 run 6: bench_gpu layer (one mixer layer forward + backward, A / G / N at T = 4096, 16384, 32768) on
# 372dd6b's tree (the reordered GDN backward, SwiGLU's forward).
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/device.txt
tar -xzf _cmp/pack/bins.tgz  # bench_gpu, built here
timeout 170 ./bench_gpu layer -n 10 > $L/layer.log 2>&1; echo "layer rc=$?"; grep RESULT $L/layer.log | cut -c1-120
tar -czf $O/logs.tgz -C $O logs && rm -rf $L
