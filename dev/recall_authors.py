"""
The copy task on the authors' NAtS-L layer: trains a small model built from the authors' PyTorch/Triton layer
(automl/NeuralAttentionSearchLinear on flash-linear-attention, imported from source directories given on the
command line; Triton needs an NVIDIA GPU) on the same batches natsl.c's trainers read, so that the two can be
compared side by side (doc/model.md §5, §11).

The task: rows of R = 256 tokens `[0] x x [0]`, x = (R - 2) / 2 = 127 tokens drawn uniformly from 1 .. V-1 of a
V = 128-token vocabulary; rows are laid back to back into one stream. A batch is read from the stream as
common/dataloader.h reads a shard (B*T+1 tokens, inputs the first B*T, targets shifted by one, next batch B*T
further), so with T = R every input row is one copy row and its targets end with the next row's 0. The answer
positions are the inputs whose target lies in the second copy: t = 127 .. 253 of each row (targets 128 .. 254).
Loss bounds: a model without memory pays log(V-1) = 4.844 on each of the 2*127 random targets, 4.806 per token
over all tokens; with perfect recall the second copy is free: 2.403 over all tokens, 0 over the answers.

  --write-shards DIR   writes DIR/train.bin, DIR/val.bin (llm.c shards, dev/data/data_common.py) and the
                       V-token decoding table DIR/tokenizer.bin, then exits (numpy only); train_natsl /
                       train_natsl_cu read them with -i DIR/train.bin -j DIR/val.bin
  --run SPEC           trains one model (repeatable; the runs share one process, so Triton compiles once):
                       SPEC = PATTERN[:OPTION]..., PATTERN over N (the authors' NAtS-L layer) and G (fla's
                       GatedDeltaNet); options: a route, argmax (the shipped config, default), gumbel (their
                       ST-Gumbel), softmax or gdn (every chunk's router decision forced to that op); and the
                       layer's own switches away from natsl_340M.json: rope (attn_apply_pos_encoding=True),
                       noconv (attn_with_short_conv=False: the softmax op's q, k, v straight from the
                       projections), nonorm (attn_qk_norm=False); nosilu drops the SiLU after the q and k
                       short convs (both ops then read signed q, k features; v keeps it); nogate
                       (use_gate=False: the two op outputs RMSNorm'd and summed, no SiLU output gate, no ω);
                       siggate (the fused gated norm's activation 'sigmoid' instead of 'swish');
                       qk=X starts the softmax q/k RMSNorm weights at X instead of 1

The model mirrors the authors' NeuralAttentionSearchLinearAttnGDNForCausalLM (natsl_340M.json: pre-norm blocks,
fla's fused RMSNorm and SwiGLU MLP with hidden_ratio 4, untied head, norm eps 1e-6) and its _init_weights (every
Linear, Conv1d and the embedding N(0, 0.02), A_log and dt_bias as the layer draws them, norm weights 1); the
optimizer is natsl.c's (doc/model.md §9: AdamW (0.9, 0.95), eps 1e-8, decay on matrices only, clipping at 1,
warmup then cosine to final-frac of the peak, the flags' defaults those of common/train_util.h).

Example (the GPU machine; the sources checked out as plain files):
  python dev/recall_authors.py --write-shards /tmp/copy
  python dev/recall_authors.py --authors-src NATSL_REPO --fla-src FLA_REPO -e 340m --run NN --run NN:softmax
"""
import argparse
import math
import os
import sys
import time
import types

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "data"))
from data_common import need, write_datafile, write_tokenizer_table  # noqa: E402

PRESETS = {  # D, H, d_k, H_a as common/config.h's presets
    "tiny": (128, 2, 48, 4),
    "small": (512, 3, 128, 6),
    "340m": (1024, 6, 128, 12),
}
SPLITS = {"train": 0, "val": 1}


# ---------------------------------------------------------------------------------------------------------------
# the copy task (deterministic per seed and split)

