/*
train_natsl.c — the NAtS-L reference trainer on the CPU: the whole method in one file, to be read top to
bottom. NAtS-L (Neural Attention Search Linear, arXiv 2602.03681) splits the sequence into chunks of 64
tokens. Per chunk and per head a router picks one of two token mixers for how *later* chunks see this
chunk: softmax attention (later queries attend its keys) or Gated DeltaNet (its tokens are committed into
a linear-attention state). Inside a query's own chunk both run. The two outputs are normalized, mixed with
weights computed from q, gated and projected.

The model is defined in doc/model.md: the comments cite its sections as "§5.3" and its equations as
"(5.3a)". Every forward pass has its backward written by hand next to it; test_natsl.c checks each
against finite differences in double precision.

The file reads in this order:
  1. conventions and the small layers (embedding, linear, norms, SwiGLU, short conv, gates, RoPE, ...)
  2. the two NAtS-L token mixers (the softmax op and the GDN op) and the router
  3. the model: the G, A, N, S and H layers, the block, the forward and backward passes
  3b. decoding with the cache: B sequences a token at a time, equal to the forward pass (doc/model.md §14)
  4. the training step: gradient norm, clipping, AdamW
  5. checkpoints and the program (the loop around train_step lives in common/train_main.inc)
  Appendix: speed and checking machinery that is not model math (the blocked matmul, bf16 emulation).
What is not model math and is shared with the GPU trainer train_natsl.cu lives in common/: the
configuration and parameter layout (config.h), the activation layout (layout.h), data loader, tokenizer,
checkpoint files, flags and the training driver.

Conventions
  * Row vectors; a linear layer with weight W[out][in] computes y = x Wᵀ; activations are token-major
    [B*T][width]; B sequences of T tokens, BT = B*T rows.
  * _forward functions overwrite (=) their outputs.
  * _backward functions accumulate (+=) into every parameter gradient (for gradient accumulation over
    micro-batches). Input gradients are accumulated (+=) unless the function's comment says it WRITES
    them (=): an op that is the only producer of a gradient writes it, so nobody has to zero it first.
  * Build: make train_natsl (see Makefile). -DNATSL_DOUBLE builds in double precision (the tests).
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tgmath.h>
#include <time.h>
#include <errno.h>
#include <sys/stat.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include "common/config.h"
#include "common/dataloader.h"
#include "common/tokenizer.h"
#include "common/checkpoint.h"
#include "common/train_util.h"
#include "common/budget.h"
#include "common/dist.h"
#include "common/layout.h" // real; LayerParams, LayerActs: named pointers into the flat buffers; the ops' arguments

#define CH NATSL_CHUNK

static inline real sigmoid(real x) { return 1 / (1 + exp(-x)); }
static inline real silu(real x) { return x * sigmoid(x); }
static inline real dsilu(real x) { real s = sigmoid(x); return s * (1 + x * (1 - s)); } // d silu / dx
static inline real softplus(real x) { return x > 20 ? x : log1p(exp(x)); }
// Built with -ffast-math, which lets the compiler assume there are no infinities or NaNs (and so
// vectorize exp): maxima start from a finite sentinel, and non-finite gradient norms are recognized from
// their bits (is_finite, common/train_util.h).
#define NEG_LARGE ((real)-1e30)

static void *xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size);
    if (!p) { fprintf(stderr, "error: out of memory allocating %zu bytes\n", n * size); exit(1); }
    return p;
}

// From the appendix: the matrix product C[M][N] (=, or += with accumulate) A·B with strided operands,
// A(i,k) = A.p[i*A.rs + k*A.cs], B(k,j) = B.p[k*B.rs + j*B.cs]; with -p bf16 it rounds its operands to bf16.
typedef struct { const real *p; long rs, cs; } GemmOperand;
static void gemm(real *C, int ldc, GemmOperand A, GemmOperand B, int M, int N, int K, int accumulate);
static int g_bf16 = 0;              // -p bf16: the CPU computes what train_natsl_cu -p bf16 does (appendix)
static real matmul_precision(real x); // x as the GPU stores a matmul operand (or the GDN op's start states): bf16 in bf16 mode
static real *attention_operands_bf16(AttnArgs *r, const AttnArgs *a, const real **dout, const real **out, int *rounds_out);

// ================================================================================================
// 1. Layers. Each _forward is followed by its _backward.
// ================================================================================================

// ---- embedding (§2, (2.1a)): h0[bt] = E[id[bt]] -------------------------------------------------------
// out: the residual stream, stored in the matmul precision (bf16 in bf16 mode, doc/model.md §12.1 item 13)
static void encoder_forward(real *out, const int *ids, const real *wte, int BT, int D) {
    #pragma omp parallel for
    for (int bt = 0; bt < BT; bt++)
        for (int i = 0; i < D; i++) out[(size_t)bt * D + i] = matmul_precision(wte[(size_t)ids[bt] * D + i]);
}
// dwte[id[bt]] += dout[bt]   (2.3c)
static void encoder_backward(real *dwte, const real *dout, const int *ids, int BT, int D) {
    for (int bt = 0; bt < BT; bt++) { // serial: two positions may hold the same token
        real *d = dwte + (size_t)ids[bt] * D;
        const real *g = dout + (size_t)bt * D;
        for (int i = 0; i < D; i++) d[i] += g[i];
    }
}

// ---- linear layer (§0): out[BT][OC] = inp[BT][C] Wᵀ (+ add[BT][OC]), W[OC][C] ------------------------------
// out_bf16: in bf16 mode the GPU stores out in bf16 (it only feeds kernels that read bf16: the short conv,
// the gated norm's gate, SwiGLU, the classifier; or it is the residual stream), so it is rounded here too. add (NULL:
// none): a residual stream that the output lands on, (2.1c-d).
static void matmul_forward(real *out, const real *inp, const real *weight, int BT, int C, int OC, int out_bf16,
                           const real *add) {
    gemm(out, OC, (GemmOperand){inp, C, 1}, (GemmOperand){weight, 1, C}, BT, OC, C, 0); // B(c,o) = W[o][c]
    if (add) {
        #pragma omp parallel for
        for (size_t i = 0; i < (size_t)BT * OC; i++) out[i] += add[i];
    }
    if (out_bf16 && g_bf16) {
        #pragma omp parallel for
        for (size_t i = 0; i < (size_t)BT * OC; i++) out[i] = matmul_precision(out[i]);
    }
}
// dinp[BT][C] = dout[BT][OC] · W, += with dinp_mode DINP_ADD, rounded to the matmul precision with DINP_WRITE_MP
// (skipped if dinp == NULL);  dweight[OC][C] += doutᵀ · inp (skipped if dweight == NULL). dout's rows are of stride
// ldo ≥ OC (matmul_backward_ld: the layers' input projections, gdn_in_ld; the GPU's product in bf16 mode runs over all
// ldo columns, the pad's zeros too).
static void matmul_backward_ld(real *dinp, real *dweight, const real *dout, int ldo, const real *inp, const real *weight,
                               int BT, int C, int OC, int dinp_mode) {
    if (dinp) gemm(dinp, C, (GemmOperand){dout, ldo, 1}, (GemmOperand){weight, C, 1}, BT, C, OC, dinp_mode == DINP_ADD);
    if (dinp && dinp_mode == DINP_WRITE_MP && g_bf16) {
        #pragma omp parallel for
        for (size_t i = 0; i < (size_t)BT * C; i++) dinp[i] = matmul_precision(dinp[i]);
    }
    if (dweight) gemm(dweight, C, (GemmOperand){dout, 1, ldo}, (GemmOperand){inp, C, 1}, OC, C, BT, 1); // A(o,t) = dout[t][o]
}
static void matmul_backward(real *dinp, real *dweight, const real *dout, const real *inp, const real *weight, int BT,
                            int C, int OC, int dinp_mode) {
    matmul_backward_ld(dinp, dweight, dout, OC, inp, weight, BT, C, OC, dinp_mode);
}

// ---- RMSNorm (§0, (0.3)): y = x / sqrt(mean(x²) + eps) ⊙ w over rows of width n ------------------------
// The rows (NormRows, common/layout.h) are (i, h) for i < N, h < nh, at x + i*ldx + h*n (and y + i*ldy + h*n): one
// call normalizes every head of a packed [N][nh*n] tensor. rstd[i*nh + h] is kept for the backward. y_mp: y is stored
// in the matmul precision (bf16 in bf16 mode: where it feeds only matmuls or the softmax op), so it is rounded.
static void rmsnorm_forward(real *y, real *rstd, const real *x, const real *w, NormRows rows, int y_mp) {
    int N = rows.rows, nh = rows.heads, n = rows.n, ldx = rows.ldx, ldy = rows.ldy;
    #pragma omp parallel for
    for (int r = 0; r < N * nh; r++) {
        const real *xr = x + (size_t)(r / nh) * ldx + (r % nh) * n;
        real *yr = y + (size_t)(r / nh) * ldy + (r % nh) * n;
        real ss = 0;
        for (int i = 0; i < n; i++) ss += xr[i] * xr[i];
        real s = 1 / sqrt(ss / n + NATSL_EPS);
        for (int i = 0; i < n; i++) yr[i] = y_mp ? matmul_precision(xr[i] * s * w[i]) : xr[i] * s * w[i];
        rstd[r] = s;
    }
}
// dx += ρ(w⊙dy − x̂·mean(x̂⊙w⊙dy)),  dw += Σ_rows dy⊙x̂   (3.4j);  dx_mp: dx is stored in the matmul precision (the
// residual stream's gradient), so the sum is rounded
static void rmsnorm_backward(real *dx, real *dw, const real *dy, const real *x, const real *w, const real *rstd,
                             NormRows rows, int dx_mp) {
    int N = rows.rows, nh = rows.heads, n = rows.n, ldx = rows.ldx, ldy = rows.ldy;
    #pragma omp parallel for
    for (int r = 0; r < N * nh; r++) {
        size_t ox = (size_t)(r / nh) * ldx + (r % nh) * n, oy = (size_t)(r / nh) * ldy + (r % nh) * n;
        real s = rstd[r], dot = 0;
        for (int i = 0; i < n; i++) dot += x[ox + i] * s * w[i] * dy[oy + i];
        dot /= n;
        for (int i = 0; i < n; i++) {
            real v = dx[ox + i] + s * (w[i] * dy[oy + i] - x[ox + i] * s * dot);
            dx[ox + i] = dx_mp ? matmul_precision(v) : v;
        }
    }
    #pragma omp parallel for
    for (int i = 0; i < n; i++) { // one column per thread: a fixed summation order (reproducible)
        real acc = 0;
        for (int r = 0; r < N * nh; r++) {
            size_t ox = (size_t)(r / nh) * ldx + (r % nh) * n, oy = (size_t)(r / nh) * ldy + (r % nh) * n;
            acc += dy[oy + i] * x[ox + i] * rstd[r];
        }
        dw[i] += acc;
    }
}

// ---- SwiGLU (§2, (2.2a)): h = silu(gu[:, :F]) ⊙ gu[:, F:] ----------------------------------------------
// h is stored in the matmul precision (it feeds only W_down's product)
static void swiglu_forward(real *h, const real *gu, int BT, int F) {
    #pragma omp parallel for
    for (int bt = 0; bt < BT; bt++)
        for (int i = 0; i < F; i++) {
            const real *row = gu + (size_t)bt * 2 * F;
            h[(size_t)bt * F + i] = matmul_precision(silu(row[i]) * row[F + i]);
        }
}
// dgu = [dh ⊙ up ⊙ silu'(gate), dh ⊙ silu(gate)]   (2.2b): WRITES dgu (SwiGLU is its only producer); and WRITES
// h = silu(gate) ⊙ up again, as swiglu_forward computes it (W_down's weight gradient reads it: block_rebuild; the GPU
// forms it in the same pass)
static void swiglu_backward(real *dgu, real *h, const real *dh, const real *gu, int BT, int F) {
    #pragma omp parallel for
    for (int bt = 0; bt < BT; bt++)
        for (int i = 0; i < F; i++) {
            const real *row = gu + (size_t)bt * 2 * F;
            real d = dh[(size_t)bt * F + i];
            real *dg = dgu + (size_t)bt * 2 * F;
            dg[i] = d * row[F + i] * dsilu(row[i]);
            dg[F + i] = d * silu(row[i]);
        }
    swiglu_forward(h, gu, BT, F);
}

// ---- causal depthwise short conv (kernel 4) + SiLU (§3.1, (3.1b-c)) --------------------------------------
// pre_t[ch] = Σ_{i<4} w[ch][i] x_{t−3+i}[ch] (x_τ = 0 for τ < 0, per sequence);  y = silu(pre).
// The conv (ConvArgs, common/layout.h) runs on channels col .. col+n−1 of x (rows of stride ldx: the projection
// output) with those channels' weights w[col + ch][4]; y is [B*T][n], stored in the matmul precision (bf16 in bf16
// mode: it feeds the L2 norm, the two ops and the N layer's RMSNorm, which read it so). pre is not stored: the
// backward pass recomputes it from x.
static real conv_pre(const real *xc, int ldx, const real *wc, int t) { // xc: the channel's column of the sequence
    real s = 0;
    for (int i = 0; i < NATSL_CONV; i++) {
        int tau = t - (NATSL_CONV - 1) + i;
        if (tau >= 0) s += wc[i] * xc[(size_t)tau * ldx];
    }
    return s;
}
static void conv_silu_forward(real *y, const ConvArgs *a, int col, int n) {
    const real *x = a->x, *w = a->w;
    int ldx = a->ldx, B = a->B, T = a->T;
    #pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            size_t bt = (size_t)b * T + t;
            for (int ch = 0; ch < n; ch++)
                y[bt * n + ch] = matmul_precision(silu(conv_pre(x + (size_t)b * T * ldx + col + ch, ldx, w + (col + ch) * NATSL_CONV, t)));
        }
}
// dpre = dy ⊙ silu'(pre);  dx_τ = Σ_i w[i] dpre_{τ+3−i};  dw[ch][i] += Σ_t dpre_t x_{t−3+i}   (3.4k, 3.4n)
// WRITES dx's channels col .. col+n−1 (the conv is their only producer; rows of stride lddx).
static void conv_silu_backward(real *dx, int lddx, real *dw, const real *dy, const ConvArgs *a, int col, int n) {
    const real *x = a->x, *w = a->w;
    int ldx = a->ldx, B = a->B, T = a->T;
    #pragma omp parallel for
    for (int ch = 0; ch < n; ch++) { // channels are independent: one thread owns a channel
        const real *wc = w + (col + ch) * NATSL_CONV;
        real dwc[NATSL_CONV] = {0};
        for (int b = 0; b < B; b++) {
            const real *xc = x + (size_t)b * T * ldx + col + ch;
            real *dxc = dx + (size_t)b * T * lddx + col + ch;
            for (int t = 0; t < T; t++) dxc[(size_t)t * lddx] = 0;
            for (int t = 0; t < T; t++) {
                size_t bt = (size_t)b * T + t;
                real dp = dy[bt * n + ch] * dsilu(conv_pre(xc, ldx, wc, t));
                for (int i = 0; i < NATSL_CONV; i++) {
                    int tau = t - (NATSL_CONV - 1) + i;
                    if (tau < 0) continue;
                    dwc[i] += dp * xc[(size_t)tau * ldx];
                    dxc[(size_t)tau * lddx] += dp * wc[i];
                }
            }
        }
        for (int i = 0; i < NATSL_CONV; i++) dw[(col + ch) * NATSL_CONV + i] += dwc[i];
    }
}

// The G and N layers' Q, K, V (K, K and Vt channels) from the projection's columns Q | K | V, and the backward that
// WRITES dx's columns Q | K | V (rows of stride lddx; the GPU takes the three runs in one launch).
static void conv_silu_qkv_forward(real *q, real *k, real *v, const ConvArgs *a, int K, int Vt) {
    conv_silu_forward(q, a, 0, K);
    conv_silu_forward(k, a, K, K);
    conv_silu_forward(v, a, 2 * K, Vt);
}
static void conv_silu_qkv_backward(real *dx, int lddx, real *dw, const real *dq, const real *dk, const real *dv,
                                   const ConvArgs *a, int K, int Vt) {
    conv_silu_backward(dx, lddx, dw, dq, a, 0, K);
    conv_silu_backward(dx, lddx, dw, dk, a, K, K);
    conv_silu_backward(dx, lddx, dw, dv, a, 2 * K, Vt);
}

// ---- L2 norm per head (§0, (0.4)): ŷ = x / sqrt(Σx² + 1e-6); x, y are [N][nh*n] -----------------------
// y (q̂, k̂: the GDN op's operands) is stored in the matmul precision, as x (the conv's output) is.
static void l2norm_forward(real *y, real *rho, const real *x, int N, int nh, int n) {
    #pragma omp parallel for
    for (int r = 0; r < N * nh; r++) {
        const real *xr = x + (size_t)r * n;
        real ss = 0;
        for (int i = 0; i < n; i++) ss += xr[i] * xr[i];
        real s = 1 / sqrt(ss + NATSL_EPS);
        for (int i = 0; i < n; i++) y[(size_t)r * n + i] = matmul_precision(xr[i] * s);
        rho[r] = s;
    }
}
// WRITES dx = ρ(dŷ − ŷ(ŷ·dŷ))   (3.4i), in place if dx = dy; rows of dx, dy and y of stride ld (nh·n: the planes
// above). The GDN op's backward calls it (GdnArgs.rho): the layers take dQ, dK from the op and add their other parts.
static void l2norm_backward(real *dx, const real *dy, const real *y, const real *rho, int N, int nh, int n, int ld) {
    #pragma omp parallel for
    for (int r = 0; r < N * nh; r++) {
        size_t at = (size_t)(r / nh) * ld + (size_t)(r % nh) * n;
        const real *yr = y + at, *dyr = dy + at;
        real dot = 0;
        for (int i = 0; i < n; i++) dot += yr[i] * dyr[i];
        for (int i = 0; i < n; i++) dx[at + i] = rho[r] * (dyr[i] - yr[i] * dot);
    }
}

// ---- GDN gates (§3.1, (3.1f-g)): β = σ(b), g = −exp(A_log)·softplus(a + dt_bias); ab rows are [a(H) | b(H)]
// (GdnGatesArgs, common/layout.h)
static void gdn_gates_forward(real *g, real *beta, const GdnGatesArgs *a) {
    const real *ab = a->ab, *A_log = a->A_log, *dt_bias = a->dt_bias;
    int BT = a->BT, H = a->H;
    #pragma omp parallel for
    for (int bt = 0; bt < BT; bt++)
        for (int h = 0; h < H; h++) {
            const real *row = ab + (size_t)bt * 2 * H;
            g[(size_t)bt * H + h] = -exp(A_log[h]) * softplus(row[h] + dt_bias[h]);
            beta[(size_t)bt * H + h] = sigmoid(row[H + h]);
        }
}
// da = dg·(−e^{A_log})·σ(a + dt_bias), d dt_bias = Σ da, dA_log = Σ dg·g, db = dβ·β(1−β)   (3.4l-m), from the
// forward's g and β. WRITES dab's rows (stride ld_dab): da | db, then zeros up to column ncol_dab (the pad of the
// layers' gradient rows, gdn_in_ld)
static void gdn_gates_backward(real *dab, real *dA_log, real *ddt_bias, const real *dg, const real *dbeta,
                               const real *g, const real *beta, const GdnGatesArgs *a) {
    const real *ab = a->ab, *A_log = a->A_log, *dt_bias = a->dt_bias;
    int BT = a->BT, H = a->H, ld = a->ld_dab, ncol = a->ncol_dab;
    for (int bt = 0; bt < BT; bt++)
        for (int j = 2 * H; j < ncol; j++) dab[(size_t)bt * ld + j] = 0;
    for (int h = 0; h < H; h++) {
        real sa = 0, sd = 0;
        for (int bt = 0; bt < BT; bt++) {
            size_t i = (size_t)bt * H + h;
            real da = dg[i] * -exp(A_log[h]) * sigmoid(ab[(size_t)bt * 2 * H + h] + dt_bias[h]);
            real *d = dab + (size_t)bt * ld;
            d[h] = da;
            d[H + h] = dbeta[i] * beta[i] * (1 - beta[i]);
            sd += da;
            sa += dg[i] * g[i];
        }
        ddt_bias[h] += sd;
        dA_log[h] += sa;
    }
}

// ---- RoPE (§4, (4.2a-b); §5.8): rotate-half, theta 10000, in place on nh heads of width hd ------------------
// Row r is position t = r mod T; the angle t·10000^(−2i/hd) in double. The backward is the rotation by the
// opposite angle (sign = −1). x_mp: x is stored in the matmul precision (the A layer's q, k), so the rotated
// values are rounded to it.
// One token's row x (nh heads of width hd, contiguous) at position t (the decoder rotates one token at a time).
static void rope_rotate_row(real *x, int t, int nh, int hd, int sign, int x_mp) {
    for (int h = 0; h < nh; h++) {
        real *v = x + h * hd;
        for (int i = 0; i < hd / 2; i++) {
            double ang = t * pow(10000.0, -2.0 * i / hd);
            real c = cos(ang), s = sign * sin(ang);
            real x1 = v[i], x2 = v[i + hd / 2];
            v[i] = x1 * c - x2 * s;
            v[i + hd / 2] = x2 * c + x1 * s;
            if (x_mp) { v[i] = matmul_precision(v[i]); v[i + hd / 2] = matmul_precision(v[i + hd / 2]); }
        }
    }
}
static void rope_rotate(real *x, int N, int T, int nh, int hd, int ld, int sign, int x_mp) {
    #pragma omp parallel for
    for (int r = 0; r < N; r++) rope_rotate_row(x + (size_t)r * ld, r % T, nh, hd, sign, x_mp);
}
static void rope_forward(real *x, int N, int T, int nh, int hd, int ld, int x_mp) { rope_rotate(x, N, T, nh, hd, ld, 1, x_mp); }
// in place: dx holds dL/d(rotated x) and becomes dL/dx
static void rope_backward(real *dx, int N, int T, int nh, int hd, int ld) { rope_rotate(dx, N, T, nh, hd, ld, -1, 0); }

// ---- pairwise softmax: y[2i..2i+1] = softmax(x[2i..2i+1]) (router π (5.2c), output weights ω (5.1e)) --
static void pair_softmax_forward(real *y, const real *x, size_t npairs) {
    for (size_t i = 0; i < npairs; i++) {
        real p0 = 1 / (1 + exp(x[2 * i + 1] - x[2 * i]));
        y[2 * i] = p0;
        y[2 * i + 1] = 1 - p0;
    }
}
// dx0 += y0·y1·(dy0 − dy1),  dx1 −= the same   (6.5c)
static void pair_softmax_backward(real *dx, const real *dy, const real *y, size_t npairs) {
    for (size_t i = 0; i < npairs; i++) {
        real d = y[2 * i] * y[2 * i + 1] * (dy[2 * i] - dy[2 * i + 1]);
        dx[2 * i] += d;
        dx[2 * i + 1] -= d;
    }
}

// ---- the classifier's loss (§2, (2.3a)): cross-entropy over the V real tokens of the padded logits [BT][Vp] ------
// A target ANSWER_IGNORE (-1, answer-only training: not an answer) is skipped: loss 0, gradient 0 (§13.1, (13.1a-b)).
static void crossentropy_forward(real *losses, real *lse, const real *logits, const int *targets,
                                 int BT, int V, int Vp) {
    #pragma omp parallel for
    for (int bt = 0; bt < BT; bt++) {
        const real *z = logits + (size_t)bt * Vp;
        real mx = NEG_LARGE, s = 0;
        for (int i = 0; i < V; i++) mx = fmax(mx, z[i]);
        #pragma omp simd reduction(+ : s)
        for (int i = 0; i < V; i++) s += exp(z[i] - mx);
        lse[bt] = mx + log(s);
        losses[bt] = targets[bt] == ANSWER_IGNORE ? 0 : lse[bt] - z[targets[bt]];
    }
}
// WRITES dlogits in place of the logits: dloss·(softmax − onehot) on the V real tokens, 0 on the padding (2.3b).
static void crossentropy_backward(real *logits, const real *lse, const int *targets, real dloss,
                                  int BT, int V, int Vp) {
    #pragma omp parallel for
    for (int bt = 0; bt < BT; bt++) {
        real *z = logits + (size_t)bt * Vp, l = lse[bt];
        int tg = targets[bt];
        real dl = tg == ANSWER_IGNORE ? 0 : dloss;
        #pragma omp simd
        for (int i = 0; i < V; i++) z[i] = dl * exp(z[i] - l) - (i == tg ? dl : 0);
        for (int i = V; i < Vp; i++) z[i] = 0;
    }
}

// Accuracy (§13.1, (13.1c)): hit[bt] = 1 where the argmax of the V real logits (the lowest id among equal maxima) is
// the target, else 0 (and 0 where the target is ANSWER_IGNORE).
static void crossentropy_hits(unsigned char *hit, const real *logits, const int *targets, int BT, int V, int Vp) {
    #pragma omp parallel for
    for (int bt = 0; bt < BT; bt++) {
        const real *z = logits + (size_t)bt * Vp;
        int best = 0;
        for (int i = 1; i < V; i++) if (z[i] > z[best]) best = i;
        hit[bt] = targets[bt] != ANSWER_IGNORE && best == targets[bt];
    }
}

// ================================================================================================
// 2. The two token mixers of a NAtS-L layer and the router that drives them with the routing mask
// m[B][Nc][Hm][2] (op 0 = softmax attention, op 1 = GDN; §5.2). In training m is 0/1 with the last chunk 1
// for both ops. The ops also accept real-valued m in [0,1] (the relaxation of §8), and m = NULL means
// "every chunk active": the plain causal attention of an A layer, the plain recurrence of a G layer.
// ================================================================================================

// weight of the pairs between a query in chunk cq and the keys of chunk c (§5.3, §8)
static inline real chunk_weight(const real *m, int b, int c, int cq, int n, int Nc, int Hm, int op) {
    if (!m || c == cq) return 1;
    return m[(((size_t)b * Nc + c) * Hm + n) * 2 + op];
}

// ---- softmax attention over the allowed pairs (§4, §5.3: (5.3a-d)) ----------------------------------------
// Operands in AttnArgs (common/layout.h). out [B*T][heads*head_v]; lse [B][heads][T] (log of each row's
// normalizer, kept for the backward). Query i attends key j' ≤ i of its own chunk, and the keys of earlier
// chunks c with weight m[b][c][j/G][0] (G = heads/mask_heads heads share one mask head; chunks with weight 0
// are skipped):  P_ij' = w_ij' exp(e_ij') / Σ w exp(e),  e_ij' = q_i·k_j' / sqrt(head_k),  o_i = Σ P_ij' v_j'.
// One query row q against spans of keys (§5.3 (5.3b-d)): span i holds n keys k + t·ldk and values v + t·ldv with
// weight w (the chunk's mask value; a span of weight 0 is not passed).  o = Σ w·exp(e − mx)·v / Σ w·exp(e − mx),
// e = q·k / sqrt(dq); returns lse = mx + log(Σ w·exp(e − mx)). e: scratch for the keys of all spans. The training
// forward passes a query's allowed chunks, the decoder (§14) its cache: kept chunks and the current one.
typedef struct { const real *k, *v; int ldk, ldv, n; real w; } KeySpan;
static real attend_query(real *o, const real *q, const KeySpan *sp, int nsp, int dq, int dvh, real *e) {
    real scale = 1 / sqrt((real)dq), mx = NEG_LARGE, sum = 0;
    int at = 0;
    for (int s = 0; s < nsp; s++)
        for (int t = 0; t < sp[s].n; t++, at++) {
            const real *kt = sp[s].k + (size_t)t * sp[s].ldk;
            real dot = 0;
            for (int d = 0; d < dq; d++) dot += q[d] * kt[d];
            e[at] = dot * scale;
            if (e[at] > mx) mx = e[at];
        }
    for (int d = 0; d < dvh; d++) o[d] = 0;
    at = 0;
    for (int s = 0; s < nsp; s++)
        for (int t = 0; t < sp[s].n; t++, at++) {
            real p = sp[s].w * exp(e[at] - mx);
            const real *vt = sp[s].v + (size_t)t * sp[s].ldv;
            sum += p;
            for (int d = 0; d < dvh; d++) o[d] += p * vt[d];
        }
    for (int d = 0; d < dvh; d++) o[d] /= sum;
    return mx + log(sum);
}
static void attention_forward(real *out, real *lse, const AttnArgs *args) {
    AttnArgs r;
    int rounds_out;
    real *copies = attention_operands_bf16(&r, args, NULL, NULL, &rounds_out); // -p bf16 (appendix): the GPU's bf16 operands
    const AttnArgs *a = copies ? &r : args;
    const real *q = a->q, *k = a->k, *v = a->v, *m = a->mask;
    int B = a->B, T = a->T, NH = a->heads, Hm = a->mask_heads, dq = a->head_k, dvh = a->head_v;
    int Nc = T / CH, G = NH / Hm;
    #pragma omp parallel
    {
        real *e = xcalloc(T, sizeof(real));
        KeySpan *sp = xcalloc(Nc, sizeof(KeySpan));
        #pragma omp for collapse(2)
        for (int b = 0; b < B; b++)
            for (int j = 0; j < NH; j++)
                for (int i = 0; i < T; i++) {
                    int ci = i / CH, nsp = 0;
                    for (int c = 0; c <= ci; c++) {
                        real wc = chunk_weight(m, b, c, ci, j / G, Nc, Hm, 0);
                        if (wc == 0) continue;
                        size_t row = (size_t)b * T + c * CH;
                        sp[nsp++] = (KeySpan){k + row * a->ldqk + j * dq, v + row * a->ldv + j * dvh, a->ldqk, a->ldv,
                                              c < ci ? CH : i - c * CH + 1, wc};
                    }
                    const real *qi = q + ((size_t)b * T + i) * a->ldqk + j * dq;
                    real *oi = out + ((size_t)b * T + i) * NH * dvh + j * dvh;
                    lse[((size_t)b * NH + j) * T + i] = attend_query(oi, qi, sp, nsp, dq, dvh, e);
                }
        free(e); free(sp);
    }
    if (rounds_out)
        for (size_t i = 0; i < (size_t)B * T * NH * dvh; i++) out[i] = matmul_precision(out[i]);
    free(copies);
}
// Exact backward over the allowed pairs (§6.2, (6.2a-d)): dP = dO_i·v_j', δ_i = dO_i·o_i, dE = P(dP − δ),
// dq_i = s Σ dE k, dk_j' = s Σ dE q, dv_j' = Σ P dO.  Router gradient (§6.3), when m != NULL: for key
// chunks c < chunk(i) with m ≠ 0, dA[b][c][n][0] = Σ exp(e − lse)(dP − δ) over the G heads of mask head n,
// the later queries and the chunk's keys (= dL/dm exactly, (6.3a)).
// With own_sg (§6.2 (6.2e)) the pairs of a query's own chunk add nothing to dq, dk, dv (δ_i keeps the whole o_i).
// WRITES dq, dk, dv (their heads' columns; the other columns of the rows are left as they are) and dA[...][0]
// (all chunks; 0 where m = 0 and at the last chunk; dA[...][1] is left as it is).
static void attention_backward(real *dq, real *dk, real *dv, real *dA, const real *dout, const real *out,
                               const real *lse, const AttnArgs *args) {
    AttnArgs r;
    int rounds_out;
    real *copies = attention_operands_bf16(&r, args, &dout, &out, &rounds_out); // -p bf16 (appendix): the GPU's bf16 operands
    const AttnArgs *a = copies ? &r : args;
    const real *q = a->q, *k = a->k, *v = a->v, *m = a->mask;
    int B = a->B, T = a->T, NH = a->heads, Hm = a->mask_heads, dqh = a->head_k, dvh = a->head_v;
    int Nc = T / CH, G = NH / Hm, ldqk = a->ldqk, ldv = a->ldv;
    real scale = 1 / sqrt((real)dqh);
    #pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (int n = 0; n < Hm; n++) { // one thread owns a mask head: its dA entries and its G heads
            for (int j = n * G; j < (n + 1) * G; j++)
                for (int i = 0; i < T; i++) {
                    size_t row = (size_t)b * T + i;
                    memset(dq + row * ldqk + j * dqh, 0, dqh * sizeof(real));
                    memset(dk + row * ldqk + j * dqh, 0, dqh * sizeof(real));
                    memset(dv + row * ldv + j * dvh, 0, dvh * sizeof(real));
                }
            if (m) for (int c = 0; c < Nc; c++) dA[(((size_t)b * Nc + c) * Hm + n) * 2 + 0] = 0;
            for (int j = n * G; j < (n + 1) * G; j++)
                for (int i = 0; i < T; i++) {
                    int ci = i / CH;
                    size_t row = (size_t)b * T + i;
                    const real *qi = q + row * ldqk + j * dqh;
                    const real *doi = dout + row * NH * dvh + j * dvh, *oi = out + row * NH * dvh + j * dvh;
                    real *dqi = dq + row * ldqk + j * dqh;
                    real delta = 0, l = lse[((size_t)b * NH + j) * T + i];
                    for (int d = 0; d < dvh; d++) delta += doi[d] * oi[d];
                    for (int c = 0; c <= ci - (a->own_sg ? 1 : 0); c++) {
                        real wc = chunk_weight(m, b, c, ci, n, Nc, Hm, 0);
                        if (wc == 0) continue;
                        real dAc = 0;
                        for (int jj = c * CH; jj < (c + 1) * CH && jj <= i; jj++) {
                            size_t rj = (size_t)b * T + jj;
                            const real *kj = k + rj * ldqk + j * dqh, *vj = v + rj * ldv + j * dvh;
                            real s = 0, dp = 0;
                            for (int d = 0; d < dqh; d++) s += qi[d] * kj[d];
                            for (int d = 0; d < dvh; d++) dp += doi[d] * vj[d];
                            real ex = exp(s * scale - l), p = wc * ex, de = p * (dp - delta);
                            real *dkj = dk + rj * ldqk + j * dqh, *dvj = dv + rj * ldv + j * dvh;
                            for (int d = 0; d < dqh; d++) { dqi[d] += scale * de * kj[d]; dkj[d] += scale * de * qi[d]; }
                            for (int d = 0; d < dvh; d++) dvj[d] += p * doi[d];
                            dAc += ex * (dp - delta);
                        }
                        if (m && c < ci) dA[(((size_t)b * Nc + c) * Hm + n) * 2 + 0] += dAc;
                    }
                }
        }
    free(copies);
}

// ---- the GDN op with chunk commits (§3.2, §5.4: (5.4a-h)) ---------------------------------------------------
// Operands in GdnArgs (common/layout.h). out [B*T][H*head_v]; state [B][H][Nc][head_k][head_v] keeps the
// committed state before each chunk, as stored: s0_c = S_c (bf16(S_c) with -p bf16, as the GPU stores it, (5.4h)).
// Per chunk c, a virtual run starts from s0_c and applies the delta rule token by token (decay first, then
// update; the output reads the updated state):
//   Z ← α_t Z;  u_t = β_t (v_t − Zᵀk̂_t);  Z ← Z + k̂_t u_tᵀ;  o_t = s Zᵀq̂_t      (α_t = e^{g_t}, s = 1/sqrt(d_k))
// then S_{c+1} = Dec_c S_c + m_c (Z_last − Dec_c s0_c),  Dec_c = exp(Σ_{t∈c} g_t),  m_c = m[b][c][h][1]:
// a GDN chunk (m = 1) commits its run, any other chunk only decays the committed state.
// One token of the delta rule on the d_k×d_v run state Z (3.2b-e): Z ← α Z;  u = β(v − Zᵀk̂);  Z ← Z + k̂ uᵀ;
// o = s Zᵀq̂ (s = 1/sqrt(d_k)). kz: scratch [d_v]. The training forward and the decoder (§14) step with it.
static void gdn_token_step(real *Z, real *o, const real *q, const real *k, const real *v, real al, real bt, int dk,
                           int dv, real *kz) {
    real scale = 1 / sqrt((real)dk);
    for (int j = 0; j < dv; j++) kz[j] = 0;
    for (int i = 0; i < dk; i++)
        for (int j = 0; j < dv; j++) { Z[i * dv + j] *= al; kz[j] += k[i] * Z[i * dv + j]; }
    for (int j = 0; j < dv; j++) { kz[j] = bt * (v[j] - kz[j]); o[j] = 0; } // kz ← u_t
    for (int i = 0; i < dk; i++)
        for (int j = 0; j < dv; j++) { Z[i * dv + j] += k[i] * kz[j]; o[j] += q[i] * Z[i * dv + j]; }
    for (int j = 0; j < dv; j++) o[j] *= scale;
}
// The chunk's commit (5.4h): S ← Dec·S + m·(Z_last − Dec·s0), s0 = the start state as stored (matmul_precision(S)),
// written (1 − m)·Dec·S + m·(Z + Dec·(S − s0)); m = 1 for a G layer and a GDN-routed chunk, 0 for a softmax one.
static void gdn_chunk_commit(real *S, const real *Z, real mc, real dec, size_t KV) {
    for (size_t i = 0; i < KV; i++) S[i] = (1 - mc) * dec * S[i] + mc * (Z[i] + dec * (S[i] - matmul_precision(S[i])));
}
static void gdn_op_forward(real *out, real *state, const GdnArgs *a) {
    const real *q = a->q, *k = a->k, *v = a->v, *g = a->g, *beta = a->beta, *m = a->mask;
    int B = a->B, T = a->T, H = a->H, dk = a->head_k, dv = a->head_v, Nc = T / CH;
    size_t KV = (size_t)dk * dv;
    #pragma omp parallel
    {
        real *S = xcalloc(KV, sizeof(real)), *Z = xcalloc(KV, sizeof(real)), *kz = xcalloc(dv, sizeof(real));
        #pragma omp for collapse(2)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < H; h++) {
                memset(S, 0, KV * sizeof(real));
                for (int c = 0; c < Nc; c++) {
                    // the chunk runs from its stored start state (bf16 on the GPU in bf16 mode, (5.4h))
                    real *s0 = state + (((size_t)b * H + h) * Nc + c) * KV;
                    for (size_t i = 0; i < KV; i++) s0[i] = Z[i] = matmul_precision(S[i]);
                    real gsum = 0;
                    for (int t = c * CH; t < (c + 1) * CH; t++) {
                        size_t row = (size_t)b * T + t;
                        const real *qt = q + row * a->ldqk + h * dk, *kt = k + row * a->ldqk + h * dk;
                        const real *vt = v + row * a->ldv + h * dv;
                        gsum += g[row * H + h];
                        gdn_token_step(Z, out + row * H * dv + h * dv, qt, kt, vt, exp(g[row * H + h]), beta[row * H + h],
                                       dk, dv, kz);
                    }
                    real mc = m ? m[(((size_t)b * Nc + c) * H + h) * 2 + 1] : 1;
                    gdn_chunk_commit(S, Z, mc, exp(gsum), KV);
                }
            }
        free(S); free(Z); free(kz);
    }
    if (a->out_mp) // the layers' output, stored in the matmul precision (it feeds only the gated norm)
        for (size_t i = 0; i < (size_t)B * T * H * dv; i++) out[i] = matmul_precision(out[i]);
}
// Exact backward (§3.4 (3.4a-h), §6.1 (6.1a-c), §6.4 (6.4b)), chunk by chunk in reverse, carrying dS = dL/dS_{c+1}.
// Inside a chunk the run is recomputed from the saved S_c and back-propagated token by token:
//   D = dZ_t + s q̂_t dO_tᵀ;  dq̂ = s Z_t dO;  dk̂ = D u;  du = Dᵀk̂;  r = v − P_tᵀk̂ (P_t = α_t Z_{t−1});
//   dβ = du·r;  dr = β du;  dv = dr;  dP = D − k̂ drᵀ;  dk̂ −= P dr;  dg_t = ⟨dP, P_t⟩;  dZ_{t−1} = α_t dP
// starting from dZ_last = m_c dS. Then dS_c = dZ_start + (1 − m_c) Dec_c dS; the decay-only path adds
// (1 − m_c) Dec_c ⟨dS, S_c⟩ to every dg_t of the chunk; and the router gradient where m_c ≠ 0 is
// dA[b][c][h][1] = ⟨dS, Z_last − Dec_c S_c⟩ (the chunk's own update ΔS_c, §6.4).
// WRITES dq, dk (their heads' columns), dg, dβ and dA[...][1]; dv WRITTEN likewise, or ACCUMULATED into with
// a->dv_add (an N layer: the softmax op has written its part of dv first). With a->rho (the layers') dq, dk are the
// gradients of the L2 norm's inputs Q, K: the norm's backward (3.4i) runs last, in place; with a->grads_mp (a G layer's)
// dq, dk, dv are then stored in the matmul precision.
static void gdn_op_backward(real *dq, real *dk, real *dv, real *dg, real *dbeta, real *dA, const real *dout,
                            const real *state, const GdnArgs *a) {
    const real *q = a->q, *k = a->k, *v = a->v, *g = a->g, *beta = a->beta, *m = a->mask;
    int B = a->B, T = a->T, H = a->H, dkh = a->head_k, dvh = a->head_v, Nc = T / CH, ldqk = a->ldqk, ldv = a->ldv;
    size_t KV = (size_t)dkh * dvh;
    real scale = 1 / sqrt((real)dkh);
    #pragma omp parallel
    {
        real *Zs = xcalloc((CH + 1) * KV, sizeof(real));    // Z_{start-1}, Z_start, ..., Z_last
        real *us = xcalloc(CH * dvh, sizeof(real)), *rs = xcalloc(CH * dvh, sizeof(real));
        real *dS = xcalloc(KV, sizeof(real)), *dZ = xcalloc(KV, sizeof(real));
        real *du = xcalloc(dvh, sizeof(real));
        #pragma omp for collapse(2)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < H; h++) {
                for (int t = 0; t < T; t++) {
                    size_t row = (size_t)b * T + t;
                    memset(dq + row * ldqk + h * dkh, 0, dkh * sizeof(real));
                    memset(dk + row * ldqk + h * dkh, 0, dkh * sizeof(real));
                    if (!a->dv_add) memset(dv + row * ldv + h * dvh, 0, dvh * sizeof(real));
                    dg[row * H + h] = dbeta[row * H + h] = 0;
                }
                if (m) for (int c = 0; c < Nc; c++) dA[(((size_t)b * Nc + c) * H + h) * 2 + 1] = 0;
                memset(dS, 0, KV * sizeof(real));
                for (int c = Nc - 1; c >= 0; c--) {
                    const real *Sc = state + (((size_t)b * H + h) * Nc + c) * KV;
                    // recompute the chunk's virtual run, keeping every Z_t, u_t and r_t
                    memcpy(Zs, Sc, KV * sizeof(real));
                    real gsum = 0;
                    for (int tt = 0; tt < CH; tt++) {
                        size_t row = (size_t)b * T + c * CH + tt;
                        const real *kt = k + row * ldqk + h * dkh, *vt = v + row * ldv + h * dvh;
                        real al = exp(g[row * H + h]), bt = beta[row * H + h];
                        const real *Zp = Zs + tt * KV;
                        real *Zt = Zs + (tt + 1) * KV, *r = rs + tt * dvh, *u = us + tt * dvh;
                        gsum += g[row * H + h];
                        for (int j = 0; j < dvh; j++) r[j] = vt[j];
                        for (int i = 0; i < dkh; i++)
                            for (int j = 0; j < dvh; j++) r[j] -= al * Zp[i * dvh + j] * kt[i];
                        for (int j = 0; j < dvh; j++) u[j] = bt * r[j];
                        for (int i = 0; i < dkh; i++)
                            for (int j = 0; j < dvh; j++) Zt[i * dvh + j] = al * Zp[i * dvh + j] + kt[i] * u[j];
                    }
                    real mc = m ? m[(((size_t)b * Nc + c) * H + h) * 2 + 1] : 1, dec = exp(gsum);
                    if (m) {
                        real dm = 0, dd = 0;
                        for (size_t i = 0; i < KV; i++) {
                            dm += dS[i] * (Zs[CH * KV + i] - dec * Sc[i]);
                            dd += dS[i] * Sc[i];
                        }
                        if (mc != 0) dA[(((size_t)b * Nc + c) * H + h) * 2 + 1] += dm;
                        for (int tt = 0; tt < CH; tt++) dg[((size_t)b * T + c * CH + tt) * H + h] += (1 - mc) * dec * dd;
                    }
                    for (size_t i = 0; i < KV; i++) dZ[i] = mc * dS[i];
                    for (int tt = CH - 1; tt >= 0; tt--) {
                        size_t row = (size_t)b * T + c * CH + tt;
                        const real *qt = q + row * ldqk + h * dkh, *kt = k + row * ldqk + h * dkh;
                        const real *dot = dout + row * H * dvh + h * dvh;
                        const real *Zp = Zs + tt * KV, *Zt = Zs + (tt + 1) * KV, *u = us + tt * dvh, *r = rs + tt * dvh;
                        real al = exp(g[row * H + h]), bt = beta[row * H + h];
                        real *dqt = dq + row * ldqk + h * dkh, *dkt = dk + row * ldqk + h * dkh;
                        real *dvt = dv + row * ldv + h * dvh;
                        for (int j = 0; j < dvh; j++) du[j] = 0;
                        for (int i = 0; i < dkh; i++) { // D = dZ + s q dOᵀ (in dZ); dq̂, dk̂ = D u, du = Dᵀk̂
                            real sq = 0, sk = 0;
                            for (int j = 0; j < dvh; j++) {
                                real d = dZ[i * dvh + j] += scale * qt[i] * dot[j];
                                sq += Zt[i * dvh + j] * dot[j];
                                sk += d * u[j];
                                du[j] += kt[i] * d;
                            }
                            dqt[i] += scale * sq;
                            dkt[i] += sk;
                        }
                        real db = 0;
                        for (int j = 0; j < dvh; j++) { db += du[j] * r[j]; du[j] *= bt; dvt[j] += du[j]; } // du ← dr
                        dbeta[row * H + h] += db;
                        real dgt = 0;
                        for (int i = 0; i < dkh; i++) { // dP = D − k̂ drᵀ; dk̂ −= P dr; dg = ⟨dP, P⟩; dZ = α dP
                            real sp = 0;
                            for (int j = 0; j < dvh; j++) {
                                real dP = dZ[i * dvh + j] - kt[i] * du[j], P = al * Zp[i * dvh + j];
                                sp += P * du[j];
                                dgt += dP * P;
                                dZ[i * dvh + j] = al * dP;
                            }
                            dkt[i] -= sp;
                        }
                        dg[row * H + h] += dgt;
                    }
                    for (size_t i = 0; i < KV; i++) dS[i] = dZ[i] + (1 - mc) * dec * dS[i];
                }
            }
        free(Zs); free(us); free(rs); free(dS); free(dZ); free(du);
    }
    if (a->rho) {
        l2norm_backward(dq, dq, q, a->rho, B * T, H, dkh, ldqk);
        l2norm_backward(dk, dk, k, a->rho + (size_t)B * T * H, B * T, H, dkh, ldqk);
    }
    if (a->grads_mp) { // a G layer's dQ, dK, dV, stored in the matmul precision (they feed only the conv's backward)
        for (size_t i = 0; i < (size_t)B * T * ldqk; i++) {
            dq[i] = matmul_precision(dq[i]);
            dk[i] = matmul_precision(dk[i]);
        }
        for (size_t i = 0; i < (size_t)B * T * ldv; i++) dv[i] = matmul_precision(dv[i]);
    }
}

// ---- the router (Attention Score Layer, §5.2: (5.2a-f)) ------------------------------------------------------
// p_c = mean_{t∈c} x_t,  ℓ_c = p_c W_rᵀ viewed [H][2],  π = softmax over the pair,  mask = one-hot
// argmax (op 0 on ties) with the straight-through estimator; the last chunk is active for both ops.
// Operands and options in RouterArgs (common/layout.h). noise (ST-Gumbel routing, §7.2; NULL = off): Gumbel noise g
// [B][Nc][H][2]; then pi holds y = softmax((ℓ + g)/τ) in place of π and the hard choice is argmax(ℓ + g), decided on
// y (ties to op 0). relaxed (tests only, §8): mask = π (or y) itself, so the whole layer is a smooth function of W_r
// and x. x is the normalized block input, which the GPU stores in bf16 in bf16 mode: the pool reads it so.
static void router_forward(real *mask, real *pi, real *logits, real *pool, const RouterArgs *a) {
    const real *x = a->x, *Wr = a->Wr, *noise = a->noise;
    int B = a->B, T = a->T, D = a->D, H = a->H, relaxed = a->relaxed;
    real tau = a->tau;
    int Nc = T / CH;
    #pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (int c = 0; c < Nc; c++) {
            real *p = pool + ((size_t)b * Nc + c) * D;
            for (int i = 0; i < D; i++) p[i] = 0;
            for (int t = c * CH; t < (c + 1) * CH; t++)
                for (int i = 0; i < D; i++) p[i] += matmul_precision(x[((size_t)b * T + t) * D + i]);
            for (int i = 0; i < D; i++) p[i] /= CH;
        }
    matmul_forward(logits, pool, Wr, B * Nc, D, 2 * H, 0, NULL);
    if (!noise) pair_softmax_forward(pi, logits, (size_t)B * Nc * H);
    else
        for (size_t i = 0; i < (size_t)B * Nc * H; i++) { // (7.2a)
            real y0 = 1 / (1 + exp(((logits[2 * i + 1] + noise[2 * i + 1]) - (logits[2 * i] + noise[2 * i])) / tau));
            pi[2 * i] = y0;
            pi[2 * i + 1] = 1 - y0;
        }
    for (size_t i = 0; i < (size_t)B * Nc * H; i++) {
        int last = (int)((i / H) % Nc) == Nc - 1;
        int soft = pi[2 * i] >= pi[2 * i + 1];
        mask[2 * i] = last ? 1 : relaxed ? pi[2 * i] : soft;
        mask[2 * i + 1] = last ? 1 : relaxed ? pi[2 * i + 1] : !soft;
    }
}
// dÃ = dA with the last chunk zeroed (6.5a);  straight-through: dℓ = π ⊙ (dÃ − ⟨π, dÃ⟩) (6.5b-c);
// dW_r += dℓᵀ p;  dp = dℓ W_r;  dx_t += dp_{c(t)} / 64   (6.5d-e).  dpool, dlogits are scratch [B*Nc][D], [B*Nc][2H].
// With the §7 options: dpi (NULL = none) is the gradient of the auxiliary terms on s[…, m] (7.1c, 7.4a), the
// same for every routed chunk: dÃ + dpi goes through the straight-through; with noise (τ ≠ 1 or dpi) pi holds
// y and dℓ = y ⊙ (dÃ − ⟨y, dÃ⟩) / τ (7.2a).
static void router_backward(real *dx, real *dWr, real *dpool, real *dlogits, const real *dA, const real *pi,
                            const real *pool, const RouterArgs *a) {
    const real *Wr = a->Wr, *dpi = a->dpi;
    int B = a->B, T = a->T, D = a->D, H = a->H;
    real tau = a->tau;
    int Nc = T / CH;
    memset(dlogits, 0, (size_t)B * Nc * 2 * H * sizeof(real));
    for (int b = 0; b < B; b++)
        for (int c = 0; c < Nc - 1; c++) { // the last chunk's dÃ is zero: it stays 0 in dlogits
            size_t o = ((size_t)b * Nc + c) * 2 * H;
            if (!dpi && tau == 1) pair_softmax_backward(dlogits + o, dA + o, pi + o, H);
            else
                for (int n = 0; n < H; n++) {
                    const real *y = pi + o + 2 * n, *d = dA + o + 2 * n;
                    real d0 = d[0] + (dpi ? dpi[0] : 0), d1 = d[1] + (dpi ? dpi[1] : 0);
                    real g = y[0] * y[1] * (d0 - d1) / tau;
                    dlogits[o + 2 * n] += g;
                    dlogits[o + 2 * n + 1] -= g;
                }
        }
    matmul_backward(dpool, dWr, dlogits, pool, Wr, B * Nc, D, 2 * H, DINP_WRITE);
    #pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int i = 0; i < D; i++)
                dx[((size_t)b * T + t) * D + i] += dpool[((size_t)b * Nc + t / CH) * D + i] / CH;
}

// ---- the gated output norm (§3.3 (3.3b), §5.6 (5.6b)) ------------------------------------------------------------
// The gate's activation φ and its derivative (5.6g): silu (the paper's) or sigmoid, σ' = σ(1 − σ) (-O, Config.gate_act).
static inline real gate_act(real x, int act) { return act == GATE_SIGMOID ? sigmoid(x) : silu(x); }
static inline real dgate_act(real x, int act) { if (act == GATE_SIGMOID) { real s = sigmoid(x); return s * (1 - s); } return dsilu(x); }
// Rows of width n, contiguous [R][n]. Two inputs (N layer): y = (ω0·RMSNorm_{w1}(o1) + ω1·RMSNorm_{w2}(o2))
// ⊙ φ(gate), ω [R][2]. One input (G layer: o2 = ω = NULL): y = RMSNorm_{w1}(o1) ⊙ φ(gate); φ = a->gate_act.
// rstd [2][R] keeps both inputs' reciprocal RMS. y is stored in the matmul precision (it feeds only W_o's product).
static void gated_norm_forward(real *y, real *rstd, const GatedNormArgs *a) {
    const real *o1 = a->o1, *w1 = a->w1, *o2 = a->o2, *w2 = a->w2, *omega = a->omega, *gate = a->gate;
    int R = a->rows, n = a->n;
    #pragma omp parallel for
    for (int r = 0; r < R; r++) {
        size_t o = (size_t)r * n;
        real s1 = 0, s2 = 0;
        for (int i = 0; i < n; i++) s1 += o1[o + i] * o1[o + i];
        s1 = 1 / sqrt(s1 / n + NATSL_EPS);
        rstd[r] = s1;
        if (o2) {
            for (int i = 0; i < n; i++) s2 += o2[o + i] * o2[o + i];
            s2 = 1 / sqrt(s2 / n + NATSL_EPS);
            rstd[R + r] = s2;
        }
        for (int i = 0; i < n; i++) {
            real nsum = o2 ? omega[2 * r] * o1[o + i] * s1 * w1[i] + omega[2 * r + 1] * o2[o + i] * s2 * w2[i]
                           : o1[o + i] * s1 * w1[i];
            y[o + i] = matmul_precision(nsum * gate_act(gate[o + i], a->gate_act));
        }
    }
}
// With dn = dy ⊙ φ(gate) (5.6d-g): dgate = dy ⊙ n ⊙ φ'(gate), dω_k = dn·RMSNorm_k, and each input's RMSNorm
// backward with dy_k = ω_k dn (§5.6: the authors' Triton kernel computes exactly this). WRITES do1, do2, dω and
// dgate (the gated norm is their only producer); the weight gradients dw1, dw2 accumulate. do1, the GDN op's dout, is
// stored in the matmul precision (doc/model.md §12.1 item 16; the softmax op rounds its dout as it reads it).
static void gated_norm_backward(real *do1, real *dw1, real *do2, real *dw2, real *domega, real *dgate,
                                const real *dy, const real *rstd, const GatedNormArgs *a) {
    const real *o1 = a->o1, *w1 = a->w1, *o2 = a->o2, *w2 = a->w2, *omega = a->omega, *gate = a->gate;
    int R = a->rows, n = a->n, act = a->gate_act;
    #pragma omp parallel for
    for (int r = 0; r < R; r++) {
        size_t o = (size_t)r * n, og = (size_t)(r / a->heads) * a->ld_dgate + (size_t)(r % a->heads) * n;
        real s1 = rstd[r], s2 = o2 ? rstd[R + r] : 0, w_1 = o2 ? omega[2 * r] : 1, w_2 = o2 ? omega[2 * r + 1] : 0;
        real dom1 = 0, dom2 = 0, dot1 = 0, dot2 = 0;
        for (int i = 0; i < n; i++) {
            real n1 = o1[o + i] * s1 * w1[i], n2 = o2 ? o2[o + i] * s2 * w2[i] : 0;
            real dn = dy[o + i] * gate_act(gate[o + i], act);
            dgate[og + i] = dy[o + i] * (w_1 * n1 + w_2 * n2) * dgate_act(gate[o + i], act);
            dom1 += dn * n1; dom2 += dn * n2;
            dot1 += o1[o + i] * s1 * w1[i] * w_1 * dn;
            if (o2) dot2 += o2[o + i] * s2 * w2[i] * w_2 * dn;
        }
        dot1 /= n; dot2 /= n;
        for (int i = 0; i < n; i++) {
            real dn = dy[o + i] * gate_act(gate[o + i], act);
            do1[o + i] = matmul_precision(s1 * (w1[i] * w_1 * dn - o1[o + i] * s1 * dot1));
            if (o2) do2[o + i] = s2 * (w2[i] * w_2 * dn - o2[o + i] * s2 * dot2);
        }
        if (o2) { domega[2 * r] = dom1; domega[2 * r + 1] = dom2; }
    }
    #pragma omp parallel for
    for (int i = 0; i < n; i++) { // weight gradients, one column per thread (fixed order)
        real a1 = 0, a2 = 0;
        for (int r = 0; r < R; r++) {
            size_t o = (size_t)r * n;
            real dn = dy[o + i] * gate_act(gate[o + i], act);
            a1 += dn * (o2 ? omega[2 * r] : 1) * o1[o + i] * rstd[r];
            if (o2) a2 += dn * omega[2 * r + 1] * o2[o + i] * rstd[R + r];
        }
        dw1[i] += a1;
        if (o2) dw2[i] += a2;
    }
}

// ================================================================================================
// 3. The model: parameters, activations, the four layer kinds, the forward and backward passes
// ================================================================================================

typedef struct {
    Config cfg;
    ParamTensor tensors[NATSL_MAX_TENSORS];
    int ntensors;
    size_t nparams;
    size_t nmom;                             // the moments this process keeps: all nparams (ZeRO-1 shards are the GPU's)
    real *params, *grads, *adam_m, *adam_v; // flat buffers
    ParamPtrs p, g;                          // named pointers into params and grads
    int B, T;                                // the largest batch the activations hold
    int recompute;                           // -k: 1, 2 rerun layers in the backward pass (model_acts_layout)
    real *acts;                              // flat activation buffer
    LayerActs la[NATSL_MAX_LAYERS];
    real *hL, *lnf, *lnf_rstd, *logits, *lse, *losses; // final norm and classifier
    real *dacts, *dres, *dlnf;               // gradient scratch: one layer's activations, the residual
    size_t acts_size, dacts_size;            // floats in acts and dacts
    int *inputs, *targets;
    real mean_loss;                          // over the scored targets of the last forward pass (§13.1)
    int nscored;                             // how many: B·T, or the answers among them under -w 1
    int router_relaxed, router_no_grad;      // test-only switches (§8), 0 in training
    RouterBudget rb;                         // §7: penalty, load balancing, ST-Gumbel (common/budget.h)
    real *gnoise;                            // §7.2: this micro-batch's Gumbel noise [N layers][B][Nc][H][2]
    void (*layer_done)(void *ctx, int l, int B, int T); // NULL, or called by model_forward as each layer's block_forward
    void *layer_done_ctx;                    //   has run (the prefill, common/train_main.inc, fills the decoder from it)
} Model;

static void model_build(Model *M, const Config *c) {
    memset(M, 0, sizeof(*M));
    M->cfg = *c;
    M->rb.kappa = SEL_KAPPA;
    M->ntensors = param_tensors(c, M->tensors, &M->nparams);
    M->nmom = M->nparams;
    M->params = xcalloc(M->nparams, sizeof(real));
    M->grads = xcalloc(M->nparams, sizeof(real));
    param_pointers(&M->p, M->tensors, M->ntensors, M->params);
    param_pointers(&M->g, M->tensors, M->ntensors, M->grads);
}

// Initialization (§2), from one seeded stream: init_params (common/layout.h) fills the buffer.
static void model_init(Model *M, uint64_t seed) { init_params(M->params, M->tensors, M->ntensors, seed); }

// Allocates activations for micro-batches of up to B×T tokens (T a multiple of 64); recompute: see
// model_acts_layout (common/layout.h).
static void model_alloc_acts(Model *M, int B, int T, int recompute) {
    const Config *c = &M->cfg;
    size_t BT = (size_t)B * T, dmax;
    size_t total = model_acts_layout(M->la, c, B, T, recompute, 0, NULL, &dmax);
    M->B = B; M->T = T; M->recompute = recompute;
    M->acts = xcalloc(total, sizeof(real));
    model_acts_layout(M->la, c, B, T, recompute, 0, M->acts, &dmax);
    M->hL = xcalloc(BT * c->D, sizeof(real));
    M->lnf = xcalloc(BT * c->D, sizeof(real));
    M->lnf_rstd = xcalloc(BT, sizeof(real));
    M->logits = xcalloc(BT * c->Vp, sizeof(real));
    M->lse = xcalloc(BT, sizeof(real));
    M->losses = xcalloc(BT, sizeof(real));
    M->acts_size = total;
    M->dacts_size = dmax;
    M->dacts = xcalloc(dmax, sizeof(real));
    M->dres = xcalloc(BT * c->D, sizeof(real));
    M->dlnf = xcalloc(BT * c->D, sizeof(real));
    M->inputs = xcalloc(BT, sizeof(int));
    M->targets = xcalloc(BT, sizeof(int));
    M->gnoise = xcalloc(router_noise_size(c, B, T), sizeof(real));
}

// AdamW's moments, zero until the first update
static void model_alloc_moments(Model *M) {
    if (M->adam_m) return;
    M->adam_m = xcalloc(M->nmom, sizeof(real));
    M->adam_v = xcalloc(M->nmom, sizeof(real));
}

// Frees what model_alloc_acts allocated (model_free: that and the parameters)
static void model_free_acts(Model *M) {
    free(M->acts); free(M->hL); free(M->lnf); free(M->lnf_rstd); free(M->logits); free(M->lse); free(M->losses);
    free(M->dacts); free(M->dres); free(M->dlnf); free(M->inputs); free(M->targets); free(M->gnoise);
}

static void model_free(Model *M) {
    free(M->params); free(M->grads); free(M->adam_m); free(M->adam_v);
    model_free_acts(M);
}

// F: a model that runs M's parameters (the prefill's forward passes, common/train_main.inc), without activations until
// model_alloc_acts gives it its own; model_free_acts releases them (F owns nothing else).
static void model_share(Model *F, const Model *M) {
    *F = *M;
    F->acts = F->hL = F->lnf = F->lnf_rstd = F->logits = F->lse = F->losses = F->dacts = F->dres = F->dlnf = F->gnoise = NULL;
    F->inputs = F->targets = NULL;
    F->layer_done = NULL;
}

static void model_zero_grad(Model *M) { memset(M->grads, 0, M->nparams * sizeof(real)); }

// ---- G and N layers share their inputs (§3.1, §5.1) ---------------------------------------------------
// proj = x[W_q;W_k;W_v]ᵀ;  Q, K, V = silu(conv(proj));  gate = x W_gᵀ;  q̂, k̂ = L2N per head;  β, g.
static void gdn_inputs_forward(const Config *c, LayerActs *a, const LayerParams *p, int B, int T) {
    int BT = B * T, D = c->D, K = cfg_K(c), Vt = cfg_Vt(c), H = c->H, W = 2 * K + Vt;
    ConvArgs conv = gdn_conv_args(c, a, p, B, T);
    GdnGatesArgs gates = gdn_gates_args(c, a, p, B, T);
    matmul_forward(a->proj, a->xn, p->wqkv, BT, D, W, 1, NULL);
    conv_silu_qkv_forward(a->q, a->k, a->v, &conv, K, Vt); // proj's columns: Q | K | V
    matmul_forward(a->gate, a->xn, p->wg, BT, D, Vt, 1, NULL);
    matmul_forward(a->ab, a->xn, p->wab, BT, D, 2 * H, 0, NULL);
    // the Q and K planes (BT rows each, wherever the layout put them: it may hold more tokens than this pass)
    l2norm_forward(a->q_hat, a->qk_rho, a->q, BT, H, c->dk);
    l2norm_forward(a->k_hat, a->qk_rho + (size_t)BT * H, a->k, BT, H, c->dk);
    gdn_gates_forward(a->g, a->beta, &gates);
}
// Takes the gradients in d (of q, k, v, gate, g, β; the layer's backward has taken q̂, k̂'s to q, k) down to the
// parameters and dx, which it WRITES. d proj | d gate | d ab share rows (gdn_in_ld), as [W_q;W_k;W_v], W_g, [W_a;W_b]
// lie one after another, so one product takes dx = [d proj | d gate | d ab] [W_qkv; W_g; W_ab] and all three
// weights' gradients.
static void gdn_inputs_backward(const Config *c, real *dx, LayerActs *d, LayerParams *gp, const LayerActs *a,
                                const LayerParams *p, int B, int T) {
    int BT = B * T, D = c->D, K = cfg_K(c), Vt = cfg_Vt(c), ld = gdn_in_ld(c);
    ConvArgs conv = gdn_conv_args(c, a, p, B, T);
    GdnGatesArgs gates = gdn_gates_args(c, a, p, B, T);
    gdn_gates_backward(d->ab, gp->a_log, gp->dt_bias, d->g, d->beta, a->g, a->beta, &gates);
    conv_silu_qkv_backward(d->proj, ld, gp->conv, d->q, d->k, d->v, &conv, K, Vt);
    matmul_backward_ld(dx, gp->wqkv, d->proj, ld, a->xn, p->wqkv, BT, D, gdn_in_cols(c), DINP_WRITE);
}

// Every layer's _backward WRITES dx, the gradient of its normalized input x (no other op produces it).

// ---- G: the plain Gated DeltaNet layer (§3) -----------------------------------------------------------
// o = GDN(q̂, k̂, V, g, β) (every chunk committed);  y_h = RMSNorm_{w_o}(o_h) ⊙ φ(gate_h);  out = res + y W_oᵀ
// (every layer: res is the residual stream that the output lands on, (2.1c), and out is stored as the stream is, in
// the matmul precision; NULL: none, out in fp32: an S layer's two mixer outputs)
static void gdn_layer_forward(const Config *c, LayerActs *a, const LayerParams *p, real *out, const real *res, int B,
                              int T) {
    GdnArgs op = gdn_layer_op_args(c, a, B, T);
    GatedNormArgs norm = gdn_layer_norm_args(c, a, p->o_norm, B, T);
    gdn_inputs_forward(c, a, p, B, T);
    gdn_op_forward(a->gdn_out, a->state, &op);
    gated_norm_forward(a->y, a->norm_rstd, &norm);
    matmul_forward(out, a->y, p->wo, B * T, cfg_Vt(c), c->D, res != NULL, res);
}
static void gdn_layer_backward(const Config *c, real *dx, const real *dout, LayerActs *d, LayerParams *gp,
                               const LayerActs *a, const LayerParams *p, int B, int T) {
    GdnArgs op = gdn_layer_op_args(c, a, B, T);
    GatedNormArgs norm = gdn_layer_norm_args(c, a, p->o_norm, B, T);
    matmul_backward(d->y, gp->wo, dout, a->y, p->wo, B * T, cfg_Vt(c), c->D, DINP_WRITE_MP);
    gated_norm_backward(d->gdn_out, gp->o_norm, NULL, NULL, NULL, d->gate, d->y, a->norm_rstd, &norm);
    gdn_op_backward(d->q, d->k, d->v, d->g, d->beta, NULL, d->gdn_out, a->state, &op); // dQ, dK: L2 norm's folded in
    gdn_inputs_backward(c, dx, d, gp, a, p, B, T);
}

// ---- A: causal softmax attention with RoPE (§4) ---------------------------------------------------------
// proj = x W_qkvᵀ (q | k | v column blocks);  q, k rotated in place;  o = causal softmax attention;  out = res + o W_oᵀ.
// proj, o and o's gradient are stored in the matmul precision (the GPU's bf16 mode keeps them in bf16). The q and k
// blocks are adjacent, so one RoPE call over 2·heads heads rotates both.
static void attention_layer_forward(const Config *c, LayerActs *a, const LayerParams *p, real *out, const real *res,
                                    int B, int T) {
    int BT = B * T, D = c->D, heads = cfg_attn_heads(c);
    AttnArgs op = attn_layer_op_args(c, a, B, T);
    matmul_forward(a->proj, a->xn, p->wqkv, BT, D, 3 * D, 1, NULL);
    rope_forward(a->q, BT, T, 2 * heads, NATSL_ATTN_HEAD, 3 * D, 1);
    attention_forward(a->att_out, a->lse, &op);
    matmul_forward(out, a->att_out, p->wo, BT, D, D, res != NULL, res);
}
static void attention_layer_backward(const Config *c, real *dx, const real *dout, LayerActs *d, LayerParams *gp,
                                     const LayerActs *a, const LayerParams *p, int B, int T) {
    int BT = B * T, D = c->D, heads = cfg_attn_heads(c);
    AttnArgs op = attn_layer_op_args(c, a, B, T);
    matmul_backward(d->att_out, gp->wo, dout, a->att_out, p->wo, BT, D, D, DINP_WRITE_MP);
    attention_backward(d->q, d->k, d->v, NULL, d->att_out, a->att_out, a->lse, &op);
    rope_backward(d->q, BT, T, 2 * heads, NATSL_ATTN_HEAD, 3 * D);
    matmul_backward(dx, gp->wqkv, d->proj, a->xn, p->wqkv, BT, D, 3 * D, DINP_WRITE);
}

// ---- H: Native Hybrid Attention (§15) --------------------------------------------------------------------------
// Per head (64 wide) and sequence: m slots K̃, Ṽ [m][64], fed by the token s = t − w that leaves the window,
//   K̃ ← Diag(α_s) K̃ + (1 − α_s) ⊗ k_s,  Ṽ likewise with v_s,  log α_s = logσ(z_s)/τ, z_s = x_s W_αᵀ   (15.1a-b)
// and one softmax over the slots (unrotated q, only once a token has left: t ≥ w) and the window's rotated keys
// max(0, t−w+1) .. t:  o_t = softmax([q K̃ᵀ, q̂ K̂_winᵀ] / 8) [Ṽ; V_win]   (15.2a-c). lse [B][heads][T] is kept,
// and the slots at every chunk start [B][heads][Nc][2][m][64], from which the backward replays a chunk.
#define NHA_HD NATSL_ATTN_HEAD
static inline real nha_log_alpha(real z) { return -softplus(-z) / NHA_TAU; } // (15.1a)
// (15.1b): token s (its k, v and gate logits z [m]) enters the slots S = K̃ | Ṽ
static void nha_slot_update(real *S, const real *k, const real *v, const real *z, int m) {
    real *Ks = S, *Vs = S + (size_t)m * NHA_HD;
    for (int j = 0; j < m; j++) {
        real al = exp(nha_log_alpha(z[j]));
        for (int d = 0; d < NHA_HD; d++) {
            Ks[j * NHA_HD + d] = al * Ks[j * NHA_HD + d] + (1 - al) * k[d];
            Vs[j * NHA_HD + d] = al * Vs[j * NHA_HD + d] + (1 - al) * v[d];
        }
    }
}
// Query t's scores (15.2a): the m slots' e[j] = q_t·K̃_j / 8 (unrotated q), the window's e[i − lo] = q̂_t·k̂_i / 8 for
// i = lo .. t, lo = max(0, t − w + 1) (nha_window_lo; none when w = 0)
static void nha_slot_scores(real *e, const real *q, const real *S, int m) {
    for (int j = 0; j < m; j++) {
        real s = 0;
        for (int d = 0; d < NHA_HD; d++) s += q[d] * S[(size_t)j * NHA_HD + d];
        e[j] = s * 0.125;
    }
}
static inline int nha_window_lo(int t, int w) { return t - w + 1 > 0 ? t - w + 1 : 0; }
static void nha_window_scores(real *e, const NhaArgs *a, size_t bt, int h, int t) {
    const real *qr = a->qr + bt * a->ldr + h * NHA_HD;
    for (int i = nha_window_lo(t, a->w); i <= t; i++) {
        const real *kr = a->kr + (bt - t + i) * a->ldr + h * NHA_HD;
        real s = 0;
        for (int d = 0; d < NHA_HD; d++) s += qr[d] * kr[d];
        *e++ = s * 0.125;
    }
}
// out [B*T][heads·64] (stored in the matmul precision, as the A layer's), lse, slots: see above.
static void nha_forward(real *out, real *lse, real *slots, const NhaArgs *a) {
    int B = a->B, T = a->T, Hh = a->heads, m = a->m, w = a->w, ldo = Hh * NHA_HD;
    size_t SZ = 2 * (size_t)m * NHA_HD;
    #pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < Hh; h++) {
            real *S = xcalloc(SZ, sizeof(real)), *e = xcalloc(m + T, sizeof(real));
            for (int t = 0; t < T; t++) {
                size_t bt = (size_t)b * T + t;
                if (t % CH == 0) memcpy(slots + (((size_t)b * Hh + h) * (T / CH) + t / CH) * SZ, S, SZ * sizeof(real));
                if (t >= w) { // token s = t − w leaves the window (15.1b)
                    size_t bs = bt - w;
                    nha_slot_update(S, a->k + bs * a->ldqkv + h * NHA_HD, a->v + bs * a->ldqkv + h * NHA_HD,
                                    a->z + bs * Hh * m + (size_t)h * m, m);
                }
                int nslot = t >= w ? m : 0, lo = nha_window_lo(t, w), n = nslot + t + 1 - lo;
                nha_slot_scores(e, a->q + bt * a->ldqkv + h * NHA_HD, S, nslot);
                nha_window_scores(e + nslot, a, bt, h, t);
                real mx = NEG_LARGE, sum = 0, o[NHA_HD] = {0};
                for (int i = 0; i < n; i++) mx = fmax(mx, e[i]);
                for (int i = 0; i < n; i++) {
                    real p = exp(e[i] - mx);
                    const real *vv = i < nslot ? S + (size_t)(m + i) * NHA_HD : a->v + (bt - t + lo + i - nslot) * a->ldqkv + h * NHA_HD;
                    sum += p;
                    for (int d = 0; d < NHA_HD; d++) o[d] += p * vv[d];
                }
                for (int d = 0; d < NHA_HD; d++) out[bt * ldo + h * NHA_HD + d] = matmul_precision(o[d] / sum);
                lse[((size_t)b * Hh + h) * T + t] = mx + log(sum);
            }
            free(S); free(e);
        }
}
// The backward (15.3a-f): with p = exp(e − lse) and Δ_t = do_t·o_t, de = p (do·value − Δ_t); the window's part per
// query, then the slots' in reverse time, a chunk at a time (its slots replayed from the chunk start): dK̃, dṼ carry
// back through (15.1b): dk_s += (1−α_s) dK̃, dα_s = Σ_d dK̃ (K̃_prev − k_s) + likewise Ṽ, dK̃ ← α_s dK̃;
// dz_s = dα_s α_s (1 − σ(z_s))/τ. WRITES dq, dk, dv (strides as q, k, v), dqr, dkr (as qr, kr) and dz (as z).
static void nha_backward(real *dq, real *dk, real *dv, real *dqr, real *dkr, real *dz, const real *dout, const real *out,
                         const real *lse, const real *slots, const NhaArgs *a) {
    int B = a->B, T = a->T, Hh = a->heads, m = a->m, w = a->w, ldo = Hh * NHA_HD, ld = a->ldqkv, ldr = a->ldr;
    size_t SZ = 2 * (size_t)m * NHA_HD;
    #pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < Hh; h++) {
            real *St = xcalloc((CH + 1) * SZ, sizeof(real)), *dS = xcalloc(SZ, sizeof(real)), *e = xcalloc(m + T, sizeof(real));
            for (int t = 0; t < T; t++) {
                size_t bt = (size_t)b * T + t;
                for (int d = 0; d < NHA_HD; d++) {
                    dq[bt * ld + h * NHA_HD + d] = dk[bt * ld + h * NHA_HD + d] = dv[bt * ld + h * NHA_HD + d] = 0;
                    dqr[bt * ldr + h * NHA_HD + d] = dkr[bt * ldr + h * NHA_HD + d] = 0;
                }
                for (int j = 0; j < m; j++) dz[bt * Hh * m + (size_t)h * m + j] = 0;
            }
            for (int t = 0; t < T; t++) { // the window's part (15.3b-c)
                size_t bt = (size_t)b * T + t, row = bt * ldo + h * NHA_HD;
                real L = lse[((size_t)b * Hh + h) * T + t], Dt = 0;
                for (int d = 0; d < NHA_HD; d++) Dt += dout[row + d] * out[row + d];
                int lo = nha_window_lo(t, w);
                nha_window_scores(e, a, bt, h, t);
                for (int i = 0; i <= t - lo; i++) {
                    size_t bi = bt - t + lo + i;
                    const real *vi = a->v + bi * ld + h * NHA_HD, *kr = a->kr + bi * ldr + h * NHA_HD;
                    const real *qr = a->qr + bt * ldr + h * NHA_HD;
                    real p = exp(e[i] - L), dp = 0;
                    for (int d = 0; d < NHA_HD; d++) dp += dout[row + d] * vi[d];
                    real de = p * (dp - Dt) * 0.125;
                    for (int d = 0; d < NHA_HD; d++) {
                        dqr[bt * ldr + h * NHA_HD + d] += de * kr[d];
                        dkr[bi * ldr + h * NHA_HD + d] += de * qr[d];
                        dv[bi * ld + h * NHA_HD + d] += p * dout[row + d];
                    }
                }
            }
            for (int c = T / CH - 1; c >= 0; c--) { // the slots' part, in reverse time (15.3d-f)
                memcpy(St, slots + (((size_t)b * Hh + h) * (T / CH) + c) * SZ, SZ * sizeof(real));
                for (int i = 0; i < CH; i++) { // St[i+1]: the slots query c·64+i reads
                    size_t bs = (size_t)b * T + c * CH + i - w;
                    memcpy(St + (i + 1) * SZ, St + i * SZ, SZ * sizeof(real));
                    if (c * CH + i >= w) nha_slot_update(St + (i + 1) * SZ, a->k + bs * ld + h * NHA_HD, a->v + bs * ld + h * NHA_HD,
                                                         a->z + bs * Hh * m + (size_t)h * m, m);
                }
                for (int i = CH - 1; i >= 0; i--) {
                    int t = c * CH + i;
                    if (t < w) continue; // no token has left: no read, no update
                    size_t bt = (size_t)b * T + t, bs = bt - w, row = bt * ldo + h * NHA_HD;
                    const real *S = St + (i + 1) * SZ, *Sp = St + i * SZ, *q = a->q + bt * ld + h * NHA_HD;
                    real L = lse[((size_t)b * Hh + h) * T + t], Dt = 0;
                    for (int d = 0; d < NHA_HD; d++) Dt += dout[row + d] * out[row + d];
                    nha_slot_scores(e, q, S, m);
                    for (int j = 0; j < m; j++) { // query t reads the slots (15.3d)
                        const real *Kj = S + (size_t)j * NHA_HD, *Vj = S + (size_t)(m + j) * NHA_HD;
                        real p = exp(e[j] - L), dp = 0;
                        for (int d = 0; d < NHA_HD; d++) dp += dout[row + d] * Vj[d];
                        real de = p * (dp - Dt) * 0.125;
                        for (int d = 0; d < NHA_HD; d++) {
                            dq[bt * ld + h * NHA_HD + d] += de * Kj[d];
                            dS[(size_t)j * NHA_HD + d] += de * q[d];
                            dS[(size_t)(m + j) * NHA_HD + d] += p * dout[row + d];
                        }
                    }
                    const real *ks = a->k + bs * ld + h * NHA_HD, *vs = a->v + bs * ld + h * NHA_HD;
                    for (int j = 0; j < m; j++) { // token s entered them (15.3e-f)
                        size_t iz = bs * Hh * m + (size_t)h * m + j;
                        real zj = a->z[iz], al = exp(nha_log_alpha(zj)), da = 0;
                        real *dK = dS + (size_t)j * NHA_HD, *dV = dS + (size_t)(m + j) * NHA_HD;
                        for (int d = 0; d < NHA_HD; d++) {
                            da += dK[d] * (Sp[(size_t)j * NHA_HD + d] - ks[d]) + dV[d] * (Sp[(size_t)(m + j) * NHA_HD + d] - vs[d]);
                            dk[bs * ld + h * NHA_HD + d] += (1 - al) * dK[d];
                            dv[bs * ld + h * NHA_HD + d] += (1 - al) * dV[d];
                            dK[d] *= al; dV[d] *= al;
                        }
                        dz[iz] += da * al * (1 - sigmoid(zj)) / NHA_TAU;
                    }
                }
            }
            free(St); free(dS); free(e);
        }
}

// The layer: proj = x W_qkvᵀ (q | k | v, not rotated);  qk_rot = RoPE(q | k);  z = x W_αᵀ;  o = NHA;  out = res + o W_oᵀ.
// proj, qk_rot, o and o's gradient are stored in the matmul precision, as the A layer's. l: the layer (its window).
static void nha_layer_forward(const Config *c, LayerActs *a, const LayerParams *p, real *out, const real *res, int B,
                              int T, int l) {
    int BT = B * T, D = c->D, heads = cfg_attn_heads(c);
    NhaArgs op = nha_layer_op_args(c, a, l, B, T, 0);
    matmul_forward(a->proj, a->xn, p->wqkv, BT, D, 3 * D, 1, NULL);
    for (size_t i = 0; i < (size_t)BT; i++) memcpy(a->qk_rot + i * 2 * D, a->proj + i * 3 * D, 2 * D * sizeof(real));
    rope_forward(a->qk_rot, BT, T, 2 * heads, NATSL_ATTN_HEAD, 2 * D, 1);
    matmul_forward(a->alpha, a->xn, p->walpha, BT, D, heads * c->nha_m, 0, NULL);
    nha_forward(a->att_out, a->lse, a->slots, &op);
    matmul_forward(out, a->att_out, p->wo, BT, D, D, res != NULL, res);
}
static void nha_layer_backward(const Config *c, real *dx, const real *dout, LayerActs *d, LayerParams *gp,
                               const LayerActs *a, const LayerParams *p, int B, int T, int l) {
    int BT = B * T, D = c->D, heads = cfg_attn_heads(c);
    NhaArgs op = nha_layer_op_args(c, a, l, B, T, 0);
    matmul_backward(d->att_out, gp->wo, dout, a->att_out, p->wo, BT, D, D, DINP_WRITE_MP);
    nha_backward(d->q, d->k, d->v, d->qk_rot, d->qk_rot + D, d->alpha, d->att_out, a->att_out, a->lse, a->slots, &op);
    rope_backward(d->qk_rot, BT, T, 2 * heads, NATSL_ATTN_HEAD, 2 * D);
    for (size_t i = 0; i < (size_t)BT; i++)
        for (int j = 0; j < 2 * D; j++) d->proj[i * 3 * D + j] += d->qk_rot[i * 2 * D + j];
    matmul_backward(dx, gp->wqkv, d->proj, a->xn, p->wqkv, BT, D, 3 * D, DINP_WRITE);
    matmul_backward(dx, gp->walpha, d->alpha, a->xn, p->walpha, BT, D, heads * c->nha_m, DINP_ADD);
}

// ---- N: the NAtS-L layer (§5) --------------------------------------------------------------------------
// Router mask Ã from mean-pooled x (§5.2). Softmax op on qa = RMSNorm_{w_qn}(Q head), ka likewise, va = V
// (optional RoPE, §5.8); GDN op on q̂, k̂, V as in G, both driven by Ã (§5.3, §5.4). ω = pair softmax of
// Q W_owᵀ (§5.1). Fused norm (§5.6), over the Ha rows of d_va features of each token (the GDN output
// [H][d_v] re-viewed as [Ha][d_va]):  y_j = (ω_j0·RMSNorm_{w1}(o^gdn_j) + ω_j1·RMSNorm_{w2}(o^att_j)) ⊙ φ(gate_j);
// out = res + y W_oᵀ.  Shapes (340M): Q, K [BT][768], V [BT][1536]; H = 6 GDN heads of 128/256, Ha = 12 softmax
// heads of 64/128 (dka/dva).
// r: the router's noise, tau (ST-Gumbel routing, §7.2) and the tests' switches (Routing, common/layout.h).
static void natsl_layer_forward(const Config *c, LayerActs *a, const LayerParams *p, real *out, const real *res, int B,
                                int T, const Routing *r) {
    int BT = B * T, K = cfg_K(c), Ha = c->Ha, dka = cfg_dka(c);
    AttnArgs att = natsl_attn_args(c, a, B, T);
    GdnArgs gdn = natsl_gdn_args(c, a, B, T);
    GatedNormArgs norm = natsl_norm_args(c, a, p->n1, p->n2, B, T);
    RouterArgs router = natsl_router_args(c, a, p, B, T, r);
    NormRows heads = {BT, Ha, dka, K, K}; // the softmax planes' RMSNorm: Ha heads of dka in Q's, K's rows
    gdn_inputs_forward(c, a, p, B, T);
    router_forward(a->rmask, a->rpi, a->rlogits, a->pool, &router);
    rmsnorm_forward(a->qa, a->qa_rstd, a->q, p->qn, heads, 1);
    rmsnorm_forward(a->ka, a->ka_rstd, a->k, p->kn, heads, 1);
    if (c->rope) { rope_forward(a->qa, BT, T, Ha, dka, K, 1); rope_forward(a->ka, BT, T, Ha, dka, K, 1); }
    matmul_forward(a->omega_raw, a->q, p->wow, BT, K, 2 * Ha, 0, NULL);
    pair_softmax_forward(a->omega, a->omega_raw, (size_t)BT * Ha);
    attention_forward(a->att_out, a->lse, &att);
    gdn_op_forward(a->gdn_out, a->state, &gdn);
    gated_norm_forward(a->y, a->norm_rstd, &norm);
    matmul_forward(out, a->y, p->wo, BT, cfg_Vt(c), c->D, res != NULL, res);
}
// The softmax op's backward writes dV and dA[...][0]; the GDN op's then adds its part to dV and writes dA[...][1]:
// together the router gradient dÃ [B][Nc][H][2] (§6.3, §6.4). r: the §7 terms' dpi, tau (router_backward), and
// no_grad (tests).
static void natsl_layer_backward(const Config *c, real *dx, const real *dout, LayerActs *d, LayerParams *gp,
                                 const LayerActs *a, const LayerParams *p, int B, int T, const Routing *r) {
    int BT = B * T, K = cfg_K(c), Ha = c->Ha, dka = cfg_dka(c);
    AttnArgs att = natsl_attn_args(c, a, B, T);
    GdnArgs gdn = natsl_gdn_args(c, a, B, T);
    GatedNormArgs norm = natsl_norm_args(c, a, p->n1, p->n2, B, T);
    RouterArgs router = natsl_router_args(c, a, p, B, T, r);
    NormRows heads = {BT, Ha, dka, K, K};
    matmul_backward(d->y, gp->wo, dout, a->y, p->wo, BT, cfg_Vt(c), c->D, DINP_WRITE_MP);
    gated_norm_backward(d->gdn_out, gp->n1, d->att_out, gp->n2, d->omega, d->gate, d->y, a->norm_rstd, &norm);
    attention_backward(d->qa, d->ka, d->v, d->rmask, d->att_out, a->att_out, a->lse, &att);
    // dQ, dK: the GDN op's backward writes them (the L2 norm's folded in), ω's and the softmax planes' RMSNorms add
    gdn_op_backward(d->q, d->k, d->v, d->g, d->beta, d->rmask, d->gdn_out, a->state, &gdn);
    pair_softmax_backward(d->omega_raw, d->omega, a->omega, (size_t)BT * Ha);
    matmul_backward(d->q, gp->wow, d->omega_raw, a->q, p->wow, BT, K, 2 * Ha, DINP_ADD);
    if (c->rope) { rope_backward(d->qa, BT, T, Ha, dka, K); rope_backward(d->ka, BT, T, Ha, dka, K); }
    rmsnorm_backward(d->q, gp->qn, d->qa, a->q, p->qn, a->qa_rstd, heads, 0);
    rmsnorm_backward(d->k, gp->kn, d->ka, a->k, p->kn, a->ka_rstd, heads, 0);
    gdn_inputs_backward(c, dx, d, gp, a, p, B, T); // writes dx, the router adds its part
    if (!r->no_grad) router_backward(dx, gp->wr, d->pool, d->rlogits, d->rmask, a->rpi, a->pool, &router);
}

// ---- S: layer-level selection (§7.3) ----------------------------------------------------------------------
// Both mixers run on x: the A mixer (§4, with its own W_qkv_a, W_o_a) into sel_out's first plane, the G mixer (§3)
// into its second; out = res + the one the gate chose (the value of Ã_A·A(x) + Ã_G·G(x), (7.3c)), or in relaxed
// mode (tests) res + y_A·A(x) + y_G·G(x). The gate: r->gate (Routing, common/layout.h).
static void select_layer_forward(const Config *c, LayerActs *a, const LayerParams *p, real *out, const real *res,
                                 int B, int T, const Routing *r) {
    const SelGate *g = r->gate;
    size_t n = (size_t)B * T * c->D;
    LayerActs aa = select_attn_acts(c, a, B, T, 0);
    LayerParams pa = select_attn_params(p);
    attention_layer_forward(c, &aa, &pa, a->sel_out, NULL, B, T);
    gdn_layer_forward(c, a, p, a->sel_out + n, NULL, B, T);
    for (size_t i = 0; i < n; i++) {
        out[i] = g->relaxed ? g->y_a * a->sel_out[i] + g->y_g * a->sel_out[n + i] : a->sel_out[(g->a ? 0 : n) + i];
        if (res) out[i] = matmul_precision(out[i] + res[i]); // the residual stream
    }
}
// (7.3d): ∂L/∂y_A = ⟨dout, A(x)⟩ + r->dpen (the penalty's λ_S/L, (7.3e), in the loss's scale), ∂L/∂y_G =
// ⟨dout, G(x)⟩, to s_sel through sel_grad (none with r->no_grad: the tests' hard mode). The chosen mixer's backward
// gets dout, the other none (its Ã is 0: zero gradient); relaxed mode: each gets y·dout.
static void select_layer_backward(const Config *c, real *dx, const real *dout, LayerActs *d, LayerParams *gp,
                                  const LayerActs *a, const LayerParams *p, int B, int T, const Routing *r) {
    const SelGate *g = r->gate;
    size_t n = (size_t)B * T * c->D;
    if (!r->no_grad) {
        double dya = r->dpen, dyg = 0;
        for (size_t i = 0; i < n; i++) { dya += (double)dout[i] * a->sel_out[i]; dyg += (double)dout[i] * a->sel_out[n + i]; }
        gp->s_sel[0] += sel_grad(g, dya, dyg);
    }
    const real *da = dout, *dg = dout;
    if (g->relaxed) {
        for (size_t i = 0; i < n; i++) { d->sel_out[i] = g->y_a * dout[i]; d->sel_out[n + i] = g->y_g * dout[i]; }
        da = d->sel_out; dg = d->sel_out + n;
    }
    if (g->relaxed || !g->a) gdn_layer_backward(c, dx, dg, d, gp, a, p, B, T);
    if (g->relaxed || g->a) { // relaxed: the A mixer's part of dx is written aside, then added
        LayerActs aa = select_attn_acts(c, a, B, T, 0), dd = select_attn_acts(c, d, B, T, 0);
        LayerParams pa = select_attn_params(p), ga = select_attn_params(gp);
        real *dxa = g->relaxed ? xcalloc(n, sizeof(real)) : dx;
        attention_layer_backward(c, dxa, da, &dd, &ga, &aa, &pa, B, T);
        if (g->relaxed) {
            for (size_t i = 0; i < n; i++) dx[i] += dxa[i];
            free(dxa);
        }
    }
}

// Host float32 copies of a model buffer and back (routing statistics, checkpoints, logs, the -D dump); the GPU twins
// copy from and to the device.
static float *to_float32(const real *x, size_t n) {
    float *f = xcalloc(n, sizeof(float));
    for (size_t i = 0; i < n; i++) f[i] = (float)x[i];
    return f;
}
static double *to_float64(const real *x, size_t n) {
    double *f = xcalloc(n, sizeof(double));
    for (size_t i = 0; i < n; i++) f[i] = x[i];
    return f;
}
static void from_float32(real *x, const float *f, size_t n) { for (size_t i = 0; i < n; i++) x[i] = f[i]; }
static float *logits_to_float32(const Model *M, size_t row, size_t nrows) { // rows of Vp values
    return to_float32(M->logits + row * M->cfg.Vp, nrows * M->cfg.Vp);
}
// The last forward pass's per-position losses and hits (crossentropy_hits) of its BT targets, on the host (§13.1)
static void token_scores(const Model *M, const int *targets, int BT, float *loss, unsigned char *hit) {
    for (int i = 0; i < BT; i++) loss[i] = (float)M->losses[i];
    crossentropy_hits(hit, M->logits, targets, BT, M->cfg.V, M->cfg.Vp);
}

// ---- §7: the routing of a whole pass. Shared with train_natsl.cu, a part of this program written on the functions
// above (its top lists what it takes from it): the router's statistics and auxiliary terms (softmax_fraction,
// router_aux_forward), the Gumbel noise (gumbel_draw, next_micro_batch) and the S layers' gates (select_gate,
// select_draw, select_pattern).
#include "common/model_routing.inc"

// Layer l's routing in this pass (Routing, common/layout.h): an N layer's Gumbel noise from this micro-batch's when
// ST-Gumbel routing is on in this pass (else none, τ = 1), an S layer's gate from its forward pass, the tests'
// switches; dpi, dpen: the §7 terms' gradients in the backward pass (dpi only where the router's terms are on).
static Routing layer_routing(const Model *M, int l, int B, int T, const real *dpi, double dpen) {
    Routing r = {NULL, 1, budget_aux_on(&M->rb) ? dpi : NULL, &M->rb.sel[l], dpen, M->router_relaxed, M->router_no_grad};
    if (M->rb.noise && M->cfg.pattern[l] == 'N') {
        r.noise = M->gnoise + (size_t)natsl_layer_index(&M->cfg, l) * B * (T / CH) * M->cfg.H * 2;
        r.tau = M->rb.tau;
    }
    return r;
}

// ---- the whole model (§2, (2.1a-f)) --------------------------------------------------------------------------------
// h^0 = E[ids];  per layer: r = h + Mixer(RMSNorm(h)),  h' = r + MLP(RMSNorm(r));  logits = RMSNorm(h^L) W_headᵀ

// Layer l from its input h^l = la[l].res up to the MLP's gate and up projections gu: everything its backward pass
// reads (model_forward adds SwiGLU and the down projection; model_backward reruns this under recompute, and
// swiglu_backward forms the hidden hmid again for W_down's weight gradient).
static void block_forward(Model *M, int l, int B, int T) {
    const Config *c = &M->cfg;
    int BT = B * T, D = c->D;
    LayerActs *a = &M->la[l];
    const LayerParams *p = &M->p.layer[l];
    rmsnorm_forward(a->xn, a->rstd1, a->res, p->ln_mix, norm_rows(BT, D), 1);
    if (c->pattern[l] == 'G') gdn_layer_forward(c, a, p, a->r, a->res, B, T);
    else if (c->pattern[l] == 'A') attention_layer_forward(c, a, p, a->r, a->res, B, T);
    else if (c->pattern[l] == 'H') nha_layer_forward(c, a, p, a->r, a->res, B, T, l);
    else {
        if (c->pattern[l] == 'S') M->rb.sel[l] = select_gate(M, l);
        Routing r = layer_routing(M, l, B, T, NULL, 0);
        if (c->pattern[l] == 'S') select_layer_forward(c, a, p, a->r, a->res, B, T, &r);
        else natsl_layer_forward(c, a, p, a->r, a->res, B, T, &r);
    }
    rmsnorm_forward(a->xn2, a->rstd2, a->r, p->ln_mlp, norm_rows(BT, D), 1);
    matmul_forward(a->gu, a->xn2, p->wgu, BT, D, 2 * c->F, 1, NULL);
}

// Layer l's SHARED activations (common/layout.h), whose one copy all layers share, that its backward reads, as
// block_forward computed them: the first RMSNorm's output and the conv's V. (The MLP's hidden hmid, SHARED too, comes
// out of swiglu_backward again, which reads what it is made of anyway, before W_down's weight gradient needs it.)
static void block_rebuild(Model *M, int l, int B, int T) {
    const Config *c = &M->cfg;
    int BT = B * T, D = c->D;
    char kind = c->pattern[l];
    LayerActs *a = &M->la[l];
    const LayerParams *p = &M->p.layer[l];
    rmsnorm_forward(a->xn, a->rstd1, a->res, p->ln_mix, norm_rows(BT, D), 1);
    if (kind != 'A' && kind != 'H') { // G, N, S (an S layer's G mixer)
        ConvArgs conv = gdn_conv_args(c, a, p, B, T);
        conv_silu_forward(a->v, &conv, 2 * cfg_K(c), cfg_Vt(c));
    }
}

static void model_forward(Model *M, const int *inputs, const int *targets, int B, int T) {
    const Config *c = &M->cfg;
    int BT = B * T, D = c->D;
    if (B > M->B || (size_t)B * T > (size_t)M->B * M->T || T % CH) {
        fprintf(stderr, "error: model_forward(B=%d, T=%d) exceeds the activations (B=%d, T=%d)\n", B, T, M->B, M->T);
        exit(1);
    }
    encoder_forward(M->la[0].res, inputs, M->p.wte, BT, D);
    for (int l = 0; l < c->L; l++) {
        real *out = l + 1 < c->L ? M->la[l + 1].res : M->hL;
        block_forward(M, l, B, T);
        if (M->layer_done) M->layer_done(M->layer_done_ctx, l, B, T);
        swiglu_forward(M->la[l].hmid, M->la[l].gu, BT, c->F);
        matmul_forward(out, M->la[l].hmid, M->p.layer[l].wdown, BT, c->F, D, 1, M->la[l].r);
    }
    rmsnorm_forward(M->lnf, M->lnf_rstd, M->hL, M->p.ln_f, norm_rows(BT, D), 1);
    matmul_forward(M->logits, M->lnf, M->p.head, BT, D, c->Vp, 1, NULL);
    if (targets) {
        crossentropy_forward(M->losses, M->lse, M->logits, targets, BT, c->V, c->Vp);
        double s = 0;
        for (int i = 0; i < BT; i++) s += M->losses[i];
        M->nscored = targets_scored(targets, BT); // (13.1a): the mean over the scored targets
        M->mean_loss = M->nscored ? s / M->nscored : 0;
        router_aux_forward(M, B, T);
    }
}

// Lays out the gradient scratch for the MLP's (mlp = ACTS_GRADS_MLP) or the mixer's (0) backward of one layer of
// the given kind, the fields the backward pass accumulates into zeroed (the ones their producer writes whole come
// last and are left as they are: common/layout.h). The two share the scratch: the mixer's takes it over once the
// MLP's gradients are spent.
static void grads_scratch(Model *M, LayerActs *d, char kind, int B, int T, int mlp) {
    size_t acc = layer_acts_layout(d, &M->cfg, kind, B, T, NULL, ACTS_GRADS_ACC | mlp);
    memset(M->dacts, 0, acc * sizeof(real));
    layer_acts_layout(d, &M->cfg, kind, B, T, M->dacts, ACTS_GRADS | mlp);
}

// Accumulates the gradient of dloss_scale · Σ losses into M->grads (dloss_scale = 1/(n·accum) in training, n the
// micro-batch's scored targets M->nscored: B·T, or its answers under -w 1, (13.1b)). Every layer but the last first
// refills the shared scratch with what its backward pass reads (the last one's activations are still there): block_rebuild without recompute; under recompute (-k 1, -k 2) block_forward
// reruns the layer. The CPU reruns the whole block at both levels; level 1 only keeps more (the GPU uses it to
// skip the token mixers in the rerun).
static void model_backward(Model *M, const int *inputs, const int *targets, int B, int T, real dloss_scale) {
    const Config *c = &M->cfg;
    int BT = B * T, D = c->D;
    real dpi[2] = {M->rb.dpi[0] * dloss_scale * M->nscored, M->rb.dpi[1] * dloss_scale * M->nscored}; // §7 terms, weighted as the mean loss
    double dpen_sel = M->rb.sel_lambda / c->L * dloss_scale * M->nscored;                        // (7.3e), likewise
    crossentropy_backward(M->logits, M->lse, targets, dloss_scale, BT, c->V, c->Vp);
    matmul_backward(M->dlnf, M->g.head, M->logits, M->lnf, M->p.head, BT, D, c->Vp, DINP_WRITE_MP);
    memset(M->dres, 0, (size_t)BT * D * sizeof(real));
    rmsnorm_backward(M->dres, M->g.ln_f, M->dlnf, M->hL, M->p.ln_f, M->lnf_rstd, norm_rows(BT, D), 1);
    for (int l = c->L - 1; l >= 0; l--) { // M->dres holds dL/dh^{l+1}, then dL/dr, then dL/dh^l
        LayerActs *a = &M->la[l], d;
        const LayerParams *p = &M->p.layer[l];
        LayerParams *gp = &M->g.layer[l];
        if (l < c->L - 1) {
            if (M->recompute) block_forward(M, l, B, T);
            else block_rebuild(M, l, B, T);
        }
        grads_scratch(M, &d, c->pattern[l], B, T, ACTS_GRADS_MLP);
        matmul_backward(d.hmid, NULL, M->dres, NULL, p->wdown, BT, c->F, D, DINP_WRITE_MP);
        swiglu_backward(d.gu, a->hmid, d.hmid, a->gu, BT, c->F); // and hmid, as the forward computed it
        matmul_backward(NULL, gp->wdown, M->dres, a->hmid, NULL, BT, c->F, D, DINP_WRITE_MP);
        matmul_backward(d.xn2, gp->wgu, d.gu, a->xn2, p->wgu, BT, D, 2 * c->F, DINP_WRITE_MP);
        rmsnorm_backward(M->dres, gp->ln_mlp, d.xn2, a->r, p->ln_mlp, a->rstd2, norm_rows(BT, D), 1);
        grads_scratch(M, &d, c->pattern[l], B, T, 0);
        if (c->pattern[l] == 'G') gdn_layer_backward(c, d.xn, M->dres, &d, gp, a, p, B, T);
        else if (c->pattern[l] == 'A') attention_layer_backward(c, d.xn, M->dres, &d, gp, a, p, B, T);
        else if (c->pattern[l] == 'H') nha_layer_backward(c, d.xn, M->dres, &d, gp, a, p, B, T, l);
        else {
            Routing r = layer_routing(M, l, B, T, dpi, dpen_sel);
            if (c->pattern[l] == 'S') select_layer_backward(c, d.xn, M->dres, &d, gp, a, p, B, T, &r);
            else natsl_layer_backward(c, d.xn, M->dres, &d, gp, a, p, B, T, &r);
        }
        rmsnorm_backward(M->dres, gp->ln_mix, d.xn, a->res, p->ln_mix, a->rstd1, norm_rows(BT, D), 1);
    }
    encoder_backward(M->g.wte, M->dres, inputs, BT, D);
}

// Shared with train_natsl.cu, a part of this program (its top lists what it takes from it): freezing the S layers
// and the checkpoint files (save_model, load_model, save_state, load_state and ZeRO-1's shards).
#include "common/model_io.inc"

// ================================================================================================
// 3b. Decoding with the cache (doc/model.md §14): B sequences one token at a time, each at its own position with its
// own routing, equal to the forward pass over the same tokens. Per layer kind the cache holds (one flat buffer, laid
// out by decoder_layout):
//   G: the GDN state S_c [H][d_k][d_v], the current chunk's run Z and its Σg, the short conv's last inputs;
//   A: the keys (RoPE'd) and values of every token so far;
//   N: what G holds, the router's running sum of x over the current chunk, the current chunk's softmax keys and
//      values, and per head group the keys and values of the completed chunks the router sent to softmax;
//   S: what its frozen choice (the noise-free gate, §7.3) holds;
//   H: the slots and the last w tokens' keys (RoPE'd and not), values and gate logits (§15: constant memory).
// A step costs O(1) in the GDN part and O(kept softmax tokens) in attention. At a chunk's last token the router
// decides for the chunk from its mean (5.2a-d): routed to GDN, the run commits into the state and the keys and values
// are dropped; routed to softmax, they are kept and the state only decays (5.4h).
// A prompt's whole chunks go in through the forward pass, whose activations fill the cache (decoder_fill_layer, as
// each layer finishes; decoder_fill_done), the rest through decoder_step (decoder_prefill, common/train_main.inc; its
// oracle decoder_prefill_tokens feeds every token through decoder_step).
// ================================================================================================

typedef struct {
    real *S, *Z, *gsum, *tail; // G, N: state S_c and run Z [B][H][d_k][d_v], Σg of the chunk [B][H], the conv inputs
                               //   [B][4][2K+Vt] (the last 3 tokens', then the current one's)
    real *psum;                // N: Σ x over the current chunk [B][D] (the router's pool, (5.2a))
    real *ck, *cv;             // N: the current chunk's ka [B][64][K], va [B][64][Vt];  A: keys, values [B][Tmax][D]
    real *kk, *kv;             // N: the kept chunks' keys [B][H][Nc][64][d_k], values [B][H][Nc][64][d_v], per head
                               //   group (its G softmax heads' columns), in chunk order
    real *hs, *hk, *hz;        // H: slots [B][heads][2][m][64]; the window's ring of nha_ring tokens: k [B][ring][D]
                               //   (not rotated), gate logits [B][ring][heads·m] (its RoPE'd keys, values: ck, cv)
} DecLayer;

// An H layer's window ring (§15): the last min(w, Tmax) tokens (token t at t mod ring)
static int nha_ring(const Config *c, int l, int Tmax) { return c->nha_w[l] < Tmax ? c->nha_w[l] : Tmax; }

typedef struct {
    Model *M;
    int B, Tmax, Ncmax;
    char kind[NATSL_MAX_LAYERS + 1];  // the pattern with every S resolved to the A or G its gate chooses
    LayerParams p[NATSL_MAX_LAYERS];  // the parameters each layer runs with (an S layer's: its chosen mixer's)
    DecLayer dl[NATSL_MAX_LAYERS];
    real *cache;                      // the flat cache, cache_size reals (decoder_layout)
    size_t cache_size;
    real *work, *zrows;               // one step's activations (decoder_work_layout), the rows' logits [B][Vp]
    LayerActs w;
    real *logits;                     // [B][Vp]: each sequence's latest logits
    int *pos, *seq, *ids;             // [B]: tokens each sequence has consumed; a step's sequences and tokens
    int *nkept;                       // [L][B][H]: softmax chunks an N layer keeps, per sequence and head group
    signed char *route;               // [L][B][Nc][H]: the router's decision per completed chunk: 1 softmax, 0 GDN
} Decoder;

// The cache's fields, carved out of base (NULL: only count); returns its size in reals.
static size_t decoder_layout(Decoder *d, real *base) {
    const Config *c = &d->M->cfg;
    size_t B = d->B, D = c->D, K = cfg_K(c), Vt = cfg_Vt(c), H = c->H, W = 2 * K + Vt, Nc = d->Ncmax, off = 0;
    size_t KV = (size_t)c->dk * c->dv;
#define TAKE(field, n) do { L->field = base ? base + off : NULL; off += (size_t)(n); } while (0)
    for (int l = 0; l < c->L; l++) {
        DecLayer *L = &d->dl[l];
        memset(L, 0, sizeof(*L));
        if (d->kind[l] != 'A' && d->kind[l] != 'H') {
            TAKE(S, B * H * KV); TAKE(Z, B * H * KV); TAKE(gsum, B * H); TAKE(tail, B * NATSL_CONV * W);
        }
        if (d->kind[l] == 'N') {
            TAKE(psum, B * D); TAKE(ck, B * CH * K); TAKE(cv, B * CH * Vt);
            TAKE(kk, B * H * Nc * CH * c->dk); TAKE(kv, B * H * Nc * CH * c->dv);
        }
        if (d->kind[l] == 'A') { TAKE(ck, B * d->Tmax * D); TAKE(cv, B * d->Tmax * D); }
        if (d->kind[l] == 'H') {
            size_t ring = nha_ring(c, l, d->Tmax), HM = (size_t)cfg_attn_heads(c) * c->nha_m;
            TAKE(hs, B * HM * 2 * NATSL_ATTN_HEAD); TAKE(ck, B * ring * D); TAKE(cv, B * ring * D);
            TAKE(hk, B * ring * D); TAKE(hz, B * ring * HM);
        }
    }
#undef TAKE
    return off;
}

// One step's activations for R rows (one token of each advancing sequence), in the fields of LayerActs with B·T = R;
// carved out of base (NULL: only count). The planes (q | k, q̂ | k̂, qa | ka) are R rows apart.
static size_t decoder_work_layout(LayerActs *w, const Config *c, int R, real *base) {
    size_t D = c->D, K = cfg_K(c), Vt = cfg_Vt(c), H = c->H, Ha = c->Ha, off = 0;
    size_t P = 2 * K + Vt > 3 * D ? 2 * K + Vt : 3 * D, A = Vt > D ? Vt : D, NR = H > Ha ? H : Ha;
    memset(w, 0, sizeof(*w));
#define TAKE(field, n) do { w->field = base ? base + off : NULL; off += (size_t)(n); } while (0)
    TAKE(res, R * D); TAKE(xn, R * D); TAKE(rstd1, R); TAKE(proj, R * P); TAKE(qk, 2 * R * K); TAKE(v, R * Vt);
    TAKE(gate, R * Vt); TAKE(ab, R * 2 * H); TAKE(g, R * H); TAKE(beta, R * H); TAKE(qk_hat, 2 * R * K);
    TAKE(qk_rho, 2 * R * H); TAKE(qka, 2 * R * K); TAKE(qka_rstd, 2 * R * Ha); TAKE(omega_raw, R * 2 * Ha);
    TAKE(omega, R * 2 * Ha); TAKE(gdn_out, R * Vt); TAKE(att_out, R * A); TAKE(pool, D); TAKE(rlogits, 2 * H);
    TAKE(rpi, 2 * H); TAKE(norm_rstd, 2 * R * NR); TAKE(y, R * Vt); TAKE(r, R * D); TAKE(xn2, R * D); TAKE(rstd2, R);
    TAKE(gu, R * 2 * c->F); TAKE(hmid, R * c->F);
    TAKE(qk_rot, R * 2 * D); TAKE(alpha, R * cfg_attn_heads(c) * c->nha_m); // H (0 without H layers)
#undef TAKE
    if (base) {
        w->q = w->qk; w->k = w->qk + R * K; w->q_hat = w->qk_hat; w->k_hat = w->qk_hat + R * K;
        w->qa = w->qka; w->ka = w->qka + R * K; w->qa_rstd = w->qka_rstd; w->ka_rstd = w->qka_rstd + R * Ha;
    }
    return off;
}

// Empties the cache: every sequence at position 0.
static void decoder_reset(Decoder *d) {
    const Config *c = &d->M->cfg;
    memset(d->cache, 0, d->cache_size * sizeof(real));
    memset(d->pos, 0, d->B * sizeof(int));
    memset(d->nkept, 0, (size_t)c->L * d->B * c->H * sizeof(int));
    memset(d->route, -1, (size_t)c->L * d->B * d->Ncmax * c->H);
}

// A decoder for B sequences of up to Tmax tokens each. The S layers are frozen to their noise-free choice (§7.3).
static void decoder_init(Decoder *d, Model *M, int B, int Tmax) {
    const Config *c = &M->cfg;
    memset(d, 0, sizeof(*d));
    d->M = M; d->B = B; d->Tmax = Tmax; d->Ncmax = (Tmax + CH - 1) / CH;
    for (int l = 0; l < c->L; l++) {
        d->kind[l] = c->pattern[l];
        d->p[l] = M->p.layer[l];
        if (c->pattern[l] != 'S') continue;
        double s = M->p.layer[l].s_sel[0];
        d->kind[l] = sel_gate(s, M->rb.kappa, NULL, 1).a ? 'A' : 'G';
        if (d->kind[l] == 'A') d->p[l] = select_attn_params(&M->p.layer[l]);
    }
    d->cache_size = decoder_layout(d, NULL);
    d->cache = xcalloc(d->cache_size, sizeof(real));
    decoder_layout(d, d->cache);
    d->work = xcalloc(decoder_work_layout(&d->w, c, B, NULL), sizeof(real));
    d->zrows = xcalloc((size_t)B * c->Vp, sizeof(real));
    d->logits = xcalloc((size_t)B * c->Vp, sizeof(real));
    d->pos = xcalloc(B, sizeof(int)); d->seq = xcalloc(B, sizeof(int)); d->ids = xcalloc(B, sizeof(int));
    d->nkept = xcalloc((size_t)c->L * B * c->H, sizeof(int));
    d->route = xcalloc((size_t)c->L * B * d->Ncmax * c->H, 1);
    decoder_reset(d);
}

static void decoder_free(Decoder *d) {
    free(d->cache); free(d->work); free(d->zrows); free(d->logits); free(d->pos); free(d->seq); free(d->ids);
    free(d->nkept); free(d->route);
}

// G and N layers (§3, §5) on R rows: the inputs (3.1a-h, 5.1a-e) with the short conv over the cached last inputs,
// one GDN step per head on the run Z (3.2b-e, 5.4b-c), for N the softmax op over the kept chunks and the current one
// (5.3a-d), the gated norm and the output projection; at a chunk's last token the router's decision and the commit.
static void decoder_gdn_layer(Decoder *d, int l, int R) {
    const Config *c = &d->M->cfg;
    const LayerParams *p = &d->p[l];
    const DecLayer *L = &d->dl[l];
    LayerActs *w = &d->w;
    int D = c->D, K = cfg_K(c), Vt = cfg_Vt(c), H = c->H, W = 2 * K + Vt, dk = c->dk, dv = c->dv;
    int Ha = c->Ha, dka = cfg_dka(c), dva = cfg_dva(c), G = Ha / H, nats = d->kind[l] == 'N';
    size_t KV = (size_t)dk * dv;
    matmul_forward(w->proj, w->xn, p->wqkv, R, D, W, 1, NULL);
    #pragma omp parallel for
    for (int r = 0; r < R; r++) { // the short conv (3.1c) over the last 3 inputs and this one, then SiLU
        real *win = L->tail + (size_t)d->seq[r] * NATSL_CONV * W;
        memcpy(win + (NATSL_CONV - 1) * W, w->proj + (size_t)r * W, W * sizeof(real));
        for (int ch = 0; ch < W; ch++) {
            real y = matmul_precision(silu(conv_pre(win + ch, W, p->conv + ch * NATSL_CONV, NATSL_CONV - 1)));
            if (ch < K) w->q[(size_t)r * K + ch] = y;
            else if (ch < 2 * K) w->k[(size_t)r * K + ch - K] = y;
            else w->v[(size_t)r * Vt + ch - 2 * K] = y;
        }
        memmove(win, win + W, (NATSL_CONV - 1) * W * sizeof(real));
    }
    matmul_forward(w->gate, w->xn, p->wg, R, D, Vt, 1, NULL);
    matmul_forward(w->ab, w->xn, p->wab, R, D, 2 * H, 0, NULL);
    l2norm_forward(w->qk_hat, w->qk_rho, w->qk, 2 * R, H, dk);
    GdnGatesArgs gates = gdn_gates_args(c, w, p, 1, R); // R rows, one token of each sequence
    gdn_gates_forward(w->g, w->beta, &gates);
    #pragma omp parallel
    {
        real *kz = xcalloc(dv, sizeof(real));
        #pragma omp for collapse(2)
        for (int r = 0; r < R; r++)
            for (int h = 0; h < H; h++) { // the run starts each chunk from the committed state as stored (5.4h)
                size_t bh = (size_t)d->seq[r] * H + h, rh = (size_t)r * H + h;
                real *S = L->S + bh * KV, *Z = L->Z + bh * KV;
                if (d->pos[d->seq[r]] % CH == 0) {
                    for (size_t i = 0; i < KV; i++) Z[i] = matmul_precision(S[i]);
                    L->gsum[bh] = 0;
                }
                L->gsum[bh] += w->g[rh];
                gdn_token_step(Z, w->gdn_out + (size_t)r * Vt + h * dv, w->q_hat + (size_t)r * K + h * dk,
                               w->k_hat + (size_t)r * K + h * dk, w->v + (size_t)r * Vt + h * dv, exp(w->g[rh]),
                               w->beta[rh], dk, dv, kz);
            }
        free(kz);
    }
    for (size_t i = 0; i < (size_t)R * Vt; i++) w->gdn_out[i] = matmul_precision(w->gdn_out[i]);
    if (nats) {
        rmsnorm_forward(w->qa, w->qa_rstd, w->q, p->qn, (NormRows){R, Ha, dka, K, K}, 1);
        rmsnorm_forward(w->ka, w->ka_rstd, w->k, p->kn, (NormRows){R, Ha, dka, K, K}, 1);
        if (c->rope)
            for (int r = 0; r < R; r++) {
                rope_rotate_row(w->qa + (size_t)r * K, d->pos[d->seq[r]], Ha, dka, 1, 1);
                rope_rotate_row(w->ka + (size_t)r * K, d->pos[d->seq[r]], Ha, dka, 1, 1);
            }
        matmul_forward(w->omega_raw, w->q, p->wow, R, K, 2 * Ha, 0, NULL);
        pair_softmax_forward(w->omega, w->omega_raw, (size_t)R * Ha);
        for (int r = 0; r < R; r++) { // the router's running sum; the chunk's keys and values
            int b = d->seq[r], t = d->pos[b] % CH;
            for (int i = 0; i < D; i++) L->psum[(size_t)b * D + i] += matmul_precision(w->xn[(size_t)r * D + i]);
            memcpy(L->ck + ((size_t)b * CH + t) * K, w->ka + (size_t)r * K, K * sizeof(real));
            memcpy(L->cv + ((size_t)b * CH + t) * Vt, w->v + (size_t)r * Vt, Vt * sizeof(real));
        }
        #pragma omp parallel
        {
            real *e = xcalloc((size_t)d->Ncmax * CH, sizeof(real));
            KeySpan *sp = xcalloc(d->Ncmax + 1, sizeof(KeySpan));
            #pragma omp for collapse(2)
            for (int r = 0; r < R; r++)
                for (int j = 0; j < Ha; j++) { // (5.3a): the kept chunks of head group n, then the own chunk up to t
                    int b = d->seq[r], n = j / G, jj = j % G, nsp = 0;
                    int nk = d->nkept[((size_t)l * d->B + b) * H + n];
                    size_t slot = ((size_t)b * H + n) * d->Ncmax;
                    for (int i = 0; i < nk; i++)
                        sp[nsp++] = (KeySpan){L->kk + (slot + i) * CH * dk + jj * dka, L->kv + (slot + i) * CH * dv + jj * dva,
                                              dk, dv, CH, 1};
                    sp[nsp++] = (KeySpan){L->ck + (size_t)b * CH * K + j * dka, L->cv + (size_t)b * CH * Vt + j * dva, K, Vt,
                                          d->pos[b] % CH + 1, 1};
                    attend_query(w->att_out + (size_t)r * Vt + j * dva, w->qa + (size_t)r * K + j * dka, sp, nsp, dka, dva, e);
                }
            free(e); free(sp);
        }
        for (size_t i = 0; i < (size_t)R * Vt; i++) w->att_out[i] = matmul_precision(w->att_out[i]);
    }
    GatedNormArgs norm = nats ? natsl_norm_args(c, w, p->n1, p->n2, R, 1) : gdn_layer_norm_args(c, w, p->o_norm, R, 1);
    gated_norm_forward(w->y, w->norm_rstd, &norm);
    matmul_forward(w->r, w->y, p->wo, R, Vt, D, 1, w->res);
    for (int r = 0; r < R; r++) { // the chunk boundary: the router decides (5.2a-d), the state commits or decays (5.4h)
        int b = d->seq[r], cidx = d->pos[b] / CH;
        if (d->pos[b] % CH != CH - 1) continue;
        if (nats) {
            for (int i = 0; i < D; i++) { w->pool[i] = L->psum[(size_t)b * D + i] / CH; L->psum[(size_t)b * D + i] = 0; }
            matmul_forward(w->rlogits, w->pool, p->wr, 1, D, 2 * H, 0, NULL);
            pair_softmax_forward(w->rpi, w->rlogits, H);
        }
        for (int h = 0; h < H; h++) {
            int soft = nats && w->rpi[2 * h] >= w->rpi[2 * h + 1]; // ties to softmax (5.2d)
            size_t bh = (size_t)b * H + h;
            if (nats) d->route[(((size_t)l * d->B + b) * d->Ncmax + cidx) * H + h] = (signed char)soft;
            if (soft) { // keep the chunk's keys and values of head group h
                int *nk = &d->nkept[((size_t)l * d->B + b) * H + h];
                size_t slot = bh * d->Ncmax + *nk;
                for (int t = 0; t < CH; t++) {
                    memcpy(L->kk + (slot * CH + t) * dk, L->ck + ((size_t)b * CH + t) * K + h * dk, dk * sizeof(real));
                    memcpy(L->kv + (slot * CH + t) * dv, L->cv + ((size_t)b * CH + t) * Vt + h * dv, dv * sizeof(real));
                }
                (*nk)++;
            }
            gdn_chunk_commit(L->S + bh * KV, L->Z + bh * KV, soft ? 0 : 1, exp(L->gsum[bh]), KV);
        }
    }
}

// A layer (§4) on R rows: q, k RoPE'd at each sequence's position, k and v appended to the cache, causal attention
// over every cached token (4.1c).
static void decoder_attention_layer(Decoder *d, int l, int R) {
    const Config *c = &d->M->cfg;
    const LayerParams *p = &d->p[l];
    const DecLayer *L = &d->dl[l];
    LayerActs *w = &d->w;
    int D = c->D, heads = cfg_attn_heads(c), hd = NATSL_ATTN_HEAD;
    matmul_forward(w->proj, w->xn, p->wqkv, R, D, 3 * D, 1, NULL);
    for (int r = 0; r < R; r++) {
        int b = d->seq[r];
        real *row = w->proj + (size_t)r * 3 * D;
        rope_rotate_row(row, d->pos[b], 2 * heads, hd, 1, 1);
        memcpy(L->ck + ((size_t)b * d->Tmax + d->pos[b]) * D, row + D, D * sizeof(real));
        memcpy(L->cv + ((size_t)b * d->Tmax + d->pos[b]) * D, row + 2 * D, D * sizeof(real));
    }
    #pragma omp parallel
    {
        real *e = xcalloc(d->Tmax, sizeof(real));
        #pragma omp for collapse(2)
        for (int r = 0; r < R; r++)
            for (int j = 0; j < heads; j++) {
                int b = d->seq[r];
                KeySpan sp = {L->ck + (size_t)b * d->Tmax * D + j * hd, L->cv + (size_t)b * d->Tmax * D + j * hd, D, D,
                              d->pos[b] + 1, 1};
                attend_query(w->att_out + (size_t)r * D + j * hd, w->proj + (size_t)r * 3 * D + j * hd, &sp, 1, hd, hd, e);
            }
        free(e);
    }
    for (size_t i = 0; i < (size_t)R * D; i++) w->att_out[i] = matmul_precision(w->att_out[i]);
    matmul_forward(w->r, w->att_out, p->wo, R, D, D, 1, w->res);
}

// H layer (§15) on R rows: the token s = t − w leaving the window enters the slots (15.1b; w = 0: this token), this
// token's k, v and gate logits z (for when it leaves) and its rotated key join the window's ring of min(w, Tmax)
// tokens, then one softmax over the slots (t ≥ w) and the window (15.2a-c).
static void decoder_nha_layer(Decoder *d, int l, int R) {
    const Config *c = &d->M->cfg;
    const LayerParams *p = &d->p[l];
    const DecLayer *L = &d->dl[l];
    LayerActs *w = &d->w;
    int D = c->D, heads = cfg_attn_heads(c), hd = NATSL_ATTN_HEAD, m = c->nha_m, HM = heads * m, win = c->nha_w[l];
    int Wc = nha_ring(c, l, d->Tmax);
    size_t SZ = 2 * (size_t)m * hd;
    matmul_forward(w->proj, w->xn, p->wqkv, R, D, 3 * D, 1, NULL);
    matmul_forward(w->alpha, w->xn, p->walpha, R, D, HM, 0, NULL);
    for (int r = 0; r < R; r++) {
        int b = d->seq[r], t = d->pos[b];
        const real *row = w->proj + (size_t)r * 3 * D;
        real *qk = w->qk_rot + (size_t)r * 2 * D;
        if (t >= win) { // token t − w leaves: from the ring (its slot is the one token t takes), or this token (w = 0)
            size_t at = Wc ? ((size_t)b * Wc + t % Wc) : 0;
            const real *k = Wc ? L->hk + at * D : row + D, *v = Wc ? L->cv + at * D : row + 2 * D;
            const real *z = Wc ? L->hz + at * HM : w->alpha + (size_t)r * HM;
            for (int h = 0; h < heads; h++)
                nha_slot_update(L->hs + ((size_t)b * heads + h) * SZ, k + h * hd, v + h * hd, z + (size_t)h * m, m);
        }
        memcpy(qk, row, 2 * D * sizeof(real));
        rope_rotate_row(qk, t, 2 * heads, hd, 1, 1);
        if (Wc) {
            size_t at = (size_t)b * Wc + t % Wc;
            memcpy(L->hk + at * D, row + D, D * sizeof(real));
            memcpy(L->cv + at * D, row + 2 * D, D * sizeof(real));
            memcpy(L->ck + at * D, qk + D, D * sizeof(real));
            memcpy(L->hz + at * HM, w->alpha + (size_t)r * HM, HM * sizeof(real));
        }
    }
    #pragma omp parallel
    {
        real *e = xcalloc(m + Wc, sizeof(real));
        #pragma omp for collapse(2)
        for (int r = 0; r < R; r++)
            for (int h = 0; h < heads; h++) {
                int b = d->seq[r], t = d->pos[b], nslot = t >= win ? m : 0, lo = nha_window_lo(t, win), n = nslot;
                const real *S = L->hs + ((size_t)b * heads + h) * SZ, *qr = w->qk_rot + (size_t)r * 2 * D + h * hd;
                nha_slot_scores(e, w->proj + (size_t)r * 3 * D + h * hd, S, nslot);
                for (int i = lo; i <= t; i++) {
                    const real *kr = L->ck + ((size_t)b * Wc + i % Wc) * D + h * hd;
                    real s = 0;
                    for (int j = 0; j < hd; j++) s += qr[j] * kr[j];
                    e[n++] = s * 0.125;
                }
                real mx = NEG_LARGE, sum = 0, o[NATSL_ATTN_HEAD] = {0};
                for (int i = 0; i < n; i++) mx = fmax(mx, e[i]);
                for (int i = 0; i < n; i++) {
                    real pr = exp(e[i] - mx);
                    const real *vv = i < nslot ? S + (size_t)(m + i) * hd : L->cv + ((size_t)b * Wc + (lo + i - nslot) % Wc) * D + h * hd;
                    sum += pr;
                    for (int j = 0; j < hd; j++) o[j] += pr * vv[j];
                }
                for (int j = 0; j < hd; j++) w->att_out[(size_t)r * D + h * hd + j] = matmul_precision(o[j] / sum);
            }
        free(e);
    }
    matmul_forward(w->r, w->att_out, p->wo, R, D, D, 1, w->res);
}

// One token for every sequence b with tokens[b] >= 0 (the others wait): the whole model (2.1a-f) on those rows; each
// one's logits land in d->logits[b] and its position advances.
static void decoder_step(Decoder *d, const int *tokens) {
    const Config *c = &d->M->cfg;
    const ParamPtrs *P = &d->M->p;
    int D = c->D, F = c->F, R = 0;
    for (int b = 0; b < d->B; b++) {
        if (tokens[b] < 0) continue;
        if (d->pos[b] >= d->Tmax) die("decoder_step: a sequence is full (decoder_init's Tmax tokens)");
        d->seq[R] = b; d->ids[R] = tokens[b]; R++;
    }
    if (R == 0) return;
    LayerActs *w = &d->w;
    decoder_work_layout(w, c, R, d->work);
    encoder_forward(w->res, d->ids, P->wte, R, D);
    for (int l = 0; l < c->L; l++) {
        const LayerParams *p = &d->p[l];
        rmsnorm_forward(w->xn, w->rstd1, w->res, p->ln_mix, norm_rows(R, D), 1);
        if (d->kind[l] == 'A') decoder_attention_layer(d, l, R);
        else if (d->kind[l] == 'H') decoder_nha_layer(d, l, R);
        else decoder_gdn_layer(d, l, R);
        rmsnorm_forward(w->xn2, w->rstd2, w->r, p->ln_mlp, norm_rows(R, D), 1);
        matmul_forward(w->gu, w->xn2, p->wgu, R, D, 2 * F, 1, NULL);
        swiglu_forward(w->hmid, w->gu, R, F);
        matmul_forward(w->res, w->hmid, p->wdown, R, F, D, 1, w->r);
    }
    rmsnorm_forward(w->xn, w->rstd1, w->res, P->ln_f, norm_rows(R, D), 1);
    matmul_forward(d->zrows, w->xn, P->head, R, D, c->Vp, 1, NULL);
    for (int r = 0; r < R; r++) {
        memcpy(d->logits + (size_t)d->seq[r] * c->Vp, d->zrows + (size_t)r * c->Vp, c->Vp * sizeof(real));
        d->pos[d->seq[r]]++;
    }
}

// Sequence b's latest logits (Vp values) as a new float32 array.
static float *decoder_logits(const Decoder *d, int b) { return to_float32(d->logits + (size_t)b * d->M->cfg.Vp, d->M->cfg.Vp); }

// Layer l's cache of the sequences r->seq from the prefill's forward pass F over their first r->T tokens (whole chunks;
// the sequences at position 0), read just after F's layer l ran (its activations, the shared ones too, are layer l's;
// doc/model.md §14.5):
//   G, N: the conv inputs of the last 3 tokens (proj's rows); the committed state after the last chunk as decoder_step
//         carries it (5.4h): with each chunk rerun (5.4b) from the start state s0_c the forward stored, its own part
//         ΔS_c = Z_last − Dec_c s0_c (5.4f), S = Σ_c (Π_{c'>c} Dec_c') m_c ΔS_c (5.4g), m_c = 1 for a G layer, for an N
//         layer the router's decision r->route (the forward forces its last chunk, (5.2f): the decisions come from π);
//   N:    the decisions, and each head group's softmax chunks' keys and values (ka, V columns) in chunk order;
//   A:    the keys (RoPE'd in proj) and values of every token;
//   H:    the slots after the pass (15.1b): those the forward stored at its last chunk's start, then that chunk's
//         steps t ≥ w again, each taking in its token t − w (proj's k, v; alpha's z), as decoder_step does; the ring:
//         the last min(w, Tmax) tokens' k, v (proj), RoPE'd k (qk_rot) and z (alpha), token t at t mod ring.
// The router's running sum and the current chunk's run start empty at a chunk's first token.
static void decoder_fill_layer(Decoder *d, const Model *F, int l, const PrefillRows *r) {
    const Config *c = &d->M->cfg;
    const LayerActs *a = &F->la[l];
    const DecLayer *L = &d->dl[l];
    int T = r->T, Nc = T / CH, D = c->D, K = cfg_K(c), Vt = cfg_Vt(c), H = c->H, W = 2 * K + Vt, dk = c->dk, dv = c->dv;
    size_t KV = (size_t)dk * dv;
    if (d->kind[l] == 'H') {
        int heads = cfg_attn_heads(c), hd = NATSL_ATTN_HEAD, m = c->nha_m, HM = heads * m, win = c->nha_w[l];
        int Wc = nha_ring(c, l, d->Tmax), first = (Nc - 1) * CH > win ? (Nc - 1) * CH : win;
        size_t SZ = 2 * (size_t)m * hd;
        for (int i = 0; i < r->n; i++) {
            int b = r->seq[i];
            for (int h = 0; h < heads; h++) {
                real *S = L->hs + ((size_t)b * heads + h) * SZ;
                memcpy(S, a->slots + (((size_t)i * heads + h) * Nc + Nc - 1) * SZ, SZ * sizeof(real));
                for (int t = first; t < T; t++) { // token t − w enters at step t (15.1b)
                    size_t row = (size_t)i * T + t - win;
                    nha_slot_update(S, a->proj + row * 3 * D + D + h * hd, a->proj + row * 3 * D + 2 * D + h * hd,
                                    a->alpha + row * HM + (size_t)h * m, m);
                }
            }
            for (int t = T - Wc > 0 ? T - Wc : 0; t < T; t++) {
                size_t at = (size_t)b * Wc + t % Wc, row = (size_t)i * T + t;
                memcpy(L->hk + at * D, a->proj + row * 3 * D + D, D * sizeof(real));
                memcpy(L->cv + at * D, a->proj + row * 3 * D + 2 * D, D * sizeof(real));
                memcpy(L->ck + at * D, a->qk_rot + row * 2 * D + D, D * sizeof(real));
                memcpy(L->hz + at * HM, a->alpha + row * HM, HM * sizeof(real));
            }
        }
        return;
    }
    if (d->kind[l] == 'A') {
        const real *proj = c->pattern[l] == 'S' ? a->aproj : a->proj; // an S layer frozen to A: its A mixer's
        for (int i = 0; i < r->n; i++)
            for (int t = 0; t < T; t++) {
                size_t to = ((size_t)r->seq[i] * d->Tmax + t) * D;
                const real *row = proj + ((size_t)i * T + t) * 3 * D;
                memcpy(L->ck + to, row + D, D * sizeof(real));
                memcpy(L->cv + to, row + 2 * D, D * sizeof(real));
            }
        return;
    }
    int nats = d->kind[l] == 'N';
    for (int i = 0; i < r->n; i++) {
        int b = r->seq[i];
        memcpy(L->tail + (size_t)b * NATSL_CONV * W, a->proj + ((size_t)i * T + T - 3) * W, 3 * W * sizeof(real));
        if (!nats) continue;
        memcpy(d->route + ((size_t)l * d->B + b) * d->Ncmax * H, r->route + (size_t)i * Nc * H, (size_t)Nc * H);
        memcpy(d->nkept + ((size_t)l * d->B + b) * H, r->nkept + (size_t)i * H, H * sizeof(int));
        for (int h = 0; h < H; h++) // the softmax chunks' keys and values of head group h, in chunk order
            for (int ch = 0, slot = 0; ch < Nc; ch++) {
                if (r->route[((size_t)i * Nc + ch) * H + h] != 1) continue;
                size_t to = (((size_t)b * H + h) * d->Ncmax + slot++) * CH;
                for (int t = 0; t < CH; t++) {
                    size_t row = (size_t)i * T + ch * CH + t;
                    memcpy(L->kk + (to + t) * dk, a->ka + row * K + h * dk, dk * sizeof(real));
                    memcpy(L->kv + (to + t) * dv, a->v + row * Vt + h * dv, dv * sizeof(real));
                }
            }
    }
    #pragma omp parallel
    {
        real *Z = xcalloc(KV, sizeof(real)), *kz = xcalloc(dv, sizeof(real)), *o = xcalloc(dv, sizeof(real));
        #pragma omp for collapse(2)
        for (int i = 0; i < r->n; i++)
            for (int h = 0; h < H; h++) {
                real *S = L->S + ((size_t)r->seq[i] * H + h) * KV;
                memset(S, 0, KV * sizeof(real));
                for (int ch = 0; ch < Nc; ch++) {
                    const real *s0 = a->state + (((size_t)i * H + h) * Nc + ch) * KV;
                    memcpy(Z, s0, KV * sizeof(real));
                    real gsum = 0;
                    for (int t = ch * CH; t < (ch + 1) * CH; t++) {
                        size_t row = (size_t)i * T + t, rh = row * H + h;
                        gsum += a->g[rh];
                        gdn_token_step(Z, o, a->q_hat + row * K + h * dk, a->k_hat + row * K + h * dk, a->v + row * Vt + h * dv,
                                       exp(a->g[rh]), a->beta[rh], dk, dv, kz);
                    }
                    real dec = exp(gsum), m = nats ? r->route[((size_t)i * Nc + ch) * H + h] != 1 : 1;
                    for (size_t e = 0; e < KV; e++) S[e] = dec * S[e] + m * (Z[e] - dec * s0[e]);
                }
            }
        free(Z); free(kz); free(o);
    }
}

// After the prefill's forward pass F (decoder_fill_layer): the sequences r->seq at position r->T, and the logits of
// those whose prompt ends there, the pass's last row's.
static void decoder_fill_done(Decoder *d, const Model *F, const PrefillRows *r) {
    int Vp = d->M->cfg.Vp;
    for (int i = 0; i < r->n; i++) {
        d->pos[r->seq[i]] = r->T;
        if (r->ends[i])
            memcpy(d->logits + (size_t)r->seq[i] * Vp, F->logits + ((size_t)i * r->T + r->T - 1) * Vp, Vp * sizeof(real));
    }
}

// What the cache holds now, in bytes: the fixed state of every G and N layer (S, Z, Σg, conv inputs; N: the router's
// sum and the current chunk's keys and values) and the keys and values that grow (A: every token's; N: the kept
// chunks'; H: the window's, up to w tokens, kv[l]; H's slots are fixed); a Transformer of the same width and depth would hold K and V of every layer and token. sfr[l]: the
// fraction of an N layer's completed chunk-heads routed to softmax (-1: no N layer or no completed chunk).
static DecoderStats decoder_stats(const Decoder *d) {
    const Config *c = &d->M->cfg;
    DecoderStats s;
    memset(&s, 0, sizeof(s));
    size_t B = d->B, D = c->D, K = cfg_K(c), Vt = cfg_Vt(c), H = c->H, W = 2 * K + Vt, tokens = 0, el = sizeof(real);
    for (int b = 0; b < d->B; b++) tokens += d->pos[b];
    s.transformer = (double)tokens * c->L * 2 * D * el;
    for (int l = 0; l < c->L; l++) {
        s.sfr[l] = -1;
        if (d->kind[l] == 'A') s.kv[l] = (double)tokens * 2 * D * el;
        if (d->kind[l] == 'H') { // §15: the slots, and the window's tokens held now (k, RoPE'd k, v, gate logits)
            size_t HM = (size_t)cfg_attn_heads(c) * c->nha_m;
            for (int b = 0; b < d->B; b++) s.kv[l] += (double)nha_ring(c, l, d->pos[b]) * (3 * D + HM) * el;
            s.held += (double)B * HM * 2 * NATSL_ATTN_HEAD * el + s.kv[l];
            continue;
        }
        if (d->kind[l] != 'A') s.held += (double)B * (2 * H * c->dk * c->dv + H + NATSL_CONV * W) * el;
        if (d->kind[l] != 'N') { s.held += s.kv[l]; continue; }
        s.held += (double)B * (D + CH * (K + Vt)) * el;
        int n = 0, soft = 0;
        for (size_t i = 0; i < B * H; i++) s.kv[l] += (double)d->nkept[(size_t)l * B * H + i] * CH * (c->dk + c->dv) * el;
        for (size_t i = 0; i < B * d->Ncmax * H; i++) {
            signed char x = d->route[(size_t)l * B * d->Ncmax * H + i];
            n += x >= 0; soft += x == 1;
        }
        if (n) s.sfr[l] = (double)soft / n;
        s.held += s.kv[l];
    }
    return s;
}

// ================================================================================================
// 4. The training step (§9): gradients over micro-batches, global norm, clipping, AdamW
// ================================================================================================

static double grad_norm(const Model *M) {
    double s = 0;
    for (size_t i = 0; i < M->nparams; i++) s += (double)M->grads[i] * M->grads[i];
    return sqrt(s);
}

// One AdamW step at step t (1-based) on the gradients scaled by grad_scale (the clipping), with decoupled weight
// decay on the tensors config.h marks:  m = β1 m + (1−β1) g,  v = β2 v + (1−β2) g²,
// w −= lr (m̂ / (sqrt(v̂) + eps) + wd·w),  m̂ = m / (1 − β1ᵗ),  v̂ = v / (1 − β2ᵗ).
static void adamw_update(Model *M, double lr, double wd, double grad_scale, int t) {
    const double b1 = ADAMW_BETA1, b2 = ADAMW_BETA2, c1 = 1 - pow(b1, t), c2 = 1 - pow(b2, t);
    model_alloc_moments(M);
    for (int k = 0; k < M->ntensors; k++) {
        const ParamTensor *pt = &M->tensors[k];
        double decay = pt->decay ? wd : 0;
        #pragma omp parallel for
        for (size_t i = pt->offset; i < pt->offset + pt->numel; i++) {
            double g = M->grads[i] * grad_scale;
            M->adam_m[i] = b1 * M->adam_m[i] + (1 - b1) * g;
            M->adam_v[i] = b2 * M->adam_v[i] + (1 - b2) * g * g;
            double mh = M->adam_m[i] / c1, vh = M->adam_v[i] / c2;
            M->params[i] -= lr * (mh / (sqrt(vh) + ADAMW_EPS) + decay * M->params[i]);
        }
    }
}

// One optimizer step t (1-based) over `accum` micro-batches of B×T tokens from the loader: zero the gradients;
// per micro-batch, forward and backward with the loss scaled by 1/(n·accum), n its scored targets (B·T, or its
// answers under -w 1: (13.1b)), so the gradients sum to the gradient of the mean of the micro-batches' mean losses; then the global gradient norm, clipping to GRAD_CLIP and one
// AdamW update. A step whose gradient norm is not finite is skipped (no update). Returns the mean loss, the norm
// (before clipping) and, per N layer l, the fraction of chunks routed to softmax in sfr[l] (when sfr != NULL).
// With the §7 options: the step first draws its S gates' noise (§7.3), under ST-Gumbel routing each micro-batch its
// router noise (the forward passes of evaluation, sampling and -D's first batch see none); the penalty, the
// load-balancing term and the hard softmax fraction of the micro-batches are averaged into pen, lb, frac (the loss
// stays the task loss).
// A data error ends the program with its message.
typedef struct { double loss, norm; int skipped; double pen, lb, frac, tau; } StepStats; // pen..tau: §7
static StepStats train_step(Model *M, DataLoader *train, int accum, int B, int T, double lr, double wd, int t,
                            double *sfr) {
    const Config *c = &M->cfg;
    StepStats s = {0, 0, 0, 0, 0, 0, 0};
    model_zero_grad(M);
    for (int l = 0; sfr && l < c->L; l++) sfr[l] = 0;
    M->rb.noise = M->rb.tau0 > 0; // §7.2: Gumbel noise in this step's forward passes only, at τ_t
    M->rb.tau = s.tau = M->rb.noise ? budget_tau(&M->rb, t) : 1;
    select_draw(M, t);            // §7.3: the S gates' noise of this step
    for (int k = 0; k < accum; k++) {
        next_micro_batch(M, train, B, T); // its tokens and, under ST-Gumbel routing, its noise
        model_forward(M, train->inputs, train->targets, B, T);
        model_backward(M, train->inputs, train->targets, B, T, M->nscored ? (real)1 / ((real)M->nscored * accum) : 0);
        s.loss += M->mean_loss / accum;
        s.pen += M->rb.pen / accum; s.lb += M->rb.lb / accum; s.frac += M->rb.frac / accum;
        for (int l = 0; sfr && l < c->L; l++)
            if (c->pattern[l] == 'N') sfr[l] += softmax_fraction(M, l, -1, B, T) / accum;
    }
    M->rb.noise = M->rb.sel_noise = 0;
    s.norm = grad_norm(M);
    s.skipped = !is_finite(s.norm);
    if (!s.skipped) adamw_update(M, lr, wd, s.norm > GRAD_CLIP ? GRAD_CLIP / s.norm : 1, t);
    return s;
}

// ================================================================================================
// 5. The program: the CPU backend of the training driver common/train_main.inc (flags, model, data, the loop
// around train_step with validation, samples, logging and checkpoints). main is left out when test_natsl.c
// includes this file.
// ================================================================================================

static const char *backend_default_precision = "fp32";
static void backend_start(const TrainArgs *a) {
    g_bf16 = !strcmp(a->precision, "bf16");
    if (g_bf16) printf("precision: bf16 matmul operands, as train_natsl_cu -p bf16 (a check mode: slower than fp32)\n");
#ifdef _OPENMP
    printf("threads: %d\n", omp_get_max_threads());
#endif
    if (g_world > 1) die("train_natsl trains in one process; the environment starts several (common/dist.h): "
                         "train_natsl_cu trains on several GPUs");
}
static void backend_allreduce(double *x, int n) { (void)x; (void)n; } // one process: its sums are the job's
static void backend_step_timed(int first, double dt) { (void)first; (void)dt; }
static void backend_step_note(const Model *M, int B, int T, int accum, double dt) { (void)M; (void)B; (void)T; (void)accum; (void)dt; }
static void backend_finish(void) {}

#include "common/train_main.inc"

#ifndef TESTING
int main(int argc, char **argv) { return train_main(argc, argv); }
#endif

// ================================================================================================
// Appendix: speed and checking machinery, not model math
// ================================================================================================

// ---- -p bf16: emulating the GPU's bf16 mode ------------------------------------------------------
// A check mode, not a fast one: the CPU computes what train_natsl_cu -p bf16 computes, so the two can be
// compared tightly (test_natsl.c). The GPU's matmuls take bf16 operands and accumulate in fp32; so gemm rounds
// every operand to bf16 (round to nearest even) as it packs it, and accumulates in fp32. The GPU also stores in bf16
// a few matmul outputs (matmul_forward's out_bf16), the residual stream (the embedding, each residual add, doc/model.md
// §12.1 item 13) and its gradient (rmsnorm_backward's dx_mp, item 14), the RMSNorm outputs that feed matmuls or the
// softmax op (rmsnorm_forward's y_mp), the gated norm's and SwiGLU's outputs, the token mixers' operands (the conv's
// Q, K, V, the L2 norm's q̂, k̂, the N layer's RoPE'd qa, ka), the GDN op's chunk-start states (gdn_op_forward,
// (5.4h)), its output and output gradient (GdnArgs.out_mp, item 16) and a G layer's dQ, dK, dV (GdnArgs.grads_mp,
// item 15): those are rounded with matmul_precision() where they are stored
// (test_natsl.c checks every field the GPU's layout stores in bf16); and its bf16 attention kernels read bf16 copies
// of dout and out and store a bf16 output (attention_operands_bf16 below).
static real round_bf16(real x) {
    float f = (float)x;
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x7fffu + ((u >> 16) & 1)) & 0xffff0000u; // inf/nan kept
    memcpy(&f, &u, 4);
    return f;
}
static real matmul_precision(real x) { return g_bf16 ? round_bf16(x) : x; }

// The GPU runs the softmax op on its bf16 tensor-core kernels where they take the head dims ((64,64): the A layer;
// (64,128): the 340m/760m N layers), on q, k, v as stored (bf16 in bf16 mode: their producers write them so) and on
// dout and out in bf16 in the backward (as stored where AttnArgs.out_mp says so, else bf16 copies), and stores the
// output in bf16 (widened to fp32 where AttnArgs.out_mp is 0, as in the tests). Elsewhere (other head dims, or
// NATSL_ATTN_BF16=0 in the environment, as on the GPU) it runs the TF32 kernels on the fp32 values of the bf16
// operands and of dout (bf16 where it is stored so, AttnArgs.out_mp, else fp32), and rounds the output where it is
// stored in bf16. In bf16 mode attention_forward/backward read rounded copies of q, k, v (the model's are
// rounded already; the tests' need not be) and of what the GPU reads in bf16: r gets the args with q, k, v pointing
// into them, *dout and *out (when given) are pointed at their copies where the GPU reads them in bf16; returns the
// buffer holding them all (free it), or NULL in fp32 mode. *rounds_out: the op's output is rounded (stored in bf16).
static real *attention_operands_bf16(AttnArgs *r, const AttnArgs *a, const real **dout, const real **out, int *rounds_out) {
    int flash = env_flag("NATSL_ATTN_BF16", 1) && a->head_k == 64 && (a->head_v == 64 || a->head_v == 128);
    *rounds_out = g_bf16 && (flash || a->out_mp);
    if (!g_bf16) return NULL;
    if (!*rounds_out) dout = out = NULL; // (out_mp: the GPU stores the gradient in bf16 too; the bf16 kernels read it so)
    size_t rows = (size_t)a->B * a->T, nqk = (rows - 1) * a->ldqk + (size_t)a->heads * a->head_k;
    size_t nv = (rows - 1) * a->ldv + (size_t)a->heads * a->head_v, no = rows * a->heads * a->head_v;
    real *buf = xcalloc(2 * nqk + nv + 2 * no, sizeof(real)), *p = buf;
    const real *src[5] = {a->q, a->k, a->v, dout ? *dout : NULL, out ? *out : NULL};
    size_t n[5] = {nqk, nqk, nv, no, no};
    real *dst[5];
    for (int t = 0; t < 5; t++) {
        dst[t] = p;
        if (src[t]) for (size_t i = 0; i < n[t]; i++) p[i] = round_bf16(src[t][i]);
        p += n[t];
    }
    *r = *a;
    r->q = dst[0]; r->k = dst[1]; r->v = dst[2];
    if (dout) *dout = dst[3];
    if (out) *out = dst[4];
    return buf;
}

// ---- the matrix product ------------------------------------------------------------------------------
// gemm_reference is the definition (and the oracle the tests check gemm against; build with
// -DNATSL_REFERENCE_GEMM to train with it):  C(i,j) (=, or +=) Σ_k A(i,k) B(k,j).
static void gemm_reference(real *C, int ldc, GemmOperand A, GemmOperand B, int M, int N, int K, int accumulate) {
    #pragma omp parallel for
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            real s = 0;
            for (int k = 0; k < K; k++)
                s += matmul_precision(A.p[i * A.rs + k * A.cs]) * matmul_precision(B.p[k * B.rs + j * B.cs]);
            C[(long)i * ldc + j] = accumulate ? C[(long)i * ldc + j] + s : s;
        }
}

// gemm_blocked computes the same the way fast BLAS libraries do, in portable C: the output is split into blocks that
// threads take independently; for each block, K is walked in KC-sized slices whose A and B parts are copied
// ("packed") into contiguous micro-panels; a micro-kernel keeps an MR×NR tile of C in registers (GCC/clang
// vector code). Each output element is summed in a fixed order whatever the thread count, so runs are reproducible.
#define MR 6      // micro-tile rows
#define NR 16     // micro-tile columns
#define KC 256    // K slice: one packed B micro-panel (KC x NR reals = 16 KB) stays in L1
#define MC 256    // max block rows: the packed A slice (MC x KC = 256 KB) stays in L2
#define NC 512    // max block cols: packed B slice (KC x NC = 512 KB), read once per block

// c[0:m][0:n] (row stride ldc) = or += a·b, where a is a packed MR-row micro-panel
// (kc x MR) and b a packed NR-column micro-panel (kc x NR). The MR x NR accumulator tile
// lives in registers as MR vectors of NR reals (GCC/clang vector extensions, so both
// compilers emit the same SIMD code: 6 AVX-512 / 12 AVX2 / 24 NEON registers in float):
// per k, MR broadcasts of a times one NR-wide row of b. Unaligned vector loads and stores
// go through memcpy (the packed panels and c have only real alignment).
// noinline: inlined into the OpenMP region, clang spills the accumulators.
typedef real vrow __attribute__((vector_size(NR * sizeof(real))));
__attribute__((noinline))
static void micro_kernel(int kc, const real *a, const real *b, real *c, int ldc,
                         int m, int n, int accumulate) {
    vrow acc[MR], bk, ck;
    for (int i = 0; i < MR; i++) acc[i] = (vrow){0};
    for (int k = 0; k < kc; k++, a += MR, b += NR) {
        memcpy(&bk, b, sizeof(bk));
        for (int i = 0; i < MR; i++) acc[i] += a[i] * bk;
    }
    if (m == MR && n == NR) { // a whole tile: vector stores
        for (int i = 0; i < MR; i++) {
            if (accumulate) { memcpy(&ck, c + (long)i * ldc, sizeof(ck)); acc[i] += ck; }
            memcpy(c + (long)i * ldc, &acc[i], sizeof(ck));
        }
        return;
    }
    real tile[MR][NR]; // edge tiles: only their valid m x n part
    memcpy(tile, acc, sizeof(tile));
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++)
            c[(long)i * ldc + j] = accumulate ? c[(long)i * ldc + j] + tile[i][j] : tile[i][j];
}

// Pack rows [0,n) x cols [0,kc) of X, where X(r,k) = X[r*rs + k*ks], into R-row
// micro-panels stored k-major: dst[p][k][r] = X(p*R + r, k). Rows past n are zero.
// In bf16 mode the packed values are the operand rounded to bf16.
static void pack(real *dst, const real *X, long rs, long ks, int n, int kc, int R) {
    real *start = dst;
    for (int p = 0; p < n; p += R, dst += (long)R * kc, X += R * rs) {
        int rows = n - p < R ? n - p : R, k = 0;
        if (rows == R && rs == 1)       // the R values of one k are adjacent: copy
            for (; k < kc; k++)
                for (int r = 0; r < R; r++) dst[k * R + r] = X[k * ks + r];
        else if (rows == R && ks == 1)  // rows are contiguous in k: transpose 8 k's at a time
            for (; k + 8 <= kc; k += 8)
                for (int r = 0; r < R; r++)
                    for (int kk = 0; kk < 8; kk++) dst[(k + kk) * R + r] = X[r * rs + k + kk];
        for (; k < kc; k++)             // general case, k remainder and partial panels
            for (int r = 0; r < R; r++)
                dst[k * R + r] = r < rows ? X[r * rs + k * ks] : 0;
    }
    if (g_bf16)
        for (real *v = start; v < dst; v++) *v = round_bf16(*v);
}

// Scratch for packed panels, grown on demand and kept between calls. Not thread-safe:
// the matmuls must be called from one thread at a time (they use OpenMP internally).
static real *gemm_scratch = NULL;
static size_t gemm_scratch_size = 0;

static int ceil_div(int a, int b) { return (a + b - 1) / b; }

static void gemm_blocked(real *Cm, int ldc, GemmOperand A, GemmOperand B, int M, int N, int K, int accumulate) {
    int nthreads = 1;
#ifdef _OPENMP
    nthreads = omp_get_max_threads();
#endif
    // Block sizes: split M and N evenly into blocks no larger than MC / NC.
    int nbm = ceil_div(M, MC), nbn = ceil_div(N, NC);
    // Not enough blocks to keep all threads equally busy? split further.
    while ((nbm * nbn) % nthreads != 0 && nbm * nbn < 4 * nthreads) {
        if (ceil_div(M, nbm) >= ceil_div(N, nbn) && nbm < ceil_div(M, MR)) nbm++;
        else if (nbn < ceil_div(N, NR)) nbn++;
        else break;
    }
    int mc = ceil_div(ceil_div(M, nbm), MR) * MR, nc = ceil_div(ceil_div(N, nbn), NR) * NR;
    nbm = ceil_div(M, mc); nbn = ceil_div(N, nc);
    size_t per_thread = (size_t)KC * (mc + nc);
    if (gemm_scratch_size < per_thread * nthreads) {
        free(gemm_scratch);
        gemm_scratch_size = per_thread * nthreads;
        gemm_scratch = xcalloc(gemm_scratch_size, sizeof(real));
    }
    // Blocks are dealt round-robin; consecutive blocks read the same B slice (shared L3).
    // Within a block, each packed B micro-panel (L1) is swept against all A panels (L2).
    #pragma omp parallel for schedule(static, 1)
    for (int blk = 0; blk < nbm * nbn; blk++) {
        int tid = 0;
#ifdef _OPENMP
        tid = omp_get_thread_num();
#endif
        real *Ap = gemm_scratch + per_thread * tid, *Bp = Ap + (size_t)KC * mc;
        int i0 = (blk % nbm) * mc, j0 = (blk / nbm) * nc;
        int mb = M - i0 < mc ? M - i0 : mc, nb = N - j0 < nc ? N - j0 : nc;
        for (int p0 = 0; p0 < K; p0 += KC) {
            int kc = K - p0 < KC ? K - p0 : KC;
            pack(Ap, A.p + i0 * A.rs + p0 * A.cs, A.rs, A.cs, mb, kc, MR);
            pack(Bp, B.p + p0 * B.rs + j0 * B.cs, B.cs, B.rs, nb, kc, NR);
            for (int j = 0; j < nb; j += NR)
                for (int i = 0; i < mb; i += MR)
                    micro_kernel(kc, Ap + (long)i * kc, Bp + (long)j * kc,
                                 Cm + (long)(i0 + i) * ldc + j0 + j, ldc,
                                 mb - i < MR ? mb - i : MR, nb - j < NR ? nb - j : NR,
                                 accumulate || p0 > 0);
        }
    }
}

static void gemm(real *C, int ldc, GemmOperand A, GemmOperand B, int M, int N, int K, int accumulate) {
#ifdef NATSL_REFERENCE_GEMM
    gemm_reference(C, ldc, A, B, M, N, K, accumulate);
#else
    gemm_blocked(C, ldc, A, B, M, N, K, accumulate);
#endif
}
