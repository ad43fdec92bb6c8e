#!/bin/bash
# session 26 run 3 (H100): the attention forward (1) rs: the running max moves only past 2^8 (rescale skipped
# otherwise) and wgmma descriptors from their low words; (2) tma: rs + K/V/Q tiles by the TMA unit into a four-stage
# mbarrier ring (thread 0 issues), against main 5d71bb1 (base): small + check of each, `time` alternating twice, the
# variants' SASS, ncu (full) of each forward
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/device.txt
t0=$(date +%s)
for v in rs tma; do
  timeout 60 stdbuf -oL _cmp/fb_$v small > $L/small_$v.log 2>&1; rc=$?; echo "small $v rc=$rc"; tail -n 1 $L/small_$v.log
  [ $rc -ne 0 ] && { tar -czf $O/logs.tgz -C $O logs; exit 1; }
done
for v in rs tma; do
  timeout 120 stdbuf -oL _cmp/fb_$v check > $L/check_$v.log 2>&1; echo "check $v rc=$?"; grep FAIL $L/check_$v.log | head -3; tail -n 1 $L/check_$v.log
done
for r in 1 2; do for v in base rs tma; do
  timeout 60 stdbuf -oL _cmp/fb_$v time > $L/time_${v}_$r.log 2>&1; echo "time $v $r rc=$?"
  grep "A causal B8 T4096 16x64  \|frac 1.0  \|T4096 12x64/128 frac 0.25\|A causal B1 T32768\|T32768 12x64/128 frac 1.0\|T32768 12x64/128 frac 0.25" $L/time_${v}_$r.log | sed 's/ \+/ /g' | cut -c1-80
done; done
for v in rs tma; do cuobjdump -sass _cmp/fwd_$v.cubin > $L/sass_fwd_$v.txt 2>&1; done
for v in rs tma; do
  timeout 100 ncu --set full --kernel-name regex:fa_fwd --launch-count 1 _cmp/fb_$v prof > $L/ncu_fwd_$v.log 2>&1; echo "ncu $v rc=$?"
  grep -E "Duration|Issue Slots Busy|DRAM Throughput|L2 Hit Rate |Executed Instructions  |Registers Per" $L/ncu_fwd_$v.log | head -8
done
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs
