#!/bin/bash
# session 26 run 11 (H100): the final kernels (s26-smem, run 9's binaries): memcheck of `flash_bf16 small` and of
# 2 GNA bf16 340m training steps (the A and N layers' attention, TMA loads included)
O=${OUT:-/tmp/o}; mkdir -p $O/logs; L=$O/logs
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/device.txt
timeout 150 compute-sanitizer --tool memcheck _cmp/fb_smem small > $L/memcheck_small.log 2>&1; echo "memcheck small rc=$?"; tail -n 2 $L/memcheck_small.log
(cd _cmp/smem && timeout 150 compute-sanitizer --tool memcheck ./train_natsl_cu -e 340m -a GNA -b 1 -t 256 -x 2 -v 0 -s 0 -p bf16 -i data/fineweb_edu_train.bin -j data/fineweb_edu_val.bin -o /tmp/mc) > $L/memcheck_train.log 2>&1; echo "memcheck train rc=$?"; tail -n 2 $L/memcheck_train.log | cut -c1-150
tar -czf $O/logs.tgz -C $O logs
