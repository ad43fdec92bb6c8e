#!/bin/bash
# session 13 run 6: NATSL_GEMM_TIMED=0 in the CPU-vs-GPU comparison: the GPU tests, then the comparison again (same bits?)
O=${OUT:-/tmp/o}; mkdir -p $O
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee $O/device.txt
t0=$(date +%s)
make -j8 train_natsl test_natsl train_natsl_cu > $O/build.log 2>&1; echo "build rc=$? $(( $(date +%s) - t0 )) s"
timeout 280 ./test_natsl gpu > $O/gpu_tests.log 2>&1; echo "GPU tests rc=$?"
grep -E "^(PASS|FAIL)|check failed|passed" $O/gpu_tests.log | cut -c1-220
grep -E "^  760m GN bf16" $O/gpu_tests.log | cut -c1-200
timeout $(( 590 - ($(date +%s) - t0) )) ./test_natsl cpu_vs_gpu > $O/cvg2.log 2>&1; echo "cpu_vs_gpu again rc=$?"
sel() { grep -E "^  (tiny|760m) .*(: loss|recompute)" "$1"; }
sel $O/gpu_tests.log > $O/a.txt; sel $O/cvg2.log > $O/b.txt; wc -l < $O/a.txt
diff $O/a.txt $O/b.txt > $O/diff.txt && echo "the comparison's lines repeat exactly" || { echo "lines differ:"; head -20 $O/diff.txt | cut -c1-200; }
tail -1 $O/cvg2.log
echo "total: $(( $(date +%s) - t0 )) s"
