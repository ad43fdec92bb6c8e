#!/bin/bash
# dev/cuda/run_device.sh — the GPU checks and benchmarks of natsl.c in one go (run from the repo root on a GPU
# machine, e.g. through the device tool); logs go to $OUT (default /tmp/natsl_out).
#   bash dev/cuda/run_device.sh [test] [gdn] [att] [layer] [step] [prof]   (no argument: all but prof)
#   test : make test (CPU tests + test_natsl's CPU-vs-GPU comparison, fp32 and bf16, GNGN and GNA at T=256)
#   gdn  : dev/cuda/gdn/gdn_chunk (chunked GDN op vs a double oracle, then its timing at the 340M size; fp32 and TF32)
#   att  : dev/cuda/attention/masked_attention check (the TF32 attention kernels vs a double oracle)
#   flash: dev/cuda/attention/flash_bf16 check (the bf16 attention kernels vs a double oracle)
#   layer: ./bench_gpu layer $LAYER_ARGS (one mixer layer, fwd+bwd, T = 4096 / 16384 / 32768)
#   step : ./bench_gpu step $STEP_ARGS (full 340m training steps, V=32000, B=8 T=4096 or the largest B that fits;
#          e.g. STEP_ARGS="-k 1 -a natsl-hybrid" for recompute)
#   prof : NATSL_PROFILE=1 train_natsl_cu, 340m B=4 T=4096 bf16, 4 steps: time per op ($PROF_ARGS appended)
#   san  : compute-sanitizer memcheck of a few tiny training steps (GNA, -k 0 and -k 2), and racecheck of one 340m
#          NANA step with its hazards counted per kernel (cuBLAS's nvjet_sm90_* kernels always show some: racecheck
#          does not model their TMA/mbarrier traffic; any other kernel in that list is a real finding)
#   init : compute-sanitizer initcheck of a few tiny training steps (GNA, -k 0 and -k 2): no kernel reads device memory
#          before something wrote it (the GDN op's workspace shares the logits' buffer, which nothing clears)
#   gdnsan: compute-sanitizer memcheck and racecheck of dev/cuda/gdn/gdn_chunk test bf16 (every bf16 GDN kernel,
#          each d_k; the racecheck takes about 300 s)
#   gdncmp: gdn_chunk all bf16 in this tree and in each tree of $GDN_TREES (folders holding train_natsl.cu, common/ and
#          dev/cuda/gdn/, e.g. `mkdir -p _cmp/x && git archive <branch> | tar -x -C _cmp/x`; carry ["_cmp"]): every
#          case and the kernels' times of each, side by side
#   nha  : dev/cuda/nha/nha_bench (the H layer's op vs a double oracle, then its times at the 340m size)
#   nhasan: compute-sanitizer memcheck and racecheck of dev/cuda/nha/nha_bench test (every H kernel, fp32 and bf16)
#   conv : dev/cuda/conv/conv_bench (the short conv's kernels vs a double oracle, the backward in both its forms, timed)
#   tune : dev/cuda/gemm_tune (cublasGemmEx vs cuBLASLt's best candidate for each linear product of the 340m)
#   main : the main job on the GPU (./train_natsl_cu: tiny, bf16, 300 steps)
#   ncu  : Nsight Compute speed-of-light of the heaviest kernels in one 340m B=1 T=4096 step
#   ncuconv: Nsight Compute of the short conv's kernels (speed of light, memory workload, occupancy, warp stalls) in a
#          340m B=8 T=4096 step: why they run at about 45% of their byte floor
#   cmp  : ./bench_gpu step $STEP_ARGS in this tree, then in the tree at ${CMP_DIR:-_cmp} (another commit, to compare
#          on the same machine: `rm -rf _cmp && mkdir _cmp && git archive <ref> | tar -x -C _cmp`; _cmp is ignored,
#          so the device tool's run needs carry ["_cmp"])
set -o pipefail
O=${OUT:-/tmp/natsl_out}; mkdir -p $O
WHAT="$*"; [ -z "$WHAT" ] && WHAT="test gdn att layer step"
has() { [[ " $WHAT " == *" $1 "* ]]; }
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee $O/device.txt
NV="nvcc -O3 -arch=compute_90a -code=sm_90a -std=c++17 --default-stream per-thread -I."
t0=$(date +%s)
make -j8 train_natsl test_natsl train_natsl_cu > $O/build.log 2>&1 &
$NV dev/bench_gpu.cu -o bench_gpu -lcublasLt -lcublas -lnccl >> $O/build_bench.log 2>&1 &
{ has gdn || has gdnsan || has gdncmp; } && { $NV dev/cuda/gdn/gdn_chunk.cu -o /tmp/gdn_chunk -lcublasLt -lcublas -lnccl >> $O/build_bench.log 2>&1 & }
if has gdncmp; then for t in $GDN_TREES; do
    $NV $t/dev/cuda/gdn/gdn_chunk.cu -o /tmp/gdn_$(basename $t) -lcublasLt -lcublas -lnccl >> $O/build_bench.log 2>&1 & done; fi
{ has nha || has nhasan; } && { $NV dev/cuda/nha/nha_bench.cu -o /tmp/nha_bench -lcublasLt -lcublas -lnccl >> $O/build_bench.log 2>&1 & }
has att && { $NV dev/cuda/attention/masked_attention.cu -o /tmp/masked_attention -lcublasLt -lcublas -lnccl >> $O/build_bench.log 2>&1 & }
has conv && { $NV dev/cuda/conv/conv_bench.cu -o /tmp/conv_bench -lcublasLt -lcublas -lnccl >> $O/build_bench.log 2>&1 & }
has tune && { $NV dev/cuda/gemm_tune.cu -o /tmp/gemm_tune -lcublasLt -lcublas >> $O/build_bench.log 2>&1 & }
has flash && { $NV -Xcompiler -fopenmp dev/cuda/attention/flash_bf16.cu -o /tmp/flash_bf16 -lcublasLt -lcublas -lnccl >> $O/build_bench.log 2>&1 & }
CMP=${CMP_DIR:-_cmp}
has cmp && { (cd $CMP && $NV dev/bench_gpu.cu -o bench_gpu -lcublasLt -lcublas -lnccl) >> $O/build_cmp.log 2>&1 & }
wait
echo "build: $(( $(date +%s) - t0 )) s"; tail -3 $O/build.log; cat $O/build_bench.log
if has test; then timeout 400 make test > $O/test.log 2>&1; echo "make test rc=$?"; grep -iE "^  (tiny|760m)|passed|fail|error" $O/test.log | tail -50; fi
if has gdn; then timeout 300 /tmp/gdn_chunk > $O/gdn.log 2>&1; echo "gdn_chunk rc=$?"; cat $O/gdn.log; fi
if has gdncmp; then for n in chunk $(for t in $GDN_TREES; do basename $t; done); do
    timeout 200 /tmp/gdn_$n all bf16 > $O/gdncmp_$n.log 2>&1; echo "gdn_chunk ($n) rc=$?"
    grep -E "FAIL|CORRECTNESS|TIME|kernels" $O/gdncmp_$n.log | cut -c1-200; done; fi
