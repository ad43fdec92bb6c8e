#!/usr/bin/env python3
"""
Exports a natsl.c model file (model_*.bin, common/checkpoint.h) to the authors' Hugging Face format: a folder with
config.json (model_type neural_attention_search_linear_attn_gdn, the fields of their natsl_340M.json) and
model.safetensors (their parameter names and shapes), which their NeuralAttentionSearchLinearAttnGDNForCausalLM
(automl/NeuralAttentionSearchLinear) loads with from_pretrained. doc/export.md has the mapping and the evaluation.

    python3 dev/export_hf.py out/model_00005000.bin hf_model            # fp32, as the checkpoint
    python3 dev/export_hf.py out/model_00005000.bin hf_model --dtype bf16

Their model has N layers (their NAtS-L layer) and G layers (fla's GatedDeltaNet, listed in gdn_layers), the SiLU
output gate and no vocabulary padding: A and S layers, the sigmoid gate (-C sigmoid) and a pattern without an N
layer stop the export with one line naming the file; the padding rows of the embedding and the head (Vp - V of
them, never read by natsl.c's outputs) are left out. dev/import_hf.py is the way back. Needs numpy and safetensors.
"""
import argparse
import json
import os
import sys

MODEL_MAGIC, MODEL_VERSION = 20261122, 1
CHUNK, CONV, EPS = 64, 4, 1e-6       # common/config.h: NATSL_CHUNK, NATSL_CONV, NATSL_EPS
MAX_LAYERS, MAX_DIM, MAX_VOCAB = 64, 65536, 1 << 20
GPT2_VOCAB, GPT2_EOT = 50257, 50256
GATE_SILU, GATE_SIGMOID = 0, 1
MODEL_TYPE = "neural_attention_search_linear_attn_gdn"
ARCH = "NeuralAttentionSearchLinearAttnGDNForCausalLM"


def need(module):
    import importlib
    try:
        return importlib.import_module(module)
    except ImportError:
        sys.exit(f"error: this needs the Python package '{module}': pip install numpy safetensors")


def fail(path, msg):
    sys.exit(f"error: {path}: {msg}")


def vocab_padded(V):
    return (V + 127) // 128 * 128


# ---------------------------------------------------------------------------------------------------------------
# the parameter mapping (doc/export.md): natsl.c's flat buffer (common/config.h param_tensors) against their names

def layer_tensors(c, kind):
    """The tensors of one G or N layer in buffer order: (natsl.c slot, its shape, parts); each part (HF name under
    model.layers.<l>., rows, HF shape) takes the next rows of the slot, reshaped (the convs' [C, 4] to [C, 1, 4])."""
    D, H, dk, dv, Ha, F = c["D"], c["H"], c["dk"], c["dv"], c["Ha"], c["F"]
    K, Vt = H * dk, H * dv
    dka, dva = K // Ha, Vt // Ha
    t = [("ln_mix", (D,), [("attn_norm.weight", D, (D,))]),
         ("wqkv", (2 * K + Vt, D), [("attn.q_proj.weight", K, (K, D)), ("attn.k_proj.weight", K, (K, D)),
                                    ("attn.v_proj.weight", Vt, (Vt, D))]),
         ("wg", (Vt, D), [("attn.g_proj.weight", Vt, (Vt, D))]),
         ("wab", (2 * H, D), [("attn.a_proj.weight", H, (H, D)), ("attn.b_proj.weight", H, (H, D))]),
         ("a_log", (H,), [("attn.A_log", H, (H,))]),
         ("dt_bias", (H,), [("attn.dt_bias", H, (H,))]),
         ("conv", (2 * K + Vt, CONV), [("attn.q_conv1d.weight", K, (K, 1, CONV)), ("attn.k_conv1d.weight", K, (K, 1, CONV)),
                                       ("attn.v_conv1d.weight", Vt, (Vt, 1, CONV))])]
    if kind == "G":
        t.append(("o_norm", (dv,), [("attn.o_norm.weight", dv, (dv,))]))
    else:
        t += [("wr", (2 * H, D), [("attn.nats_layer.weight", 2 * H, (2 * H, D))]),
              ("wow", (2 * Ha, K), [("attn.nats_out_weights_layer.weight", 2 * Ha, (2 * Ha, K))]),
              ("qn", (dka,), [("attn.q_norm.weight", dka, (dka,))]),
              ("kn", (dka,), [("attn.k_norm.weight", dka, (dka,))]),
              ("n1", (dva,), [("attn.o_norm.weight1", dva, (dva,))]),
              ("n2", (dva,), [("attn.o_norm.weight2", dva, (dva,))])]
    t += [("wo", (D, Vt), [("attn.o_proj.weight", D, (D, Vt))]),
          ("ln_mlp", (D,), [("mlp_norm.weight", D, (D,))]),
          ("wgu", (2 * F, D), [("mlp.gate_proj.weight", F, (F, D)), ("mlp.up_proj.weight", F, (F, D))]),
          ("wdown", (D, F), [("mlp.down_proj.weight", D, (D, F))])]
    return t


