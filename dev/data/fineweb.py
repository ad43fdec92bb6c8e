"""
FineWeb / FineWeb-Edu -> GPT-2 tokens -> llm.c-format shards (for users with internet access).

    pip install -r dev/data/requirements.txt
    python dev/data/fineweb.py --version 10B          # dev/data/fineweb10B/fineweb_{val,train}_NNNNNN.bin
    python dev/data/fineweb.py --version 10B --edu    # dev/data/edu_fineweb10B/edu_fineweb_{val,train}_NNNNNN.bin
    python dev/data/fineweb.py --local_text FILE --outdir /tmp/shards --shard_size 100000   # offline check

Source: the HuggingFace hub datasets HuggingFaceFW/fineweb and HuggingFaceFW/fineweb-edu, config
"sample-10BT" or "sample-100BT", split "train", column "text". By default it is streamed
(datasets.load_dataset(..., streaming=True) yields rows as it downloads; nothing big is kept on
disk); --download fetches the parquet files into the HF cache first (resumable), then reads them.

Each document becomes [<|endoftext|> = 50256] + its GPT-2 tokens. Documents are packed back to
back in dataset order and cut into shards of exactly --shard_size tokens (a document may straddle
two shards; the last shard holds the remainder). Shard 0 is the validation shard
(PREFIX_val_000000.bin), the others are training (PREFIX_train_000001.bin, ...). File format: see
data_common.py. Tokenization runs in a multiprocessing pool; imap keeps document order, so the
output is deterministic.

--local_text FILE replaces the hub download with a local UTF-8 file split into documents at blank
lines; everything after that (tokenizing, packing, writing) is the same code path.
"""
import argparse
import multiprocessing as mp
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from data_common import need, write_datafile  # noqa: E402
from gpt2_offline import EOT, get_encoding  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def hub_documents(edu, version, download):
    """Yield the text of every document of the FineWeb(-Edu) sample, in dataset order."""
    load_dataset = need("datasets").load_dataset  # imported here so --local_text works without `datasets`
    repo = "HuggingFaceFW/fineweb-edu" if edu else "HuggingFaceFW/fineweb"
    ds = load_dataset(repo, name=f"sample-{version}T", split="train", streaming=not download)
    for row in ds:
        yield row["text"]


def local_documents(path):
    """Yield the documents of a local text file: pieces separated by one or more blank lines."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    for doc in re.split(r"\n(?:[ \t]*\n)+", text):
        if doc.strip():
            yield doc


_enc = None  # one tiktoken Encoding per worker process


def _init_worker():
    global _enc
    _enc = get_encoding()


def tokenize(doc):
    """[EOT] + GPT-2 tokens of one document, as uint16 (GPT-2 ids are < 50257 < 2^16)."""
    np = need("numpy")
    tokens = np.array([EOT] + _enc.encode_ordinary(doc), dtype=np.int64)
    assert tokens.max() < 2**16
    return tokens.astype(np.uint16)


class ShardWriter:
    """Packs token arrays into fixed-size shards; shard 0 is 'val', the rest 'train'."""

    def __init__(self, outdir, prefix, shard_size, max_shards=None):
        self.outdir, self.prefix, self.max_shards = outdir, prefix, max_shards
        np = need("numpy")
        self.buf = np.empty(shard_size, dtype=np.uint16)
        self.fill = 0    # tokens in buf
        self.index = 0   # index of the shard being filled
        self.total = 0   # tokens written so far

    def done(self):
        return self.max_shards is not None and self.index >= self.max_shards

    def add(self, tokens):
        while len(tokens) and not self.done():
            take = min(len(tokens), len(self.buf) - self.fill)
            self.buf[self.fill:self.fill + take] = tokens[:take]
            self.fill += take
            tokens = tokens[take:]
            if self.fill == len(self.buf):
                self.flush()

    def flush(self):
        """Write the (possibly partial) current shard, if it holds any tokens."""
        if self.fill == 0 or self.done():
            return
        split = "val" if self.index == 0 else "train"
        path = os.path.join(self.outdir, f"{self.prefix}_{split}_{self.index:06d}.bin")
        write_datafile(path, self.buf[:self.fill])
        print(f"wrote {path}: {self.fill} tokens", flush=True)
        self.total += self.fill
        self.index += 1
        self.fill = 0


def main():
    ap = argparse.ArgumentParser(description="tokenize FineWeb(-Edu) into llm.c shards")
    ap.add_argument("--version", choices=["10B", "100B"], default="10B", help="which sample (default 10B)")
    ap.add_argument("--edu", action="store_true", help="FineWeb-Edu instead of FineWeb")
    ap.add_argument("--shard_size", type=int, default=10**8, help="tokens per shard (default 1e8)")
    ap.add_argument("--max_shards", type=int, default=None, help="stop after writing this many shards")
    ap.add_argument("--outdir", default=None, help="default dev/data/{edu_,}fineweb{10B,100B}")
    ap.add_argument("--procs", type=int, default=max(1, (os.cpu_count() or 2) - 1), help="tokenizer processes")
    ap.add_argument("--download", action="store_true", help="download the parquet files instead of streaming")
    ap.add_argument("--local_text", default=None, help="use this local text file (documents split at blank lines)")
    args = ap.parse_args()
    assert 0 < args.shard_size < 2**31

    prefix = "edu_fineweb" if args.edu else "fineweb"
    outdir = args.outdir or os.path.join(HERE, f"{prefix}{args.version}")
    os.makedirs(outdir, exist_ok=True)
    if args.local_text:
        docs = local_documents(args.local_text)
    else:
        docs = hub_documents(args.edu, args.version, args.download)

    writer = ShardWriter(outdir, prefix, args.shard_size, args.max_shards)
    ndocs = 0
    # Pool.imap hands documents to the workers in chunks and returns results in input order.
    # Its task pipe blocks when the workers fall behind, so a streamed dataset is not read ahead
    # without bound.
    with mp.Pool(args.procs, initializer=_init_worker) as pool:
        for tokens in pool.imap(tokenize, docs, chunksize=16):
            writer.add(tokens)
            ndocs += 1
            if writer.done():
                break
    writer.flush()
    print(f"done: {ndocs} documents, {writer.total} tokens in {writer.index} shards under {outdir}")


if __name__ == "__main__":
    main()
