"""
Tokenize one local text file with GPT-2 BPE into an llm.c-format train/val pair of shards.

    python dev/data/tokenize_text.py INPUT.txt --name NAME [--val_tokens N | --val_fraction F] [--outdir data]

writes OUTDIR/NAME_train.bin and OUTDIR/NAME_val.bin (format: see data_common.py).

Choices:
* The whole file is treated as ONE document: the token stream is <|endoftext|> (50256) followed
  by the tokens of the text. (Our two small corpora have no document separators: the FineWeb-Edu
  sample glues documents together with no marker, tinyshakespeare is one play-text.) Any literal
  "<|endoftext|>" inside the text is tokenized as ordinary text, never as the special token.
* The validation split is the LAST part of the token stream (default: the last 10% of tokens);
  training gets everything before it. The split is at a token boundary, so the val shard does
  not start with <|endoftext|>.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from data_common import sha256_file, write_datafile  # noqa: E402
from gpt2_offline import EOT, get_encoding  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].strip())
    ap.add_argument("input", help="UTF-8 text file")
    ap.add_argument("--name", required=True, help="output name: writes NAME_train.bin and NAME_val.bin")
    split = ap.add_mutually_exclusive_group()
    split.add_argument("--val_tokens", type=int, help="number of tokens at the end that go to val")
    split.add_argument("--val_fraction", type=float, help="fraction of tokens at the end that go to val (default 0.1)")
    ap.add_argument("--outdir", default="data", help="output directory (default: data)")
    args = ap.parse_args()

    with open(args.input, encoding="utf-8") as f:
        text = f.read()
    tokens = [EOT] + get_encoding().encode_ordinary(text)
    n = len(tokens)
    n_val = args.val_tokens if args.val_tokens is not None else round(n * (args.val_fraction or 0.1))
    if not 0 < n_val < n:
        sys.exit(f"{args.input}: cannot take {n_val} val tokens out of {n}")

    os.makedirs(args.outdir, exist_ok=True)
    for split_name, part in (("train", tokens[:n - n_val]), ("val", tokens[n - n_val:])):
        path = os.path.join(args.outdir, f"{args.name}_{split_name}.bin")
        write_datafile(path, part)
        print(f"{path}: {len(part)} tokens, sha256 {sha256_file(path)}")


if __name__ == "__main__":
    main()
