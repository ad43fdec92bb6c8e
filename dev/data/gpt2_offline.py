"""
The GPT-2 BPE tokenizer as a tiktoken Encoding, built offline.

tiktoken.get_encoding("gpt2") downloads encoder.json and vocab.bpe from
openaipublic.blob.core.windows.net. This repository keeps byte-identical copies in
dev/data/gpt2/ (see the README there), so we build the very same Encoding from them:

    from gpt2_offline import get_encoding
    enc = get_encoding()
    enc.encode_ordinary("Hello world")   # -> [15496, 995]

No network is ever touched: tiktoken's loader only goes online for paths containing "://",
and we pass it plain local paths (and turn off its file cache while it reads them).

Run this file to self-test: it checks a few well-known ids and compares tiktoken against a
tiny independent pure-Python GPT-2 BPE (written below) on real text.
"""
import argparse
import functools
import hashlib
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from data_common import need  # noqa: E402  (tiktoken and regex are imported where they are used)

GPT2_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpt2")
ENCODER_JSON = os.path.join(GPT2_DIR, "encoder.json")
VOCAB_BPE = os.path.join(GPT2_DIR, "vocab.bpe")
# sha256 of OpenAI's originals (the same hashes tiktoken pins for its own download)
SHA256 = {
    ENCODER_JSON: "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783",
    VOCAB_BPE: "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
}
VOCAB_SIZE = 50257  # 50000 merges + 256 bytes + <|endoftext|>
EOT = 50256         # <|endoftext|>

# GPT-2's pre-tokenizer: text is first split into chunks by this regex (from openai/gpt-2,
# src/encoder.py), then BPE runs inside each chunk. Contractions, optional-space + letters,
# optional-space + digits, optional-space + other symbols, and runs of whitespace.
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def _check_sha256(path):
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    if digest != SHA256[path]:
        raise ValueError(f"{path}: sha256 {digest} does not match GPT-2's {SHA256[path]}")


@functools.lru_cache(maxsize=None)
def get_encoding():
    """The GPT-2 tiktoken Encoding (50257 tokens, <|endoftext|> = 50256), from local files only."""
    for path in (ENCODER_JSON, VOCAB_BPE):
        assert "://" not in path  # a local path: tiktoken reads it with open(), never the network
        _check_sha256(path)
    # TIKTOKEN_CACHE_DIR="" makes tiktoken read the files directly instead of copying them into
    # (or reading a stale copy from) its cache directory; restore the user's setting afterwards.
    tiktoken = need("tiktoken")
    data_gym_to_mergeable_bpe_ranks = need("tiktoken.load").data_gym_to_mergeable_bpe_ranks
    saved = os.environ.get("TIKTOKEN_CACHE_DIR")
    os.environ["TIKTOKEN_CACHE_DIR"] = ""
    try:
        ranks = data_gym_to_mergeable_bpe_ranks(
            vocab_bpe_file=VOCAB_BPE, encoder_json_file=ENCODER_JSON,
            vocab_bpe_hash=SHA256[VOCAB_BPE], encoder_json_hash=SHA256[ENCODER_JSON])
    finally:
        if saved is None:
            del os.environ["TIKTOKEN_CACHE_DIR"]
        else:
            os.environ["TIKTOKEN_CACHE_DIR"] = saved
    return tiktoken.Encoding(
        name="gpt2_offline",
        pat_str=GPT2_PATTERN,
        mergeable_ranks=ranks,
        special_tokens={"<|endoftext|>": EOT},
        explicit_n_vocab=VOCAB_SIZE,
    )


# ---------------------------------------------------------------------------------------------
# Byte <-> unicode table and a slow reference BPE, for the self-test and make_tokenizer_table.py

def bytes_to_unicode():
    """GPT-2's reversible map from the 256 byte values to printable unicode characters.

    Printable Latin-1 bytes ('!'..'~', '¡'..'¬', '®'..'ÿ') map to themselves; the other 68 bytes
    (control characters, space, ...) map to chr(256), chr(257), ... in increasing byte order.
    That is why a space shows up as 'Ġ' (chr(288)) and '\\n' as 'Ċ' in encoder.json."""
    keep = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
            + list(range(ord("®"), ord("ÿ") + 1)))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def reference_encode(text):
    """Plain GPT-2 BPE, independent of tiktoken: split with the regex, map bytes to unicode,
    then repeatedly merge the adjacent pair with the lowest merge rank. Slow; for testing."""
    with open(ENCODER_JSON, encoding="utf-8") as f:
        encoder = json.load(f)
    with open(VOCAB_BPE, encoding="utf-8") as f:
        merges = [tuple(line.split()) for line in f.read().split("\n")[1:] if line]
    rank = {pair: i for i, pair in enumerate(merges)}
    regex = need("regex")  # tiktoken depends on it; needed for \p{L}
    b2u = bytes_to_unicode()
    ids = []
    for chunk in regex.findall(GPT2_PATTERN, text):
        parts = [b2u[b] for b in chunk.encode("utf-8")]
        while len(parts) > 1:
            pairs = [(rank.get((a, b), float("inf")), i) for i, (a, b) in enumerate(zip(parts, parts[1:]))]
            best, i = min(pairs)
            if best == float("inf"):
                break
            parts[i:i + 2] = [parts[i] + parts[i + 1]]
        ids.extend(encoder[p] for p in parts)
    return ids


if __name__ == "__main__":
    argparse.ArgumentParser(description="self-test of the offline GPT-2 tokenizer: known ids, and tiktoken "
                            "against an independent pure-Python BPE on real text").parse_args()
    enc = get_encoding()
    assert enc.n_vocab == VOCAB_SIZE and enc.eot_token == EOT
    known = {"Hello world": [15496, 995], " the": [262], "\n": [198], "!": [0]}
    for s, want in known.items():
        got = enc.encode_ordinary(s)
        assert got == want, (s, got, want)
    assert enc.encode("<|endoftext|>", allowed_special="all") == [EOT]
    assert enc.encode_ordinary("<|endoftext|>") != [EOT]  # as plain text it is not special
    # compare with the reference BPE on tricky strings and on the start of real text files
    samples = ["Hello world", "  two  spaces\n\n\ttab", "don't I'll we've 123456 3.14159",
               "naïve café ☕ 日本語 emoji 🙂", "ﬁ ligature and \u00a0nbsp", ""]
    shared = "/work/shared/data"
    for name in ("fineweb_edu_sample_1MB.txt", "tinyshakespeare.txt"):
        path = os.path.join(shared, name)
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                samples.append(f.read(30000))
    for s in samples:
        got, want = enc.encode_ordinary(s), reference_encode(s)
        assert got == want, f"mismatch on {s[:40]!r}"
        assert enc.decode(got) == s
    print(f"gpt2_offline: OK (known ids, <|endoftext|>, {len(samples)} samples match the reference BPE)")
