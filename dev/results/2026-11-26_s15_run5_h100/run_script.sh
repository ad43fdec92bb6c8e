#!/bin/bash
# session 15 run 5: Nsight Compute of the wgmma attention kernels (flash_bf16 prof: one forward + backward of the A
# shape, causal B8 T4096 16x64): speed of light, memory workload, warp states, occupancy, the dQ atomics' L2 traffic.
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee $L/device.txt
t0=$(date +%s)
nvcc -O3 -arch=compute_90a -code=sm_90a -std=c++17 -lineinfo -I. -Xcompiler -fopenmp dev/cuda/attention/flash_bf16.cu -o /tmp/flash_bf16 -lcublasLt -lcublas -lnccl > $L/build_flash.log 2>&1
echo "build: $(( $(date +%s) - t0 )) s"; tail -n 2 $L/build*.log
timeout 300 ncu --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy \
  --section ComputeWorkloadAnalysis --metrics lts__t_sectors_op_red.sum,lts__t_sectors_op_atom.sum,lts__t_sectors_op_read.sum,lts__t_sectors_op_write.sum,smsp__inst_executed_op_global_red.sum \
  -k regex:"fa_(fwd|bwd)_wgmma" /tmp/flash_bf16 prof > $L/ncu.log 2>&1; echo "ncu rc=$?"
grep -E "^  fa_|Duration|Throughput|Achieved Occupancy|Stall|L2 Hit|Mem Busy|Registers|Issue Slots|Executed Ipc|lts__|smsp__inst|Warp Cycles|Eligible|One or More" $L/ncu.log | head -90
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs && rm -rf $L