def copy_rows(n_rows, row_len, vocab, seed, split):
    """n_rows rows [0] x x [0] as a numpy array [n_rows, row_len]."""
    np = need("numpy")
    if row_len % 2 or row_len < 4:
        sys.exit(f"error: --row {row_len}: a row [0] x x [0] needs an even length of at least 4")
    half = (row_len - 2) // 2
    rng = np.random.default_rng([seed, SPLITS[split]])
    x = rng.integers(1, vocab, size=(n_rows, half), dtype=np.int64)
    zero = np.zeros((n_rows, 1), dtype=np.int64)
    return np.concatenate([zero, x, x, zero], axis=1)


def answer_mask(T, row_len):
    """1 at the input positions whose target is a second-copy token (t = half .. 2*half-1 of each row)."""
    half = (row_len - 2) // 2
    return [1 if half <= t % row_len < 2 * half else 0 for t in range(T)]


def write_shards(a):
    os.makedirs(a.write_shards, exist_ok=True)
    counts = {"train": a.train_rows, "val": a.val_rows}
    for split, n in counts.items():
        rows = copy_rows(n, a.row, a.vocab, a.data_seed, split)
        path = os.path.join(a.write_shards, f"{split}.bin")
        write_datafile(path, rows.reshape(-1).astype("uint16"))
        print(f"wrote {path}: {n} rows of {a.row} tokens ({n * a.row} tokens)")
    # the decoding table: token 0 prints as '|', token i as the two hex digits of i
    pieces = [b"|"] + [b"%02x " % i for i in range(1, a.vocab)]
    path = os.path.join(a.write_shards, "tokenizer.bin")
    write_tokenizer_table(path, pieces, 0)
    print(f"wrote {path}: V = {a.vocab}, eot 0")


class Stream:
    """common/dataloader.h's walk over one shard held in memory: B*T+1 tokens a batch, B*T further each time."""

    def __init__(self, tokens, B, T, device):
        self.tokens, self.B, self.T, self.device, self.pos = tokens, B, T, device, 0

    def reset(self):
        self.pos = 0

    def next(self):
        import torch
        n = self.B * self.T
        if self.pos + n + 1 > len(self.tokens):
            self.pos = 0
        buf = torch.as_tensor(self.tokens[self.pos:self.pos + n + 1], dtype=torch.long)
        self.pos += n
        x = buf[:-1].view(self.B, self.T).to(self.device, non_blocking=True)
        y = buf[1:].view(self.B, self.T).to(self.device, non_blocking=True)
        return x, y


# ---------------------------------------------------------------------------------------------------------------
# importing the authors' layer without their package __init__s (those pull in transformers for the HF models)

def limit_autotune(n):
    """Makes triton.autotune keep only the first n configs of every kernel imported after this call (n > 0):
    Triton compiles each config on first use, which for the GDN kernels' long lists takes minutes; the configs
    differ in tiling only."""
    import triton
    autotune = triton.autotune

    def first_configs(configs, key, *args, **kwargs):
        return autotune(list(configs)[:n], key, *args, **kwargs)

    triton.autotune = first_configs


def import_sources(authors_src, fla_src):
    """Registers fla, fla.layers, fla.ops (from fla_src) and nats (from authors_src or authors_src/src) as
    packages without running their __init__ files, and nats.models.utils (the inference caches, which import
    transformers) as an empty module: training uses neither. Returns (NAtS layer class, GatedDeltaNet class,
    fla.modules)."""
    nats_dir = next((d for d in (os.path.join(authors_src, "src", "nats"), os.path.join(authors_src, "nats"))
                     if os.path.isdir(d)), None)
    fla_dir = os.path.join(fla_src, "fla")
    if nats_dir is None:
        sys.exit(f"error: --authors-src {authors_src}: no src/nats or nats directory there")
    if not os.path.isdir(fla_dir):
        sys.exit(f"error: --fla-src {fla_src}: no fla directory there")

    def package(name, path):
        m = types.ModuleType(name)
        m.__path__ = [path]
        sys.modules[name] = m

    package("fla", fla_dir)
    package("fla.layers", os.path.join(fla_dir, "layers"))
    package("fla.ops", os.path.join(fla_dir, "ops"))
    package("nats", nats_dir)
    package("nats.models", os.path.join(nats_dir, "models"))
    caches = types.ModuleType("nats.models.utils")
    caches.NAtSLayerCache = caches.NAtSCache = None
    sys.modules["nats.models.utils"] = caches
    import fla.modules
    from fla.layers.gated_deltanet import GatedDeltaNet
    from nats.layers.natsl_attn_gdn import NeuralAttentionSearchLinearAttnGDN
    return NeuralAttentionSearchLinearAttnGDN, GatedDeltaNet, fla.modules


