// The named pointers into natsl.c's flat buffers, shared by train_natsl.c and train_natsl.cu so both
// programs lay out parameters and activations the same way (sizes are computed only here and in
// config.h's param_tensors), and the arguments of the ops and layers that read them.
#ifndef NATSL_LAYOUT_H
#define NATSL_LAYOUT_H

#include <string.h>
#include "config.h"
#include "budget.h"     // SelGate (Routing)
#include "train_util.h" // rng_seed, rng_normal, rng_uniform

// The element type of the flat buffers: float; double with -DNATSL_DOUBLE (the CPU build of the tests).
#ifdef NATSL_DOUBLE
typedef double real;
#else
typedef float real;
#endif

typedef union { // named pointers into the flat parameter (or gradient) buffer, in P_* order
    struct { real *ln_mix, *wqkv, *wg, *wab, *a_log, *dt_bias, *conv, *o_norm, *wr, *wow, *qn, *kn, *n1, *n2,
             *wo, *s_sel, *wqkv_a, *wo_a, *walpha, *ln_mlp, *wgu, *wdown; };
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

// Initialization (§2 table) of the flat parameter buffer w, from one seeded stream (the same values in both
// programs; the GPU fills a host buffer and copies it).
static void init_params(real *w, const ParamTensor *t, int nt, uint64_t seed) {
    uint64_t s = rng_seed(seed);
    for (int i = 0; i < nt; i++) {
        real *x = w + t[i].offset;
        for (size_t j = 0; j < t[i].numel; j++) {
            if (t[i].init == INIT_NORMAL) x[j] = 0.02 * rng_normal(&s);
            else if (t[i].init == INIT_ONES) x[j] = 1;
            else if (t[i].init == INIT_ZEROS) x[j] = 0;
            else if (t[i].init == INIT_ALOG) x[j] = log(16.0 * rng_uniform(&s));   // A ~ U(0, 16)
            else {                                                                   // dt_bias
                double dt = exp(log(1e-3) + rng_uniform(&s) * (log(1e-1) - log(1e-3)));
                if (dt < 1e-4) dt = 1e-4;
                x[j] = dt + log(-expm1(-dt)); // inverse softplus: dt + log(1 − e^{−dt})
            }
        }
    }
}

// The G, N and S layers' input projections x[W_q;W_k;W_v]ᵀ (proj), x W_gᵀ (gate), x[W_a;W_b]ᵀ (ab): gdn_in_cols
// columns in all. Their weights lie one after another in the parameter buffer (P_WQKV, P_WG, P_WAB), and in the
// gradient layout (GRADS) the three gradients share rows: d proj | d gate | d ab, then zero columns up to gdn_in_ld (a
// multiple of 8), so that one product takes them to dx and to the three weights' gradients (gdn_inputs_backward).
static inline int gdn_in_cols(const Config *c) { return 2 * cfg_K(c) + 2 * cfg_Vt(c) + 2 * c->H; }
static inline int gdn_in_ld(const Config *c) { return (gdn_in_cols(c) + 7) / 8 * 8; }

// One layer's activations (and, with the same layout, the gradients of one layer's activations).
typedef struct {
    real *res;                  // h^l, the block input [BT][D] (the residual stream: stored in the matmul precision)
    real *xn, *rstd1;           // RMSNorm(h^l) [BT][D], [BT]
    real *proj;                 // G,N: x[W_q;W_k;W_v]ᵀ [BT][2K+Vt];  A: x W_qkvᵀ [BT][3D], q,k rotated in place
                                //   (A: stored in the matmul precision, as is its att_out);  H: as A's, not rotated
    real *qk, *v;               // G,N: silu(conv(proj)): planes Q [BT][K] | K [BT][K], and V [BT][Vt]
    real *q, *k;                // G,N: the two planes of qk;  A, H: the q, k column blocks of proj (row stride 3D; v:
                                //   its v block)
    real *qk_rot, *alpha, *slots; // H (§15): q, k rotated [BT][2D] (the window's), the slot gates' x W_αᵀ [BT][Hh·m],
                                //   the slots at every chunk start [B][Hh][Nc][2][m][64] (K̃ then Ṽ)
    real *gate, *ab, *g, *beta; // G,N: x W_gᵀ [BT][Vt], x[W_a;W_b]ᵀ [BT][2H], log decay and β [BT][H] (the gradients
                                //   of proj, gate and ab: column blocks of rows of stride gdn_in_ld, at proj)
    real *qk_hat, *qk_rho;      // G,N: L2-normalized planes q̂ | k̂ [2][BT][K], their 1/norm [2][BT][H]
    real *q_hat, *k_hat;        // G,N: the two planes of qk_hat
    real *gdn_out, *state;      // G,N: GDN op output [BT][Vt], committed states [B][H][Nc][dk][dv]
    real *gdn_ws;               // G,N on the GPU: the chunked GDN op's workspace, one for all layers (not carved
                                //   here: the .cu model owns it; NULL on the CPU, whose op needs none)
    real *qka, *qka_rstd;       // N: RMSNorm'd (+RoPE) softmax planes qa | ka [2][BT][K], rstd [2][BT][Ha]
    real *qa, *ka, *qa_rstd, *ka_rstd; // N: the two planes of qka and of qka_rstd
    real *att_out, *lse;        // N: softmax op output [BT][Vt];  A, H: [BT][D] (both in the matmul precision);
                                //   lse [B][heads][T]
    real *omega_raw, *omega;    // N: Q W_owᵀ and its pair softmax [BT][2Ha]
    real *pool, *rlogits, *rpi, *rmask; // N: router [B][Nc][D], [B][Nc][2H] (logits, π, mask Ã)
    real *aproj;                // S: the A mixer's x W_qkv_aᵀ [BT][3D] (its att_out [BT][D] and lse are the fields above)
    real *sel_out;              // S: the two mixers' outputs A(x) | G(x) [2][BT][D] (§7.3)
    real *norm_rstd, *y;        // G,N: gated output norm rstd [2][rows], its output [BT][Vt]
    real *r, *xn2, *rstd2;      // h + mixer output [BT][D] (residual stream, as res); RMSNorm of it [BT][D], [BT]
    real *gu, *hmid;            // MLP: x[W_gate;W_up]ᵀ [BT][2F], silu(gate)⊙up [BT][F]
} LayerActs;

// Points the plane names (q, k, v, q_hat, ...) into the planar fields that hold them. half: the fields stored in the
// matmul precision hold 2-byte values (bf16 mode: the A layer's proj, the G and N layers' qk, qk_hat and qka; of the
// gradients, the G and S layers' qk), so their planes start half as many reals in (D is even: config_check; BT·K is,
// as T is a multiple of 64).
static void layer_planes(LayerActs *a, const Config *c, char kind, int B, int T, int half) {
    size_t BT = (size_t)B * T, K = cfg_K(c), D = c->D, plane = half ? BT * K / 2 : BT * K;
    if ((kind == 'A' || kind == 'H') && a->proj) {
        size_t col = half ? D / 2 : D;
        a->q = a->proj; a->k = a->proj + col; a->v = a->proj + 2 * col;
    }
    if (kind != 'A' && kind != 'H' && a->qk) { a->q = a->qk; a->k = a->qk + plane; }
    if (a->qk_hat) { a->q_hat = a->qk_hat; a->k_hat = a->qk_hat + plane; }
    if (a->qka) { a->qa = a->qka; a->ka = a->qka + plane; }
    if (a->qka_rstd) { a->qa_rstd = a->qka_rstd; a->ka_rstd = a->qka_rstd + BT * c->Ha; }
}

// The four parts of a layer's activations. KEPT is what every layer keeps even under recompute (its input
// h^l and the small router tensors, which logging and the tests read after a forward pass); OPS are the outputs
// of the expensive token mixers (GDN op: output and chunk-start states; softmax op: output and log-sum-exp) and
// the mixer block's output r (sparing the output projection and the residual add), which recompute level 1 keeps
// and level 2 reruns; REST is what any recompute level rebuilds; SHARED is what no layer keeps, so all layers
// share one copy: what only the layer's forward reads (a G layer's conv outputs Q and K: the L2 norm's backward
// works from q̂, k̂), and what one cheap pass rebuilds from what the layer keeps before its backward
// (block_rebuild): the first RMSNorm's output xn, the conv's output V; and the MLP's hidden hmid, which swiglu_backward
// writes again from the gu it reads anyway, before W_down's weight gradient reads it (the second RMSNorm's
// output xn2 and the gated norm's output y are kept: the room the bf16 residual stream freed).
// GRADS, a layout of its own, holds only the fields whose gradients the backward pass computes (the gradient
// scratch), in two layouts over the same room, one after the other: with GRADS_MLP or'ed in, the MLP's (xn2, hmid,
// gu), without it the mixer's, which the backward pass needs only once the MLP's are spent. In each: first the
// fields it accumulates into, which must start at zero (GRADS_ACC counts them), then those their one producer
// writes whole (the conv's and SwiGLU's input gradients, the gated norm's, those of the output
// projection's, the MLP's and the router's inputs: matmul_backward writing dinp; the two ops' input gradients; the
// mixers' dx), which need no zeroing. ACTS_BF16,
// or'ed into a part (the GPU in bf16 mode), gives the fields stored in the matmul precision half the room.
enum { ACTS_KEPT = 1, ACTS_OPS = 2, ACTS_REST = 4, ACTS_SHARED = 8, ACTS_ALL = 15, ACTS_GRADS = 16, ACTS_GRADS_ACC = 32,
       ACTS_GRADS_MLP = 64, ACTS_BF16 = 128 };

// When set, layer_acts_layout tells it each activation field it carves or counts (not the gradient layouts'):
// the field's name and the reals it takes (bench_gpu mem's memory plan).
static void (*g_layout_report)(const char *field, size_t n);

// Carves the given parts of one layer's activations of the given kind out of base (NULL: only count) and
// returns their size; fields of other parts are left as they are (a call that includes KEPT, or GRADS, clears
// them all first). Every field starts on a 64-value (256-byte) boundary, which the GPU kernels' vector loads need.
static size_t layer_acts_layout(LayerActs *a, const Config *c, char kind, int B, int T, real *base, int part) {
    size_t BT = (size_t)B * T, D = c->D, K = cfg_K(c), Vt = cfg_Vt(c), H = c->H, Ha = c->Ha;
    size_t Nc = T / NATSL_CHUNK, off = 0;
    const int half = part & ACTS_BF16, mlp = part & ACTS_GRADS_MLP;
    part &= ~(ACTS_BF16 | ACTS_GRADS_MLP);
    const int R = ACTS_REST, KP = ACTS_KEPT, OP = ACTS_OPS, SH = ACTS_SHARED;
    const int G = 256, WH = 512;    // G: the field has a gradient; WH: written whole by its one producer (after G's)
    const int MA = 1024, MG = 2048; // stored in the matmul precision as an activation (MA), as a gradient (MG)
    const int ML = 4096;            // its gradient is the MLP's (in the GRADS_MLP layout)
    const int grads = part == ACTS_GRADS || part == ACTS_GRADS_ACC;
    if (grads || (part & ACTS_KEPT)) memset(a, 0, sizeof(*a));
    for (int pass = 0; pass < (part == ACTS_GRADS ? 2 : 1); pass++) {
#define TAKE(field, n, cls) do { \
        int in_ = grads ? ((cls) & G) && !((cls) & ML) == !mlp && ((cls) & WH ? pass == 1 : pass == 0) \
                        : (part & (cls)) != 0; \
        if (in_) { \
            size_t n_ = half && ((cls) & (grads ? MG : MA)) ? ((size_t)(n) + 1) / 2 : (size_t)(n); \
            a->field = base ? base + off : NULL; off += (n_ + 63) / 64 * 64; \
            if (g_layout_report && !grads) g_layout_report(#field, (n_ + 63) / 64 * 64); } } while (0)
        TAKE(res, BT * D, KP | MA); TAKE(xn, BT * D, SH | G | WH | MA); TAKE(rstd1, BT, R);
        if (kind == 'G' || kind == 'N' || kind == 'S') {
            if (grads) TAKE(proj, BT * gdn_in_ld(c), G | WH | MG); // d proj | d gate | d ab | 0 (gdn_in_ld)
            else TAKE(proj, BT * (2 * K + Vt), R | MA);
            // N: its backward reads Q, K (ω, qa, ka); their gradients are stored in the matmul precision where the
            // GDN op is their one producer (G, S: GdnArgs.grads_mp), not in N, where other ops add to them
            const int qkv_mg = kind == 'N' ? 0 : MG;
            TAKE(qk, 2 * BT * K, (kind == 'N' ? R : SH) | G | WH | MA | qkv_mg);
            TAKE(v, BT * Vt, SH | G | WH | MA | qkv_mg); // the GDN op (G) or the softmax op (N: the GDN op adds) writes dV
            if (!grads) { TAKE(gate, BT * Vt, R | MA); TAKE(ab, BT * 2 * H, R); }
            TAKE(g, BT * H, R | G | WH); TAKE(beta, BT * H, R | G | WH);
            TAKE(qk_hat, 2 * BT * K, R | MA); TAKE(qk_rho, 2 * BT * H, R);
            TAKE(gdn_out, BT * Vt, OP | G | WH | MA | MG); TAKE(state, (size_t)B * H * Nc * c->dk * c->dv, OP | MA);
            TAKE(norm_rstd, 2 * BT * (H > Ha ? H : Ha), R); TAKE(y, BT * Vt, R | G | WH | MA | MG);
        }
        if (kind == 'N') {
            TAKE(qka, 2 * BT * K, R | G | WH | MA); TAKE(qka_rstd, 2 * BT * Ha, R);
            TAKE(att_out, BT * Vt, OP | G | WH | MA | MG); TAKE(lse, (size_t)B * Ha * T, OP);
            TAKE(omega_raw, BT * 2 * Ha, R | G); TAKE(omega, BT * 2 * Ha, R | G | WH);
            TAKE(pool, B * Nc * D, KP | G | WH); TAKE(rlogits, B * Nc * 2 * H, KP | G); TAKE(rpi, B * Nc * 2 * H, KP);
            TAKE(rmask, B * Nc * 2 * H, KP | G);
        }
        if (kind == 'A' || kind == 'H') TAKE(proj, BT * 3 * D, R | G | WH | MA);
        if (kind == 'H') {
            size_t Hh = cfg_attn_heads(c), m = c->nha_m;
            TAKE(qk_rot, BT * 2 * D, R | G | WH | MA); TAKE(alpha, BT * Hh * m, R | G | WH);
            TAKE(slots, (size_t)B * Hh * Nc * 2 * m * NATSL_ATTN_HEAD, OP);
        }
        if (kind == 'S') TAKE(aproj, BT * 3 * D, R | G | WH | MA);
        if (kind == 'A' || kind == 'S' || kind == 'H') { TAKE(att_out, BT * D, OP | G | WH | MA | MG); TAKE(lse, (size_t)B * cfg_attn_heads(c) * T, OP); }
        if (kind == 'S') TAKE(sel_out, 2 * BT * D, OP | G | WH); // its gradient: the relaxed mode's (tests) scaled dout
        TAKE(r, BT * D, OP | MA); TAKE(xn2, BT * D, R | G | WH | ML | MA | MG); TAKE(rstd2, BT, R);
        TAKE(gu, BT * 2 * c->F, R | G | WH | MA | MG | ML); TAKE(hmid, BT * c->F, SH | G | WH | ML | MA | MG);
#undef TAKE
    }
    if (base) layer_planes(a, c, kind, B, T, half && (!grads || kind == 'G' || kind == 'S')); // grads: qk's (qkv_mg)
    if (base && grads && kind != 'A' && kind != 'H' && a->proj) { // the column blocks of the input projections' gradients
        a->gate = a->proj + (half ? (2 * K + Vt) / 2 : 2 * K + Vt);
        a->ab = a->gate + (half ? Vt / 2 : Vt);
    }
    return off;
}

// What each recompute level (-k) keeps per layer; the other parts of all layers share one scratch.
static inline int acts_kept(int recompute) {
    return recompute == 0 ? ACTS_KEPT | ACTS_OPS | ACTS_REST : recompute == 1 ? ACTS_KEPT | ACTS_OPS : ACTS_KEPT;
}

// Carves the whole model's activations out of base (NULL: only count) and returns their size; *dmax gets the
// size of the largest GRADS layout of a layer, which the gradient scratch (one layer's activation gradients) needs.
// Every layer keeps acts_kept(recompute); the rest of all layers shares one scratch, which each layer's forward
// overwrites and the backward pass refills before the layer's backward (model_backward):
// recompute = 0: the shared scratch holds only the SHARED fields (block_rebuild recomputes those it must).
// recompute = 1, 2: the layer runs again (level 1 skips the GDN and softmax ops, whose outputs it kept).
// bf16: the GPU's bf16 mode (ACTS_BF16).
static size_t model_acts_layout(LayerActs *la, const Config *c, int B, int T, int recompute, int bf16, real *base,
                                size_t *dmax) {
    size_t off = 0, rest = 0;
    int kept = acts_kept(recompute), mp = bf16 ? ACTS_BF16 : 0;
    LayerActs tmp;
    *dmax = 0;
    for (const char *k = "GANSH"; *k; k++)
        for (int mlp = 0; mlp <= ACTS_GRADS_MLP; mlp += ACTS_GRADS_MLP) {
            size_t n = layer_acts_layout(&tmp, c, *k, B, T, NULL, ACTS_GRADS | mlp | mp);
            if (strchr(c->pattern, *k) && n > *dmax) *dmax = n;
        }
    for (int l = 0; l < c->L; l++)
        off += layer_acts_layout(&la[l], c, c->pattern[l], B, T, base ? base + off : NULL, kept | mp);
    for (int l = 0; l < c->L; l++) {
        size_t n = layer_acts_layout(&la[l], c, c->pattern[l], B, T, base ? base + off : NULL, (ACTS_ALL & ~kept) | mp);
        if (n > rest) rest = n;
    }
    return off + rest;
}


// ---- the operands of the two token mixers and of the gated output norm, named once for both programs -----

// The softmax op (§4, §5.3, §6.2, §6.3): `heads` heads; query/key head j at columns j*head_k of rows of stride
// ldqk, value head j at j*head_v of rows of stride ldv. mask: the routing mask [B][Nc][mask_heads][2], of which
// op 0 (softmax) is read, heads/mask_heads heads sharing one mask head; NULL: plain causal attention (an A layer).
// In bf16 mode q, k and v are stored in the matmul precision (bf16 on the GPU: their producers write them so, the
// CPU's -p bf16 rounds them). out_mp: the output and its gradient dout are too (both layers': the output feeds the A
// layer's output projection, the N layer's gated norm, whose backward passes write dout); 0: fp32 (the tests' oracles).
typedef struct {
    const real *q, *k, *v;
    int ldqk, ldv;
    const real *mask;
    int B, T, heads, mask_heads, head_k, head_v;
    int out_mp;
    int own_sg; // §6.2 (6.2e) (-L 1): the backward passes no gradient through the pairs of a query's own chunk
} AttnArgs;

// The NHA op (§15) of an H layer: `heads` heads of NATSL_ATTN_HEAD; q, k, v the column blocks of proj (rows of
// stride ldqkv, not rotated: the slots' operands), qr, kr their rotation (rows of stride ldr: the window's), z the
// slot gates' logits x W_αᵀ [B*T][heads·m]; m slots per head, window w (the layer's Config.nha_w).
typedef struct {
    const real *q, *k, *v;
    int ldqkv;
    const real *qr, *kr;
    int ldr;
    const real *z;
    int B, T, heads, m, w;
} NhaArgs;

// The GDN op (§3.2, §5.4, §6.1, §6.4): H heads; q̂/k̂ head h at columns h*head_k of rows of stride ldqk, value
// head h at h*head_v of rows of stride ldv (q̂, k̂, v stored in the matmul precision: bf16 in bf16 mode, as the
// softmax op's); log decay g and β [B*T][H]. mask: [B][Nc][H][2], of which op 1 (GDN:
// the chunk commits) is read; NULL: every chunk commits (a G layer). ws: the GPU's workspace (NULL on the CPU).
typedef struct {
    const real *q, *k, *v;
    int ldqk, ldv;
    const real *g, *beta, *mask;
    int B, T, H, head_k, head_v;
    real *ws;
    int dv_add; // the backward adds its dV to dv (an N layer: the softmax op wrote its part first); 0: writes it
    int out_mp; // the output and its gradient dout are stored in the matmul precision (the layers': the output feeds
                // only the gated norm, whose backward writes dout); 0: fp32 (the tests' oracles)
    const real *rho; // the layers': q̂, k̂ are L2N(Q), L2N(K) (§0 (0.4)) with 1/norms rho [2][B*T][H] (Q's, then
                     // K's), and the backward returns dQ, dK (the L2 norm's backward (3.4i) folded in); NULL: dq̂, dk̂
    int grads_mp; // with rho and dv_add = 0 (a G layer's): the backward stores dQ, dK, dV in the matmul precision
                  // (they feed only the conv's backward); 0: fp32 (an N layer's: other ops add to them; the tests' oracles)
} GdnArgs;

// The gated output norm (§3.3, §5.6) over `rows` rows of width n: one input o1 (G layer: o2, w2, omega NULL)
// or two (N layer), the gate [rows][n] and the mixing weights omega [rows][2]. The gate's gradient: `heads` rows a
// token, token t's at t·ld_dgate (the layers': the columns of the input projections' gradients, gdn_in_ld).
// gate_act: the gate's activation φ, GATE_SILU or GATE_SIGMOID (Config.gate_act).
typedef struct {
    const real *o1, *w1, *o2, *w2, *omega, *gate;
    int rows, n;
    int heads, ld_dgate;
    int gate_act;
} GatedNormArgs;

// RMSNorm's rows (§0, (0.3)): row (i, h), i < rows, h < heads, of width n at x + i*ldx + h*n (and y + i*ldy + h*n),
// so that one call normalizes every head of a packed [rows][heads*n] tensor; norm_rows: plain rows [rows][n].
typedef struct { int rows, heads, n, ldx, ldy; } NormRows;
static inline NormRows norm_rows(int rows, int n) { NormRows r = {rows, 1, n, n, n}; return r; }

// The causal short conv (§3.1, (3.1b-c)) over B sequences of T tokens: its input x (rows of stride ldx) and the
// weights w [channel][NATSL_CONV] of all of x's channels; a call runs on a range of them.
typedef struct {
    const real *x;
    int ldx;
    const real *w;
    int B, T;
} ConvArgs;

// The GDN gates (§3.1, (3.1f-g)) of BT tokens and H heads: from ab [BT][2H] (a | b) and the heads' A_log, dt_bias.
// The backward writes the gradient's rows da | db at a stride of ld_dab, then zeros up to column ncol_dab of them.
typedef struct {
    const real *ab, *A_log, *dt_bias;
    int BT, H;
    int ld_dab, ncol_dab;
} GdnGatesArgs;

// The router (§5.2, §7.2): x [B*T][D] (the N layer's normalized input) pooled per chunk, scored by W_r [2H][D] (H
// head groups). noise: ST-Gumbel noise [B][Nc][H][2] at temperature tau (§7.2; NULL: none, tau = 1). relaxed (tests
// only, §8): the mask is π itself. dpi (the backward; NULL: none): the §7 terms' gradient on every routed s[…, m]
// (7.1c, 7.4a).
typedef struct {
    const real *x, *Wr;
    int B, T, D, H;
    const real *noise;
    real tau;
    int relaxed;
    const real *dpi;
} RouterArgs;

// How the N and S layers route in one pass (§7), as the model hands it to them. An N layer's: its Gumbel noise
// [B][Nc][H][2] at temperature tau (§7.2; NULL: none, tau = 1) and, in the backward pass, dpi (RouterArgs). An S
// layer's: its gate in the forward pass (§7.3) and, in the backward pass, dpen, the penalty's gradient λ_S/L on y_A
// (7.3e). dpi and dpen are in the mean loss's scale. Tests only (§8): relaxed, an N layer's mask is π itself (an S
// gate carries its own); no_grad, no gradient reaches W_r or s_sel.
typedef struct {
    const real *noise;
    real tau;
    const real *dpi;
    const SelGate *gate;
    double dpen;
    int relaxed, no_grad;
} Routing;

// §7.3: an S layer's A mixer, as an A layer's fields and parameters: its projection aproj (planes q, k, v) where
// an A layer has proj, its W_qkv_a and W_o_a where an A layer has W_qkv and W_o; the rest is the S layer's own
// (att_out, lse; the G mixer's fields and parameters are the S layer's G-named ones). For activations, their
// gradients, parameters and parameter gradients alike. half: as layer_planes (the activations in bf16 mode).
static inline LayerActs select_attn_acts(const Config *c, const LayerActs *a, int B, int T, int half) {
    LayerActs v = *a;
    v.proj = a->aproj;
    layer_planes(&v, c, 'A', B, T, half);
    return v;
}
static inline LayerParams select_attn_params(const LayerParams *p) {
    LayerParams v = *p;
    v.wqkv = p->wqkv_a;
    v.wo = p->wo_a;
    return v;
}

// The G layer's GDN op: every chunk commits.
static inline GdnArgs gdn_layer_op_args(const Config *c, const LayerActs *a, int B, int T) {
    GdnArgs o = {a->q_hat, a->k_hat, a->v, cfg_K(c), cfg_Vt(c), a->g, a->beta, NULL, B, T, c->H, c->dk, c->dv, a->gdn_ws, 0, 1,
                 a->qk_rho, 1};
    return o;
}
// The N layer's two ops, both driven by the router's mask (§5.3, §5.4).
static inline GdnArgs natsl_gdn_args(const Config *c, const LayerActs *a, int B, int T) {
    GdnArgs o = gdn_layer_op_args(c, a, B, T);
    o.mask = a->rmask;
    o.dv_add = 1;
    o.grads_mp = 0;
    return o;
}
static inline AttnArgs natsl_attn_args(const Config *c, const LayerActs *a, int B, int T) {
    AttnArgs o = {a->qa, a->ka, a->v, cfg_K(c), cfg_Vt(c), a->rmask, B, T, c->Ha, c->H, cfg_dka(c), cfg_dva(c), 1, c->own_sg};
    return o;
}
// The A layer's op: plain causal attention over the q, k, v column blocks of proj, which, like the op's output,
// are stored in the matmul precision.
static inline AttnArgs attn_layer_op_args(const Config *c, const LayerActs *a, int B, int T) {
    int D = c->D, heads = cfg_attn_heads(c);
    AttnArgs o = {a->q, a->k, a->v, 3 * D, 3 * D, NULL, B, T, heads, heads, NATSL_ATTN_HEAD, NATSL_ATTN_HEAD, 1, 0};
    return o;
}
// The H layer l's op: over proj's q, k, v column blocks, qk_rot's q | k and the gate logits alpha. half: qk_rot holds
// 2-byte values (the GPU's bf16 mode, as layer_planes').
static inline NhaArgs nha_layer_op_args(const Config *c, const LayerActs *a, int l, int B, int T, int half) {
    int D = c->D, heads = cfg_attn_heads(c);
    NhaArgs o = {a->q, a->k, a->v, 3 * D, a->qk_rot, a->qk_rot + (half ? D / 2 : D), 2 * D, a->alpha, B, T, heads,
                 c->nha_m, c->nha_w[l]};
    return o;
}
// The G, N and S layers' conv on the columns Q | K | V of proj, and their gates (the gradient's rows: the columns of
// the input projections' gradients, gdn_in_ld).
static inline ConvArgs gdn_conv_args(const Config *c, const LayerActs *a, const LayerParams *p, int B, int T) {
    ConvArgs o = {a->proj, 2 * cfg_K(c) + cfg_Vt(c), p->conv, B, T};
    return o;
}
static inline GdnGatesArgs gdn_gates_args(const Config *c, const LayerActs *a, const LayerParams *p, int B, int T) {
    int ld = gdn_in_ld(c);
    GdnGatesArgs o = {a->ab, p->a_log, p->dt_bias, B * T, c->H, ld, ld - 2 * cfg_K(c) - 2 * cfg_Vt(c)};
    return o;
}
// The N layer's router on its normalized input
static inline RouterArgs natsl_router_args(const Config *c, const LayerActs *a, const LayerParams *p, int B, int T,
                                           const Routing *r) {
    RouterArgs o = {a->xn, p->wr, B, T, c->D, c->H, r->noise, r->tau, r->relaxed, r->dpi};
    return o;
}
static inline GatedNormArgs gdn_layer_norm_args(const Config *c, const LayerActs *a, const real *o_norm, int B, int T) {
    GatedNormArgs o = {a->gdn_out, o_norm, NULL, NULL, NULL, a->gate, B * T * c->H, c->dv, c->H, gdn_in_ld(c), c->gate_act};
    return o;
}
static inline GatedNormArgs natsl_norm_args(const Config *c, const LayerActs *a, const real *n1, const real *n2, int B, int T) {
    GatedNormArgs o = {a->gdn_out, n1, a->att_out, n2, a->omega, a->gate, B * T * c->Ha, cfg_dva(c), c->Ha, gdn_in_ld(c), c->gate_act};
    return o;
}

#endif
