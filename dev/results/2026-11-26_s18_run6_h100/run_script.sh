#!/bin/bash
# session 18 run 6: b5386f4 (fwd_state_bf16's stmatrix stores) under compute-sanitizer: memcheck and racecheck of 340m-head
# GN bf16 training steps (the racecheck's hazards counted per kernel: cuBLAS's own are reported too). Logs in logs.tgz.
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee $L/device.txt
t0=$(date +%s)
make train_natsl_cu > $L/build.log 2>&1; echo "build: $(( $(date +%s) - t0 )) s"
timeout 90 compute-sanitizer --tool memcheck ./train_natsl_cu -e 340m -a GN -b 1 -t 256 -x 2 -v 0 -s 0 -p bf16 -o /tmp/mc > $L/memcheck_gn340.log 2>&1; echo "memcheck rc=$?"; grep -E "ERROR SUMMARY" $L/memcheck_gn340.log
timeout 150 compute-sanitizer --tool racecheck --racecheck-report hazard ./train_natsl_cu -e 340m -a GN -b 1 -t 256 -x 1 -v 0 -s 0 -p bf16 -o /tmp/rc > $L/racecheck_gn340.log 2>&1; echo "racecheck rc=$?"; grep -E "RACECHECK SUMMARY" $L/racecheck_gn340.log
grep -oE "in void [A-Za-z_:0-9]+|in [a-z_0-9]+_kernel[A-Za-z_<>0-9, ]*" $L/racecheck_gn340.log | sort | uniq -c | sort -rn | head -20
echo "total: $(( $(date +%s) - t0 )) s"
tar -czf $O/logs.tgz -C $O logs && rm -rf $L
