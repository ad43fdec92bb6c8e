#!/bin/bash
# session 24 run 4 (H100): main's final code (5de5f7f: the forward's weight in the exponent, the A layer's dk RoPE
# backward in the attention kernel): ./test_natsl gpu, memcheck of 2 GNA bf16 340m steps, the four patterns' steps,
# the layer table, a profile of the transformer step.
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/device.txt
t0=$(date +%s)
tar -xzf _cmp/pack/bins.tgz
F=_cmp/fin
(cd $F && timeout 230 ./test_natsl gpu) > $L/test_gpu.log 2>&1; echo "test_gpu rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 3 $L/test_gpu.log | cut -c1-200
(cd $F && timeout 100 compute-sanitizer --tool memcheck ./train_natsl_cu -e 340m -a GNA -b 1 -t 256 -x 2 -v 0 -s 0 -p bf16 \
  -i data/fineweb_edu_train.bin -j data/fineweb_edu_val.bin -o /tmp/mc) > $L/memcheck_train.log 2>&1
echo "memcheck train rc=$?"; tail -n 2 $L/memcheck_train.log
(cd $F && timeout 160 ./bench_gpu step -a natsl-hybrid,gdn,gdn-hybrid,transformer -p bf16 -n 5) > $L/step.log 2>&1; echo "step rc=$?"
grep RESULT $L/step.log | cut -c1-230
(cd $F && timeout 60 ./bench_gpu layer -n 10) > $L/layer.log 2>&1; echo "layer rc=$?"; grep RESULT $L/layer.log | cut -c1-150
(cd $F && NATSL_PROFILE=1 timeout 60 ./bench_gpu step -a transformer -p bf16 -n 5) > $L/prof_transformer.log 2>&1; echo "prof rc=$?"
grep -E "RESULT|attention|rope|matmul|rmsnorm|swiglu" $L/prof_transformer.log | cut -c1-200
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs && rm -rf $L
