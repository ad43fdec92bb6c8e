# Reference timing: Qwen's FlashQLA (TileLang, Hopper) GDN op, forward and backward, at the 340m preset's shape, for
# comparison with natsl.c's GDN op (`./gdn_chunk time bf16`, dev/cuda/gdn/). natsl.c's 340m has 6 heads of d_k = 128,
# d_v = 256 with one gate and beta a head; FlashQLA takes heads of d = 128, so the same op is 6 q/k heads and 12 value
# heads of 128 (each pair of value heads shares its q/k head; its g and beta are repeated for the pair): the same
# FLOPs, states and bytes. natsl.c's op takes L2-normalized q, k and folds the L2 norm's backward into its own
# backward, so both rows are printed: FlashQLA without and with `use_qk_l2norm_in_kernel`.
#
# Needs torch, tilelang (==0.1.9 for FlashQLA 0.1.2) and FlashQLA's source on PYTHONPATH:
#   PYTHONPATH=/path/to/FlashQLA:$PYTHONPATH python3 dev/flashqla_ref.py [B T]
import sys
import torch
from flash_qla import chunk_gated_delta_rule

B, T = (int(sys.argv[1]), int(sys.argv[2])) if len(sys.argv) > 2 else (8, 4096)
HK, HV, D = 6, 12, 128
dev, bf = "cuda", torch.bfloat16
torch.manual_seed(0)
q = torch.randn(B, T, HK, D, device=dev, dtype=bf)
k = torch.randn(B, T, HK, D, device=dev, dtype=bf)
q = torch.nn.functional.normalize(q.float(), dim=-1).to(bf)
k = torch.nn.functional.normalize(k.float(), dim=-1).to(bf)
v = torch.randn(B, T, HV, D, device=dev, dtype=bf)
g = torch.nn.functional.logsigmoid(torch.randn(B, T, HK, device=dev)).repeat_interleave(2, dim=2) / 16  # log decay
beta = torch.rand(B, T, HK, device=dev).sigmoid().repeat_interleave(2, dim=2).to(bf)
do = torch.randn(B, T, HV, D, device=dev, dtype=bf)
for t in (q, k, v, g, beta):
    t.requires_grad_()


def run(l2):
    o, _ = chunk_gated_delta_rule(q, k, v, g, beta, scale=D ** -0.5, output_final_state=False,
                                  use_qk_l2norm_in_kernel=l2)
    return o


for l2 in (False, True):
    for _ in range(5):  # the first calls compile the kernels
        run(l2).backward(do)
    e = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
    tf, tb = [], []
    for _ in range(30):
        for t in (q, k, v, g, beta):
            t.grad = None
        e[0].record()
        o = run(l2)
        e[1].record()
        o.backward(do)
        e[2].record()
        torch.cuda.synchronize()
        tf.append(e[0].elapsed_time(e[1]))
        tb.append(e[1].elapsed_time(e[2]))
    tf.sort()
    tb.sort()
    f, b = tf[len(tf) // 2], tb[len(tb) // 2]
    print(f"FlashQLA GDN B={B} T={T} {HK} q/k heads, {HV} v heads of {D}, l2norm in kernel {int(l2)}: "
          f"forward {f:.3f} ms, backward {b:.3f} ms, total {f + b:.3f} ms (medians of 30)")
