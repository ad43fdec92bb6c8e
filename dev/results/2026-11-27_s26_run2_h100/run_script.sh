#!/bin/bash
# session 26 run 2 (H100): what limits the attention forward: ncu (full set) of main's forward kernel and of run 1's
# ping-pong variant on the A shape (`flash_bf16 prof`), and the SASS of main's forward kernels
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/device.txt
t0=$(date +%s)
cuobjdump -sass _cmp/fwd_base.cubin > $L/sass_fwd_base.txt 2>&1; echo "sass rc=$? $(wc -l < $L/sass_fwd_base.txt) lines"
for v in base pp; do
  timeout 200 ncu --set full --kernel-name regex:fa_fwd --launch-count 1 _cmp/fb_$v prof > $L/ncu_fwd_$v.log 2>&1; echo "ncu $v rc=$?"
  grep -E "Duration|SM Frequency|Compute \(SM\) Throughput|Issue Slots Busy|Executed Ipc A|No Eligible|Registers Per|Achieved Occupancy|Warp Cycles Per Issued" $L/ncu_fwd_$v.log | head -12
done
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs
