#!/bin/bash
# session 17 run 5 (same machine as run 4, its builds kept): 340m natsl-hybrid loss curves on the FineWeb-Edu shard,
# B=8 T=1024, 300 steps, lr 6e-4, seed 42: bf16 mode with the residual stream in fp32 (main 19e8f4a) and in bf16
# (this tree), then fp32 mode (this tree). Logs in logs.tgz.
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
t0=$(date +%s)
ARGS="-e 340m -a natsl-hybrid -i data/fineweb_edu_train.bin -j data/fineweb_edu_val.bin -b 8 -t 1024 -x 300 -u 30 -l 6e-4 -v 25 -m 4 -s 0 -r 42"
(cd _cmp/base && timeout 150 ./train_natsl_cu $ARGS -p bf16) > $L/curve_bf16_res32.log 2>&1; echo "res32 rc=$?"
timeout 150 ./train_natsl_cu $ARGS -p bf16 > $L/curve_bf16_res16.log 2>&1; echo "res16 rc=$?"
timeout 250 ./train_natsl_cu $ARGS -p fp32 > $L/curve_fp32.log 2>&1; echo "fp32 rc=$?"
for f in $L/curve_*.log; do echo "$(basename $f): $(grep -c '^step .*loss' $f) steps; $(grep 'val loss' $f | tail -n 1 | cut -c1-40); last: $(grep '^step .*| loss' $f | tail -n 1 | cut -c1-60)"; done
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs && rm -rf $L
