#!/bin/bash
# session 20 run 3 (run 2's machine and builds): 340m natsl-hybrid loss curves on the FineWeb-Edu shard (B=8 T=1024,
# 300 steps, lr 6e-4), the residual stream's gradient in fp32 (_cmp/base, 80b936a) and in bf16 (this tree), seeds 42
# and 7; compute-sanitizer memcheck of 2 GN bf16 training steps at the 340m head sizes; racecheck of gdn_chunk test
# bf16 (run 1's bwd_state change). Logs in logs.tgz.
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
t0=$(date +%s)
ARGS="-e 340m -a natsl-hybrid -i data/fineweb_edu_train.bin -j data/fineweb_edu_val.bin -b 8 -t 1024 -x 300 -u 30 -l 6e-4 -v 25 -m 4 -s 0 -p bf16"
for r in 42 7; do
  (cd _cmp/base && timeout 100 ./train_natsl_cu $ARGS -r $r) > $L/curve_dres32_r$r.log 2>&1; echo "dres32 r$r rc=$?"
  timeout 100 ./train_natsl_cu $ARGS -r $r > $L/curve_dres16_r$r.log 2>&1; echo "dres16 r$r rc=$?"
done
for f in $L/curve_*.log; do echo "$(basename $f): $(grep 'step  25: val\|^step 25:' $f | cut -c1-30) | $(grep 'val loss' $f | tail -n 1 | cut -c1-30) | last: $(grep '^step .*| loss' $f | tail -n 1 | cut -c1-40)"; done
echo "t: $(( $(date +%s) - t0 )) s"
timeout 100 compute-sanitizer --tool memcheck ./train_natsl_cu -e 340m -a GN -b 1 -t 256 -x 2 -v 0 -s 0 -p bf16 -o /tmp/mc > $L/memcheck.log 2>&1; echo "memcheck rc=$?"; tail -n 3 $L/memcheck.log
echo "t: $(( $(date +%s) - t0 )) s"
timeout 120 compute-sanitizer --tool racecheck --print-limit 20 ./gdn_chunk test bf16 > $L/racecheck.log 2>&1; echo "racecheck rc=$?"; grep -E "PASS|FAIL|RACECHECK|hazard" $L/racecheck.log | tail -n 8 | cut -c1-200
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs && rm -rf $L
