#!/bin/bash
# session 17 run 7 (same machine as run 6, its builds kept): run 5's loss curves with a second seed (-r 7): bf16 mode
# with the residual stream in fp32 (19e8f4a, _cmp/res32) and in bf16 (this tree; bitwise the same as d81b2bc's).
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
t0=$(date +%s)
ARGS="-e 340m -a natsl-hybrid -i data/fineweb_edu_train.bin -j data/fineweb_edu_val.bin -b 8 -t 1024 -x 300 -u 30 -l 6e-4 -v 25 -m 4 -s 0 -r 7"
(cd _cmp/res32 && timeout 150 ./train_natsl_cu $ARGS -p bf16) > $L/curve_bf16_res32_r7.log 2>&1; echo "res32 rc=$?"
timeout 150 ./train_natsl_cu $ARGS -p bf16 > $L/curve_bf16_res16_r7.log 2>&1; echo "res16 rc=$?"
for f in $L/curve_*.log; do echo "$(basename $f): $(grep 'val loss' $f | sed -n 2p | cut -c1-30); $(grep 'val loss' $f | tail -n 1 | cut -c1-30); last: $(grep '^step .*| loss' $f | tail -n 1 | cut -c1-40)"; done
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs && rm -rf $L
