#!/usr/bin/env python3
"""The softmax-budget trade-off curve (doc/model.md §7.1): trains one small model per penalty λ for the same
token budget and reports, per λ, the final validation loss and the measured softmax fraction of the NAtS-L
routers on the validation batches (mean over N layers and heads, from the trainer's last "val loss" line), plus
the mean step time, and on a recall task (shards with answer files, doc/recall.md) the answers' accuracy; with --profile (the GPU trainer's NATSL_PROFILE=1) also the time per step of the NAtS-L layers'
softmax op (attention_forward + attention_backward), the part of the N layer that grows with the softmax fraction.
Always prints the table and writes it as CSV; writes a PNG (val loss against the softmax fraction, and with
--profile against the softmax op's time, one point per λ) only when matplotlib is installed.

    python3 dev/budget_curve.py                       # CPU, tiny preset, the defaults below
    python3 dev/budget_curve.py --bin ./train_natsl_cu --lambdas 0,0.1,0.3,1 --steps 2000 --batch 8 --seq 1024 \\
        --extra "-a NNNNNN"                           # a GPU curve (any trainer flags go in --extra)

Every run starts from the same seed and sees the same batches; only -B changes (plus --extra for all runs).
"""
import argparse, csv, os, re, subprocess, sys, tempfile, time


def run(args, lam):
    out = tempfile.mkdtemp(prefix=f"natsl_budget_{lam:g}_")
    cmd = [args.bin, "-b", str(args.batch), "-t", str(args.seq), "-x", str(args.steps), "-v", str(args.steps),
           "-m", str(args.val_batches), "-s", "0", "-u", str(args.warmup), "-l", str(args.lr), "-B", str(lam),
           "-o", out] + args.extra.split()
    t0 = time.time()
    env = dict(os.environ, NATSL_PROFILE="1") if args.profile else None
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.time() - t0
    if p.returncode:
        sys.exit(f"{' '.join(cmd)} failed:\n{p.stderr}")
    vloss, frac, acc, ms, soft_ms = None, None, float("nan"), [], 0.0
    for line in p.stdout.splitlines():
        m = re.match(r"  (attention_forward|attention_backward) +([\d.]+) ms", line)
        if m:
            soft_ms += float(m.group(2))
        m = re.match(r"step (\d+): val loss ([\d.]+)(.*)", line)
        if m and int(m.group(1)) == args.steps:
            vloss = float(m.group(2))
            heads = [float(x) for part in m.group(3).split("|")[1:] if "softmax frac" in part
                     for x in part.split(":", 1)[1].split()]  # (the answers' part of a recall task's line is not one)
            frac = sum(heads) / len(heads) if heads else float("nan")
            a = re.search(r"\| answers: loss [\d.]+, accuracy ([\d.]+)", m.group(3))
            if a:
                acc = float(a.group(1))
        m = re.match(r"step +\d+/\d+ \| .*\| ([\d.]+) ms \|", line)
        if m:
            ms.append(float(m.group(1)))
    pen = [float(l.split("pen:")[1]) for l in open(os.path.join(out, "main.log")) if " pen:" in l]
    subprocess.run(["rm", "-rf", out])
    step_ms = sum(ms[1:]) / max(1, len(ms) - 1)  # the first step warms up
    return dict(lam=lam, val_loss=vloss, softmax_frac=frac, answer_acc=acc, train_pen_last=pen[-1] if pen else 0.0,
                step_ms=step_ms, softmax_op_ms=soft_ms if args.profile else float("nan"), wall_s=wall)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default="./train_natsl")
    ap.add_argument("--lambdas", default="0,0.03,0.1,0.3,1")
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--val-batches", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--extra", default="", help="more trainer flags for every run, e.g. '-a NNGN -r 1'")
    ap.add_argument("--out", default="dev/budget_curve", help="writes OUT.csv and (with matplotlib) OUT.png")
    ap.add_argument("--profile", action="store_true", help="GPU: time the softmax op (NATSL_PROFILE=1; steps run synchronized)")
    ap.add_argument("--replot", action="store_true", help="no runs: plot OUT.csv again (with --bin/--extra/... for the title)")
    ap.add_argument("--merge", action="store_true", help="keep the rows of an existing OUT.csv (same settings!) and add these")
    args = ap.parse_args()
    rows = []
    if args.merge and os.path.exists(args.out + ".csv"):
        rows = [{k: float(v) for k, v in r.items()} for r in csv.DictReader(open(args.out + ".csv"))]
    if args.replot:
        rows = [{k: float(v) for k, v in r.items()} for r in csv.DictReader(open(args.out + ".csv"))]
    print(f"{'lambda':>8} {'val loss':>9} {'softmax frac':>13} {'answer acc':>11} {'last pen':>9} {'step ms':>8} {'softmax op ms':>13} "
          f"{'wall s':>7}", flush=True)
    for lam in [] if args.replot else [float(x) for x in args.lambdas.split(",")]:
        r = run(args, lam)
        rows.append(r)
        print(f"{r['lam']:8g} {r['val_loss']:9.4f} {r['softmax_frac']:13.3f} {r['answer_acc']:11.4f} {r['train_pen_last']:9.4f} "
              f"{r['step_ms']:8.1f} {r['softmax_op_ms']:13.3f} {r['wall_s']:7.0f}", flush=True)
    rows.sort(key=lambda r: r["lam"])
    with open(args.out + ".csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {args.out}.csv")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plot (the numbers are in the CSV)")
        return
    timed = all(r["softmax_op_ms"] == r["softmax_op_ms"] for r in rows)  # no NaN: every run was profiled
    recall = all(r.get("answer_acc", float("nan")) == r.get("answer_acc", float("nan")) for r in rows)  # a recall task
    panels = [("softmax_frac", "val_loss", "softmax fraction of routed chunks (val)", "val loss")]
    if recall:
        panels.append(("softmax_frac", "answer_acc", "softmax fraction of routed chunks (val)", "answer accuracy (val)"))
    if timed:
        panels.append(("softmax_op_ms", "val_loss", "softmax op time per step, ms (NATSL_PROFILE)", "val loss"))
    fig, axes = plt.subplots(1, len(panels), figsize=(4.75 * len(panels), 3.6), squeeze=False)
    for ax, (xkey, ykey, xlabel, ylabel) in zip(axes[0], panels):
        ax.plot([r[xkey] for r in rows], [r[ykey] for r in rows], "o-")
        for r in rows:
            ax.annotate(f"λ={r['lam']:g}", (r[xkey], r[ykey]), textcoords="offset points", xytext=(4, 4), fontsize=8)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
    fig.suptitle(f"{os.path.basename(args.bin)}, {args.steps} steps x {args.batch}x{args.seq} tokens, one run per λ\n"
                 f"{args.extra}", fontsize=8)
    fig.tight_layout()
    fig.savefig(args.out + ".png", dpi=120)
    print(f"wrote {args.out}.png")


if __name__ == "__main__":
    main()
