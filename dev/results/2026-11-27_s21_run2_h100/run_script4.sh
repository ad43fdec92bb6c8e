#!/bin/bash
# session 21 run 2 (part 4): part 3's `gdn_chunk time` of this tree did not run (the harness binary had not survived
# the call's copy of the tree), so built again to /tmp; the machine had gone back meanwhile, so this was a fresh one,
# without _cmp/base's builds (its base lines: rc 127). The command as run:
O=$OUT/logs; mkdir -p $O; nvcc -O3 -arch=compute_90a -code=sm_90a -std=c++17 -I. -Xcompiler -fopenmp dev/cuda/gdn/gdn_chunk.cu -o /tmp/gdn_chunk_new -lcublasLt -lcublas -lnccl > $O/build_gdn_new.log 2>&1; for v in base new base new; do b=/tmp/gdn_chunk_new; [ $v = base ] && b=_cmp/base/gdn_chunk; timeout 60 $b time bf16 >> $O/gdn_time2_$v.log 2>&1; echo "$v rc=$?"; grep -E "TIME|kernels" $O/gdn_time2_$v.log | tail -n 4 | head -n 2 | cut -c1-250; done
