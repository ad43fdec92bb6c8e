"""Draw one sequence's routing: the file of `-E 1 -Q FILE` (common/model_routing.inc's routing_write), the op the
router of every N layer chose for each chunk and head of the first val row, softmax or GDN (doc/recall.md).

usage: python dev/plot_routing.py route.csv [--ans copy/val_T512.ans] [-o route.png]

One panel per N layer: chunks on x, heads on y, softmax cells dark, the router's probability of softmax in each cell.
With --ans (the answer file of the val shard that -E 1 read) the row's answer positions are marked under the panels.
Without matplotlib it prints the same picture as text (# softmax, . GDN, / the last chunk, ^ a chunk with an answer).
"""
import argparse
import re
import struct
import sys
from collections import defaultdict

ANS_MAGIC = 20261128


def read_routing(path):
    """The header's T, C, H and pattern, and {layer: {(chunk, head): (softmax, p_softmax)}}."""
    with open(path) as f:
        first = f.readline()
        m = re.match(r"# routing T=(\d+) C=(\d+) H=(\d+) pattern=(\S+)", first)
        if not m:
            sys.exit(f"error: {path}: not a routing file of -E 1 -Q (first line '{first.strip()}')")
        T, C, H, pattern = int(m.group(1)), int(m.group(2)), int(m.group(3)), m.group(4)
        if f.readline().strip() != "layer,chunk,head,softmax,p_softmax":
            sys.exit(f"error: {path}: no CSV header line")
        layers = defaultdict(dict)
        for line in f:
            l, c, h, soft, p = line.strip().split(",")
            layers[int(l)][int(c), int(h)] = (int(soft), float(p))
    return T, C, H, pattern, dict(layers)


def read_answers(path, T):
    """The answer positions 1 .. T-1 of the first row of an answer file (dev/data/recall.py's format)."""
    with open(path, "rb") as f:
        h = struct.unpack("<256i", f.read(1024))
        if h[0] != ANS_MAGIC:
            sys.exit(f"error: {path}: not an answer file (magic {h[0]})")
        if h[3] != T:
            sys.exit(f"error: {path}: rows of {h[3]} tokens, the routing's T is {T}")
        row = f.read(T)
    return [j for j in range(1, T) if row[j]]


def print_ascii(T, C, H, layers, answers):
    nc = T // C - 1
    print(f"routing of the first val row, T={T}: chunks of {C} (# softmax, . GDN, / the last: both ops)")
    for l in sorted(layers):
        print(f"layer {l}")
        for h in range(H):
            cells = "".join("#" if layers[l].get((c, h), (0, 0))[0] else "." for c in range(nc))
            print(f"  head {h}  {cells}/")
    if answers is not None:
        marks = {j // C for j in answers}
        print("  answers " + "".join("^" if c in marks else " " for c in range(nc + 1)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("routing", help="the file of -E 1 -Q")
    ap.add_argument("--ans", help="the answer file (.ans) of the val shard -E 1 read: its first row's answers are marked")
    ap.add_argument("-o", "--out", default="routing.png", help="output image (default routing.png)")
    args = ap.parse_args()
    T, C, H, pattern, layers = read_routing(args.routing)
    answers = read_answers(args.ans, T) if args.ans else None
    try:  # imported here: --help and the text picture need no matplotlib
        import matplotlib
    except ImportError:
        print("matplotlib not installed: the routing as text (pip install matplotlib for a PNG)")
        print_ascii(T, C, H, layers, answers)
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    nc = T // C - 1
    fig, axes = plt.subplots(len(layers), 1, figsize=(min(16, max(6, 2 + 0.25 * nc)), 1 + 0.45 * H * len(layers) + 0.4),
                             squeeze=False, sharex=True)
    for ax, l in zip(axes[:, 0], sorted(layers)):
        grid = [[layers[l].get((c, h), (0, 0))[0] for c in range(nc)] for h in range(H)]
        ax.imshow(grid, cmap="Greys", vmin=0, vmax=1.6, aspect="auto", extent=(0, nc, H - 0.5, -0.5), interpolation="nearest")
        if nc <= 40:
            for (c, h), (soft, p) in layers[l].items():
                ax.text(c + 0.5, h, f"{p:.2f}", ha="center", va="center", fontsize=6, color="white" if soft else "black")
        ax.axvspan(nc, nc + 1, facecolor="none", hatch="//", edgecolor="0.6")  # the last chunk: both ops (5.2f)
        ax.set_xlim(0, nc + 1)
        ax.set_yticks(range(H))
        ax.set_ylabel(f"layer {l}\nhead")
        if answers:
            ax.plot([j / C for j in answers], [H - 0.5] * len(answers), "|", color="tab:red", markersize=4, clip_on=False)
    axes[-1, 0].set_xlabel(f"chunk (of {C} tokens; hatched: the last, both ops)" + ("; red: the answers" if answers else ""))
    fig.suptitle(f"routing of the first val row, T={T}, pattern {pattern}\ndark = softmax, light = GDN "
                 f"(numbers: the router's p(softmax))", fontsize=8)
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
