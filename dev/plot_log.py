"""Plot one or more natsl.c runs from their main.log files: train/val loss and the softmax fraction of
each NAtS-L layer.

usage: python dev/plot_log.py out/main.log [other/main.log ...] -o runs.png     (pip install matplotlib)
"""
import argparse
import os
import sys
from collections import defaultdict


def read_log(path):
    """main.log lines are 's:<step> <key>:<value>' (sfr values are '<layer>:<fraction>')."""
    trl, tel, sfr = {}, {}, defaultdict(dict)
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) != 2 or not parts[0].startswith("s:"):
                continue
            step = int(parts[0][2:])
            key, _, value = parts[1].partition(":")
            if key == "trl":
                trl[step] = float(value)
            elif key == "tel":
                tel[step] = float(value)
            elif key == "sfr":
                layer, _, frac = value.partition(":")
                sfr[int(layer)][step] = float(frac)
    return trl, tel, sfr


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("logs", nargs="+", help="main.log files")
    ap.add_argument("-o", "--out", default="runs.png", help="output image")
    args = ap.parse_args()
    try:  # imported here: --help and the log checks need no matplotlib
        import matplotlib
    except ImportError:
        sys.exit("error: plotting needs matplotlib (pip install matplotlib)")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_loss, ax_sfr) = plt.subplots(1, 2, figsize=(12, 4.5))
    for path in args.logs:
        name = os.path.basename(os.path.dirname(os.path.abspath(path)))
        trl, tel, sfr = read_log(path)
        line, = ax_loss.plot(sorted(trl), [trl[s] for s in sorted(trl)], alpha=0.5, label=f"{name} train")
        ax_loss.plot(sorted(tel), [tel[s] for s in sorted(tel)], "o-", color=line.get_color(), label=f"{name} val")
        for layer in sorted(sfr):
            steps = sorted(sfr[layer])
            ax_sfr.plot(steps, [sfr[layer][s] for s in steps], label=f"{name} layer {layer}")
    ax_loss.set(xlabel="step", ylabel="loss", title="loss")
    ax_sfr.set(xlabel="step", ylabel="fraction of chunks", title="routed to softmax attention", ylim=(-0.05, 1.05))
    ax_loss.legend()
    ax_sfr.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(args.out, dpi=100)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