# ---------------------------------------------------------------------------------------------------------------
# the model (the authors' NeuralAttentionSearchLinearAttnGDNForCausalLM without the HF wrapper)

def build_model(spec, a, NAtS, GDN, flam):
    import torch
    import torch.nn as nn
    D, H, dk, Ha = PRESETS[a.preset]
    eps = 1e-6

    class Block(nn.Module):
        def __init__(self, kind, idx):
            super().__init__()
            self.attn_norm = flam.RMSNorm(D, eps=eps)
            if kind == "G":
                self.attn = GDN(mode="chunk", hidden_size=D, expand_v=2, head_dim=dk, num_heads=H, use_gate=True,
                                use_short_conv=True, conv_size=4, norm_eps=eps, layer_idx=idx)
            else:  # the keyword arguments of the authors' block for natsl_340M.json
                self.attn = NAtS(hidden_size=D, expand_v=2, head_dim=dk, num_heads=H, num_attn_heads=Ha,
                                 num_v_heads=None, n_ops=2, num_nats_head=None, nats_block_size=64,
                                 nats_block_agg_type="mean",
                                 nats_sample_strategy="gumble" if spec["route"] == "gumbel" else "argmax",
                                 ops_for_incomplete_chunks="all", use_gate=not spec["nogate"], use_short_conv=True,
                                 allow_neg_eigval=False, conv_size=4, conv_bias=False,
                                 attn_qk_norm=not spec["nonorm"], attn_with_short_conv=not spec["noconv"],
                                 compute_dnats_for_invalid_blocks_attn=False,
                                 compute_dnats_for_invalid_blocks_linear_att=False,
                                 incomplete_block_start_with_ht=True, decay_for_non_gdn_blocks=True,
                                 attn_rope_theta=10000.0, attn_apply_pos_encoding=spec["rope"],
                                 attn_max_position_embeddings=None, norm_eps=eps, layer_idx=idx)
                route_recorder(self.attn, spec["route"])
            self.mlp_norm = flam.RMSNorm(D, eps=eps)
            self.mlp = flam.GatedMLP(hidden_size=D, hidden_ratio=4, intermediate_size=None, hidden_act="swish",
                                     fuse_swiglu=True)

        def forward(self, h):
            res = h
            h = self.attn(hidden_states=self.attn_norm(h))[0]
            h, res = self.mlp_norm(h, res, True)
            return res + self.mlp(h)

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embeddings = nn.Embedding(a.vocab, D)
            self.layers = nn.ModuleList([Block(k, i) for i, k in enumerate(spec["pattern"])])
            self.norm = flam.RMSNorm(D, eps=eps)
            self.lm_head = nn.Linear(D, a.vocab, bias=False)

        def forward(self, ids):
            h = self.embeddings(ids)
            for layer in self.layers:
                h = layer(h)
            return self.lm_head(self.norm(h))

    model = LM()

    def init_weights(m):  # the authors' _init_weights (modeling_natsl_attn_gdn.py), initializer_range 0.02
        if isinstance(m, (NAtS, GDN)):
            with torch.no_grad():
                m.A_log.copy_(nn.init.uniform_(m.A_log, a=0, b=16).log())
                dt = torch.exp(nn.init.uniform_(m.dt_bias) * (math.log(0.1) - math.log(0.001))
                               + math.log(0.001)).clamp(min=1e-4)
                m.dt_bias.copy_(dt + torch.log(-torch.expm1(-dt)))
        elif isinstance(m, (nn.Linear, nn.Conv1d)):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
        elif hasattr(m, "reset_parameters"):
            m.reset_parameters()

    model.apply(init_weights)
    for blk in model.layers:
        if isinstance(blk.attn, NAtS) and spec["nosilu"]:
            blk.attn.q_conv1d.activation = None
            blk.attn.k_conv1d.activation = None
        if isinstance(blk.attn, NAtS) and spec["siggate"]:
            blk.attn.o_norm.activation = "sigmoid"
    if spec["qk"] != 1:
        with torch.no_grad():
            for blk in model.layers:
                if isinstance(blk.attn, NAtS) and blk.attn.attn_qk_norm:
                    blk.attn.q_norm.weight.fill_(spec["qk"])
                    blk.attn.k_norm.weight.fill_(spec["qk"])
    return model


