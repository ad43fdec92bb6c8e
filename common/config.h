// Model configuration, presets, layer patterns and the flat parameter layout of natsl.c.
// Shared by train_natsl.c (CPU) and train_natsl.cu (GPU) so that checkpoints are interchangeable.
// Everything here follows doc/model.md §1 (configuration), §2 (initialization), §9 (weight decay)
// and §10 (parameter counts).
#ifndef NATSL_CONFIG_H
#define NATSL_CONFIG_H

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NATSL_MAX_LAYERS 64
#define NATSL_CHUNK 64        // C: NAtS chunk size (§0)
#define NATSL_CONV 4          // short-conv kernel (§3.1)
#define NATSL_EPS 1e-6f       // every norm eps (§1)
#define NATSL_ATTN_HEAD 64    // head dim of the plain softmax layer A (§4), and of the NHA layer H (§15)
#define NHA_SLOTS 64          // m: the H layers' slots per head when -U is not given (§15)
#define NHA_WINDOW 64         // w: the H layers' window when -W is not given (§15)
#define NHA_MAX_WINDOW (1 << 24) // a larger window is full causal attention at every T the programs take
#define NHA_TAU 8.0           // the slot gate's temperature τ (15.1a), as Gated Slot Attention's
// matmul_backward's input gradient: written (the product is its one producer), added to, or written in the matmul
// precision (bf16 mode: bf16; the gradients that feed only one elementwise backward: SwiGLU's, the gated norm's, the
// MLP's RMSNorm's and the final norm's)
enum { DINP_WRITE, DINP_ADD, DINP_WRITE_MP };
#define GPT2_VOCAB 50257      // the ids of llm.c's shards (§1): the vocabulary where the data has no table of its own
#define GPT2_EOT 50256

// AdamW and gradient clipping (§9); the learning rate and weight decay are flags
#define ADAMW_BETA1 0.9
#define ADAMW_BETA2 0.95
#define ADAMW_EPS 1e-8
#define GRAD_CLIP 1.0         // the global gradient norm is clipped to this
#define SEL_KAPPA 10.0        // the S gates' scale κ of (7.3a) when -K is not given

typedef struct {
    int D;        // hidden size
    int L;        // layers
    int H;        // GDN heads = NAtS heads
    int dk, dv;   // GDN key / value head dims (dv = 2 dk)
    int Ha;       // softmax heads inside a NAtS-L layer
    int F;        // MLP width
    int V, Vp;    // vocabulary (real, padded)
    int rope;     // RoPE on the NAtS-L softmax op (§5.8)
    int gate_act; // the gated output norm's gate activation (§3.3, §5.6): GATE_SILU (the paper's) or GATE_SIGMOID
    int own_sg;   // training only, not in the model file (-L, §6.2 (6.2e)): 1 = the N layers' softmax op passes no gradient
                  //   through a query's own-chunk pairs
    char pattern[NATSL_MAX_LAYERS + 1]; // one of G, A, N, S, H per layer
    int nha_m;                          // H layers (§15): slots per head m; 0 when the pattern has no H
    int nha_w[NATSL_MAX_LAYERS];        // H layers: window w of layer l (0: slots only; ≥ T: full attention); 0 elsewhere
} Config;

// The gated output norm's gate activation φ (§3.3 (3.3b), §5.6 (5.6b)): y = norm ⊙ φ(gate).
enum { GATE_SILU, GATE_SIGMOID };
static inline const char *gate_act_name(int g) { return g == GATE_SIGMOID ? "sigmoid" : "silu"; }
// Applies -C: silu or sigmoid. Returns 0, or -1 with a message.
static inline int config_set_gate_act(Config *c, const char *arg, char *err, size_t errlen) {
    if (!strcmp(arg, "silu")) c->gate_act = GATE_SILU;
    else if (!strcmp(arg, "sigmoid")) c->gate_act = GATE_SIGMOID;
    else { snprintf(err, errlen, "-C %s: the output gate's activation is silu or sigmoid", arg); return -1; }
    return 0;
}

// derived sizes (§1)
static inline int cfg_K(const Config *c) { return c->H * c->dk; }     // K_tot
static inline int cfg_Vt(const Config *c) { return c->H * c->dv; }    // V_tot
static inline int cfg_dka(const Config *c) { return c->H * c->dk / c->Ha; }
static inline int cfg_dva(const Config *c) { return c->H * c->dv / c->Ha; }
static inline int cfg_attn_heads(const Config *c) { return c->D / NATSL_ATTN_HEAD; } // heads of an A layer
static inline int mlp_width(int D) { int f = 8 * D / 3; return 256 * ((f + 255) / 256); }

