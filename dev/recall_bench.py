#!/usr/bin/env python3
"""The recall benchmark (doc/recall.md): trains one model per layer pattern on a recall task of dev/data/recall.py
on its answers (-w 1), evaluates each with -E 1 at the training length and at longer ones, and prints one markdown
table: answer accuracy at each length, the softmax fraction of the N layers' routers (mean over N layers and heads,
at the training length), the val answers' loss and the training's wall time; then the commands that reproduce each
row. The data is generated once (or reused) in --data; each run keeps its checkpoint, logs and, for a pattern with N
layers, the routing of the first val row at the longest length (route_T<L>.csv: dev/plot_routing.py draws it).

    python3 dev/recall_bench.py --task copy --T 64 --V 16 --lengths 256 --steps 100 --batch 8 \\
        --run GGGG --run "GNGN -C sigmoid"                                     # CPU, tiny preset: a few minutes
    python3 dev/recall_bench.py --bin ./train_natsl_cu --preset small --task mqar --T 256 --V 128 \\
        --gen "--pairs 16" --lengths 1024,4096 --steps 1500 --batch 32 --jobs 4  # one GPU, 4 runs at once

--run is a pattern (or variant) and any trainer flags for that run ("GNGN -C sigmoid"); --extra adds flags to
every run. Several runs share one GPU (or the CPU) as separate processes with --jobs; each gets the cores / jobs
OpenMP threads of the CPU trainer unless OMP_NUM_THREADS is set.
"""
import argparse
import os
import re
import shlex
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

DEFAULT_RUNS = ["GGGG", "GGGA", "GNGN -C sigmoid", "AAAA"]


def data_files(args):
    """The data directory, generated with dev/data/recall.py where a file is missing; returns its command."""
    need = ["train.bin", "val.bin"] + [f"val_T{L}.bin" for L in args.lengths]
    cmd = ["python3", "dev/data/recall.py", args.task, "--T", str(args.T), "--V", str(args.V),
           "--train_rows", str(args.train_rows), "--val_rows", str(args.val_rows), "--outdir", args.data]
    if args.lengths:
        cmd += ["--val_lengths", ",".join(map(str, args.lengths))]
    cmd += shlex.split(args.gen)
    if not all(os.path.exists(os.path.join(args.data, f)) for f in need):
        print(f"data: {shlex.join(cmd)}", flush=True)
        p = subprocess.run([sys.executable] + cmd[1:], capture_output=True, text=True)
        if p.returncode:
            sys.exit(f"error: {shlex.join(cmd)} failed:\n{p.stdout}{p.stderr}")
    else:
        print(f"data: {args.data} (reused; written by {shlex.join(cmd)})", flush=True)
    return cmd


def parse_eval(text):
    """The answers' loss and accuracy and the mean softmax fraction over the N layers' heads of -E 1's output."""
    acc = loss = frac = None
    for line in text.splitlines():
        m = re.match(r"eval answers: n [\d.]+ \| loss ([\d.naif]+) \| accuracy ([\d.]+)", line)
        if m:
            loss, acc = float(m.group(1)), float(m.group(2))
        if line.startswith("eval: | softmax frac"):
            heads = [float(x) for part in line.split("|")[1:] for x in part.split(":", 1)[1].split()]
            frac = sum(heads) / len(heads)
    return acc, loss, frac


