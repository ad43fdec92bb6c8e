#!/bin/bash
# session 29 run 1 (H100): memcheck of 2 GNA bf16 340m training steps (the column sums' blocks of 9f097d5, the router's
# dx pass a block per chunk); ncu of router_dx_kernel; natsl-hybrid step with the products' candidates from the
# heuristic's first 8 (default), NATSL_GEMM_SEARCH=wide (every algorithm id's configurations) and =all (those again
# with other cluster shapes and CTA orders), alternating, NATSL_GEMM_REPORT=1 for the per-product lines.
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/device.txt
t0=$(date +%s)
timeout 150 compute-sanitizer --tool memcheck ./train_natsl_cu -e 340m -a GNA -b 1 -t 256 -x 2 -v 0 -s 0 -p bf16 -i data/fineweb_edu_train.bin -j data/fineweb_edu_val.bin -o /tmp/mc > $L/memcheck_train.log 2>&1; echo "memcheck train rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 2 $L/memcheck_train.log | cut -c1-150
timeout 90 ncu --kernel-name regex:"router_dx_kernel" --launch-count 2 --section SpeedOfLight ./bench_gpu step -a natsl-hybrid -p bf16 -n 1 > $L/ncu_router_dx.log 2>&1
echo "ncu rc=$?"; grep -E "Duration|Memory Throughput|DRAM Throughput" $L/ncu_router_dx.log
tar -czf $O/logs.tgz -C $O logs
run() { # name, env...
  local n=$1; shift
  local s=$(date +%s)
  env "$@" timeout 240 ./bench_gpu step -a natsl-hybrid -p bf16 > $L/step_$n.log 2>&1
  echo "$n rc=$? $(( $(date +%s) - s )) s: $(grep RESULT $L/step_$n.log | sed 's/ \+/ /g' | cut -c1-120)"
  tar -czf $O/logs.tgz -C $O logs
}
run 1_default
run 2_wide NATSL_GEMM_SEARCH=wide NATSL_GEMM_REPORT=1
run 3_all NATSL_GEMM_SEARCH=all NATSL_GEMM_REPORT=1
run 4_default NATSL_GEMM_REPORT=1
run 5_wide NATSL_GEMM_SEARCH=wide
echo "total $(( $(date +%s) - t0 )) s"