if has nha; then timeout 300 /tmp/nha_bench > $O/nha.log 2>&1; echo "nha_bench rc=$?"; grep -E "PASS|FAIL|RESULT|device" $O/nha.log; fi
if has nhasan; then
    timeout 200 compute-sanitizer --tool memcheck /tmp/nha_bench test > $O/nha_memcheck.log 2>&1; echo "nha memcheck rc=$?"
    grep -E "ERROR SUMMARY|cases passed" $O/nha_memcheck.log
    timeout 400 compute-sanitizer --tool racecheck --racecheck-report hazard /tmp/nha_bench test > $O/nha_racecheck.log 2>&1
    echo "nha racecheck rc=$?"; grep -E "RACECHECK SUMMARY|cases passed" $O/nha_racecheck.log; fi
if has att; then timeout 60 /tmp/masked_attention check > $O/att.log 2>&1; echo "masked_attention rc=$?"; grep -E "PASS|FAIL|CORRECT" $O/att.log | tail -12; fi
if has flash; then OMP_NUM_THREADS=16 timeout 120 /tmp/flash_bf16 check > $O/flash.log 2>&1; echo "flash_bf16 rc=$?"; grep -E "PASS|FAIL" $O/flash.log | tail -24; fi
if has layer; then timeout 150 ./bench_gpu layer $LAYER_ARGS > $O/bench_layer.log 2>&1; echo "bench layer rc=$?"; grep -E "RESULT|device|error" $O/bench_layer.log; fi
if has prof; then timeout 150 env NATSL_PROFILE=1 ./train_natsl_cu -e 340m -b 4 -t 4096 -x 4 -v 0 -s 0 -u 1 $PROF_ARGS \
    > $O/prof.log 2>&1; echo "prof rc=$?"; sed -n '/^profile/,$p' $O/prof.log; grep -E "^step|activations" $O/prof.log; fi
if has san; then
    for k in 0 2; do timeout 120 compute-sanitizer --tool memcheck ./train_natsl_cu -x 2 -v 0 -s 0 -b 2 -t 128 -a GNA -k $k \
        > $O/san_k$k.log 2>&1; echo "memcheck -k $k rc=$?"; grep -E "ERROR SUMMARY|error" $O/san_k$k.log | tail -2; done
    timeout 150 compute-sanitizer --tool racecheck --racecheck-report hazard --print-limit 100000000 ./train_natsl_cu -e 340m \
        -a NANA -b 1 -t 256 -x 1 -v 0 -s 0 2>&1 | grep -E "SUMMARY|^=========     (Read|Write) Thread" \
        | sed -E 's/.* at //; s/\+0x[0-9a-f]+//' | sort | uniq -c | sort -rn | head -12 | tee $O/racecheck.txt; fi
if has init; then
    for k in 0 2; do timeout 150 compute-sanitizer --tool initcheck --print-limit 100000000 ./train_natsl_cu -x 2 -v 0 -s 0 -b 2 \
        -t 128 -a GNA -k $k $INIT_ARGS > $O/initcheck_k$k.log 2>&1; echo "initcheck -k $k rc=$?"; grep -E "ERROR SUMMARY" $O/initcheck_k$k.log
        # each finding counted by its kernel and the host function that launched it (the frame after the kernel's wrapper)
        awk '/Uninitialized/ {k=""; n=0} /^=========     at / {k=$3} /Host Frame:/ && k!="" {n++; if (n==2) {split($4, f, "("); print k, "from", f[1]; k=""}}' \
            $O/initcheck_k$k.log | sort | uniq -c | sort -rn | head -12; done; fi
if has gdnsan; then
    timeout 150 compute-sanitizer --tool memcheck /tmp/gdn_chunk test bf16 > $O/gdn_memcheck.log 2>&1; echo "gdn memcheck rc=$?"
    grep -E "ERROR SUMMARY|CORRECTNESS" $O/gdn_memcheck.log
    timeout 420 compute-sanitizer --tool racecheck --racecheck-report hazard /tmp/gdn_chunk test bf16 > $O/gdn_racecheck.log 2>&1
    echo "gdn racecheck rc=$?"; grep -E "RACECHECK SUMMARY|CORRECTNESS" $O/gdn_racecheck.log; fi
if has conv; then timeout 120 /tmp/conv_bench > $O/conv.log 2>&1; echo "conv_bench rc=$?"; grep -E "PASS|FAIL|TIME|==" $O/conv.log; fi
if has tune; then timeout 120 /tmp/gemm_tune > $O/gemm_tune.log 2>&1; echo "gemm_tune rc=$?"; grep RESULT $O/gemm_tune.log; fi
if has main; then timeout 120 ./train_natsl_cu > $O/main.log 2>&1; echo "main job rc=$?"; grep -E "val loss|step  300|precision" $O/main.log; fi
if has ncu; then timeout 200 ncu --section SpeedOfLight -k regex:"bwd_final|fwd_state|fwd_out|bwd_local|bwd_state|bwd_vloop|prep|fa_bwd|attn_bwd|gated_norm_backward|rmsnorm_backward" \
    -c 16 ./train_natsl_cu -e 340m -b 1 -t 4096 -x 1 -v 0 -s 0 > $O/ncu.log 2>&1; echo "ncu rc=$?"; \
    grep -E "^  [a-z_]+.*\(|Duration|Memory Throughput|Compute \(SM\) Throughput" $O/ncu.log | head -60; fi
if has ncuconv; then timeout 200 ncu --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
    --section WarpStateStats -k regex:"conv_silu" -c 4 ./train_natsl_cu -e 340m -b 8 -t 4096 -x 1 -v 0 -s 0 > $O/ncu_conv.log 2>&1
    echo "ncu conv rc=$?"; grep -E "^  [a-z_]+.*\(|Duration|Throughput|Achieved Occupancy|Stall|L2 Hit|Mem Busy" $O/ncu_conv.log | head -60; fi
if has step; then timeout 240 ./bench_gpu step $STEP_ARGS > $O/bench_step.log 2>&1; echo "bench step rc=$?"; grep -vE "^$" $O/bench_step.log; fi
if has cmp; then
    cat $O/build_cmp.log
    for t in . $CMP; do n=$([ $t = . ] && echo this || echo cmp); (cd $t && timeout 200 ./bench_gpu step $STEP_ARGS) > $O/cmp_$n.log 2>&1
        echo "bench step ($n tree) rc=$?"; grep -E "RESULT" $O/cmp_$n.log; done; fi
echo "total: $(( $(date +%s) - t0 )) s"