def model_tensors(c):
    """Every tensor of a model of G and N layers in buffer order: (natsl.c name, shape, parts) as layer_tensors, the
    HF names in full. The embedding's and the head's rows past the parts (Vp - V) are natsl.c's padding."""
    D, V, Vp = c["D"], c["V"], c["Vp"]
    t = [("wte", (Vp, D), [("model.embeddings.weight", V, (V, D))])]
    for l, kind in enumerate(c["pattern"]):
        for slot, shape, parts in layer_tensors(c, kind):
            t.append((f"l{l}.{slot}", shape, [(f"model.layers.{l}.{n}", r, s) for n, r, s in parts]))
    t += [("ln_f", (D,), [("model.norm.weight", D, (D,))]),
          ("head", (Vp, D), [("lm_head.weight", V, (V, D))])]
    return t


def numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def check_sizes(c):
    """common/config.h's config_check for G and N layers; None or what is wrong."""
    D, L, H, dk, dv, Ha, F = (c[k] for k in ("D", "L", "H", "dk", "dv", "Ha", "F"))
    if min(D, L, H, dk, dv, Ha, F) <= 0:
        return "sizes must be positive"
    if max(D, H, dk, dv, Ha, F) > MAX_DIM:
        return "a size exceeds 65536"
    if L > MAX_LAYERS:
        return f"{L} layers, natsl.c holds at most {MAX_LAYERS}"
    if Ha % H:
        return "softmax heads must be a multiple of GDN heads"
    if (H * dk) % Ha or (H * dv) % Ha:
        return "key/value widths must split evenly into softmax heads"
    if c["rope"] and (H * dk // Ha) % 2:
        return "RoPE needs an even softmax head dim"
    if c["V"] <= 0 or c["Vp"] < c["V"] or c["Vp"] > MAX_VOCAB:
        return "padded vocabulary must hold the vocabulary (at most 2^20 rows)"
    return None


# ---------------------------------------------------------------------------------------------------------------
# natsl.c model files

def read_header(path):
    """The config of a model file (common/checkpoint.h): a dict with D, L, H, dk, dv, Ha, F, V, Vp, rope, gate_act,
    pattern and the header's parameter count n."""
    np = need("numpy")
    try:
        with open(path, "rb") as f:
            raw = f.read(1024)
    except OSError as e:
        fail(path, f"cannot read ({e.strerror})")
    if len(raw) < 1024:
        fail(path, f"file too short for a checkpoint header ({len(raw)} of 1024 bytes)")
    h = np.frombuffer(raw, dtype="<i4")
    if h[0] != MODEL_MAGIC:
        fail(path, f"not a natsl model checkpoint (bad magic {h[0]})")
    if h[1] != MODEL_VERSION:
        fail(path, f"checkpoint version {h[1]}, this script reads {MODEL_VERSION}")
    if h[12] != CHUNK:
        fail(path, f"chunk size {h[12]}, natsl.c uses {CHUNK}")
    c = dict(zip(("D", "L", "H", "dk", "dv", "Ha", "F", "V", "Vp", "rope"), (int(x) for x in h[2:12])))
    c["gate_act"] = int(h[15])
    c["n"] = int(h[13]) | (int(h[14]) << 31)
    if not 0 < c["L"] <= MAX_LAYERS:
        fail(path, f"bad layer count {c['L']}")
    codes = [int(x) for x in h[32:32 + c["L"]]]
    if any(x not in map(ord, "GANS") for x in codes):
        fail(path, "a layer kind code in the header is not G, A, N or S")
    c["pattern"] = "".join(map(chr, codes))
    if any(h[i] for i in range(16, 256) if not 32 <= i < 32 + c["L"]):
        fail(path, "a reserved header field is not 0 (corrupt or from another program)")
    return c


def check_exportable(c, path):
    """One line naming the file for what the authors' model cannot express."""
    pat = c["pattern"]
    if "S" in pat:
        fail(path, f"pattern {pat} has an S layer (layer selection, doc/model.md §7.3) at layer {pat.index('S')}: their "
             "model has none; freeze it first: ./train_natsl -e FILE -f FROZEN.bin")
    if "A" in pat:
        fail(path, f"pattern {pat} has an A layer (plain softmax attention) at layer {pat.index('A')}: their model's "
             "layers are NAtS-L or, in gdn_layers, Gated DeltaNet, and nothing else")
    if "N" not in pat:
        fail(path, f"pattern {pat} has no N layer: their NeuralAttentionSearchLinearAttnGDNForCausalLM.forward "
             "averages the N layers' softmax fractions and fails without one")
    if c["gate_act"] == GATE_SIGMOID:
        fail(path, "the output gate is sigmoid (-C sigmoid): their gated norms run silu (swish) and their config has "
             "no field to change it")
    if c["gate_act"] != GATE_SILU:
        fail(path, f"header field 15 (the gate activation) is {c['gate_act']}, must be 0 (silu) or 1 (sigmoid)")
    why = check_sizes(c)
    if why:
        fail(path, f"bad model config: {why}")
    if int(c["dk"] * (c["dv"] / c["dk"])) != c["dv"]:
        fail(path, f"dv = {c['dv']} is not dk = {c['dk']} times an expand_v their layers can hold")


def read_params(path, c):
    """The parameters of a model file as one float32 array, checked against its header and size."""
    np = need("numpy")
    n = sum(numel(s) for _, s, _ in model_tensors(c))
    if n != c["n"]:
        fail(path, f"header says {c['n']} parameters, its config has {n}")
    size = os.path.getsize(path)
    if size != 1024 + 4 * n:
        fail(path, f"{size} bytes, expected {1024 + 4 * n} for its header's config (truncated or wrong file?)")
    w = np.fromfile(path, dtype="<f4", offset=1024)
    bad = np.flatnonzero(~np.isfinite(w))
    if bad.size:
        fail(path, f"parameter {bad[0]} of {n} is {w[bad[0]]}")
    return w


def header_ints(c):
    """common/checkpoint.h's config_to_header: 256 int32."""
    np = need("numpy")
    h = np.zeros(256, dtype="<i4")
    n = sum(numel(s) for _, s, _ in model_tensors(c))
    h[:16] = [MODEL_MAGIC, MODEL_VERSION, c["D"], c["L"], c["H"], c["dk"], c["dv"], c["Ha"], c["F"], c["V"], c["Vp"],
              c["rope"], CHUNK, n & 0x7fffffff, n >> 31, c["gate_act"]]
    h[32:32 + c["L"]] = [ord(k) for k in c["pattern"]]
    return h


def write_model(path, c, w):
    """A model file (atomically: PATH.tmp, then renamed)."""
    tmp = path + ".tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(header_ints(c).tobytes())
            f.write(w.astype("<f4").tobytes())
        os.replace(tmp, path)
    except OSError as e:
        fail(path, f"cannot write ({e.strerror})")


# ---------------------------------------------------------------------------------------------------------------
# the HF folder

def hf_config(c, dtype):
    """config.json: their natsl_340M.json's fields for this model, every option their layer reads spelled out
    (the config class's defaults differ from the shipped config's for several)."""
    eot = GPT2_EOT if c["V"] == GPT2_VOCAB else None
    ev = c["dv"] // c["dk"] if c["dv"] % c["dk"] == 0 else c["dv"] / c["dk"]
    return {
        "architectures": [ARCH],
        "model_type": MODEL_TYPE,
        "attn_mode": "chunk",
        "bos_token_id": eot,
        "eos_token_id": eot,
        "conv_size": CONV,
        "conv_bias": False,
        "expand_v": ev,
        "fuse_cross_entropy": False,
        "head_dim": c["dk"],
        "hidden_act": "swish",
        "hidden_ratio": 4,
        "hidden_size": c["D"],
        "initializer_range": 0.02,
        "intermediate_size": c["F"],
        "norm_eps": EPS,
        "num_heads": c["H"],
        "num_v_heads": None,
        "num_attn_heads": c["Ha"],
        "num_nats_head": None,
        "num_hidden_layers": c["L"],
        "n_ops": 2,
        "nats_block_size": CHUNK,
        "nats_block_agg_type": "mean",
        "nats_sample_strategy": "argmax",
        "ops_for_incomplete_chunks": "all",
        "compute_dnats_for_invalid_blocks_attn": False,
        "compute_dnats_for_invalid_blocks_linear_att": False,
        "tie_word_embeddings": False,
        "attn_qk_norm": True,
        "attn_with_short_conv": True,
        "allow_neg_eigval": False,
        "use_cache": True,
        "use_gate": True,
        "use_short_conv": True,
        "gdn_layers": [l for l, k in enumerate(c["pattern"]) if k == "G"],
        "attn_apply_pos_encoding": bool(c["rope"]),
        "attn_rope_theta": 10000.0,
        "decay_for_non_gdn_blocks": True,
        "incomplete_block_start_with_ht": True,
        "outputs_are_wighted": True,
        "vocab_size": c["V"],
        "torch_dtype": {"fp32": "float32", "bf16": "bfloat16"}[dtype],
    }


def bf16_bits(x):
    """float32 array -> bf16 bit patterns (uint16), round to nearest even (no NaN: checkpoints hold none)."""
    np = need("numpy")
    u = x.astype("<f4").view("<u4").astype(np.int64)
    return ((u + 0x7fff + ((u >> 16) & 1)) >> 16).astype("<u2")


def hf_tensors(c, w):
    """{HF name: float32 array} from natsl.c's flat buffer."""
    out = {}
    off = 0
    for _, shape, parts in model_tensors(c):
        t = w[off:off + numel(shape)].reshape(shape[0], -1)
        r = 0
        for name, rows, s in parts:
            out[name] = t[r:r + rows].reshape(s)
            r += rows
        off += numel(shape)
    return out


def write_safetensors(path, tensors, dtype):
    np = need("numpy")
    st = need("safetensors")
    keep = {}
    specs = {}
    for name, x in tensors.items():
        a = np.ascontiguousarray(bf16_bits(x) if dtype == "bf16" else x.astype("<f4"))
        keep[name] = a
        specs[name] = st.TensorSpec(dtype="bfloat16" if dtype == "bf16" else "float32", shape=list(a.shape),
                                    data_ptr=a.ctypes.data, data_len=a.nbytes)
    st.serialize_file(specs, path, metadata={"format": "pt"})


def export(model_path, outdir, dtype):
    c = read_header(model_path)
    check_exportable(c, model_path)
    w = read_params(model_path, c)
    try:
        os.makedirs(outdir, exist_ok=True)
        write_safetensors(os.path.join(outdir, "model.safetensors"), hf_tensors(c, w), dtype)
        with open(os.path.join(outdir, "config.json"), "w") as f:
            json.dump(hf_config(c, dtype), f, indent=2)
            f.write("\n")
    except OSError as e:
        fail(outdir, f"cannot write ({e.strerror})")
    return c


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="a natsl.c model file (model_*.bin)")
    p.add_argument("outdir", help="the HF folder to write (config.json, model.safetensors)")
    p.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32", help="the tensors' type (default fp32, the "
                   "checkpoint's)")
    a = p.parse_args()
    c = export(a.model, a.outdir, a.dtype)
    pad = f", the {c['Vp'] - c['V']} padding rows of the embedding and the head left out" if c["Vp"] > c["V"] else ""
    print(f"wrote {a.outdir}: pattern {c['pattern']} (gdn_layers {[l for l, k in enumerate(c['pattern']) if k == 'G']}), "
          f"D={c['D']} V={c['V']}, {a.dtype}{pad}")


if __name__ == "__main__":
    main()
