"""
Reading and writing token shards in llm.c's format (shared by tokenize_text.py and fineweb.py).

A shard is a 1024-byte header of 256 little-endian int32 followed by the tokens as uint16:
    header[0] = 20240520   magic
    header[1] = 1          version (1 = uint16 GPT-2 tokens)
    header[2] = number of tokens that follow
    header[3:256] = 0
common/dataloader.h reads these files.
"""
import hashlib

import numpy as np

MAGIC, VERSION, HEADER_INTS = 20240520, 1, 256


def write_datafile(path, tokens):
    """Write tokens (any int sequence / array with values in [0, 65535]) as an llm.c shard."""
    tokens = np.asarray(tokens)
    assert tokens.ndim == 1 and len(tokens) < 2**31, "token count must fit in the int32 header"
    assert len(tokens) == 0 or (tokens.min() >= 0 and tokens.max() < 2**16), "tokens must fit in uint16"
    header = np.zeros(HEADER_INTS, dtype="<i4")
    header[0], header[1], header[2] = MAGIC, VERSION, len(tokens)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(tokens.astype("<u2").tobytes())


def read_datafile(path):
    """Read an llm.c shard back as a uint16 numpy array, checking its header."""
    with open(path, "rb") as f:
        header = np.frombuffer(f.read(HEADER_INTS * 4), dtype="<i4")
        assert header[0] == MAGIC and header[1] == VERSION, f"{path}: not a version-{VERSION} llm.c shard"
        tokens = np.frombuffer(f.read(), dtype="<u2")
    assert len(tokens) == header[2], f"{path}: header says {header[2]} tokens, file holds {len(tokens)}"
    return tokens


def sha256_file(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()
