#!/bin/bash
# session 27 run 6 (H100): the session's final code (the embedding's change and ld, its names tidied: one pointer ld2
# for the interleaved lse2/δ): harness small, check, one `time`, ./test_natsl gpu
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/device.txt
t0=$(date +%s)
timeout 60 stdbuf -oL _cmp/fin/fb small > $L/small.log 2>&1; rc=$?; echo "small rc=$rc"; tail -n 1 $L/small.log
[ $rc -ne 0 ] && { tar -czf $O/logs.tgz -C $O logs; exit 1; }
timeout 120 stdbuf -oL _cmp/fin/fb check > $L/check.log 2>&1; echo "check rc=$?"; grep FAIL $L/check.log | head -3; tail -n 1 $L/check.log
timeout 60 stdbuf -oL _cmp/fin/fb time > $L/time.log 2>&1; echo "time rc=$?"
grep "A causal B8 T4096 16x64  \|A causal B8 T4096 16x64 (bf16\|frac 1.0  \|T4096 12x64/128 frac 0.25\|A causal B1 T32768" $L/time.log | sed 's/ \+/ /g; s/active [0-9.]* //' | cut -c1-110
(cd _cmp/fin && timeout 300 ./test_natsl gpu) > $L/test_gpu.log 2>&1; echo "test_gpu rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 1 $L/test_gpu.log
tar -czf $O/logs.tgz -C $O logs
