#!/usr/bin/env python3
"""
Imports a model in the authors' Hugging Face format (model_type neural_attention_search_linear_attn_gdn: a folder
with config.json and model.safetensors, or model.safetensors.index.json and its shards, fp32, bf16 or fp16) into a
natsl.c model file, which train_natsl and train_natsl_cu load with -e (evaluate with -E 1, generate with -N, train
on). The inverse of dev/export_hf.py; doc/export.md has the mapping.

    python3 dev/import_hf.py hf_model model.bin

Layers listed in gdn_layers become G, the others N. natsl.c builds one layer of each kind, the one their shipped
config (natsl_340M.json) selects: options away from it (no output gate or short conv, no q/k norm on the softmax
op, the softmax op before the short conv, no decay through softmax chunks, Gumbel routing, other chunk sizes, norm
eps or RoPE theta, extra value heads, ...) stop the import with one line naming the file. The vocabulary is padded to
a multiple of 128 rows, the padding rows set to 0. Needs numpy and safetensors.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from export_hf import (CHUNK, CONV, EPS, MODEL_TYPE, check_sizes, fail, model_tensors, need, numel,  # noqa: E402
                       vocab_padded, write_model)

# their config class's defaults (configuration_natsl_attn_gdn.py): what a config.json without the key means
DEFAULTS = {
    "hidden_size": 2048, "expand_v": 2.0, "use_gate": True, "use_short_conv": True, "allow_neg_eigval": False,
    "conv_size": 4, "conv_bias": False, "head_dim": 256, "num_heads": 6, "num_attn_heads": 12, "num_v_heads": None,
    "n_ops": 2, "num_nats_head": None, "nats_block_size": 64, "nats_block_agg_type": "mean",
    "nats_sample_strategy": "argmax", "ops_for_incomplete_chunks": "all", "hidden_ratio": 4, "intermediate_size": None,
    "hidden_act": "swish", "attn_qk_norm": False, "attn_with_short_conv": False, "incomplete_block_start_with_ht": True,
    "decay_for_non_gdn_blocks": False, "attn_apply_pos_encoding": True, "attn_rope_theta": 10000.0,
    "num_hidden_layers": 21, "norm_eps": 1e-6, "tie_word_embeddings": False, "vocab_size": 32000, "gdn_layers": None,
}


def read_config(folder):
    path = os.path.join(folder, "config.json")
    try:
        with open(path) as f:
            j = json.load(f)
    except OSError as e:
        fail(path, f"cannot read ({e.strerror})")
    except ValueError as e:
        fail(path, f"not JSON ({e})")
    if j.get("model_type") != MODEL_TYPE:
        fail(path, f"model_type {j.get('model_type')!r}, this script reads {MODEL_TYPE!r}")
    g = dict(DEFAULTS)
    g.update({k: v for k, v in j.items() if k in DEFAULTS})
    L = g["num_hidden_layers"]
    if not isinstance(L, int) or not 0 < L <= 64:
        fail(path, f"num_hidden_layers {L}: natsl.c holds 1 to 64 layers")
    gdn = g["gdn_layers"] or []
    if any(not isinstance(l, int) or not 0 <= l < L for l in gdn):
        fail(path, f"gdn_layers {gdn}: layer indices 0 to {L - 1}")
    pattern = "".join("G" if l in gdn else "N" for l in range(L))
    has_n = "N" in pattern
    # the options natsl.c's layers have fixed, as their shipped config sets them (doc/model.md §5, the flags)
    want = [("use_gate", True, "the SiLU output gate from g_proj"), ("use_short_conv", True, "the short convs"),
            ("conv_size", CONV, "short convs of 4 taps"), ("allow_neg_eigval", False, "beta in (0, 1)"),
            ("hidden_act", "swish", "the SwiGLU MLP"), ("num_v_heads", None, "as many value heads as key heads")]
    if has_n:
        want += [("conv_bias", False, "no conv bias"), ("n_ops", 2, "two ops (softmax, GDN)"),
                 ("nats_block_size", CHUNK, "64-token chunks"), ("nats_block_agg_type", "mean", "mean-pooled routing"),
                 ("nats_sample_strategy", "argmax", "argmax routing (gumble draws noise at inference)"),
                 ("ops_for_incomplete_chunks", "all", "both ops inside a chunk"),
                 ("attn_qk_norm", True, "the RMSNorm of the softmax op's q and k"),
                 ("attn_with_short_conv", True, "the softmax op's q, k, v after the short convs"),
                 ("incomplete_block_start_with_ht", True, "a chunk's own queries reading the committed state"),
                 ("decay_for_non_gdn_blocks", True, "the state decaying through softmax chunks")]
    for key, value, what in want:
        if g[key] != value and not (value is None and g[key] == g["num_heads"]):
            fail(path, f"{key} is {g[key]!r}: natsl.c's layers have {what} ({key} {json.dumps(value)})")
    if g["num_nats_head"] not in (None, g["num_heads"]):
        fail(path, f"num_nats_head is {g['num_nats_head']}: natsl.c routes one NAtS head per GDN head ({g['num_heads']})")
    if abs(g["norm_eps"] - EPS) > 1e-12:
        fail(path, f"norm_eps is {g['norm_eps']}: natsl.c's norms use {EPS}")
    rope = int(bool(g["attn_apply_pos_encoding"]) and has_n)
    if rope and g["attn_rope_theta"] != 10000:
        fail(path, f"attn_rope_theta is {g['attn_rope_theta']}: natsl.c's RoPE has theta 10000")
    dk, D, V = g["head_dim"], g["hidden_size"], g["vocab_size"]
    dv = int(dk * g["expand_v"])
    if abs(dk * g["expand_v"] - dv) > 1e-6:
        fail(path, f"head_dim {dk} times expand_v {g['expand_v']} is not a whole value head")
    F = g["intermediate_size"]
    if F is None:  # fla's GatedMLP: 2/3 of hidden_ratio * D, rounded up to a multiple of 256
        F = int(D * (g["hidden_ratio"] or 4) * 2 / 3)
        F = 256 * ((F + 255) // 256)
    c = {"D": D, "L": L, "H": g["num_heads"], "dk": dk, "dv": dv, "Ha": g["num_attn_heads"], "F": F, "V": V,
         "Vp": vocab_padded(V), "rope": rope, "gate_act": 0, "pattern": pattern}
    why = check_sizes(c)
    if why:
        fail(path, f"natsl.c cannot hold this model: {why}")
    return c, bool(g["tie_word_embeddings"])


def read_tensors(folder):
    """{name: (float32 array, file)} of the folder's safetensors file(s)."""
    np = need("numpy")
    st = need("safetensors")
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    elif os.path.exists(os.path.join(folder, "model.safetensors")):
        files = ["model.safetensors"]
    else:
        fail(folder, "no model.safetensors (nor model.safetensors.index.json): other weight formats "
             "(pytorch_model.bin) need torch; save with safe_serialization=True")
    out = {}
    for name in files:
        path = os.path.join(folder, name)
        try:
            with open(path, "rb") as f:
                items = st.deserialize(f.read())
        except OSError as e:
            fail(path, f"cannot read ({e.strerror})")
        except Exception as e:  # safetensors' own error type
            fail(path, f"not a safetensors file ({e})")
        for key, t in items:
            raw = bytes(t["data"])
            if t["dtype"] == "F32":
                x = np.frombuffer(raw, dtype="<f4")
            elif t["dtype"] == "BF16":
                x = (np.frombuffer(raw, dtype="<u2").astype("<u4") << 16).view("<f4")
            elif t["dtype"] == "F16":
                x = np.frombuffer(raw, dtype="<f2").astype("<f4")
            else:
                fail(path, f"{key} is {t['dtype']}: natsl.c reads F32, BF16 or F16 weights")
            out[key] = (x.reshape(t["shape"]), path)
    return out