def bench_run(args, i, spec):
    """Trains run i (spec: "PATTERN [flags]") and evaluates it at every length; returns its row."""
    words = shlex.split(spec)
    pattern, opts = words[0], words[1:]
    name = f"{i:02d}_{pattern}" + ("_" + re.sub(r"[^A-Za-z0-9.]+", "_", " ".join(opts)).strip("_") if opts else "")
    rd = os.path.join(args.out, name)
    os.makedirs(rd, exist_ok=True)
    for f in os.listdir(rd):  # a run of an earlier benchmark in the same place: start over
        if f.startswith(("model_", "state_", "main.log")):
            os.remove(os.path.join(rd, f))
    train = [args.bin, "-e", args.preset, "-a", pattern, "-i", os.path.join(args.data, "train.bin"),
             "-j", os.path.join(args.data, "val.bin"), "-t", str(args.T), "-b", str(args.batch), "-x", str(args.steps),
             "-w", "1", "-s", "0", "-v", "0", "-l", str(args.lr), "-u", str(args.warmup), "-r", str(args.seed),
             "-o", rd] + opts + shlex.split(args.extra)
    row = dict(i=i, pattern=pattern, opts=" ".join(opts), dir=rd, cmds=[shlex.join(train)], acc={}, loss=None, frac={},
               wall=None, error=None, route=None)
    t0 = time.time()
    with open(os.path.join(rd, "train.log"), "w") as log:
        p = subprocess.run(train, stdout=log, stderr=subprocess.STDOUT, env=args.env)
    row["wall"] = time.time() - t0
    if p.returncode:
        row["error"] = f"training failed (exit {p.returncode}): {rd}/train.log"
        return row
    ckpt = os.path.join(rd, f"model_{args.steps:08d}.bin")
    m = re.search(r"^model: .* pattern=(\S+)", open(os.path.join(rd, "train.log")).read(), re.M)
    lengths = [args.T] + args.lengths
    for L in lengths:
        val = os.path.join(args.data, "val.bin" if L == args.T else f"val_T{L}.bin")
        ev = [args.bin, "-E", "1", "-e", ckpt, "-j", val, "-t", str(L), "-b", str(args.batch), "-m", str(args.eval_batches)]
        if L == lengths[-1] and m and "N" in m.group(1):  # the routing of the first val row at the longest length
            row["route"] = (os.path.join(rd, f"route_T{L}.csv"), val[:-4] + ".ans")
            ev += ["-Q", row["route"][0]]
        row["cmds"].append(shlex.join(ev))
        p = subprocess.run(ev, capture_output=True, text=True, env=args.env)
        with open(os.path.join(rd, f"eval_T{L}.log"), "w") as log:
            log.write(p.stdout + p.stderr)
        if p.returncode:
            row["error"] = f"-E 1 at T={L} failed (exit {p.returncode}): {rd}/eval_T{L}.log"
            return row
        acc, loss, frac = parse_eval(p.stdout)
        row["acc"][L] = acc
        row["frac"][L] = frac if L >= 128 else None  # one chunk of 64 and the forced last: nothing routed
        if L == args.T:
            row["loss"] = loss
    return row