def route_recorder(layer, route):
    """Wraps the layer's router sampling: keeps each step's decisions (op 0 = softmax) for the softmax fraction,
    and with route softmax / gdn replaces them by that op for every chunk (the router then gets no gradient)."""
    import torch
    sample = layer.nats_sample_func

    def sample_and_record(logits):
        if route in ("softmax", "gdn"):
            y = torch.zeros_like(logits)
            y[..., 0 if route == "softmax" else 1] = 1
        else:
            y = sample(logits)
        layer.route_taken = y[..., 0].detach().float().clone()  # [B, chunks, heads], before the last-chunk forcing
        return y

    layer.nats_sample_func = sample_and_record


def softmax_fractions(model):
    """Per N layer, the fraction of chunks each head routes to softmax, the last chunk excluded (as natsl.c's
    softmax_fraction counts)."""
    out = []
    for i, blk in enumerate(model.layers):
        r = getattr(blk.attn, "route_taken", None)
        if r is not None and r.shape[1] > 1:
            out.append((i, r[:, :-1].mean(dim=(0, 1)).tolist()))
    return out


# ---------------------------------------------------------------------------------------------------------------
# training (doc/model.md §9, with common/train_util.h's defaults)

def lr_at(step, a):
    """common/train_util.h's lr_at for the 0-based step."""
    if step < a.warmup:
        return a.lr * (step + 1) / a.warmup
    if a.steps <= a.warmup:
        return a.lr
    progress = min(1.0, (step - a.warmup) / (a.steps - a.warmup))
    return a.lr * (a.final_frac + (1 - a.final_frac) * 0.5 * (1 + math.cos(math.pi * progress)))


def evaluate(model, val, a, amask, autocast):
    """Mean loss over a.val_batches batches from the val stream's start: all tokens, answers only, and the
    answers' argmax accuracy; and each N layer's softmax fractions per head, averaged over the batches."""
    import torch
    import torch.nn.functional as F
    val.reset()
    tot = ans = acc = 0.0
    fr = None
    with torch.no_grad(), autocast():  # train mode: the authors' training branch (their eval branch is another kernel)
        for _ in range(a.val_batches):
            x, y = val.next()
            logits = model(x).float()
            nll = F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1), reduction="none").view(y.shape)
            tot += nll.mean().item()
            ans += (nll * amask).sum().item() / (amask.sum().item() * y.shape[0])
            acc += ((logits.argmax(-1) == y).float() * amask).sum().item() / (amask.sum().item() * y.shape[0])
            f = softmax_fractions(model)
            fr = f if fr is None else [(i, [u + v for u, v in zip(p, q)]) for (i, p), (_, q) in zip(fr, f)]
    n = a.val_batches
    fr = [(i, [v / n for v in p]) for i, p in (fr or [])]
    return tot / n, ans / n, acc / n, fr


