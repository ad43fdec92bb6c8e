#!/bin/bash
# session 13 run 3: fused conv (one launch for Q|K|V) + bwd_local_bf16 taking vloop part 0, against main (_cmp)
O=${OUT:-/tmp/o}; mkdir -p $O
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee $O/device.txt
NV="nvcc -O3 -arch=sm_90 -std=c++17 -I."
t0=$(date +%s)
rm -rf /tmp/v1 && mkdir /tmp/v1 && cp -r train_natsl.cu common dev /tmp/v1/ && \
  sed -i 's/__launch_bounds__(256, blocks8<DK>()) bwd_local_bf16_kernel/__launch_bounds__(256, 1) bwd_local_bf16_kernel/' /tmp/v1/train_natsl.cu
grep -c "__launch_bounds__(256, 1) bwd_local_bf16_kernel" /tmp/v1/train_natsl.cu
$NV dev/bench_gpu.cu -o bench_gpu -lcublasLt -lcublas -lnccl > $O/build_bench.log 2>&1 &
$NV dev/cuda/gdn/gdn_chunk.cu -o /tmp/gdn_new -lcublasLt -lcublas -lnccl > $O/build_gdn.log 2>&1 &
(cd /tmp/v1 && $NV dev/cuda/gdn/gdn_chunk.cu -o /tmp/gdn_v1 -lcublasLt -lcublas -lnccl) > $O/build_v1.log 2>&1 &
(cd _cmp && $NV dev/bench_gpu.cu -o bench_gpu -lcublasLt -lcublas -lnccl && $NV dev/cuda/gdn/gdn_chunk.cu -o /tmp/gdn_old -lcublasLt -lcublas -lnccl) > $O/build_cmp.log 2>&1 &
wait; echo "build: $(( $(date +%s) - t0 )) s"; tail -3 $O/build_*.log
timeout 200 /tmp/gdn_new all bf16 > $O/gdn_new.log 2>&1; echo "gdn_new rc=$?"; grep -E "PASS|FAIL|TIME|kernels" $O/gdn_new.log | tail -30
for v in v1 old; do timeout 60 /tmp/gdn_$v time bf16 > $O/gdn_$v.log 2>&1; echo "gdn_$v rc=$?"; grep -E "TIME|kernels" $O/gdn_$v.log; done
for t in . _cmp; do n=$([ $t = . ] && echo this || echo cmp)
  (cd $t && NATSL_PROFILE=1 timeout 120 ./bench_gpu step -a natsl-hybrid -p bf16 -n 5) > $O/step_$n.log 2>&1; echo "step $n rc=$?"
  grep RESULT $O/step_$n.log; sed -n '/^profile/,$p' $O/step_$n.log | grep -E "profile|gdn_op|conv|block_rebuild|everything"; done
echo "total: $(( $(date +%s) - t0 )) s"