def import_hf(folder, out_path):
    np = need("numpy")
    c, tied = read_config(folder)
    tensors = read_tensors(folder)
    if tied and "lm_head.weight" not in tensors and "model.embeddings.weight" in tensors:
        tensors["lm_head.weight"] = tensors["model.embeddings.weight"]  # natsl.c's head is its own copy
    parts_all = [p for _, _, parts in model_tensors(c) for p in parts]
    names = {n for n, _, _ in parts_all}
    extra = sorted(set(tensors) - names)
    if extra:
        fail(tensors[extra[0]][1], f"{len(extra)} tensor(s) natsl.c's model has no place for, first {extra[0]}")
    w = np.zeros(sum(numel(s) for _, s, _ in model_tensors(c)), dtype="<f4")
    off = 0
    for _, shape, parts in model_tensors(c):
        t = w[off:off + numel(shape)].reshape(shape[0], -1)
        r = 0
        for name, rows, s in parts:
            if name not in tensors:
                fail(os.path.join(folder, "config.json"), f"its model has {name} {list(s)}, the weights lack it")
            x, path = tensors[name]
            if tuple(x.shape) != tuple(s):
                fail(path, f"{name} is {list(x.shape)}, the config makes it {list(s)}")
            t[r:r + rows] = x.reshape(rows, -1)
            r += rows
        off += numel(shape)
    bad = np.flatnonzero(~np.isfinite(w))
    if bad.size:
        fail(folder, f"a weight is {w[bad[0]]} (natsl.c refuses non-finite parameters)")
    write_model(out_path, c, w)
    return c


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("folder", help="the HF folder (config.json, model.safetensors)")
    p.add_argument("model", help="the natsl.c model file to write (model_*.bin)")
    a = p.parse_args()
    c = import_hf(a.folder, a.model)
    print(f"wrote {a.model}: pattern {c['pattern']}, D={c['D']} L={c['L']} H={c['H']} dk={c['dk']} dv={c['dv']} "
          f"Ha={c['Ha']} F={c['F']} V={c['V']} (padded to {c['Vp']}) rope={c['rope']}")


if __name__ == "__main__":
    main()