def train_one(spec, a, classes, data):
    import torch
    import torch.nn.functional as F
    NAtS, GDN, flam = classes
    torch.manual_seed(a.seed)
    dev = torch.device("cuda")
    model = build_model(spec, a, NAtS, GDN, flam).to(dev)
    nparams = sum(p.numel() for p in model.parameters())
    decay = [p for p in model.parameters() if p.ndim == 2]      # linear weights, embedding, head
    other = [p for p in model.parameters() if p.ndim != 2]      # norms, A_log, dt_bias, convs [C, 1, 4]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.wd}, {"params": other, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    if a.dtype == "bf16":
        def autocast():
            return torch.autocast("cuda", dtype=torch.bfloat16)
    else:
        def autocast():
            return torch.autocast("cuda", enabled=False)
    train = Stream(data["train"], a.batch, a.seq, dev)
    val = Stream(data["val"], a.batch, a.seq, dev)
    amask = torch.tensor(answer_mask(a.seq, a.row), dtype=torch.float32, device=dev)
    tag = spec["name"]
    print(f"[{tag}] pattern {spec['pattern']} route {spec['route']} rope {int(spec['rope'])} noconv "
          f"{int(spec['noconv'])} nonorm {int(spec['nonorm'])} nosilu {int(spec['nosilu'])} nogate {int(spec['nogate'])} "
          f"siggate {int(spec['siggate'])} "
          f"qk {spec['qk']:g} "
          f"preset {a.preset}: "
          f"{nparams} parameters, {a.dtype}, B {a.batch} T {a.seq}, lr {a.lr:g} warmup {a.warmup} "
          f"final {a.final_frac:g} wd {a.wd:g}", flush=True)
    t_start = t_last = time.time()
    steps_last = 0

    def report(step):
        nonlocal t_last, steps_last
        torch.cuda.synchronize()
        ms = 1000 * (time.time() - t_last) / max(1, step - steps_last)
        vl, va, vacc, fr = evaluate(model, val, a, amask, autocast)
        frs = " | softmax frac " + " ".join(f"l{i}: " + " ".join(f"{v:.2f}" for v in p) for i, p in fr) if fr else ""
        print(f"[{tag}] step {step}: val loss {vl:.4f} | answers {va:.4f} acc {vacc:.3f}{frs} | "
              f"{ms:.1f} ms/step", flush=True)
        t_last, steps_last = time.time(), step

    step, t_budget = 0, None  # --max-seconds counts from the end of step 1 (Triton's compiling excluded)
    report(0)
    while step < a.steps:
        if t_budget is not None and time.time() - t_budget > a.max_seconds:
            print(f"[{tag}] stopped after {step} steps: --max-seconds {a.max_seconds:g} reached", flush=True)
            break
        step += 1
        lr = lr_at(step - 1, a)
        for g in opt.param_groups:
            g["lr"] = lr
        x, y = train.next()
        with autocast():
            logits = model(x)
        loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), y.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        if torch.isfinite(norm):
            opt.step()
        else:
            print(f"[{tag}] step {step}: gradient norm {norm.item()} not finite, step skipped", flush=True)
        if step == 1:
            torch.cuda.synchronize()
            t_budget = time.time()
        if step % a.log_every == 0:
            print(f"[{tag}] step {step}/{a.steps} | loss {loss.item():.4f} | lr {lr:.2e} | norm {norm.item():.3f}",
                  flush=True)
        if a.val_every and step % a.val_every == 0:
            report(step)
    if not a.val_every or step % a.val_every:
        report(step)
    print(f"[{tag}] done in {time.time() - t_start:.0f} s", flush=True)