// ----------------------------------------------------------------------------------------------
// presets and patterns (§1)

// The NAtS-L Hybrid rule: N at every layer l with l mod 4 = 3 and at the last layer, G elsewhere.
static inline void pattern_from_variant(char *out, const char *variant, int L) {
    for (int l = 0; l < L; l++) {
        char k = 'G';
        if (!strcmp(variant, "natsl-hybrid")) k = (l % 4 == 3 || l == L - 1) ? 'N' : 'G';
        else if (!strcmp(variant, "natsl")) k = 'N';
        else if (!strcmp(variant, "gdn")) k = 'G';
        else if (!strcmp(variant, "gdn-hybrid")) k = (l % 4 == 3) ? 'A' : 'G';
        else if (!strcmp(variant, "transformer")) k = 'A';
        else if (!strcmp(variant, "nha-hybrid")) k = (l % 4 == 3) ? 'A' : 'H'; // §15.4: full attention every 4th layer
        out[l] = k;
    }
    out[L] = '\0';
}

static inline int is_variant_name(const char *s) {
    return !strcmp(s, "natsl-hybrid") || !strcmp(s, "natsl") || !strcmp(s, "gdn") ||
           !strcmp(s, "gdn-hybrid") || !strcmp(s, "transformer") || !strcmp(s, "nha-hybrid");
}

// The embedding and head rows (§1): the vocabulary rounded up to a multiple of 128 (GPT-2's 50257 to 50304).
static inline int vocab_padded(int V) { return (V + 127) / 128 * 128; }

// Fills c from a preset name: "tiny", "small", "340m", "760m", for a vocabulary of V tokens (the data's, §1). Returns 0,
// or -1 for an unknown name.
static inline int config_from_preset(Config *c, const char *name, int V) {
    memset(c, 0, sizeof(*c));
    c->V = V; c->Vp = vocab_padded(V);
    if (!strcmp(name, "tiny")) { c->D = 128; c->L = 4; c->H = 2; c->dk = 48; c->Ha = 4; }
    else if (!strcmp(name, "small")) { c->D = 512; c->L = 4; c->H = 3; c->dk = 128; c->Ha = 6; } // the 340m's head widths
    else if (!strcmp(name, "340m")) { c->D = 1024; c->L = 21; c->H = 6; c->dk = 128; c->Ha = 12; }
    else if (!strcmp(name, "760m")) { c->D = 1536; c->L = 21; c->H = 6; c->dk = 192; c->Ha = 18; }
    else return -1;
    c->dv = 2 * c->dk;
    c->F = mlp_width(c->D);
    if (!strcmp(name, "tiny")) strcpy(c->pattern, "GNGN");   // both kinds, cheap on a CPU
    else pattern_from_variant(c->pattern, "natsl-hybrid", c->L);
    return 0;
}

// The layer kinds a pattern may hold; every dispatch on a pattern letter (param_tensors, the activation
// layout, block_forward/model_backward of both programs) knows exactly these five. S (§7.3) holds an A and a
// G mixer and selects one per step; H is Native Hybrid Attention (§15).
static inline int is_layer_kind(char k) { return k == 'G' || k == 'A' || k == 'N' || k == 'S' || k == 'H'; }
// Whether the pattern has a layer with a GDN op (G, N, S), with an A mixer (A, S)
static inline int pattern_has_gdn(const Config *c) { return strpbrk(c->pattern, "GNS") != NULL; }
static inline int pattern_has_attn_layer(const Config *c) { return strpbrk(c->pattern, "ASH") != NULL; }

// The H layers' defaults (§15): m = NHA_SLOTS slots and a window of NHA_WINDOW in every H layer of the pattern.
static inline void config_nha_defaults(Config *c) {
    c->nha_m = strchr(c->pattern, 'H') ? NHA_SLOTS : 0;
    for (int l = 0; l < NATSL_MAX_LAYERS; l++) c->nha_w[l] = l < c->L && c->pattern[l] == 'H' ? NHA_WINDOW : 0;
}

