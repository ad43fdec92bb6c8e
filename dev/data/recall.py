"""
Synthetic recall tasks scored on their answers only: llm.c shards, the positions that are answers, a decoding table.

    python dev/data/recall.py copy --T 256 --V 128                 # -> dev/data/recall/copy/
    python dev/data/recall.py copy --T 128 --V 32 --val_lengths 512,2048 --outdir dev/data/recall/copy_t128
    python dev/data/recall.py mqar --T 256 --V 128 --pairs 16
    python dev/data/recall.py passkey --T 256 --val_lengths 1024,4096
    python dev/data/recall.py selcopy --T 256 --V 16 --tokens 16

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
    mqar       multi-query associative recall (Zoology, Arora et al. 2023): [0] k1 v1 .. kD vD, then a query region
               of T-1-2D tokens where each key k_i appears once, followed by its value v_i, at an even offset 2g drawn
               without replacement with P(g) proportional to (g+1)^(a-1) (a = --power_a, Zoology's 0.01: most queries
               close to the pairs, a long tail); every other query-region token uniform over 1..V-1. Keys are distinct
               draws from 1..V/2-1, values distinct draws from V/2..V-1 (--pairs D); answers: the D query values.
    passkey    needle in a haystack: [0] text .. " The pass key is NNNNN. " .. text "\\nThe pass key is NNNNN", the
               text a slice of Tiny Shakespeare (the train split for train rows, the val split for val rows, decoded
               from data/tinyshakespeare_char/), the needle at a uniform depth, the key --digits random digits;
               answers: the key's digits at the end of the row. One token per character: the vocabulary is the row
               start (id 0), then the distinct bytes of the text and the digits in byte order (--V is not used).
    selcopy    selective copying (Mamba, Gu & Dao 2023): [0] then a region of T-2-M tokens holding M data tokens
               (uniform over 3..V-1, --tokens M) at random positions among blanks (id 1), then the marker (id 2) and
               the M data tokens in their order; answers: those last M tokens.
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


def task_mqar(rng, rows, T, a):
    """[0] k1 v1 .. kD vD, then each key once, followed by its value, in a region of noise; the query values are the
    answers."""
    np = need("numpy")
    D, nkeys = a.pairs, a.V // 2 - 1
    Q = T - 1 - 2 * D  # the query region
    if D < 1 or D > nkeys or D > a.V - a.V // 2 or Q // 2 < D:
        sys.exit(f"error: mqar: {D} pairs need 1 <= D <= V/2-1 = {nkeys} (distinct keys and values) and a query "
                 f"region of at least 2D tokens: T-1-2D = {Q} at T = {T}")
    # D distinct keys and values per row: the first D of a random permutation (argsort of uniform draws)
    keys = 1 + np.argsort(rng.random((rows, nkeys)), axis=1)[:, :D]
    values = a.V // 2 + np.argsort(rng.random((rows, a.V - a.V // 2)), axis=1)[:, :D]
    # D distinct slots g of the Q//2 even offsets, drawn without replacement with P(g) ~ (g+1)^(a-1): the D largest of
    # log P(g) + Gumbel noise are such a draw
    slots = Q // 2
    logp = (a.power_a - 1) * np.log(np.arange(1, slots + 1))
    gaps = np.argsort(-(logp + rng.gumbel(size=(rows, slots))), axis=1)[:, :D]
    tokens = np.empty((rows, T), dtype=np.int64)
    tokens[:, 0] = 0
    tokens[:, 1:1 + 2 * D:2] = keys
    tokens[:, 2:2 + 2 * D:2] = values
    tokens[:, 1 + 2 * D:] = rng.integers(1, a.V, size=(rows, Q))
    answers = np.zeros((rows, T), dtype=np.uint8)
    r = np.arange(rows)[:, None]
    at = 1 + 2 * D + 2 * gaps
    tokens[r, at] = keys
    tokens[r, at + 1] = values
    answers[r, at + 1] = 1
    return tokens, answers


PASSKEY_NEEDLE, PASSKEY_QUERY = " The pass key is {}. ", "\nThe pass key is {}"


def passkey_text(split):
    """The bytes of the Tiny Shakespeare split (data/tinyshakespeare_char/, decoded with its table)."""
    from data_common import read_datafile, read_tokenizer_table
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "data", "tinyshakespeare_char")
    pieces, eot = read_tokenizer_table(os.path.join(root, "tokenizer.bin"))
    return b"".join(pieces[t] for t in read_datafile(os.path.join(root, f"{split}.bin")) if t != eot)


def task_passkey(rng, rows, T, a):
    """[0] haystack with the needle at a uniform depth, then the query; the key's digits at the end are the answers."""
    np = need("numpy")
    text = np.frombuffer(passkey_text(a.split), dtype=np.uint8)
    needle_len = len(PASSKEY_NEEDLE.format("0" * a.digits))
    query_len = len(PASSKEY_QUERY.format("0" * a.digits))
    H = T - 1 - needle_len - query_len  # haystack characters per row
    if a.digits < 1 or H < 1 or H > len(text):
        sys.exit(f"error: passkey: a row of {T} tokens holds the row start, the needle ({needle_len}), the query "
                 f"({query_len}) and at least 1 haystack character, and at most the {len(text)} characters of the text")
    start = rng.integers(0, len(text) - H + 1, size=rows)
    depth = rng.integers(0, H + 1, size=rows)
    key = rng.integers(0, 10, size=(rows, a.digits))
    tokens = np.empty((rows, T), dtype=np.int64)
    answers = np.zeros((rows, T), dtype=np.uint8)
    answers[:, T - a.digits:] = 1
    for r in range(rows):
        k = "".join(str(d) for d in key[r])
        hay = text[start[r]:start[r] + H]
        row = (bytes([0]) + hay[:depth[r]].tobytes() + PASSKEY_NEEDLE.format(k).encode() + hay[depth[r]:].tobytes()
               + PASSKEY_QUERY.format(k).encode())
        tokens[r] = a.byte_id[np.frombuffer(row, dtype=np.uint8)]
        tokens[r, 0] = 0
    return tokens, answers


