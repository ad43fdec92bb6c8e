#!/bin/bash
# session 23 run 5 (H100): s23-l2 (b078ad2 + the conv's Q | K with their L2 norm in one pass; a G layer's pass
# without the Q, K stores compiled apart; _cmp/l2) against b078ad2 (_cmp/ce): conv_bench, natsl-hybrid steps
# alternating twice, gdn steps, the other two patterns of l2, a profile of l2's natsl-hybrid step, racecheck of the
# fused cross-entropy's kernel alone (untimed cuBLAS choices: run 4's crash was the sanitizer in cuBLASLt's timing
# loop), memcheck of 2 GN bf16 steps of l2.
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/device.txt
t0=$(date +%s)
tar -xzf _cmp/pack/bins.tgz
timeout 100 _cmp/l2/_conv_bench > $L/conv_bench.log 2>&1; echo "conv_bench rc=$? ($(( $(date +%s) - t0 )) s)"
grep -E "d_k|TIME Q|CORRECT" $L/conv_bench.log | cut -c1-170
for v in ce l2 ce l2; do
  (cd _cmp/$v && timeout 80 ./bench_gpu step -a natsl-hybrid -p bf16 -n 5) >> $L/step_$v.log 2>&1; echo "step $v rc=$?"
  grep RESULT $L/step_$v.log | tail -n 1 | cut -c1-120
done
for v in ce l2; do
  (cd _cmp/$v && timeout 80 ./bench_gpu step -a gdn -p bf16 -n 5) >> $L/step_gdn_$v.log 2>&1; echo "gdn $v rc=$?"
  grep RESULT $L/step_gdn_$v.log | tail -n 1 | cut -c1-120
done
(cd _cmp/l2 && timeout 100 ./bench_gpu step -a transformer,gdn-hybrid -p bf16 -n 5) > $L/step_other_l2.log 2>&1; echo "other rc=$?"
grep RESULT $L/step_other_l2.log | cut -c1-200
echo "($(( $(date +%s) - t0 )) s)"
(cd _cmp/l2 && NATSL_PROFILE=1 timeout 60 ./bench_gpu step -a natsl-hybrid -p bf16 -n 5) > $L/prof_l2.log 2>&1; echo "prof rc=$?"
grep -E "RESULT|crossentropy|conv_silu|l2norm" $L/prof_l2.log | cut -c1-200
(cd _cmp/l2 && NATSL_GEMM_TIMED=0 timeout 100 compute-sanitizer --tool racecheck --kernel-name kns=crossentropy --print-limit 20 \
  ./train_natsl_cu -a GNA -b 1 -t 128 -x 2 -v 0 -s 0 -p bf16 -i data/fineweb_edu_train.bin -j data/fineweb_edu_val.bin -o /tmp/rc) \
  > $L/racecheck.log 2>&1
echo "racecheck rc=$?"; tail -n 2 $L/racecheck.log
(cd _cmp/l2 && timeout 100 compute-sanitizer --tool memcheck ./train_natsl_cu -e 340m -a GN -b 1 -t 256 -x 2 -v 0 -s 0 -p bf16 \
  -i data/fineweb_edu_train.bin -j data/fineweb_edu_val.bin -o /tmp/mc) > $L/memcheck.log 2>&1
echo "memcheck rc=$?"; tail -n 2 $L/memcheck.log
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs && rm -rf $L