// Applies -W (NULL: keep) and -U (0: keep): the H layers' windows, one value for every H layer or a comma-separated
// list with one per H layer in order, and their slots per head. Returns 0, or -1 with a message.
static inline int config_set_nha(Config *c, const char *windows, int slots, char *err, size_t errlen) {
    int nh = 0;
    for (int l = 0; l < c->L; l++) nh += c->pattern[l] == 'H';
    if (!nh) { snprintf(err, errlen, "-W/-U set the H layers' windows and slots: the pattern %s has no H layer", c->pattern); return -1; }
    if (slots) c->nha_m = slots;
    if (!windows) return 0;
    long w[NATSL_MAX_LAYERS];
    int n = 0;
    for (const char *s = windows;;) { // digits, then a comma and more digits, or the end
        char *end;
        if (n == NATSL_MAX_LAYERS || *s < '0' || *s > '9') { n = -1; break; }
        w[n++] = strtol(s, &end, 10);
        if (*end != ',') { if (*end) n = -1; break; }
        s = end + 1;
    }
    if (n <= 0 || (n != 1 && n != nh)) {
        snprintf(err, errlen, "-W %s: one window, or a comma-separated list of %d (one per H layer)", windows, nh);
        return -1;
    }
    for (int l = 0, i = 0; l < c->L; l++) {
        if (c->pattern[l] != 'H') continue;
        long x = w[n == 1 ? 0 : i++];
        if (x > NHA_MAX_WINDOW) { snprintf(err, errlen, "-W %s: a window is 0 to %d", windows, NHA_MAX_WINDOW); return -1; }
        c->nha_w[l] = (int)x;
    }
    return 0;
}

// Applies -a: a variant name (keeps L) or a literal pattern over G/A/N/S/H (sets L). The pure NAtS-L
// variant turns RoPE on for the softmax op (§5.8); every other choice leaves it off. H layers get the defaults
// of config_nha_defaults.
static inline int config_set_pattern(Config *c, const char *arg, char *err, size_t errlen) {
    if (is_variant_name(arg)) {
        pattern_from_variant(c->pattern, arg, c->L);
        c->rope = !strcmp(arg, "natsl");
        config_nha_defaults(c);
        return 0;
    }
    size_t n = strlen(arg);
    if (n == 0 || n > NATSL_MAX_LAYERS) {
        snprintf(err, errlen, "-a %s: a pattern needs 1 to %d layers", arg, NATSL_MAX_LAYERS);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        if (!is_layer_kind(arg[i])) {
            snprintf(err, errlen, "-a %s: not a variant (natsl-hybrid, natsl, gdn, gdn-hybrid, "
                     "transformer, nha-hybrid) nor a pattern over G/A/N/S/H (bad letter '%c')", arg, arg[i]);
            return -1;
        }
    }
    strcpy(c->pattern, arg);
    c->L = (int)n;
    c->rope = 0;
    config_nha_defaults(c);
    return 0;
}

#define NATSL_MAX_DIM 65536      // bound on every size of a config: keeps all products far from overflow
#define NATSL_MAX_VOCAB (1 << 20)

// Checks that the sizes fit together and the pattern holds only G, A, N, S and H. Every config the programs
// build a model from passes here (presets, -a, checkpoint headers). Returns 0 or -1 with a message.
static inline int config_check(const Config *c, char *err, size_t errlen) {
    const char *why = NULL;
    int bad_letter = -1;
    for (int l = 0; l < c->L && l < NATSL_MAX_LAYERS; l++)
        if (!is_layer_kind(c->pattern[l])) { bad_letter = l; break; }
    if (c->D <= 0 || c->L <= 0 || c->H <= 0 || c->dk <= 0 || c->dv <= 0 || c->Ha <= 0 || c->F <= 0) why = "sizes must be positive";
    else if (c->D > NATSL_MAX_DIM || c->H > NATSL_MAX_DIM || c->dk > NATSL_MAX_DIM || c->dv > NATSL_MAX_DIM ||
             c->Ha > NATSL_MAX_DIM || c->F > NATSL_MAX_DIM) why = "a size exceeds 65536";
    else if (c->L > NATSL_MAX_LAYERS || (int)strnlen(c->pattern, NATSL_MAX_LAYERS + 1) != c->L) why = "pattern length must equal the layer count";
    else if (bad_letter >= 0) {
        snprintf(err, errlen, "bad model config: pattern %s has '%c' (code %d) at layer %d; layers are G, A, N, S or H",
                 c->pattern, c->pattern[bad_letter] >= 32 && c->pattern[bad_letter] < 127 ? c->pattern[bad_letter] : '?',
                 (unsigned char)c->pattern[bad_letter], bad_letter);
        return -1;
    }
    else if (c->Ha % c->H) why = "softmax heads must be a multiple of GDN heads";
    else if ((c->H * c->dk) % c->Ha || (c->H * c->dv) % c->Ha) why = "key/value widths must split evenly into softmax heads";
    else if (pattern_has_attn_layer(c) && c->D % NATSL_ATTN_HEAD) why = "an A (or S, H) layer needs D to be a multiple of 64";
    else if (strchr(c->pattern, 'H') ? c->nha_m < 1 || c->nha_m > 4096 : c->nha_m != 0)
        why = "the H layers' slots per head must be 1 to 4096 (and 0 without H layers)";
    else if (c->rope && cfg_dka(c) % 2) why = "RoPE needs an even softmax head dim";
    else if (c->V <= 0 || c->Vp < c->V || c->Vp > NATSL_MAX_VOCAB) why = "padded vocabulary must hold the vocabulary (at most 2^20 rows)";
    else if (c->rope != 0 && c->rope != 1) why = "the RoPE flag must be 0 or 1";
    else if (c->gate_act != GATE_SILU && c->gate_act != GATE_SIGMOID) why = "the gate activation must be 0 (silu) or 1 (sigmoid)";
    else if (c->rope && !strchr(c->pattern, 'N')) why = "RoPE (on the NAtS-L softmax op) needs an N layer";
    for (int l = 0; l < NATSL_MAX_LAYERS && !why; l++)
        if (l < c->L && c->pattern[l] == 'H' ? c->nha_w[l] < 0 || c->nha_w[l] > NHA_MAX_WINDOW : c->nha_w[l] != 0)
            why = "an H layer's window must be 0 to 2^24 (and 0 for the other layers)";
    if (why) { snprintf(err, errlen, "bad model config: %s", why); return -1; }
    return 0;
}

