#!/bin/bash
# session 25 run 12 (H100): the backward's blocks in groups of 16 key chunks (s25-bwd-groups, _cmp/grp) against main
# cfc3cc8 (_cmp/base): flash_bf16 check and memcheck of small (grp), ./test_natsl gpu (grp), bench_gpu layer of both
# alternating twice, one natsl-hybrid step run of each
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/device.txt
t0=$(date +%s)
tar -xzf _cmp/pack/bins.tgz
timeout 40 stdbuf -oL _cmp/fb_grp small > $L/small_grp.log 2>&1; rc=$?; echo "small rc=$rc"; tail -n 1 $L/small_grp.log
[ $rc -ne 0 ] && { tar -czf $O/logs.tgz -C $O logs; exit 1; }
timeout 100 stdbuf -oL _cmp/fb_grp check > $L/check_grp.log 2>&1; echo "check rc=$?"; grep FAIL $L/check_grp.log | head -3; tail -n 1 $L/check_grp.log
timeout 90 compute-sanitizer --tool memcheck _cmp/fb_grp small > $L/memcheck_grp.log 2>&1; echo "memcheck rc=$?"; tail -n 1 $L/memcheck_grp.log
(cd _cmp/grp && timeout 280 ./test_natsl gpu) > $L/test_gpu.log 2>&1; echo "test_gpu rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 1 $L/test_gpu.log
for v in base grp base grp; do
  (cd _cmp/$v && timeout 60 ./bench_gpu layer -n 10) >> $L/layer_$v.log 2>&1; echo "layer $v rc=$?"
  grep RESULT $L/layer_$v.log | grep "layer A B=8\|N B=8 T= 4096 softmax-frac router\|ratio T=32768" | tail -n 3 | cut -c1-120
done
for v in base grp; do
  (cd _cmp/$v && timeout 60 ./bench_gpu step -a natsl-hybrid -p bf16 -n 5) >> $L/step_$v.log 2>&1; echo "step $v rc=$?"
  grep RESULT $L/step_$v.log | tail -n 1 | cut -c1-150
done
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs
