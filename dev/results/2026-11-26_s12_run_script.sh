#!/bin/bash
# session 12 device batch: $1 = which batch
O=${OUT:-/tmp/o}; mkdir -p $O
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee $O/device.txt
NV="nvcc -O3 -arch=sm_90 -std=c++17 -I."
t0=$(date +%s)
case "$1" in
1)
  make -j8 train_natsl test_natsl train_natsl_cu > $O/build_main.log 2>&1 &
  $NV dev/bench_gpu.cu -o bench_gpu -lcublas -lnccl > $O/build_main_bench.log 2>&1 &
  (cd _wip && make -j8 train_natsl test_natsl train_natsl_cu > $O/build_wip.log 2>&1) &
  (cd _wip && $NV dev/bench_gpu.cu -o bench_gpu -lcublasLt -lcublas -lnccl > $O/build_wip_bench.log 2>&1) &
  wait; echo "build: $(( $(date +%s) - t0 )) s"; tail -2 $O/build_*.log
  for t in . _wip; do n=$([ $t = . ] && echo main || echo wip)
    (cd $t && NATSL_PROFILE=1 timeout 90 ./bench_gpu step -a natsl-hybrid -p bf16 -n 5 > $O/step_$n.log 2>&1); echo "step $n rc=$?"
    grep -E "tok/s|RESULT" $O/step_$n.log | head -5; done
  timeout $(( 590 - ($(date +%s) - t0) )) make test > $O/test_main.log 2>&1; echo "make test main rc=$?"
  grep -iE "^  (tiny|760m)|passed|fail|error" $O/test_main.log | tail -30 ;;
2)
  make -j8 train_natsl test_natsl train_natsl_cu > $O/build.log 2>&1 &
  $NV dev/bench_gpu.cu -o bench_gpu -lcublasLt -lcublas -lnccl > $O/build_bench.log 2>&1 &
  wait; echo "build: $(( $(date +%s) - t0 )) s"; tail -2 $O/build*.log
  NATSL_PROFILE=1 timeout 90 ./bench_gpu step -a natsl-hybrid -p bf16 -n 5 > $O/step.log 2>&1; echo "step rc=$?"
  grep -E "RESULT" $O/step.log; sed -n '/^profile/,$p' $O/step.log | head -14
  timeout 60 compute-sanitizer --tool memcheck ./train_natsl_cu -x 2 -v 0 -s 0 -b 2 -t 128 -a GNA -o /tmp/memck > $O/memcheck.log 2>&1
  echo "memcheck rc=$?"; grep -E "ERROR SUMMARY" $O/memcheck.log
  timeout $(( 590 - ($(date +%s) - t0) )) make test > $O/test.log 2>&1; echo "make test rc=$?"
  grep -iE "^  (tiny|760m)|passed|fail|error" $O/test.log | tail -40 ;;
3)
  make -j8 train_natsl test_natsl train_natsl_cu > $O/build.log 2>&1 &
  $NV dev/bench_gpu.cu -o bench_gpu -lcublasLt -lcublas -lnccl > $O/build_bench.log 2>&1 &
  wait; echo "build: $(( $(date +%s) - t0 )) s"; tail -2 $O/build*.log
  NATSL_PROFILE=1 timeout 90 ./bench_gpu step -a natsl-hybrid -p bf16 -n 5 > $O/step.log 2>&1; echo "step rc=$?"
  grep -E "RESULT" $O/step.log; sed -n '/^profile/,$p' $O/step.log | head -40
  timeout 330 make test > $O/test.log 2>&1; echo "make test rc=$?"
  grep -iE "^  (tiny|760m)|passed|fail|error|resume" $O/test.log | tail -40
  timeout $(( 585 - ($(date +%s) - t0) )) ./bench_gpu step -a gdn,transformer,gdn-hybrid -p bf16 -n 5 > $O/step3.log 2>&1; echo "step3 rc=$?"
  grep RESULT $O/step3.log ;;
4)
  make -j8 train_natsl test_natsl train_natsl_cu > $O/build.log 2>&1 &
  $NV dev/bench_gpu.cu -o bench_gpu -lcublasLt -lcublas -lnccl > $O/build_bench.log 2>&1 &
  wait; echo "build: $(( $(date +%s) - t0 )) s"; tail -2 $O/build*.log
  NATSL_PROFILE=1 timeout 90 ./bench_gpu step -a natsl-hybrid -p bf16 -n 5 > $O/step.log 2>&1; echo "step rc=$?"
  grep -E "RESULT" $O/step.log; sed -n '/^profile/,$p' $O/step.log | head -40
  timeout 60 compute-sanitizer --tool memcheck ./train_natsl_cu -x 2 -v 0 -s 0 -b 2 -t 128 -a GSNS -o /tmp/memck > $O/memcheck.log 2>&1
  echo "memcheck GSNS bf16 rc=$?"; grep -E "ERROR SUMMARY" $O/memcheck.log; ls -la /tmp/memck
  timeout 30 ./train_natsl_cu > $O/main.log 2>&1; echo "main job rc=$?"; grep -E "val loss|step  *300|precision|ms" $O/main.log | tail -4
  timeout $(( 590 - ($(date +%s) - t0) )) make test > $O/test.log 2>&1; echo "make test rc=$?"
  grep -iE "^  (tiny|760m)|passed|fail|error|resume" $O/test.log | tail -40 ;;
esac
echo "total: $(( $(date +%s) - t0 )) s"