def parse_run(s):
    parts = s.split(":")
    spec = {"name": s, "pattern": parts[0], "route": "argmax", "rope": False, "noconv": False, "nonorm": False, "nosilu": False,
            "nogate": False, "siggate": False,
            "qk": 1.0}
    for p in parts[1:]:
        if p in ("argmax", "gumbel", "softmax", "gdn"):
            spec["route"] = p
        elif p in ("rope", "noconv", "nonorm", "nosilu", "nogate", "siggate"):
            spec[p] = True
        elif p.startswith("qk="):
            try:
                spec["qk"] = float(p[3:])
            except ValueError:
                sys.exit(f"error: --run {s}: '{p}' needs a number after qk=")
        else:
            sys.exit(f"error: --run {s}: '{p}' is not a route (argmax, gumbel, softmax, gdn), rope, noconv, "
                     "nonorm, nosilu, nogate, siggate nor qk=X")
    if not spec["pattern"] or set(spec["pattern"]) - set("NG"):
        sys.exit(f"error: --run {s}: the pattern is a string over N (NAtS-L) and G (GatedDeltaNet)")
    return spec


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--write-shards", metavar="DIR", help="write the copy task's shards and tokenizer.bin there, then exit")
    p.add_argument("--train-rows", type=int, default=16 * 3000 + 1, help="rows in train.bin (default 48001)")
    p.add_argument("--val-rows", type=int, default=16 * 8 + 1, help="rows in val.bin (default 129)")
    p.add_argument("--authors-src", metavar="DIR", help="automl/NeuralAttentionSearchLinear checkout (holds src/nats)")
    p.add_argument("--fla-src", metavar="DIR", help="flash-linear-attention checkout (holds fla/)")
    p.add_argument("--run", action="append", default=[], metavar="SPEC", help="PATTERN[:OPTION]..., repeatable")
    p.add_argument("-e", "--preset", choices=sorted(PRESETS), default="340m")
    p.add_argument("--vocab", type=int, default=128)
    p.add_argument("--row", type=int, default=256, help="copy row length R (default 256)")
    p.add_argument("--data-seed", type=int, default=1234, help="seed of the task's rows")
    p.add_argument("-b", "--batch", type=int, default=16)
    p.add_argument("-t", "--seq", type=int, default=256)
    p.add_argument("-x", "--steps", type=int, default=1000)
    p.add_argument("-l", "--lr", type=float, default=1.5e-3)
    p.add_argument("-u", "--warmup", type=int, default=20)
    p.add_argument("-q", "--final-frac", type=float, default=0.1)
    p.add_argument("-c", "--wd", type=float, default=0.1)
    p.add_argument("-r", "--seed", type=int, default=42)
    p.add_argument("-v", "--val-every", type=int, default=100)
    p.add_argument("-m", "--val-batches", type=int, default=8)
    p.add_argument("--log-every", type=int, default=50)
    p.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16", help="bf16 = autocast over fp32 weights")
    p.add_argument("--autotune-configs", type=int, default=0, metavar="N",
                   help="keep the first N configs of each Triton autotune list (default 0 = all)")
    p.add_argument("--max-seconds", type=float, default=1e9, help="stop a run's training this long after its step 1")
    a = p.parse_args()
    if a.vocab < 2 or a.vocab > 65536:
        sys.exit(f"error: --vocab {a.vocab}: 2 to 65536")
    if a.write_shards:
        write_shards(a)
        return
    if not a.run or not a.authors_src or not a.fla_src:
        sys.exit("error: training needs --authors-src, --fla-src and at least one --run (or --write-shards DIR)")
    if a.seq % 64:
        sys.exit(f"error: -t {a.seq}: a multiple of 64 (the NAtS chunk)")
    specs = [parse_run(s) for s in a.run]
    np = need("numpy")
    import torch
    import triton
    print(f"torch {torch.__version__}, triton {triton.__version__}, {torch.cuda.get_device_name(0)}", flush=True)
    if a.autotune_configs:
        limit_autotune(a.autotune_configs)
    classes = import_sources(a.authors_src, a.fla_src)
    rows_needed = a.steps * a.batch + 1
    data = {"train": copy_rows(rows_needed, a.row, a.vocab, a.data_seed, "train").reshape(-1).astype(np.int64),
            "val": copy_rows(a.val_batches * a.batch + 1, a.row, a.vocab, a.data_seed, "val").reshape(-1).astype(np.int64)}
    for spec in specs:
        try:
            train_one(spec, a, classes, data)
        except Exception as e:  # one failing run (a kernel that does not build here) leaves the others to run
            import traceback
            traceback.print_exc()
            print(f"[{spec['name']}] FAILED: {type(e).__name__}: {e}", flush=True)


if __name__ == "__main__":
    main()
