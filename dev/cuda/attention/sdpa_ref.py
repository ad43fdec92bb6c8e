# reference: PyTorch SDPA (bf16, causal) fwd / bwd TFLOP/s on the A shape, same FLOP counting as flash_bf16.cu
import torch, torch.nn.functional as F
B, H, T, D = 8, 16, 4096, 64
q, k, v, do = (torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16) for _ in range(4))
q.requires_grad_(); k.requires_grad_(); v.requires_grad_()
fl = 4 * B * H * T * T / 2 * D
from torch.nn.attention import sdpa_kernel, SDPBackend
for be in [SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION]:
    try:
        with sdpa_kernel(be):
            for _ in range(3):
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True); o.backward(do)
            e = [torch.cuda.Event(enable_timing=True) for _ in range(3)]; tf, tb = [], []
            for _ in range(20):
                e[0].record(); o = F.scaled_dot_product_attention(q, k, v, is_causal=True); e[1].record()
                o.backward(do); e[2].record(); torch.cuda.synchronize()
                tf.append(e[0].elapsed_time(e[1])); tb.append(e[1].elapsed_time(e[2]))
            tf.sort(); tb.sort(); f, b = tf[10], tb[10]
            print(f"SDPA {be.name:18s} B8 T4096 16x64 causal: fwd {f:.3f} ms {fl/f*1e-9:.1f} TFLOP/s  bwd {b:.3f} ms {2.5*fl/b*1e-9:.1f} TFLOP/s")
    except Exception as ex:
        print("SDPA", be, "failed:", str(ex)[:200])
