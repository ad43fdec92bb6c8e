"""
Synthetic recall tasks scored on their answers only: llm.c shards, the positions that are answers, a decoding table.

    python dev/data/recall.py copy --T 256 --V 128                 # -> dev/data/recall/copy/
    python dev/data/recall.py copy --T 128 --V 32 --val_lengths 512,2048 --outdir dev/data/recall/copy_t128

Each run writes, in OUTDIR (default dev/data/recall/TASK):
    train.bin, val.bin      llm.c shards (data_common.py): rows of exactly T tokens, one after the other, plus one
                            trailing row-start token, so the train shard holds train_rows*T + 1 tokens
    train.ans, val.ans      which tokens are answers (format below), one per shard
    val_T<L>.bin/.ans       for each length L of --val_lengths: the same task in rows of L tokens (evaluation-only
                            runs at lengths up to 16x the training T)
    tokenizer.bin           the decoding table of the task's vocabulary (common/tokenizer.h): the trainers take V
                            from it, and samples start from its eot id, the row-start token

Rows and batches. common/dataloader.h cuts a batch of B rows of T tokens at a position that advances by B*T from 0,
so with -t T every training row is exactly one task row (a task row never straddles two batch rows); the input of row
r is its tokens r*T .. r*T+T-1, their targets the tokens one further. The first token of every row is the row-start
token, which is never an answer, so a row's answers are predicted from that row alone.

Answer file (.ans, beside each shard, the shard's name with .bin replaced by .ans):
    header: 256 little-endian int32 = [20261128 magic, 1 version, N tokens, row length T, number of answers, 0, ...]
    then N uint8, one per token of the shard: 1 where the token is an answer (its prediction is scored), else 0.
A target at token index j of the shard is scored when byte j is 1. The row length lets the trainer refuse a -t that
does not match the rows.

Tasks (every row starts with token 0; all draws from numpy's PCG64 seeded by (seed, split, row length): the same
command writes the same bytes; train and val rows come from different streams):
    copy       [0] x [0] x: x = T/2-1 tokens uniform over 1..V-1; answers: the second x (T/2-1 per row). Given
               memory the second copy is free: the loss averaged over all positions then has the floor
               (T/2-1) ln(V-1) / T, without memory 2 (T/2-1) ln(V-1) / T (T=256, V=128: 2.403 and 4.806).
"""
import argparse
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from data_common import header_bytes, need, write_datafile, write_tokenizer_table  # noqa: E402

ANS_MAGIC, ANS_VERSION = 20261128, 1
SPLITS = {"train": 0, "val": 1}


def write_answers(path, answers, T):
    """Write the answer file of a shard: answers is a 0/1 uint8 array, one entry per token of the shard."""
    np = need("numpy")
    answers = np.asarray(answers, dtype=np.uint8)
    assert answers.ndim == 1 and answers.max(initial=0) <= 1
    with open(path, "wb") as f:
        f.write(header_bytes(ANS_MAGIC, ANS_VERSION, len(answers), T, int(answers.sum())))
        f.write(answers.tobytes())


def read_answers(path):
    """(answers as bytes, row length T) of an answer file, checking its header."""
    with open(path, "rb") as f:
        header = struct.unpack("<256i", f.read(1024))
        body = f.read()
    assert header[0] == ANS_MAGIC and header[1] == ANS_VERSION, f"{path}: not an answer file"
    assert len(body) == header[2], f"{path}: header says {header[2]} tokens, file holds {len(body)}"
    assert sum(body) == header[4], f"{path}: header says {header[4]} answers, file holds {sum(body)}"
    return body, header[3]


# ---- the tasks: each returns (tokens [rows, T], answers [rows, T]) for `rows` rows of T tokens ---------------------

def task_copy(rng, rows, T, a):
    """[0] x [0] x, x uniform over 1..V-1; the second x are the answers."""
    np = need("numpy")
    if T % 2 or T < 4:
        sys.exit(f"error: copy needs an even row length of at least 4 (got {T})")
    n = T // 2 - 1
    x = rng.integers(1, a.V, size=(rows, n), dtype=np.int64)
    zero = np.zeros((rows, 1), dtype=np.int64)
    tokens = np.concatenate([zero, x, zero, x], axis=1)
    answers = np.zeros((rows, T), dtype=np.uint8)
    answers[:, T // 2 + 1:] = 1
    return tokens, answers


def copy_vocab(a):
    """Pieces of the numbered vocabularies: id 0 (the row start) prints as '|', id i as 'i '."""
    return [b"|"] + [f"{i} ".encode() for i in range(1, a.V)], 0


TASKS = {"copy": (task_copy, copy_vocab)}


def write_split(outdir, name, split, T, rows, a):
    """Rows of the task into OUTDIR/NAME.bin and NAME.ans (+ one trailing row-start token, never an answer)."""
    np = need("numpy")
    make, _ = TASKS[a.task]
    rng = np.random.Generator(np.random.PCG64([a.seed, SPLITS[split], T]))
    tokens, answers = make(rng, rows, T, a)
    assert tokens.shape == (rows, T) and answers.shape == (rows, T)
    assert (tokens[:, 0] == a.row_start).all() and not answers[:, 0].any()
    tokens = np.append(tokens.reshape(-1), a.row_start)
    answers = np.append(answers.reshape(-1), 0)
    assert 0 <= tokens.min() and tokens.max() < a.vocab_size
    path = os.path.join(outdir, f"{name}.bin")
    write_datafile(path, tokens)
    write_answers(os.path.join(outdir, f"{name}.ans"), answers, T)
    print(f"{path}: {rows} rows of {T} tokens, {int(answers.sum())} answers (+ .ans)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].strip(),
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("task", choices=sorted(TASKS), help="which task")
    ap.add_argument("--T", type=int, default=256, help="row length of train.bin and val.bin, the trainer's -t (default 256)")
    ap.add_argument("--V", type=int, default=128, help="vocabulary size of the numbered tasks (default 128)")
    ap.add_argument("--train_rows", type=int, default=65536, help="rows in train.bin (default 65536)")
    ap.add_argument("--val_rows", type=int, default=512, help="rows in each val shard (default 512)")
    ap.add_argument("--val_lengths", default="", help="comma-separated longer row lengths: val_T<L>.bin each (default none)")
    ap.add_argument("--seed", type=int, default=1234, help="seed (default 1234)")
    ap.add_argument("--outdir", help="output directory (default dev/data/recall/TASK)")
    a = ap.parse_args()
    lengths = [int(s) for s in a.val_lengths.split(",") if s.strip()]
    if not 2 <= a.V <= 65536:
        sys.exit(f"error: --V {a.V}: the vocabulary must hold 2 to 65536 tokens")
    if a.train_rows < 1 or a.val_rows < 1 or a.T < 1 or any(L < 1 for L in lengths):
        sys.exit("error: rows and lengths must be positive")
    pieces, a.row_start = TASKS[a.task][1](a)
    a.vocab_size = len(pieces)
    outdir = a.outdir or os.path.join("dev", "data", "recall", a.task)
    os.makedirs(outdir, exist_ok=True)
    write_tokenizer_table(os.path.join(outdir, "tokenizer.bin"), pieces, a.row_start)
    print(f"{os.path.join(outdir, 'tokenizer.bin')}: {a.vocab_size} tokens, row start / eot = {a.row_start}")
    write_split(outdir, "train", "train", a.T, a.train_rows, a)
    write_split(outdir, "val", "val", a.T, a.val_rows, a)
    for L in lengths:
        write_split(outdir, f"val_T{L}", "val", L, a.val_rows, a)


if __name__ == "__main__":
    main()
