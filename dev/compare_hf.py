#!/usr/bin/env python3
"""
natsl.c against the authors' Hugging Face model (automl/NeuralAttentionSearchLinear's
NeuralAttentionSearchLinearAttnGDNForCausalLM on flash-linear-attention, imported from source directories; Triton
needs an NVIDIA GPU) through dev/export_hf.py and dev/import_hf.py, on the same tokens:

  (a) natsl.c -> HF: trains a natsl.c model a few steps (or takes --model), exports it, loads the folder into their
      model (every tensor checked equal to the file's), and compares their logits, loss and routing decisions with
      natsl.c's own (the trainer's -D dump: its first batch's loss, logits over the V real tokens and every N layer's
      router logits and decisions, common/dump.h) on one batch of B x T tokens;
  (b) HF -> natsl.c: a model of their code (their initialization, the 1-D weights then scaled by random factors so
      that no two norm weights are alike), saved with save_pretrained, imported, and compared the same way; the
      imported file exported again gives the saved tensors bit for bit.

Their model runs in fp32 (Triton's dot products in IEEE fp32: TRITON_F32_DEFAULT=ieee; --dtype bf16: bf16 autocast,
also taken where their kernels refuse fp32), in train mode under no_grad (their
training kernel, the one doc/model.md §5 reads) and in eval mode (their inference kernel), use_cache off. Per
quantity it prints the max abs and the normwise difference ||a - b|| / ||b|| (b natsl.c's) and a verdict against
the bars below; routing decisions that differ are counted, and counted as near-ties when natsl.c's two router
logits differ by less than the tie width. Exits 1 when a check fails.

    make train_natsl
    PYTHONPATH=EINOPS_DIR python3 dev/compare_hf.py --authors-src NATSL_REPO --fla-src FLA_REPO
    python3 dev/compare_hf.py --natsl-only        # no torch: the export, the shards, natsl.c's dumps, the imports

--natsl-only runs everything that needs no torch ((a) up to natsl.c's dump and the export/import round trip).
"""
import argparse
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "data"))
from data_common import write_datafile, write_tokenizer_table  # noqa: E402
from export_hf import export, hf_tensors, need, read_header, read_params, hf_config  # noqa: E402
from import_hf import import_hf  # noqa: E402

DUMP_MAGIC = 20261124
BARS = {  # normwise logits, relative loss, the near-tie width of the router logits
    "fp32": (5e-3, 1e-3, 1e-3),
    "bf16": (5e-2, 2e-2, 2e-2),
}
T0 = time.time()
FAILS = []


def say(msg):
    print(f"[{time.time() - T0:6.1f} s] {msg}", flush=True)


def check(ok, what):
    if not ok:
        FAILS.append(what)
    return "ok" if ok else "FAIL"


