#!/usr/bin/env bash
# The checks of training on several GPUs (doc/model.md §9.4), on a machine of N ≥ 2 GPUs, after
# make train_natsl_cu:  dev/multi_gpu_check.sh OUTDIR [N] [parts]
# parts (default all): equiv (1 GPU vs N, fp32 and bf16, -z 0 and -z 1, ST-Gumbel, 340m), resume (bit-identical on N),
# fail (a killed rank, mismatched flags), mpi (a USE_MPI=1 build under mpirun; torchrun), scale (340m NAtS-L Hybrid tok/s, 1 vs N
# GPUs, and the reduction's overlap). Each part logs to OUTDIR/<part>.log and prints PASS/FAIL lines and numbers.
set -u
O=$1; N=${2:-2}; PARTS=${3:-"equiv resume fail mpi scale"}
mkdir -p "$O"; W=$(mktemp -d)
export NATSL_TIMEOUT=${NATSL_TIMEOUT:-60}
L="dev/launch.sh $N"
one() { ./train_natsl_cu "$@"; }
# max relative difference of loss and norm (and val loss) between two runs' step lines; PASS if below the bar (bar 0:
# INFO, a reference that is not a check). With fileC fileD (two runs that differ only in the order of fp32 sums, the
# floor of such a comparison), each quantity's bar is the larger of bar and twice C's difference from D.
compare() { # name bar fileA fileB [fileC fileD]
    python3 - "$@" <<'PY'
import re, sys
name, bar, a, b = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4]
floor = sys.argv[5:7]
def read(p):
    st, va = {}, {}
    for line in open(p, errors="replace"):
        m = re.match(r"step +(\d+)/\d+ \| loss ([-\d.]+) \| lr \S+ \| norm ([-\d.]+)", line)
        if m: st[int(m[1])] = (float(m[2]), float(m[3]))
        m = re.match(r"step (\d+): val loss ([-\d.]+)", line)
        if m: va[int(m[1])] = float(m[2])
    return st, va
def diffs(sa, va, sb, vb):
    rl = max(abs(sa[s][0] - sb[s][0]) / abs(sb[s][0]) for s in sa)
    rn = max(abs(sa[s][1] - sb[s][1]) / max(abs(sb[s][1]), 1e-12) for s in sa)
    rv = max([abs(va[s] - vb[s]) / abs(vb[s]) for s in va if s in vb] or [0])
    return rl, rn, rv
(sa, va), (sb, vb) = read(a), read(b)
if not sa or sorted(sa) != sorted(sb):
    print(f"FAIL {name}: steps differ ({len(sa)} vs {len(sb)})"); sys.exit(0)
d = diffs(sa, va, sb, vb)
bars, why = (bar, bar, bar), f"bar {bar:g}"
if floor:
    (sc, vc), (sd, vd) = read(floor[0]), read(floor[1])
    if not sc or sorted(sc) != sorted(sd):
        print(f"FAIL {name}: the floor's runs' steps differ ({len(sc)} vs {len(sd)})"); sys.exit(0)
    bars = tuple(max(bar, 2 * f) for f in diffs(sc, vc, sd, vd))
    why = f"bars: {bar:g} or twice the floor, loss {bars[0]:.1e}, norm {bars[1]:.1e}, val {bars[2]:.1e}"
ok = all(x < y for x, y in zip(d, bars))
last = max(sa)
print(f"{'INFO' if bar <= 0 else 'PASS' if ok else 'FAIL'} {name}: {len(sa)} steps, max rel. diff loss {d[0]:.2e}, norm {d[1]:.2e}, val {d[2]:.2e} "
      f"({why}); last step loss {sa[last][0]:.6f} vs {sb[last][0]:.6f}")
PY
}
TINY="-b 4 -t 256 -d $((4 * 256 * 2 * N)) -x 20 -v 10 -m 4 -s 0 -u 5"
has() { [[ " $PARTS " == *" $1 "* ]]; }