// ----------------------------------------------------------------------------------------------
// the flat parameter buffer

// Per-layer parameter tensors, in the order they sit in the buffer. Tensors a layer kind does not
// have take no space. Stacked weights are stored contiguously so one matmul computes them all:
// WQKV = [W_q; W_k; W_v], WAB = [W_a; W_b], CONV = [conv_q; conv_k; conv_v], WGU = [W_gate; W_up].
enum {
    P_LN_MIX,  // [D]            RMSNorm weight before the mixer
    P_WQKV,    // G,N,S: [2K+Vt, D]; A: [3D, D]
    P_WG,      // G,N,S: [Vt, D]   output gate
    P_WAB,     // G,N,S: [2H, D]   decay input a, then beta input b
    P_ALOG,    // G,N,S: [H]
    P_DTBIAS,  // G,N,S: [H]
    P_CONV,    // G,N,S: [2K+Vt, 4] short conv
    P_ONORM,   // G,S: [dv]      output RMSNorm of the GDN layer
    P_WR,      // N:   [2H, D]   router (Attention Score Layer)
    P_WOW,     // N:   [2Ha, K]  output-weight layer
    P_QN,      // N:   [dka]     RMSNorm of softmax q
    P_KN,      // N:   [dka]     RMSNorm of softmax k
    P_N1,      // N:   [dva]     fused output norm, GDN input
    P_N2,      // N:   [dva]     fused output norm, softmax input
    P_WO,      // G,N,S: [D, Vt]; A: [D, D]
    P_SSEL,    // S:   [1]       the selection logit s_sel (§7.3)
    P_WQKV_A,  // S:   [3D, D]   the A mixer's W_qkv
    P_WO_A,    // S:   [D, D]    the A mixer's W_o
    P_WALPHA,  // H:   [Hh*m, D] the slot gates' W_α (§15, (15.1a)); H's W_qkv, W_o are an A layer's
    P_LN_MLP,  // [D]
    P_WGU,     // [2F, D]  SwiGLU gate and up
    P_WDOWN,   // [D, F]
    NSLOT
};

enum { INIT_NORMAL, INIT_ONES, INIT_ALOG, INIT_DTBIAS, INIT_ZEROS };

static const struct { const char *name; int init; int decay; } SLOT_INFO[NSLOT] = {
    {"ln_mix", INIT_ONES, 0},  {"wqkv", INIT_NORMAL, 1}, {"wg", INIT_NORMAL, 1},
    {"wab", INIT_NORMAL, 1},   {"a_log", INIT_ALOG, 0},  {"dt_bias", INIT_DTBIAS, 0},
    {"conv", INIT_NORMAL, 0},  {"o_norm", INIT_ONES, 0}, {"wr", INIT_NORMAL, 1},
    {"wow", INIT_NORMAL, 1},   {"qn", INIT_ONES, 0},     {"kn", INIT_ONES, 0},
    {"n1", INIT_ONES, 0},      {"n2", INIT_ONES, 0},     {"wo", INIT_NORMAL, 1},
    {"s_sel", INIT_ZEROS, 0},  {"wqkv_a", INIT_NORMAL, 1}, {"wo_a", INIT_NORMAL, 1}, {"walpha", INIT_NORMAL, 1},
    {"ln_mlp", INIT_ONES, 0},  {"wgu", INIT_NORMAL, 1},  {"wdown", INIT_NORMAL, 1},
};