def fmt(x, f="{:.3f}"):
    return "—" if x is None else f.format(x)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="./train_natsl", help="the trainer: ./train_natsl or ./train_natsl_cu")
    ap.add_argument("--task", default="copy", choices=["copy", "mqar", "passkey", "selcopy"])
    ap.add_argument("--T", type=int, default=64, help="training row length, the trainer's -t (default 64)")
    ap.add_argument("--V", type=int, default=16, help="the task's vocabulary (not passkey's) (default 16)")
    ap.add_argument("--gen", default="", help="more dev/data/recall.py flags, e.g. '--pairs 16'")
    ap.add_argument("--lengths", default="256", help="comma-separated longer eval lengths (val_T<L>; '' for none)")
    ap.add_argument("--data", help="data directory (default dev/data/recall/bench_TASK_T<T>_V<V>)")
    ap.add_argument("--train-rows", type=int, help="train rows (default steps x batch, at least 1024)")
    ap.add_argument("--val-rows", type=int, default=512, help="rows in each val shard (default 512)")
    ap.add_argument("--preset", default="tiny", help="-e of every run: tiny or small (default tiny)")
    ap.add_argument("--run", action="append", help="a pattern and its flags, e.g. 'GNGN -C sigmoid' (repeat; default "
                    + ", ".join(repr(r) for r in DEFAULT_RUNS) + ")")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--batch", type=int, default=8, help="B of training and of -E 1 (default 8)")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--eval-batches", type=int, default=8, help="-E 1's -m at every length (default 8)")
    ap.add_argument("--extra", default="", help="trainer flags for every run, e.g. '-p fp32'")
    ap.add_argument("--jobs", type=int, default=1, help="runs at once (processes sharing the machine) (default 1)")
    ap.add_argument("--out", help="run directories go here (default out_recall_bench/TASK_T<T>)")
    args = ap.parse_args()
    args.lengths = [int(x) for x in args.lengths.split(",") if x]
    args.data = args.data or f"dev/data/recall/bench_{args.task}_T{args.T}_V{args.V}"
    args.out = args.out or f"out_recall_bench/{args.task}_T{args.T}"
    args.train_rows = args.train_rows or max(1024, args.steps * args.batch)
    runs = args.run or DEFAULT_RUNS
    args.env = dict(os.environ)  # the runs at once share the cores (the CPU trainer's OpenMP threads)
    args.env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // max(1, args.jobs))))
    if not os.access(args.bin, os.X_OK):
        sys.exit(f"error: {args.bin}: not built (make {os.path.basename(args.bin)})")
    if args.batch * args.eval_batches > args.val_rows:
        print(f"note: -E 1 reads {args.val_rows} val rows, not batch x eval-batches = {args.batch * args.eval_batches}")
    gen = data_files(args)
    print(f"{len(runs)} runs, {args.jobs} at once: {args.bin} -e {args.preset}, {args.steps} steps of {args.batch} x "
          f"{args.T}, then -E 1 at T = {', '.join(str(L) for L in [args.T] + args.lengths)}", flush=True)
    t0 = time.time()

    def one(item):
        r = bench_run(args, *item)
        print(f"  done {r['i']:2d} {r['pattern']} {r['opts']}: {r['error'] or 'accuracy ' + fmt(r['acc'].get(args.T))} "
              f"({r['wall']:.0f} s training)", flush=True)
        return r

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        rows = list(pool.map(one, enumerate(runs)))
    lengths = [args.T] + args.lengths
    print(f"\n{args.task} (dev/data/recall.py {' '.join(shlex.quote(w) for w in gen[2:])}), preset {args.preset}, "
          f"{args.steps} steps of {args.batch} x {args.T} on the answers (-w 1), {os.path.basename(args.bin)}; "
          f"-E 1 on {args.batch * args.eval_batches} val rows at each length; {time.time() - t0:.0f} s in all\n")
    fl = sorted({args.T, lengths[-1]})
    print("| # | pattern | options | " + " | ".join(f"accuracy T={L}" for L in lengths) + " | "
          + " | ".join(f"softmax frac T={L}" for L in fl) + f" | answer loss T={args.T} | train s |")
    print("|---|---|---|" + "---|" * (len(lengths) + len(fl)) + "---|---|")
    for r in rows:
        accs = " | ".join(fmt(r["acc"].get(L)) for L in lengths)
        fracs = " | ".join(fmt(r["frac"].get(L), "{:.2f}") for L in fl)
        print(f"| {r['i']} | `{r['pattern']}` | {'`' + r['opts'] + '`' if r['opts'] else ''} | {accs} | {fracs} "
              f"| {fmt(r['loss'], '{:.4f}')} | {r['wall']:.0f} |")
    print("\naccuracy and answer loss: over the answers of the val rows (-E 1). softmax frac: the routed chunks the N layers'"
          " routers send to softmax (mean over N layers and heads; — without N layers, or at T = 64, where no chunk is"
          " routed).\nEach row's commands (data: %s):" % shlex.join(gen))
    for r in rows:
        print(f"  {r['i']}: " + "\n     ".join(r["cmds"]))
        if r["error"]:
            print(f"     {r['error']}")
        if r["route"] and not r["error"]:
            print(f"     python3 dev/plot_routing.py {r['route'][0]} --ans {r['route'][1]} -o {r['dir']}/routing.png")
    if any(r["error"] for r in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
