#!/bin/bash
# session 21 run 2 (part 3, part 1's machine and builds): the GDN harness's kernel times, HEAD 432ad13 (_cmp/base) against
# this tree; 340m natsl-hybrid loss curves on the FineWeb-Edu shard (B=8 T=1024, 300 steps, lr 6e-4), 4fcfadb
# (_cmp/base0: dQ, dK, dV and the GDN op's dO in fp32) against this tree (both in bf16), seeds 42 and 7.
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
NV="nvcc -O3 -arch=compute_90a -code=sm_90a -std=c++17 -I."
t0=$(date +%s)
(cd _cmp/base0 && make train_natsl_cu > $L/build_base0.log 2>&1) &
(cd _cmp/base && $NV -Xcompiler -fopenmp dev/cuda/gdn/gdn_chunk.cu -o gdn_chunk -lcublasLt -lcublas -lnccl > $L/build_gdn_base.log 2>&1) &
wait; echo "build: $(( $(date +%s) - t0 )) s"; ls -la _cmp/base/gdn_chunk _cmp/base0/train_natsl_cu | cut -c30-
for v in base new; do d=.; [ $v = base ] && d=_cmp/base
  (cd $d && timeout 60 ./gdn_chunk time bf16) > $L/gdn_time_$v.log 2>&1; echo "gdn time $v rc=$?"; grep -E "TIME|kernels" $L/gdn_time_$v.log | head -n 4 | cut -c1-250
done
echo "t: $(( $(date +%s) - t0 )) s"
ARGS="-e 340m -a natsl-hybrid -i data/fineweb_edu_train.bin -j data/fineweb_edu_val.bin -b 8 -t 1024 -x 300 -u 30 -l 6e-4 -v 25 -m 4 -s 0 -p bf16"
for r in 42 7; do
  timeout 100 ./_cmp/base0/train_natsl_cu $ARGS -r $r > $L/curve_g32_r$r.log 2>&1; echo "g32 r$r rc=$?"
  timeout 100 ./train_natsl_cu $ARGS -r $r > $L/curve_g16_r$r.log 2>&1; echo "g16 r$r rc=$?"
done
for f in $L/curve_*.log; do echo "$(basename $f): $(grep 'step  25: val\|^step 25:' $f | cut -c1-30) | $(grep 'val loss' $f | tail -n 1 | cut -c1-30) | last: $(grep '^step .*| loss' $f | tail -n 1 | cut -c1-40)"; done
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs && rm -rf $L
