"""
Reading and writing token shards in llm.c's format (shared by tokenize_text.py and fineweb.py).

A shard is a 1024-byte header of 256 little-endian int32 followed by the tokens as uint16:
    header[0] = 20240520   magic
    header[1] = 1          version (1 = uint16 GPT-2 tokens)
    header[2] = number of tokens that follow
    header[3:256] = 0
common/dataloader.h reads these files.

Third-party packages (numpy, tiktoken, regex, datasets; pinned in dev/data/requirements.txt) are imported
only where they are used, through need(), so every script answers --help without them and says what
to install when they are missing.
"""
import hashlib
import importlib
import sys

MAGIC, VERSION, HEADER_INTS = 20240520, 1, 256


def need(module):
    """Import a third-party module, or exit with the command that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        sys.exit(f"error: this needs the Python package '{module}': pip install -r dev/data/requirements.txt")


def write_datafile(path, tokens):
    """Write tokens (any int sequence / array with values in [0, 65535]) as an llm.c shard."""
    np = need("numpy")
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
    np = need("numpy")
    with open(path, "rb") as f:
        header = np.frombuffer(f.read(HEADER_INTS * 4), dtype="<i4")
        assert header[0] == MAGIC and header[1] == VERSION, f"{path}: not a version-{VERSION} llm.c shard"
        tokens = np.frombuffer(f.read(), dtype="<u2")
    assert len(tokens) == header[2], f"{path}: header says {header[2]} tokens, file holds {len(tokens)}"
    return tokens


def sha256_file(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()