if has equiv; then (
    set -x
    one $TINY -p fp32 > $W/t1.txt 2>&1
    $L ./train_natsl_cu $TINY -p fp32 -z 0 > $W/tn0.txt 2>&1
    $L ./train_natsl_cu $TINY -p fp32 -z 1 > $W/tn1.txt 2>&1
    one $TINY -p bf16 > $W/b1.txt 2>&1
    $L ./train_natsl_cu $TINY -p bf16 -z 1 > $W/bn1.txt 2>&1
    one $TINY -p fp32 -G 1 -R 0.9 -B 0.3 -A 0.01 > $W/g1.txt 2>&1
    $L ./train_natsl_cu $TINY -p fp32 -G 1 -R 0.9 -B 0.3 -A 0.01 -z 1 > $W/gn1.txt 2>&1
    BIG="-e 340m -a natsl-hybrid -i data/fineweb_edu_train.bin -j data/fineweb_edu_val.bin -b 1 -t 1024 -d $((1024 * 2 * N)) -x 5 -v 5 -m 2 -s 0 -u 2 -p fp32"
    one $BIG > $W/m1.txt 2>&1
    one $BIG -b 2 > $W/m1b2.txt 2>&1
    $L ./train_natsl_cu $BIG -z 1 > $W/mn1.txt 2>&1
    set +x
    compare "tiny fp32, $N GPUs -z 0 vs 1 GPU" 1e-5 $W/tn0.txt $W/t1.txt
    compare "tiny fp32, $N GPUs -z 1 vs 1 GPU" 1e-5 $W/tn1.txt $W/t1.txt
    compare "tiny fp32, $N GPUs -z 1 vs -z 0" 1e-5 $W/tn1.txt $W/tn0.txt
    compare "tiny bf16, $N GPUs -z 1 vs 1 GPU (SPEC §8 bf16 bar)" 2e-2 $W/bn1.txt $W/b1.txt
    compare "tiny fp32 ST-Gumbel + penalty + load balancing, $N GPUs -z 1 vs 1 GPU" 1e-5 $W/gn1.txt $W/g1.txt
    # the ranks' sums reorder fp32 additions as -b 2 does on one GPU: that comparison is this one's floor
    compare "340m natsl-hybrid fp32 T=1024, $N GPUs -z 1 vs 1 GPU" 1e-5 $W/mn1.txt $W/m1.txt $W/m1b2.txt $W/m1.txt
    compare "340m, one GPU -b 2 vs -b 1 (the same tokens summed in another order: fp32's floor for the line above)" 0 \
        $W/m1b2.txt $W/m1.txt
    for f in t1 tn0 tn1 b1 bn1 g1 gn1 m1 mn1; do echo "== $f"; grep -E "^(ranks|step|error|rank)" $W/$f.txt | head -40; done
) > $O/equiv.log 2>&1; grep -E "^(PASS|FAIL|INFO)" $O/equiv.log; fi