def passkey_vocab(a):
    """The row start, then the distinct bytes of both splits of the text, the digits and the needle, in byte order."""
    used = set(passkey_text("train")) | set(passkey_text("val")) | set(b"0123456789")
    used |= set(PASSKEY_NEEDLE.encode()) | set(PASSKEY_QUERY.encode())
    order = sorted(used)
    np = need("numpy")
    a.byte_id = np.zeros(256, dtype=np.int64)
    a.byte_id[order] = np.arange(1, len(order) + 1)
    return [b"<|endoftext|>"] + [bytes([b]) for b in order], 0


def task_selcopy(rng, rows, T, a):
    """[0] M data tokens scattered among blanks, the marker, the M data tokens in order (the answers)."""
    np = need("numpy")
    M, R = a.tokens, T - 2 - a.tokens
    if a.V < 4 or M < 1 or R < M:
        sys.exit(f"error: selcopy: needs V >= 4 (got {a.V}) and 1 <= M <= (T-2)/2 data tokens (M = {M}, T = {T})")
    data = rng.integers(3, a.V, size=(rows, M))
    where = np.sort(np.argsort(rng.random((rows, R)), axis=1)[:, :M], axis=1)  # M distinct positions, in order
    tokens = np.ones((rows, T), dtype=np.int64)
    tokens[:, 0] = 0
    tokens[np.arange(rows)[:, None], 1 + where] = data
    tokens[:, 1 + R] = 2
    tokens[:, 2 + R:] = data
    answers = np.zeros((rows, T), dtype=np.uint8)
    answers[:, 2 + R:] = 1
    return tokens, answers


def selcopy_vocab(a):
    """'|' the row start, '.' the blank, '>' the marker, then the data tokens 'i '."""
    return [b"|", b".", b">"] + [f"{i} ".encode() for i in range(3, a.V)], 0


TASKS = {"copy": (task_copy, copy_vocab), "mqar": (task_mqar, copy_vocab), "passkey": (task_passkey, passkey_vocab),
         "selcopy": (task_selcopy, selcopy_vocab)}


def write_split(outdir, name, split, T, rows, a):
    """Rows of the task into OUTDIR/NAME.bin and NAME.ans (+ one trailing row-start token, never an answer)."""
    np = need("numpy")
    make, _ = TASKS[a.task]
    rng = np.random.Generator(np.random.PCG64([a.seed, SPLITS[split], T]))
    a.split = split
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
    ap.add_argument("--pairs", type=int, default=16, help="mqar: key-value pairs per row (default 16)")
    ap.add_argument("--power_a", type=float, default=0.01, help="mqar: the query distances' power law (default 0.01)")
    ap.add_argument("--digits", type=int, default=5, help="passkey: digits of the key (default 5)")
    ap.add_argument("--tokens", type=int, default=16, help="selcopy: data tokens per row (default 16)")
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
