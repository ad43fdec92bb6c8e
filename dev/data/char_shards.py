"""
Character-level shards of one text file, with their decoding table: a data set with its own vocabulary.

    python dev/data/char_shards.py [--text FILE] [--val_fraction F] [--outdir data/tinyshakespeare_char]

writes OUTDIR/train.bin and OUTDIR/val.bin (llm.c shards, see data_common.py) and OUTDIR/tokenizer.bin
(the decoding table of common/tokenizer.h). The trainers take the vocabulary from a tokenizer.bin in the
directory of the train shards (without one, the ids are GPT-2's).

Without --text it writes the main job's data, Tiny Shakespeare, offline: the text is rebuilt by decoding
data/tinyshakespeare_train.bin and _val.bin (its GPT-2 tokens) with data/gpt2_tokenizer.bin and checked
against the sha256 of the public file (data/README.md).

Choices (standard library only):
* A token is one byte of the text (for ASCII text, one character). The ids are the distinct bytes of the
  text in byte order, then <|endoftext|> as the last id: Tiny Shakespeare has 65 distinct bytes, so the
  vocabulary is 66.
* The whole file is ONE document: the stream is <|endoftext|> followed by the text's bytes (as in the
  GPT-2 shards of tokenize_text.py); samples start from <|endoftext|>.
* The validation split is the LAST part of the stream (default the last 10%), training everything before.
"""
import argparse
import hashlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from data_common import read_datafile, read_tokenizer_table, sha256_file, write_datafile, write_tokenizer_table  # noqa: E402

TINYSHAKESPEARE_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
EOT_PIECE = b"<|endoftext|>"


def tinyshakespeare_from_gpt2_shards():
    """The bytes of Tiny Shakespeare, decoded from the embedded GPT-2 shards (<|endoftext|> + the file)."""
    pieces, eot = read_tokenizer_table("data/gpt2_tokenizer.bin")
    tokens = read_datafile("data/tinyshakespeare_train.bin") + read_datafile("data/tinyshakespeare_val.bin")
    assert tokens[0] == eot and eot not in tokens[1:], "expected one <|endoftext|>, at the start"
    return b"".join(pieces[t] for t in tokens[1:])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].strip())
    ap.add_argument("--text", help="text file (default: Tiny Shakespeare, rebuilt from data/tinyshakespeare_*.bin)")
    ap.add_argument("--val_fraction", type=float, default=0.1, help="fraction of the stream at the end that goes to val (default 0.1)")
    ap.add_argument("--outdir", default="data/tinyshakespeare_char", help="output directory (default: data/tinyshakespeare_char)")
    args = ap.parse_args()

    if args.text:
        with open(args.text, "rb") as f:
            text = f.read()
    else:
        text = tinyshakespeare_from_gpt2_shards()
        assert hashlib.sha256(text).hexdigest() == TINYSHAKESPEARE_SHA256, "decoded text is not Tiny Shakespeare"
        print(f"Tiny Shakespeare rebuilt from the GPT-2 shards: {len(text)} bytes, sha256 {TINYSHAKESPEARE_SHA256}")
    vocab = sorted(set(text))
    eot = len(vocab)
    pieces = [bytes([b]) for b in vocab] + [EOT_PIECE]
    rank = {b: i for i, b in enumerate(vocab)}
    tokens = [eot] + [rank[b] for b in text]
    n = len(tokens)
    n_val = round(n * args.val_fraction)
    if not 0 < n_val < n:
        sys.exit(f"error: cannot take {n_val} val tokens out of {n}")

    os.makedirs(args.outdir, exist_ok=True)
    path = os.path.join(args.outdir, "tokenizer.bin")
    write_tokenizer_table(path, pieces, eot)
    print(f"{path}: {len(pieces)} tokens ({eot} distinct bytes, then <|endoftext|> = {eot}), sha256 {sha256_file(path)}")
    for split, part in (("train", tokens[:n - n_val]), ("val", tokens[n - n_val:])):
        path = os.path.join(args.outdir, f"{split}.bin")
        write_datafile(path, part)
        print(f"{path}: {len(part)} tokens, sha256 {sha256_file(path)}")


if __name__ == "__main__":
    main()
