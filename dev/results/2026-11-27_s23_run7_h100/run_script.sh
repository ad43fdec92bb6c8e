#!/bin/bash
# session 23 run 7 (H100): ncu (speed of light, warp states, occupancy, memory, launch) of the GDN op's seven bf16
# kernels at the 340m size as merged (gdn_chunk time bf16, built from 26ef8a1's kernels), and of the session's two
# new kernels in a 340m training step (conv_silu_l2norm_forward, crossentropy_fused_kernel; FineWeb shards, V = 50304).
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/device.txt
t0=$(date +%s)
tar -xzf _cmp/pack/bins.tgz
S="--section SpeedOfLight --section WarpStateStats --section Occupancy --section MemoryWorkloadAnalysis --section LaunchStats"
timeout 200 ncu $S -k regex:"bf16_kernel" -c 7 _cmp/fin/_gdn_chunk time bf16 > $L/ncu_gdn.log 2>&1; echo "ncu gdn rc=$? ($(( $(date +%s) - t0 )) s)"
(cd _cmp/fin && NATSL_GEMM_TIMED=0 timeout 200 ncu $S -k regex:"conv_silu_l2norm|crossentropy_fused" -c 2 ./train_natsl_cu -e 340m -b 8 \
  -t 4096 -x 1 -v 0 -s 0 -i data/fineweb_edu_train.bin -j data/fineweb_edu_val.bin -o /tmp/nc) > $L/ncu_new.log 2>&1
echo "ncu new rc=$? ($(( $(date +%s) - t0 )) s)"
for f in ncu_gdn ncu_new; do grep -E "^  [a-zA-Z_:<>0-9 ,]+\(|Duration|DRAM Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Registers Per|Warp Cycles Per Issued|L2 Hit Rate  " $L/$f.log | cut -c1-110; done
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs && rm -rf $L
