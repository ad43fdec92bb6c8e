#!/bin/bash
# session 29 run 3 (H100): the checks of this tree (the products' algorithms from every id's configurations, timed in
# turns; the router's dx pass by blocks of 16 rows): ./test_natsl gpu; memcheck of 2 GNA bf16 340m training steps;
# bench_gpu step for the four patterns (NATSL_GEMM_REPORT=1), and main's head (da91726) for gdn and transformer beside.
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/device.txt
t0=$(date +%s)
timeout 150 compute-sanitizer --tool memcheck ./train_natsl_cu -e 340m -a GNA -b 1 -t 256 -x 2 -v 0 -s 0 -p bf16 -i data/fineweb_edu_train.bin -j data/fineweb_edu_val.bin -o /tmp/mc > $L/memcheck_train.log 2>&1; echo "memcheck train rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 2 $L/memcheck_train.log | cut -c1-150
tar -czf $O/logs.tgz -C $O logs
for a in natsl-hybrid gdn gdn-hybrid transformer; do
  NATSL_GEMM_REPORT=1 timeout 150 ./bench_gpu step -a $a -p bf16 > $L/step_${a}_new.log 2>&1
  if [ $a = gdn -o $a = transformer ]; then timeout 150 _cmp/bin/bench_gpu_head step -a $a -p bf16 > $L/step_${a}_head.log 2>&1; fi
  for f in $L/step_${a}_*.log; do echo "$(basename $f .log): $(grep RESULT $f | sed 's/ \+/ /g' | cut -c1-200)"; done
  tar -czf $O/logs.tgz -C $O logs
done
timeout 320 ./test_natsl gpu > $L/test_gpu.log 2>&1; echo "test_gpu rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 1 $L/test_gpu.log
tar -czf $O/logs.tgz -C $O logs
echo "total $(( $(date +%s) - t0 )) s"
