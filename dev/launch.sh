#!/usr/bin/env bash
# Starts N ranks of a program on this machine, one per GPU, the way torchrun does: each gets RANK, WORLD_SIZE and
# LOCAL_RANK, and rank 0 serves the NCCL id on 127.0.0.1 (NATSL_PORT, a free port if unset).
#   dev/launch.sh 2 ./train_natsl_cu -e 340m -a natsl-hybrid -b 8 -t 4096 -d 65536 -o run
# Only rank 0 prints (the trainer quiets the others' stdout; their errors still show). When a rank fails, the others
# end by themselves with an error once they stop hearing from it (NATSL_TIMEOUT, default 300 s); whatever still runs
# NATSL_TIMEOUT + 30 s later is stopped. The exit status is the first failing rank's, 0 if every rank succeeded.
set -u
if [ $# -lt 2 ] || ! [[ "$1" =~ ^[1-9][0-9]*$ ]]; then
    echo "usage: dev/launch.sh N PROGRAM [FLAGS...]   (N ranks, one per GPU of this machine)" >&2
    exit 2
fi
n=$1; shift
export WORLD_SIZE=$n MASTER_ADDR=127.0.0.1
export NATSL_PORT=${NATSL_PORT:-$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null || echo $((20000 + RANDOM % 20000)))}
pids=()
for ((r = 0; r < n; r++)); do
    RANK=$r LOCAL_RANK=$r "$@" &
    pids+=($!)
done
trap 'kill "${pids[@]}" 2>/dev/null; exit 130' INT TERM
rc=0 left=$n killer=
while [ $left -gt 0 ]; do
    wait -n "${pids[@]}" 2>/dev/null
    st=$?
    [ $st -eq 127 ] && break # no child left
    left=$((left - 1))
    if [ $st -ne 0 ] && [ $rc -eq 0 ]; then
        rc=$st
        grace=$(( ${NATSL_TIMEOUT:-300} + 30 ))
        echo "launch: a rank exited with status $st; the others stop within ${grace} s" >&2
        ( sleep $grace; kill "${pids[@]}" 2>/dev/null ) &
        killer=$!
    fi
done
[ -n "$killer" ] && kill $killer 2>/dev/null
exit $rc
