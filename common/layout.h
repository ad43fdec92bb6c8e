// The named pointers into natsl.c's flat buffers, shared by train_natsl.c and train_natsl.cu so both
// programs lay out parameters and activations the same way (sizes are computed only here and in
// config.h's param_tensors). The including file defines the element type `real` first.
#ifndef NATSL_LAYOUT_H
#define NATSL_LAYOUT_H

#include <string.h>
#include "config.h"

typedef union { // named pointers into the flat parameter (or gradient) buffer, in P_* order
    struct { real *ln_mix, *wqkv, *wg, *wab, *a_log, *dt_bias, *conv, *o_norm, *wr, *wow, *qn, *kn, *n1, *n2,
             *wo, *ln_mlp, *wgu, *wdown; };
    real *t[NSLOT];
} LayerParams;

typedef struct {
    real *wte, *ln_f, *head;
    LayerParams layer[NATSL_MAX_LAYERS];
} ParamPtrs;

static void param_pointers(ParamPtrs *p, const ParamTensor *t, int nt, real *base) {
    memset(p, 0, sizeof(*p));
    for (int i = 0; i < nt; i++) {
        real *ptr = base + t[i].offset;
        if (t[i].layer >= 0) p->layer[t[i].layer].t[t[i].slot] = ptr;
        else if (!strcmp(t[i].name, "wte")) p->wte = ptr;
        else if (!strcmp(t[i].name, "ln_f")) p->ln_f = ptr;
        else p->head = ptr;
    }
}

// One layer's activations (and, with the same layout, the gradients of one layer's activations).
typedef struct {
    real *res;                  // h^l, the block input [BT][D]
    real *xn, *rstd1;           // RMSNorm(h^l) [BT][D], [BT]
    real *proj;                 // G,N: x[W_q;W_k;W_v]ᵀ [BT][2K+Vt];  A: x W_qkvᵀ [BT][3D], q,k rotated in place
    real *conv, *qkv;           // G,N: conv output before / after SiLU, planes Q [BT][K] | K [BT][K] | V [BT][Vt]
    real *gate, *ab, *g, *beta; // G,N: x W_gᵀ [BT][Vt], x[W_a;W_b]ᵀ [BT][2H], log decay and β [BT][H]
    real *qk_hat, *qk_rho;      // G,N: L2-normalized planes q̂ | k̂ [2][BT][K], their 1/norm [2][BT][H]
    real *gdn_out, *state;      // G,N: GDN op output [BT][Vt], committed states [B][H][Nc][dk][dv]
    real *gdn_ws;               // G,N on the GPU: the chunked GDN op's workspace, one for all layers (not carved
                                //   here: the .cu model owns it; NULL on the CPU, whose op needs none)
    real *qka, *qka_rstd;       // N: RMSNorm'd (+RoPE) softmax planes qa | ka [2][BT][K], rstd [2][BT][Ha]
    real *att_out, *lse;        // N: softmax op output [BT][Vt];  A: [BT][D];  lse [B][heads][T]
    real *omega_raw, *omega;    // N: Q W_owᵀ and its pair softmax [BT][2Ha]
    real *pool, *rlogits, *rpi, *rmask; // N: router [B][Nc][D], [B][Nc][2H] (logits, π, mask Ã)
    real *norm_rstd, *y;        // G,N: gated output norm rstd [2][rows], its output [BT][Vt]
    real *r, *xn2, *rstd2;      // h + mixer output [BT][D]; RMSNorm of it [BT][D], [BT]
    real *gu, *hmid;            // MLP: x[W_gate;W_up]ᵀ [BT][2F], silu(gate)⊙up [BT][F]
} LayerActs;

// Carves one layer's activations of the given kind out of base (NULL: only count). Returns the size.
// Every field starts on a 64-value (256-byte) boundary, which the GPU kernels' vector loads need.
static size_t layer_acts_layout(LayerActs *a, const Config *c, char kind, int B, int T, real *base) {
    size_t BT = (size_t)B * T, D = c->D, K = cfg_K(c), Vt = cfg_Vt(c), H = c->H, Ha = c->Ha;
    size_t Nc = T / NATSL_CHUNK, off = 0;
    memset(a, 0, sizeof(*a));
#define TAKE(field, n) do { a->field = base ? base + off : NULL; off += ((size_t)(n) + 63) / 64 * 64; } while (0)
    TAKE(res, BT * D); TAKE(xn, BT * D); TAKE(rstd1, BT);
    if (kind == 'G' || kind == 'N') {
        TAKE(proj, BT * (2 * K + Vt)); TAKE(conv, BT * (2 * K + Vt)); TAKE(qkv, BT * (2 * K + Vt));
        TAKE(gate, BT * Vt); TAKE(ab, BT * 2 * H); TAKE(g, BT * H); TAKE(beta, BT * H);
        TAKE(qk_hat, 2 * BT * K); TAKE(qk_rho, 2 * BT * H);
        TAKE(gdn_out, BT * Vt); TAKE(state, (size_t)B * H * Nc * c->dk * c->dv);
        TAKE(norm_rstd, 2 * BT * (H > Ha ? H : Ha)); TAKE(y, BT * Vt);
    }
    if (kind == 'N') {
        TAKE(qka, 2 * BT * K); TAKE(qka_rstd, 2 * BT * Ha);
        TAKE(att_out, BT * Vt); TAKE(lse, (size_t)B * Ha * T);
        TAKE(omega_raw, BT * 2 * Ha); TAKE(omega, BT * 2 * Ha);
        TAKE(pool, B * Nc * D); TAKE(rlogits, B * Nc * 2 * H); TAKE(rpi, B * Nc * 2 * H); TAKE(rmask, B * Nc * 2 * H);
    }
    if (kind == 'A') {
        size_t HA = cfg_HA(c);
        TAKE(proj, BT * 3 * D); TAKE(att_out, BT * D); TAKE(lse, (size_t)B * HA * T);
    }
    TAKE(r, BT * D); TAKE(xn2, BT * D); TAKE(rstd2, BT);
    TAKE(gu, BT * 2 * c->F); TAKE(hmid, BT * c->F);
#undef TAKE
    return off;
}

#endif