if has resume; then (
    # bit for bit: the G-only pattern (the softmax kernels' backward sums dQ and the router's dA with float atomics,
    # so runs with A or N layers repeat only to rounding: the same check reports their difference)
    for run in "GGGG 0" "GGGG 1" "GNGN 1"; do
        set -- $run; pat=$1; z=$2
        C="-a $pat -b 4 -t 256 -d $((4 * 256 * N)) -x 6 -v 3 -m 2 -s 0 -u 2 -p fp32 -z $z -G 1 -R 0.9"
        $L ./train_natsl_cu $C -o $W/full$pat$z > $W/full$pat$z.txt 2>&1
        $L ./train_natsl_cu $C -o $W/split$pat$z -n 3 > $W/s1_$pat$z.txt 2>&1
        rm -f $W/split$pat$z/*_00000006*
        $L ./train_natsl_cu $C -o $W/split$pat$z -y 1 > $W/s2_$pat$z.txt 2>&1
        ok=PASS
        for f in $(cd $W/full$pat$z && ls *_00000006*); do cmp -s $W/full$pat$z/$f $W/split$pat$z/$f || { ok=FAIL; echo "differs: $f"; }; done
        [ $pat = GNGN ] && ok=INFO
        echo "$ok resume $pat -z $z on $N GPUs: $(cd $W/full$pat$z && ls *_00000006* | tr '\n' ' ')bit-identical after 3 + 3 steps"
        compare "resume $pat -z $z: steps 4-6 resumed vs uninterrupted" 1e-5 <(grep -E "^step +[456]/" $W/s2_$pat$z.txt) \
            <(grep -E "^step +[456]/" $W/full$pat$z.txt)
        grep -h "resuming" $W/s2_$pat$z.txt
    done
    for pat in GGGG GNGN; do # one GPU, the same run twice
        for k in 1 2; do ./train_natsl_cu -a $pat -b 4 -t 256 -x 4 -v 0 -s 0 -p fp32 -o $W/rep$pat$k > /dev/null 2>&1; done
        cmp -s $W/rep${pat}1/model_00000004.bin $W/rep${pat}2/model_00000004.bin && r=identical || r=different
        echo "INFO one GPU, $pat fp32, the same 4 steps twice: model files $r"
    done
    ./train_natsl -e $W/fullGNGN1/model_00000006.bin -b 4 -t 256 -x 1 -v 1 -m 2 -s 0 > $W/cpu.txt 2>&1 &&
        echo "PASS the CPU trainer starts from the $N-GPU model file: $(grep 'val loss' $W/cpu.txt | head -1)" || { echo FAIL cpu start; tail -3 $W/cpu.txt; }
    ./train_natsl_cu -a GNGN -b 4 -t 256 -x 8 -v 0 -s 0 -p fp32 -z 1 -o $W/fullGNGN1 -y 1 > $W/one.txt 2>&1;
    grep -q "written by $N ranks with -z 1" $W/one.txt && echo "PASS 1-GPU resume of a -z 1 checkpoint refused: $(grep error $W/one.txt)" || { echo "FAIL"; tail -3 $W/one.txt; }
) > $O/resume.log 2>&1; grep -E "^(PASS|FAIL|INFO)" $O/resume.log; fi

if has fail; then (
    export NATSL_TIMEOUT=20 NATSL_PORT=29611 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1
    C="-b 4 -t 256 -x 100000 -v 0 -s 0 -d 2048"
    RANK=0 LOCAL_RANK=0 ./train_natsl_cu $C > $W/k0.txt 2> $W/k0.err & p0=$!
    RANK=1 LOCAL_RANK=1 ./train_natsl_cu $C > /dev/null 2> $W/k1.err & p1=$!
    sleep 25; kill -9 $p1; t0=$(date +%s.%N)
    wait $p0; rc=$?; t1=$(date +%s.%N)
    echo "rank 0 after rank 1 was killed: exit $rc after $(python3 -c "print(round($t1-$t0,1))") s (NATSL_TIMEOUT=20): $(cat $W/k0.err)"
    [ $rc -ne 0 ] && grep -q "^error: rank 0:" $W/k0.err && echo "PASS a killed rank ends the job" || echo "FAIL killed rank"
    grep -c "^step" $W/k0.txt
    RANK=0 LOCAL_RANK=0 ./train_natsl_cu -b 4 -t 256 -x 2 -v 0 -s 0 -d 2048 -l 1e-3 2> $W/m0.err > /dev/null & p0=$!
    RANK=1 LOCAL_RANK=1 ./train_natsl_cu -b 4 -t 256 -x 2 -v 0 -s 0 -d 2048 -l 2e-3 2> $W/m1.err > /dev/null; r1=$?
    wait $p0; r0=$?
    echo "mismatched -l: exits $r0 $r1: $(cat $W/m0.err) / $(cat $W/m1.err)"
    [ $r0 -ne 0 ] && [ $r1 -ne 0 ] && grep -q "differ from rank 0" $W/m0.err && echo "PASS mismatched flags refused" || echo "FAIL mismatched flags"
    RANK=1 LOCAL_RANK=1 timeout 60 ./train_natsl_cu -b 4 -t 256 -x 2 -v 0 -s 0 -d 2048 2> $W/a1.err > /dev/null; r=$?
    echo "rank 1 without rank 0: exit $r: $(cat $W/a1.err)"
    [ $r -eq 1 ] && grep -q "no NCCL id from rank 0" $W/a1.err && echo "PASS a rank alone stops after the timeout" || echo "FAIL rank alone"
) > $O/fail.log 2>&1; grep -E "^(PASS|FAIL)" $O/fail.log; fi

if has mpi; then (
    if command -v mpicc > /dev/null; then
        make train_natsl_cu_mpi > $W/mpibuild.txt 2>&1
        mpirun --allow-run-as-root -np $N -x NATSL_TIMEOUT -x NCCL_NVLS_ENABLE ./train_natsl_cu_mpi $TINY -p fp32 -z 1 > $W/mpi.txt 2>&1
        compare "mpirun -np $N (USE_MPI=1, -pi mpi) vs 1 GPU" 1e-5 $W/mpi.txt $W/t1.txt
        grep -E "^ranks|error" $W/mpi.txt | head -5; tail -3 $W/mpibuild.txt
    else echo "SKIP mpi: no mpicc"; fi
    if command -v torchrun > /dev/null; then
        torchrun --standalone --nproc_per_node $N --no-python ./train_natsl_cu $TINY -p fp32 -z 1 > $W/torchrun.txt 2>&1
        compare "torchrun --nproc_per_node $N vs 1 GPU" 1e-5 $W/torchrun.txt $W/t1.txt
        grep -E "^ranks|error" $W/torchrun.txt | head -5
    else echo "SKIP torchrun: not installed"; fi
) > $O/mpi.log 2>&1; grep -E "^(PASS|FAIL|SKIP)" $O/mpi.log; fi

if has scale; then (
    S="-e 340m -a natsl-hybrid -i data/fineweb_edu_train.bin -j data/fineweb_edu_val.bin -b 8 -t 4096 -x 8 -v 0 -s 0 -u 2 -p bf16"
    one $S -d 32768 > $W/s1.txt 2>&1
    $L ./train_natsl_cu $S -d $((32768 * N)) -z 0 > $W/sn0.txt 2>&1
    $L ./train_natsl_cu $S -d $((32768 * N)) -z 1 > $W/sn1.txt 2>&1
    NATSL_PROFILE=1 $L ./train_natsl_cu $S -d $((32768 * N)) -z 1 -x 4 > $W/snp.txt 2>&1
    python3 - $W/s1.txt $W/sn0.txt $W/sn1.txt $N <<'PY'
import re, sys, statistics
def tps(p):
    v = [float(m[1]) for m in (re.search(r"\| (\d+) tok/s", l) for l in open(p)) if m]
    return statistics.median(v[2:]) if len(v) > 2 else float("nan")
a, b, c, n = tps(sys.argv[1]), tps(sys.argv[2]), tps(sys.argv[3]), int(sys.argv[4])
print(f"340m natsl-hybrid bf16 B=8 T=4096: 1 GPU {a:.0f} tok/s; {n} GPUs -z 0 {b:.0f} tok/s ({b/a:.2f}x), -z 1 {c:.0f} tok/s ({c/a:.2f}x)")
PY
    grep -h -E "gradient reduction|^ranks|MiB|error" $W/snp.txt $W/sn1.txt | head; grep -h "^step" $W/s1.txt $W/sn0.txt $W/sn1.txt
    grep -h -E "profile|adamw_update|encoder_backward|grad_norm|everything else" $W/snp.txt
    nvidia-smi --query-gpu=name,memory.total --format=csv
) > $O/scale.log 2>&1; grep -E "340m|gradient reduction" $O/scale.log; fi
rm -rf "$W"