def run(cmd):
    say("$ " + " ".join(cmd))
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode:
        sys.exit(f"error: {cmd[0]} exited {p.returncode}:\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
    return p.stdout


# ---------------------------------------------------------------------------------------------------------------
# natsl.c's side: the token shard, the -D dump

def write_tokens(d, V, B, T, seed):
    """One llm.c shard of B*T+1 random tokens below V and a decoding table of V pieces beside it (the dataloader then
    takes V as the vocabulary); returns the tokens."""
    np = need("numpy")
    os.makedirs(d, exist_ok=True)
    tokens = np.random.default_rng(seed).integers(0, V, size=B * T + 1)
    write_datafile(os.path.join(d, "tokens.bin"), tokens.astype("uint16"))
    write_tokenizer_table(os.path.join(d, "tokenizer.bin"), [b"%d " % i for i in range(V)], 0)
    return tokens


def natsl_dump(trainer, model, shard, B, T, out):
    run([trainer, "-e", model, "-i", shard, "-j", shard, "-b", str(B), "-t", str(T), "-v", "0", "-s", "0",
         "-p", "fp32", "-D", out])
    return read_dump(out)


def read_dump(path):
    """common/dump.h: the first batch's loss, logits [B, T, V], and per N layer its router logits and decisions
    [B, Nc, H, 2] (in layer order)."""
    np = need("numpy")
    h = np.fromfile(path, dtype="<i4", count=256)
    if h[0] != DUMP_MAGIC:
        sys.exit(f"error: {path}: not a -D dump (magic {h[0]})")
    B, T, V, npar, nr = (int(x) for x in h[2:7])
    x = np.fromfile(path, dtype="<f4", offset=1024)
    o = 1 + B * T * V + npar
    return {"loss": float(x[0]), "logits": x[1:1 + B * T * V].reshape(B, T, V), "rlogits": x[o:o + nr],
            "rdec": x[o + nr:o + 2 * nr], "B": B, "T": T, "V": V}


def router_layers(dump, c):
    """The dump's router arrays cut per N layer: {layer: (logits, decisions)}, each [B, Nc, H, 2]."""
    B, T, H = dump["B"], dump["T"], c["H"]
    per = B * (T // 64) * 2 * H
    out, o = {}, 0
    for l, k in enumerate(c["pattern"]):
        if k == "N":
            shape = (B, T // 64, H, 2)
            out[l] = (dump["rlogits"][o:o + per].reshape(shape), dump["rdec"][o:o + per].reshape(shape))
            o += per
    return out


def diff(a, b):
    """max |a - b| and ||a - b|| / ||b|| in float64."""
    np = need("numpy")
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    nb = np.linalg.norm(b)
    return float(np.max(np.abs(a - b))) if a.size else 0.0, float(np.linalg.norm(a - b) / nb) if nb else 0.0


def natsl_summary(tag, dump, c):
    np = need("numpy")
    fr = []
    for l, (_, dec) in router_layers(dump, c).items():
        fr.append(f"l{l} " + " ".join(f"{v:.2f}" for v in dec[:, :-1, :, 0].mean(axis=(0, 1))))
    say(f"{tag}: loss {dump['loss']:.6f}, logits |max| {np.max(np.abs(dump['logits'])):.3f}, softmax fraction "
        f"{' | '.join(fr)}")


# ---------------------------------------------------------------------------------------------------------------
# the authors' side (torch, Triton, transformers)

def import_authors(authors_src, fla_src, autotune):
    """Their model classes from the source trees, without running fla's and nats' package __init__ files (those
    import every model of both packages)."""
    import types
    nats_dir = next((os.path.abspath(d) for d in (os.path.join(authors_src, "src", "nats"), os.path.join(authors_src, "nats"))
                     if os.path.isdir(d)), None)
    fla_dir = os.path.abspath(os.path.join(fla_src, "fla"))
    if nats_dir is None or not os.path.isdir(fla_dir):
        sys.exit(f"error: --authors-src {authors_src} needs src/nats (or nats), --fla-src {fla_src} needs fla/")
    if autotune:
        from recall_authors import limit_autotune
        limit_autotune(autotune)
    for name, path in (("fla", fla_dir), ("fla.layers", "layers"), ("fla.ops", "ops"), ("fla.models", "models"),
                       ("nats", nats_dir), ("nats.models", "models")):
        m = types.ModuleType(name)
        base = fla_dir if name.startswith("fla") else nats_dir
        m.__path__ = [path if os.path.isabs(path) else os.path.join(base, path)]
        sys.modules[name] = m
    from nats.models.natsl_attn_gdn.configuration_natsl_attn_gdn import NeuralAttentionSearchLineraAttnGDNConfig
    from nats.models.natsl_attn_gdn.modeling_natsl_attn_gdn import NeuralAttentionSearchLinearAttnGDNForCausalLM
    from nats.layers.natsl_attn_gdn import NeuralAttentionSearchLinearAttnGDN
    return NeuralAttentionSearchLineraAttnGDNConfig, NeuralAttentionSearchLinearAttnGDNForCausalLM, \
        NeuralAttentionSearchLinearAttnGDN


def record_routing(model, NAtS):
    """Hooks on every N layer: its router logits [B, Nc, 2H] and decisions (op 0 = softmax, before the last chunk is
    forced) of the latest forward pass, in rec[layer]."""
    rec = {}
    for l, blk in enumerate(model.model.layers):
        if not isinstance(blk.attn, NAtS):
            continue
        blk.attn.nats_layer.register_forward_hook(
            lambda m, i, o, l=l: rec.setdefault(l, {}).__setitem__("logits", o.detach().float().cpu()))
        sample = blk.attn.nats_sample_func

        def sample_and_record(logits, sample=sample, l=l):
            y = sample(logits)
            rec.setdefault(l, {})["dec"] = y[..., 0].detach().float().cpu().clone()
            return y
        blk.attn.nats_sample_func = sample_and_record
    return rec


def authors_forward(model, rec, tokens, B, T, dtype, branch):
    """Their logits [B, T, V] (float32, on the host) and the routing records of one forward pass."""
    import torch
    x = torch.as_tensor(tokens[:B * T].astype("int64")).view(B, T).cuda()
    model.train(branch == "train")
    rec.clear()
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=dtype == "bf16"):
        logits = model(input_ids=x, use_cache=False).logits
    return logits.float().cpu().numpy(), {l: dict(r) for l, r in rec.items()}


def compare(tag, dump, c, logits, rec, tokens, dtype):
    """Their outputs against natsl.c's dump; prints one line per quantity."""
    np = need("numpy")
    B, T = dump["B"], dump["T"]
    bar_logits, bar_loss, tie = BARS[dtype]
    z = logits.astype(np.float64).reshape(B * T, -1)
    y = tokens[1:B * T + 1]
    lse = np.log(np.exp(z - z.max(1, keepdims=True)).sum(1)) + z.max(1)
    loss = float(np.mean(lse - z[np.arange(B * T), y]))
    rel = abs(loss - dump["loss"]) / abs(dump["loss"])
    print(f"  {tag} loss: theirs {loss:.6f}, natsl.c {dump['loss']:.6f}, relative diff {rel:.2e} "
          f"[{check(rel <= bar_loss, tag + ' loss')} <= {bar_loss:g}]")
    # a near-tie decision that went the other way (bf16 against fp32) changes its chunk and every later position of
    # that sequence: the logits are held to the bar before the first such chunk of each sequence
    first = np.full(B, T // 64)
    for l, (rl, rd) in router_layers(dump, c).items():
        r = rec.get(l, {})
        if "dec" in r:
            differ = (rd[:, :-1, :, 0] != (r["dec"].numpy().reshape(rl.shape[:3])[:, :-1] > 0.5)).any(axis=2)
            first = np.minimum(first, np.where(differ.any(axis=1), differ.argmax(axis=1), T // 64))
    ma, nw = diff(logits, dump["logits"])
    if (first == T // 64).all():
        print(f"  {tag} logits [{B}x{T}x{dump['V']}]: max abs {ma:.3e}, normwise {nw:.3e} "
              f"[{check(nw <= bar_logits, tag + ' logits')} <= {bar_logits:g}]")
    else:
        keep = np.arange(T)[None, :] < 64 * first[:, None]
        mk, nk = diff(logits.reshape(B, T, -1)[keep], dump["logits"].reshape(B, T, -1)[keep])
        print(f"  {tag} logits [{B}x{T}x{dump['V']}]: max abs {ma:.3e}, normwise {nw:.3e}; before the first chunk "
              f"whose decision differs ({int(keep.sum())} of {B * T} positions): max abs {mk:.3e}, normwise {nk:.3e} "
              f"[{check(nk <= bar_logits, tag + ' logits')} <= {bar_logits:g}]")
    for l, (rl, rd) in router_layers(dump, c).items():
        r = rec.get(l, {})
        if "logits" not in r or "dec" not in r:
            print(f"  {tag} layer {l}: their router was not recorded [{check(False, f'{tag} layer {l} router')}]")
            continue
        theirs = r["logits"].numpy().reshape(rl.shape)
        ma, nw = diff(theirs, rl)
        ours_dec = rd[:, :-1, :, 0]
        their_dec = (r["dec"].numpy().reshape(rl.shape[:3])[:, :-1] > 0.5).astype(ours_dec.dtype)  # y_hard - y_soft + y_soft
        gap = np.abs(rl[:, :-1, :, 0] - rl[:, :-1, :, 1])
        differ = ours_dec != their_dec
        near = int(np.sum(differ & (gap < tie)))
        ok = int(differ.sum()) == near
        print(f"  {tag} layer {l} router logits: max abs {ma:.3e}, normwise {nw:.3e}; decisions: "
              f"{int(differ.sum())} of {differ.size} differ ({near} near-ties, |l0 - l1| < {tie:g}), softmax fraction "
              f"theirs {their_dec.mean():.3f} natsl.c {ours_dec.mean():.3f} [{check(ok, f'{tag} layer {l} decisions')}]")


def load_folder(Model, folder):
    """Their model built from the folder's config.json, the folder's weights loaded strictly (every name, every
    shape); then from_pretrained (the path lm-eval takes) checked to load the same tensors with nothing missing."""
    import torch
    from safetensors.torch import load_file
    sd = load_file(os.path.join(folder, "model.safetensors"))
    cfg = Model.config_class.from_pretrained(folder)
    model = Model(cfg)
    missing, unexpected = model.load_state_dict(sd, strict=False)
    print(f"  load_state_dict: {len(sd)} tensors, missing {list(missing)}, unexpected {list(unexpected)} "
          f"[{check(not missing and not unexpected, 'load_state_dict ' + folder)}]")
    fp, info = Model.from_pretrained(folder, output_loading_info=True)
    bad = [k for k, v in fp.state_dict().items() if k in sd and not torch.equal(v.float(), sd[k].float())]
    gaps = [k for key in ("missing_keys", "unexpected_keys", "mismatched_keys") for k in info.get(key, [])]
    print(f"  from_pretrained: missing/unexpected/mismatched {gaps}, {len(bad)} tensors differ from the file "
          f"[{check(not gaps and not bad, 'from_pretrained ' + folder)}]")
    del fp
    return model.float().cuda()


def authors_outputs(tag, model, rec, tokens, B, T, a):
    """Their logits and routing in each branch: [(branch, dtype, logits, routing)]; fp32 unless their kernels refuse
    it."""
    out = []
    for branch in (["train", "eval"] if a.branch == "both" else [a.branch]):
        dtype = a.dtype
        try:
            logits, r = authors_forward(model, rec, tokens, B, T, dtype, branch)
        except Exception as e:  # a Triton kernel that has no fp32 version
            if dtype == "bf16":
                raise
            say(f"{tag} {branch}: their fp32 forward failed ({type(e).__name__}: {str(e)[:300]}); bf16 instead "
                "(--autotune-configs 0 tries every kernel config)")
            dtype = "bf16"
            logits, r = authors_forward(model, rec, tokens, B, T, dtype, branch)
        out.append((branch, dtype, logits, r))
    return out


def authors_model_folder(Config, Model, c, spec, folder, seed):
    """(b): a model of their code with natsl.c's sizes and the spec's pattern ('GN', 'N:rope'), its 1-D weights
    (norms, A_log, dt_bias) scaled by random factors in [0.8, 1.2], saved as save_pretrained lays a folder out."""
    import torch
    pattern, _, opt = spec.partition(":")
    cs = dict(c, pattern=pattern, L=len(pattern), rope=int(opt == "rope"))
    j = hf_config(cs, "fp32")
    j.pop("architectures"), j.pop("model_type"), j.pop("torch_dtype")
    torch.manual_seed(seed)
    model = Model(Config(**j))
    with torch.no_grad():
        g = torch.Generator().manual_seed(seed)
        for p in model.parameters():
            if p.ndim == 1:
                p.mul_(0.8 + 0.4 * torch.rand(p.shape, generator=g))
    # (transformers 5's save_pretrained fails on their list-valued _tied_weights_keys: the folder by hand)
    from safetensors.torch import save_file
    os.makedirs(folder, exist_ok=True)
    model.config.save_pretrained(folder)
    save_file({k: v.detach().clone().contiguous() for k, v in model.state_dict().items()},
              os.path.join(folder, "model.safetensors"))
    return model.float().cuda(), cs


# ---------------------------------------------------------------------------------------------------------------

def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--authors-src", metavar="DIR", help="automl/NeuralAttentionSearchLinear checkout (holds src/nats)")
    p.add_argument("--fla-src", metavar="DIR", help="flash-linear-attention checkout (holds fla/)")
    p.add_argument("--natsl-only", action="store_true", help="no torch: export, shards, natsl.c's dumps, imports")
    p.add_argument("--trainer", action="append", default=[], help="natsl.c programs whose dumps are compared "
                   "(repeatable; default ./train_natsl, the CPU reference); the first trains (a)'s model")
    p.add_argument("--model", help="(a) on this natsl.c model file instead of a freshly trained one")
    p.add_argument("-e", "--preset", default="340m", help="(a)'s preset (default 340m: D=1024, H=6, dk=128, Ha=12)")
    p.add_argument("-a", "--pattern", default="GN", help="(a)'s pattern over G and N (default GN)")
    p.add_argument("--steps", type=int, default=10, help="(a)'s training steps on the embedded text (default 10)")
    p.add_argument("--authors", default="GN,N:rope", help="(b)'s models: patterns, ':rope' for their RoPE option "
                   "(default GN,N:rope)")
    p.add_argument("-b", "--batch", type=int, default=2)
    p.add_argument("-t", "--seq", type=int, default=256, help="T, a multiple of 64 above 64 (their layers run a "
                   "recurrent kernel at T <= 64)")
    p.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32", help="their model's precision")
    p.add_argument("--branch", choices=["train", "eval", "both"], default="both", help="their forward's branch")
    p.add_argument("--autotune-configs", type=int, default=4, metavar="N",
                   help="keep the first N configs of each Triton autotune list (0 = all; default 4: compiles faster)")
    p.add_argument("--workdir", default="/tmp/natsl_compare_hf")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    np = need("numpy")
    if a.seq % 64 or a.seq <= 64:
        sys.exit(f"error: -t {a.seq}: a multiple of 64 above 64")
    trainers = a.trainer or ["./train_natsl"]
    for t in trainers:
        if not os.access(t, os.X_OK):
            sys.exit(f"error: {t} is not built (make {os.path.basename(t)})")
    if not a.natsl_only and not (a.authors_src and a.fla_src):
        sys.exit("error: the comparison needs --authors-src and --fla-src (or --natsl-only)")
    w = a.workdir
    os.makedirs(w, exist_ok=True)

    # (a) natsl.c -> HF
    if a.model:
        model_a = a.model
    else:
        run_dir = os.path.join(w, "train")
        run(["rm", "-rf", run_dir])
        run([trainers[0], "-e", a.preset, "-a", a.pattern, "-b", "1", "-t", "128", "-x", str(a.steps), "-u", "2",
             "-l", "3e-3", "-v", "0", "-s", "0", "-o", run_dir])
        model_a = os.path.join(run_dir, f"model_{a.steps:08d}.bin")
    hf_a = os.path.join(w, "hf_natsl")
    c = export(model_a, hf_a, "fp32")
    say(f"(a) exported {model_a} (pattern {c['pattern']}, D={c['D']} H={c['H']} dk={c['dk']} Ha={c['Ha']} V={c['V']}) "
        f"to {hf_a}")
    back = os.path.join(w, "natsl_back.bin")
    import_hf(hf_a, back)
    wa, wb = read_params(model_a, c), read_params(back, c)
    tb = hf_tensors(c, wb)
    same = {k: bool(np.array_equal(v, tb[k])) for k, v in hf_tensors(c, wa).items()}
    say(f"(a) import of the export: {sum(same.values())} of {len(same)} HF tensors bit-identical "
        f"[{check(all(same.values()), 'export/import round trip')}]")
    tokens = write_tokens(os.path.join(w, "tokens"), c["V"], a.batch, a.seq, a.seed)
    shard = os.path.join(w, "tokens", "tokens.bin")
    dumps_a = {t: natsl_dump(t, model_a, shard, a.batch, a.seq, os.path.join(w, f"a_{os.path.basename(t)}.dump"))
               for t in trainers}
    for t, d in dumps_a.items():
        natsl_summary(f"(a) natsl.c {t}", d, c)

    if a.natsl_only:
        say("--natsl-only: done (the comparison with their model needs torch)" if not FAILS else f"FAILED: {FAILS}")
        sys.exit(1 if FAILS else 0)

    if a.dtype == "fp32":  # Triton's tl.dot on fp32 operands: IEEE products, not TF32 (their kernels leave it default)
        os.environ.setdefault("TRITON_F32_DEFAULT", "ieee")
    import torch
    if not torch.cuda.is_available():
        sys.exit("error: their Triton kernels need a CUDA GPU (torch.cuda.is_available() is False)")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    import transformers
    import triton
    say(f"torch {torch.__version__}, triton {triton.__version__}, transformers {transformers.__version__}, "
        f"{torch.cuda.get_device_name(0)}")
    Config, Model, NAtS = import_authors(a.authors_src, a.fla_src, a.autotune_configs)

    say(f"(a) their model from {hf_a}")
    model = load_folder(Model, hf_a)
    theirs = authors_outputs("(a)", model, record_routing(model, NAtS), tokens, a.batch, a.seq, a)
    for t, d in dumps_a.items():
        for branch, dtype, logits, r in theirs:
            compare(f"(a) {os.path.basename(t)} {branch} {dtype}", d, c, logits, r, tokens, dtype)
    del model

    # (b) HF -> natsl.c
    for i, spec in enumerate(s for s in a.authors.split(",") if s):
        folder = os.path.join(w, f"hf_authors_{i}")
        model, cs = authors_model_folder(Config, Model, c, spec, folder, a.seed + 1 + i)
        out = os.path.join(w, f"authors_{i}.bin")
        ci = import_hf(folder, out)
        ok = ci["pattern"] == cs["pattern"] and ci["rope"] == cs["rope"]
        say(f"(b) {spec}: their model saved to {folder}, imported to {out} (pattern {ci['pattern']}, rope {ci['rope']}) "
            f"[{check(ok, f'(b) {spec} pattern and RoPE')}]")
        from safetensors.torch import load_file
        saved = load_file(os.path.join(folder, "model.safetensors"))
        again = hf_tensors(ci, read_params(out, read_header(out)))
        same = [k for k, v in again.items() if k in saved and np.array_equal(v, saved[k].float().numpy())]
        print(f"  export of the import: {len(same)} of {len(saved)} saved tensors bit-identical, names "
              f"{'equal' if set(again) == set(saved) else 'differ'} "
              f"[{check(len(same) == len(saved) and set(again) == set(saved), f'(b) {spec} export of the import')}]")
        theirs = authors_outputs(f"(b) {spec}", model, record_routing(model, NAtS), tokens, a.batch, a.seq, a)
        for t in trainers:
            d = natsl_dump(t, out, shard, a.batch, a.seq, os.path.join(w, f"b{i}_{os.path.basename(t)}.dump"))
            natsl_summary(f"(b) {spec} natsl.c {t}", d, ci)
            for branch, dtype, logits, r in theirs:
                compare(f"(b) {spec} {os.path.basename(t)} {branch} {dtype}", d, ci, logits, r, tokens, dtype)
        del model
    say("all checks passed" if not FAILS else f"FAILED ({len(FAILS)}): {'; '.join(FAILS)}")
    sys.exit(1 if FAILS else 0)


if __name__ == "__main__":
    main()
