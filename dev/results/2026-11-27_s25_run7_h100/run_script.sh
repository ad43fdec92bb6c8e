#!/bin/bash
# session 25 run 7 (H100): s25-bwd-bulk64 (_cmp/bulk: the attention backward's dQ adds by bulk reduce-adds at DV = 64)
# against main 7367a6c (_cmp/base): ./test_natsl gpu (bulk), memcheck of 2 GNA bf16 340m steps (bulk), transformer
# steps alternating twice, the layer tables of both
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/device.txt
t0=$(date +%s)
tar -xzf _cmp/pack/bins.tgz
(cd _cmp/bulk && timeout 230 ./test_natsl gpu) > $L/test_gpu.log 2>&1; echo "test_gpu rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 3 $L/test_gpu.log | cut -c1-200
(cd _cmp/bulk && timeout 120 compute-sanitizer --tool memcheck ./train_natsl_cu -e 340m -a GNA -b 1 -t 256 -x 2 -v 0 -s 0 -p bf16 -i data/fineweb_edu_train.bin -j data/fineweb_edu_val.bin -o /tmp/mc) > $L/memcheck_train.log 2>&1; echo "memcheck train rc=$?"; tail -n 2 $L/memcheck_train.log | cut -c1-150
for v in base bulk base bulk; do
  (cd _cmp/$v && timeout 40 ./bench_gpu step -a transformer -p bf16 -n 5) >> $L/step_$v.log 2>&1; echo "step $v rc=$?"
  grep RESULT $L/step_$v.log | tail -n 1 | cut -c1-150
done
for v in base bulk; do
  (cd _cmp/$v && timeout 60 ./bench_gpu layer -n 10) > $L/layer_$v.log 2>&1; echo "layer $v rc=$?"; grep RESULT $L/layer_$v.log | grep "layer A" | cut -c1-150
done
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs
