"""
Reading and writing llm.c token shards and the decoding tables of common/tokenizer.h (shared by the
dev/data scripts). Standard library only.

A shard is a 1024-byte header of 256 little-endian int32 followed by the tokens as uint16:
    header[0] = 20240520   magic
    header[1] = 1          version (1 = uint16 tokens)
    header[2] = number of tokens that follow
    header[3:256] = 0
common/dataloader.h reads these files.

A decoding table is a header of 256 little-endian int32 [20251122 magic, 1 version, vocab size, eot id, 0, ...],
then for each token id 0..vocab-1 in order: one uint8 length L (1..255), then the token's L raw bytes.
common/tokenizer.h reads these files.

Third-party packages (numpy, tiktoken, regex, datasets; pinned in dev/data/requirements.txt) are imported
only where they are used, through need(), so every script answers --help without them and says what
to install when they are missing.
"""
import array
import hashlib
import importlib
import struct
import sys

MAGIC, VERSION, HEADER_INTS = 20240520, 1, 256
TOKENIZER_MAGIC, TOKENIZER_VERSION = 20251122, 1


def need(module):
    """Import a third-party module, or exit with the command that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        sys.exit(f"error: this needs the Python package '{module}': pip install -r dev/data/requirements.txt")


def header_bytes(*fields):
    """A 1024-byte header: the given int32 fields, then zeros."""
    return struct.pack(f"<{HEADER_INTS}i", *fields, *[0] * (HEADER_INTS - len(fields)))


def write_datafile(path, tokens):
    """Write tokens (a list of ints, or a numpy array, with values in [0, 65535]) as an llm.c shard."""
    assert len(tokens) < 2**31, "token count must fit in the int32 header"
    if hasattr(tokens, "astype"):  # numpy: converted without a Python loop over the tokens
        assert len(tokens) == 0 or (tokens.min() >= 0 and tokens.max() < 2**16), "tokens must fit in uint16"
        body = tokens.astype("<u2").tobytes()
    else:
        body = struct.pack(f"<{len(tokens)}H", *tokens)  # (struct.error for a value outside uint16)
    with open(path, "wb") as f:
        f.write(header_bytes(MAGIC, VERSION, len(tokens)))
        f.write(body)


def read_datafile(path):
    """Read an llm.c shard back as a list of ints, checking its header."""
    with open(path, "rb") as f:
        header = struct.unpack(f"<{HEADER_INTS}i", f.read(HEADER_INTS * 4))
        body = f.read()
    assert header[0] == MAGIC and header[1] == VERSION, f"{path}: not a version-{VERSION} llm.c shard"
    assert len(body) == 2 * header[2], f"{path}: header says {header[2]} tokens, file holds {len(body) // 2}"
    return list(struct.unpack(f"<{header[2]}H", body))


def write_tokenizer_table(path, pieces, eot):
    """Write the decoding table of the tokens whose raw bytes are pieces[id] (each 1 to 255 bytes)."""
    assert all(1 <= len(p) <= 255 for p in pieces) and 0 <= eot < len(pieces)
    with open(path, "wb") as f:
        f.write(header_bytes(TOKENIZER_MAGIC, TOKENIZER_VERSION, len(pieces), eot))
        for p in pieces:
            f.write(bytes([len(p)]) + p)


def read_tokenizer_table(path):
    """The pieces (raw bytes per token id) and the eot id of a decoding table, checking its format."""
    with open(path, "rb") as f:
        data = f.read()
    magic, version, vocab, eot = struct.unpack("<4i", data[:16])
    assert magic == TOKENIZER_MAGIC and version == TOKENIZER_VERSION, f"{path}: not a decoding table"
    pieces, at = [], HEADER_INTS * 4
    for _ in range(vocab):
        n = data[at]
        pieces.append(data[at + 1:at + 1 + n])
        at += 1 + n
    assert at == len(data), f"{path}: {len(data) - at} bytes after the last token"
    return pieces, eot


def sha256_file(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()