// Shape [rows, cols] of one slot for a layer kind; rows = 0 when the kind has no such tensor.
static inline void slot_shape(const Config *c, char kind, int slot, size_t *rows, size_t *cols) {
    size_t D = c->D, K = cfg_K(c), Vt = cfg_Vt(c), H = c->H;
    size_t r = 0, k = 1;
    int gdn = kind == 'G' || kind == 'N' || kind == 'S', nats = kind == 'N', sel = kind == 'S';
    switch (slot) {
    case P_LN_MIX: case P_LN_MLP: r = D; break;
    case P_WQKV: if (gdn) { r = 2 * K + Vt; k = D; } else { r = 3 * D; k = D; } break;
    case P_WG: if (gdn) { r = Vt; k = D; } break;
    case P_WAB: if (gdn) { r = 2 * H; k = D; } break;
    case P_ALOG: case P_DTBIAS: if (gdn) r = H; break;
    case P_CONV: if (gdn) { r = 2 * K + Vt; k = NATSL_CONV; } break;
    case P_ONORM: if (kind == 'G' || sel) r = c->dv; break;
    case P_WR: if (nats) { r = 2 * H; k = D; } break;
    case P_WOW: if (nats) { r = 2 * (size_t)c->Ha; k = K; } break;
    case P_QN: case P_KN: if (nats) r = cfg_dka(c); break;
    case P_N1: case P_N2: if (nats) r = cfg_dva(c); break;
    case P_WO: if (gdn) { r = D; k = Vt; } else { r = D; k = D; } break;
    case P_SSEL: if (sel) r = 1; break;
    case P_WQKV_A: if (sel) { r = 3 * D; k = D; } break;
    case P_WO_A: if (sel) { r = D; k = D; } break;
    case P_WALPHA: if (kind == 'H') { r = (size_t)cfg_attn_heads(c) * c->nha_m; k = D; } break;
    case P_WGU: r = 2 * (size_t)c->F; k = D; break;
    case P_WDOWN: r = D; k = c->F; break;
    }
    *rows = r; *cols = r ? k : 0;
}

// One entry per parameter tensor of the model, in buffer order.
typedef struct {
    char name[32];
    size_t offset, numel;
    int init, decay;
    int layer, slot;  // layer = -1 for the global tensors (embedding, final norm, head)
} ParamTensor;

#define NATSL_MAX_TENSORS (3 + NATSL_MAX_LAYERS * NSLOT)

// Lists every tensor with its offset. Returns the tensor count; *total gets the parameter count.
// This is the one place where parameter sizes are computed.
static inline int param_tensors(const Config *c, ParamTensor *t, size_t *total) {
    char why[256];
    if (config_check(c, why, sizeof(why))) { // a model is only ever built from a checked config
        fprintf(stderr, "error: %s\n", why);
        exit(1);
    }
    int n = 0;
    size_t off = 0;
#define ADD_TENSOR(NAME, NUMEL, INIT, DECAY, LAYER, SLOT) do { \
        snprintf(t[n].name, sizeof(t[n].name), "%s", NAME); \
        t[n].offset = off; t[n].numel = (NUMEL); t[n].init = INIT; t[n].decay = DECAY; \
        t[n].layer = LAYER; t[n].slot = SLOT; off += (NUMEL); n++; } while (0)
    ADD_TENSOR("wte", (size_t)c->Vp * c->D, INIT_NORMAL, 1, -1, -1);
    for (int l = 0; l < c->L; l++) {
        for (int s = 0; s < NSLOT; s++) {
            size_t rows, cols;
            slot_shape(c, c->pattern[l], s, &rows, &cols);
            if (!rows) continue;
            char name[32];
            snprintf(name, sizeof(name), "l%d.%s", l, SLOT_INFO[s].name);
            ADD_TENSOR(name, rows * cols, SLOT_INFO[s].init, SLOT_INFO[s].decay, l, s);
        }
    }
    ADD_TENSOR("ln_f", (size_t)c->D, INIT_ONES, 0, -1, -1);
    ADD_TENSOR("head", (size_t)c->Vp * c->D, INIT_NORMAL, 1, -1, -1);
#undef ADD_TENSOR
    *total = off;
    return n;
}

#endif
