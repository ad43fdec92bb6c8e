"""
Write the GPT-2 decoding table that common/tokenizer.h loads (default: data/gpt2_tokenizer.bin).

    python dev/data/make_tokenizer_table.py [--out data/gpt2_tokenizer.bin]

Format (little-endian):
    header: 256 int32 = [20251122 magic, 1 version, 50257 vocab size, 50256 eot id, 0, ...]
    then for each token id 0..vocab-1 in order: one uint8 length L (1..255), then L raw bytes.

The raw bytes come from encoder.json's token strings mapped back through GPT-2's
byte-to-unicode table ('Ġ' -> 0x20, ...); <|endoftext|> is stored as its 13 ASCII characters.
Every entry is cross-checked against tiktoken's own decode of that token.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from data_common import sha256_file, write_tokenizer_table  # noqa: E402
from gpt2_offline import ENCODER_JSON, EOT, VOCAB_SIZE, bytes_to_unicode, get_encoding  # noqa: E402



def main():
    ap = argparse.ArgumentParser(description="write the GPT-2 token decoding table for common/tokenizer.h")
    ap.add_argument("--out", default="data/gpt2_tokenizer.bin")
    args = ap.parse_args()

    with open(ENCODER_JSON, encoding="utf-8") as f:
        encoder = json.load(f)              # token string -> id
    u2b = {u: b for b, u in bytes_to_unicode().items()}
    pieces = [None] * VOCAB_SIZE
    for s, i in encoder.items():
        pieces[i] = bytes(u2b[c] for c in s)
    assert len(encoder) == VOCAB_SIZE and all(p is not None for p in pieces)

    enc = get_encoding()
    for i, p in enumerate(pieces):
        assert 1 <= len(p) <= 255, (i, p)
        assert p == enc.decode_single_token_bytes(i), (i, p)
    assert pieces[EOT] == b"<|endoftext|>"

    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    write_tokenizer_table(args.out, pieces, EOT)
    longest = max(len(p) for p in pieces)
    print(f"{args.out}: {VOCAB_SIZE} tokens (longest {longest} bytes), "
          f"{os.path.getsize(args.out)} bytes, sha256 {sha256_file(args.out)}")


if __name__ == "__main__":
    main()
