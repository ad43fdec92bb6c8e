/*
test_natsl.c — the checks of doc/model.md §8 for the CPU reference, plus data, checkpoint and CLI tests.

The model code is train_natsl.c itself, included here and compiled in double precision, so every
backward pass is compared against central finite differences (4-point stencil) of its own forward:
per coordinate, |analytic − numeric| / max(|analytic|, |numeric|, 1e-6) must stay below 1e-5.

Router gradients (§6.3–§6.5) are not derivatives of the hard (argmax) model, whose loss is piecewise
constant in the router. They are checked through the continuous-mask relaxation of §8:
  * the ops take a real-valued mask m; finite differences in m at the active entries must equal dA,
    and dA must be exactly 0 at inactive entries and in the last chunk;
  * in relaxed mode the router hands π itself to the ops, so the layer and the whole model are smooth
    functions of W_r and of x: the straight-through chain is checked there end to end.
The hard model is checked with the router's gradient switched off, skipping (and counting) the
coordinates whose perturbation flips a routing decision.

Run: make test, or ./test_natsl SUBSTRING for the tests whose name contains it (prints "N passed, M failed" last; exit status 1 on any failure)
*/
#define TESTING
#define NATSL_DOUBLE
#include "train_natsl.c"

#include <sys/wait.h>
#include <unistd.h>

// ---- a tiny test runner -------------------------------------------------------------------------
static int g_check_failures, g_passed, g_failed;
#define CHECK(cond, ...) do { if (!(cond)) { g_check_failures++; printf("  check failed: "); \
    printf(__VA_ARGS__); printf("  [%s:%d]\n", __FILE__, __LINE__); } } while (0)
static const char *g_filter; // run only the tests whose name contains this (argv[1])
static void run_test(const char *name, void (*fn)(void)) {
    if (g_filter && !strstr(name, g_filter)) return;
    int before = g_check_failures;
    double t0 = now_s();
    fn();
    int ok = g_check_failures == before;
    if (ok) g_passed++; else g_failed++;
    printf("%s %s (%.1f s)\n", ok ? "ok  " : "FAIL", name, now_s() - t0);
    fflush(stdout);
}
#define RUN(fn) run_test(#fn, fn)

// ---- finite differences -----------------------------------------------------------------------------
static uint64_t g_rng = 12345;
static void fill_normal(real *x, size_t n, double s) { for (size_t i = 0; i < n; i++) x[i] = s * rng_normal(&g_rng); }
static void fill_uniform(real *x, size_t n, double lo, double hi) { for (size_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * rng_uniform(&g_rng); }
static real *vec(size_t n) { return xcalloc(n, sizeof(real)); }

typedef struct { const char *name; real *x, *dx; size_t n; } Var;
typedef double (*LossFn)(void *ctx);

// Every loss below is a sum of terms (R_i·out_i, or per-token losses) that it also records here. The
// finite difference is taken term by term and then summed: terms a perturbation does not reach cancel
// exactly, so the rounding noise of a large sum (|loss| ~ 1e3) does not swamp small derivatives.
static real *g_terms;
static size_t g_nterms, g_cap;
static double record_terms(const real *a, const real *b, size_t n) { // Σ a_i·b_i (b = NULL: Σ a_i)
    double s = 0;
    if (g_nterms + n > g_cap) { g_cap = 2 * (g_nterms + n); g_terms = realloc(g_terms, g_cap * sizeof(real)); }
    for (size_t i = 0; i < n; i++) { real t = b ? a[i] * b[i] : a[i]; g_terms[g_nterms++] = t; s += t; }
    return s;
}
static real *eval_terms(LossFn f, void *ctx, size_t *n) {
    g_nterms = 0;
    f(ctx);
    real *copy = xcalloc(g_nterms, sizeof(real));
    memcpy(copy, g_terms, g_nterms * sizeof(real));
    *n = g_nterms;
    return copy;
}

// Compares dx (already computed by the backward) with central differences of f in every coordinate
// (or in `sample` random coordinates when sample > 0). flip(ctx) (optional) reports a changed
// routing decision: such coordinates are skipped and counted in *skipped.
#define FD_TOL 1e-5
static double g_fd_h = 1e-4; // step of the 4-point central difference
static double fd_check_var(const Var *v, LossFn f, void *ctx, size_t sample, int (*flip)(void *),
                           int *skipped, int *tried) {
    double worst = 0;
    size_t n = sample && sample < v->n ? sample : v->n;
    for (size_t s = 0; s < n; s++) {
        size_t i = (sample && sample < v->n) ? rng_u32(&g_rng) % v->n : s;
        real x0 = v->x[i], h = g_fd_h * (fabs(x0) > 1 ? fabs(x0) : 1);
        real *fp[2], *fm[2];
        size_t nt = 0;
        int flipped = 0;
        for (int k = 1; k <= 2; k++) {
            v->x[i] = x0 + k * h; fp[k - 1] = eval_terms(f, ctx, &nt); if (flip && flip(ctx)) flipped = 1;
            v->x[i] = x0 - k * h; fm[k - 1] = eval_terms(f, ctx, &nt); if (flip && flip(ctx)) flipped = 1;
        }
        v->x[i] = x0;
        double num = 0, ana = v->dx[i];
        for (size_t j = 0; j < nt; j++) num += 8 * (fp[0][j] - fm[0][j]) - (fp[1][j] - fm[1][j]);
        num /= 12 * h;
        for (int k = 0; k < 2; k++) { free(fp[k]); free(fm[k]); }
        if (tried) (*tried)++;
        if (flipped) { (*skipped)++; continue; }
        double den = fmax(fmax(fabs(num), fabs(ana)), 1e-6), err = fabs(num - ana) / den;
        if (err > worst) worst = err;
        if (err > FD_TOL) { CHECK(0, "%s[%zu]: analytic %.10g numeric %.10g (rel %.2e)", v->name, i, ana, num, err); return err; }
    }
    return worst;
}
static void fd_check(const char *what, Var *vars, int nv, LossFn f, void *ctx, size_t sample) {
    double worst = 0;
    for (int k = 0; k < nv; k++) worst = fmax(worst, fd_check_var(&vars[k], f, ctx, sample, NULL, NULL, NULL));
    printf("  %-28s max rel err %.2e over %d tensors\n", what, worst, nv);
}
static double dot_r(const real *a, const real *b, size_t n) { return record_terms(a, b, n); }

// ---- primitive layers: loss = Σ R ⊙ output, backward with dout = R -----------------------------------
typedef struct { int BT, C, OC; real *x, *w, *out, *R; } MatmulCtx;
static double matmul_loss(void *p) { MatmulCtx *c = p; matmul_forward(c->out, c->x, c->w, c->BT, c->C, c->OC, 0, NULL); return dot_r(c->out, c->R, (size_t)c->BT * c->OC); }
static void test_grad_matmul(void) {
    MatmulCtx c = {7, 11, 5, 0, 0, 0, 0};
    c.x = vec(77); c.w = vec(55); c.out = vec(35); c.R = vec(35);
    real *dx = vec(77), *dw = vec(55);
    fill_normal(c.x, 77, 1); fill_normal(c.w, 55, 1); fill_normal(c.R, 35, 1);
    matmul_backward(dx, dw, c.R, c.x, c.w, 7, 11, 5, DINP_WRITE);
    Var v[] = {{"inp", c.x, dx, 77}, {"weight", c.w, dw, 55}};
    fd_check("matmul", v, 2, matmul_loss, &c, 0);
    free(c.x); free(c.w); free(c.out); free(c.R); free(dx); free(dw);
    // the linear layer's three products (gemm, blocked) against gemm_reference, the definition: K slices (C > 256),
    // edge tiles, transposed operands, accumulation (dinp written, added to, or written rounded to the matmul
    // precision; with DINP_ADD, the forward's output landing on a residual); then the same in bf16 mode (operands
    // rounded, and dinp with DINP_WRITE_MP)
    int shapes[][3] = {{70, 300, 37}, {13, 520, 600}, {300, 17, 3}};
    for (int s = 0; s < 3; s++) {
        int BT = shapes[s][0], C = shapes[s][1], OC = shapes[s][2];
        real *x = vec((size_t)BT * C), *w = vec((size_t)OC * C), *y = vec((size_t)BT * OC), *dy = vec((size_t)BT * OC);
        real *gx = vec((size_t)BT * C), *gw = vec((size_t)OC * C);
        fill_normal(x, (size_t)BT * C, 1); fill_normal(w, (size_t)OC * C, 1); fill_normal(dy, (size_t)BT * OC, 1);
        fill_normal(gx, (size_t)BT * C, 1); fill_normal(gw, (size_t)OC * C, 1);
        real *y0 = vec((size_t)BT * OC), *gx0 = vec((size_t)BT * C), *gw0 = vec((size_t)OC * C);
        for (int bf16 = 0; bf16 <= 1; bf16++)
            for (int mode = DINP_WRITE; mode <= DINP_WRITE_MP; mode++) {
                g_bf16 = bf16;
                memcpy(gx0, gx, (size_t)BT * C * sizeof(real)); memcpy(gw0, gw, (size_t)OC * C * sizeof(real));
                const int add = mode == DINP_ADD;
                if (add) memcpy(y0, dy, (size_t)BT * OC * sizeof(real)); // dy as the residual
                gemm_reference(y0, OC, (GemmOperand){x, C, 1}, (GemmOperand){w, 1, C}, BT, OC, C, add);
                gemm_reference(gx0, C, (GemmOperand){dy, OC, 1}, (GemmOperand){w, C, 1}, BT, C, OC, add);
                if (mode == DINP_WRITE_MP && bf16)
                    for (size_t i = 0; i < (size_t)BT * C; i++) gx0[i] = matmul_precision(gx0[i]);
                gemm_reference(gw0, C, (GemmOperand){dy, 1, OC}, (GemmOperand){x, C, 1}, OC, C, BT, 1);
                matmul_forward(y, x, w, BT, C, OC, 0, add ? dy : NULL);
                matmul_backward(gx, gw, dy, x, w, BT, C, OC, mode);
                g_bf16 = 0;
                double worst = 0;
                for (size_t i = 0; i < (size_t)BT * OC; i++) worst = fmax(worst, fabs(y[i] - y0[i]));
                for (size_t i = 0; i < (size_t)BT * C; i++) worst = fmax(worst, fabs(gx[i] - gx0[i]));
                for (size_t i = 0; i < (size_t)OC * C; i++) worst = fmax(worst, fabs(gw[i] - gw0[i]));
                const char *how[] = {"written", "added to (and out on a residual)", "written in the matmul precision"};
                CHECK(worst < 1e-10, "gemm %dx%dx%d%s, dinp %s, differs from gemm_reference by %g", BT, C, OC,
                      bf16 ? " (bf16)" : "", how[mode], worst);
                memcpy(gx, gx0, (size_t)BT * C * sizeof(real)); memcpy(gw, gw0, (size_t)OC * C * sizeof(real));
            }
        free(x); free(w); free(y); free(dy); free(gx); free(gw); free(y0); free(gx0); free(gw0);
    }
}

typedef struct { real *x, *w, *y, *rstd, *R; } NormCtx;
static const NormRows g_norm_rows = {3, 2, 4, 10, 8};
static double rmsnorm_loss(void *p) { NormCtx *c = p; rmsnorm_forward(c->y, c->rstd, c->x, c->w, g_norm_rows, 0); return dot_r(c->y, c->R, 24); }
static void test_grad_rmsnorm(void) { // 3 rows × 2 heads of width 4, input row stride 10, output stride 8
    NormCtx c = {vec(30), vec(4), vec(24), vec(6), vec(24)};
    real *dx = vec(30), *dw = vec(4);
    fill_normal(c.x, 30, 1); fill_normal(c.w, 4, 1); fill_normal(c.R, 24, 1);
    rmsnorm_loss(&c);
    rmsnorm_backward(dx, dw, c.R, c.x, c.w, c.rstd, g_norm_rows, 0);
    for (int i = 0; i < 3; i++) CHECK(dx[i * 10 + 8] == 0 && dx[i * 10 + 9] == 0, "rmsnorm touched a gap column");
    Var v[] = {{"x", c.x, dx, 30}, {"w", c.w, dw, 4}};
    fd_check("rmsnorm (heads, strides)", v, 2, rmsnorm_loss, &c, 0);
}

static double swiglu_loss(void *p) { NormCtx *c = p; swiglu_forward(c->y, c->x, 4, 3); return dot_r(c->y, c->R, 12); }
static void test_grad_swiglu(void) {
    NormCtx c = {vec(24), NULL, vec(12), NULL, vec(12)};
    real *dx = vec(24), *h = vec(12);
    fill_normal(c.x, 24, 1.5); fill_normal(c.R, 12, 1);
    swiglu_loss(&c);
    swiglu_backward(dx, h, c.R, c.x, 4, 3);
    CHECK(!memcmp(h, c.y, 12 * sizeof(real)), "swiglu_backward's h differs from swiglu_forward's output");
    Var v[] = {{"gu", c.x, dx, 24}};
    fd_check("swiglu", v, 1, swiglu_loss, &c, 0);
}

static double conv_loss(void *p) {
    NormCtx *c = p;
    ConvArgs a = {c->x, 5, c->w, 2, 6};
    conv_silu_forward(c->y, &a, 1, 3);
    return dot_r(c->y, c->R, 36);
}
static void test_grad_conv_silu(void) { // B=2, T=6, channels 1..3 of rows of stride 5 (weights [5][4]); dx's rows of 7
    NormCtx c = {vec(60), vec(20), vec(36), NULL, vec(36)};
    real *dx = vec(60), *dw = vec(20), *dx7 = vec(84);
    fill_normal(c.x, 60, 1); fill_normal(c.w + 4, 12, 0.7); fill_normal(c.R, 36, 1); // the weights of channels 1..3
    fill_normal(dx7, 84, 1); // the channels it writes start as garbage: it writes them, it does not add to them
    for (int i = 0; i < 84; i++) if (i % 7 < 1 || i % 7 > 3) dx7[i] = 0;
    conv_loss(&c);
    ConvArgs a = {c.x, 5, c.w, 2, 6};
    conv_silu_backward(dx7, 7, dw, c.R, &a, 1, 3);
    for (int i = 0; i < 84; i++) if (i % 7 < 1 || i % 7 > 3) CHECK(dx7[i] == 0, "the conv wrote outside its channels");
    for (int i = 0; i < 60; i++) dx[i] = dx7[i / 5 * 7 + i % 5];
    for (int i = 0; i < 20; i++) if (i < 4 || i >= 16) CHECK(dw[i] == 0, "the conv's weight gradient left its channels");
    Var v[] = {{"x", c.x, dx, 60}, {"w", c.w, dw, 20}};
    fd_check("short conv + silu", v, 2, conv_loss, &c, 0);
}

static double l2_loss(void *p) { NormCtx *c = p; l2norm_forward(c->y, c->rstd, c->x, 3, 2, 4); return dot_r(c->y, c->R, 24); }
static void test_grad_l2norm(void) {
    NormCtx c = {vec(24), NULL, vec(24), vec(6), vec(24)};
    real *dx = vec(24);
    fill_normal(c.x, 24, 1); fill_normal(c.R, 24, 1);
    l2_loss(&c);
    l2norm_backward(dx, c.R, c.y, c.rstd, 3, 2, 4, 8);
    Var v[] = {{"x", c.x, dx, 24}};
    fd_check("l2norm", v, 1, l2_loss, &c, 0);
}

typedef struct { real *ab, *alog, *dtb, *g, *beta, *R1, *R2; } GateCtx;
static GdnGatesArgs gates_args(const GateCtx *c) { GdnGatesArgs a = {c->ab, c->alog, c->dtb, 5, 2, 7, 6}; return a; }
static double gates_loss(void *p) {
    GateCtx *c = p;
    GdnGatesArgs a = gates_args(c);
    gdn_gates_forward(c->g, c->beta, &a);
    return dot_r(c->g, c->R1, 10) + dot_r(c->beta, c->R2, 10);
}
static void test_grad_gdn_gates(void) { // dab written in rows of stride 7: da | db | 2 zeros | one column left alone
    GateCtx c = {vec(20), vec(2), vec(2), vec(10), vec(10), vec(10), vec(10)};
    real *dab = vec(20), *dal = vec(2), *ddt = vec(2), *d7 = vec(35);
    fill_normal(c.ab, 20, 1); fill_uniform(c.alog, 2, -1, 2); fill_normal(c.dtb, 2, 1); fill_normal(c.R1, 10, 1); fill_normal(c.R2, 10, 1);
    for (int i = 0; i < 35; i++) d7[i] = 1e3;
    gates_loss(&c);
    GdnGatesArgs a = gates_args(&c);
    gdn_gates_backward(d7, dal, ddt, c.R1, c.R2, c.g, c.beta, &a);
    for (int i = 0; i < 35; i++)
        CHECK(i % 7 < 4 || (i % 7 < 6 ? d7[i] == 0 : d7[i] == 1e3), "the gates' pad columns: %g at column %d", d7[i], i % 7);
    for (int i = 0; i < 20; i++) dab[i] = d7[i / 4 * 7 + i % 4];
    Var v[] = {{"ab", c.ab, dab, 20}, {"A_log", c.alog, dal, 2}, {"dt_bias", c.dtb, ddt, 2}};
    fd_check("gdn gates (g, beta)", v, 3, gates_loss, &c, 0);
}

static double rope_loss(void *p) { NormCtx *c = p; memcpy(c->y, c->x, 48 * sizeof(real)); rope_forward(c->y, 4, 2, 2, 6, 12, 0); return dot_r(c->y, c->R, 48); }
static void test_grad_rope(void) { // 4 rows (T = 2: positions 0,1,0,1) × 2 heads of 6
    NormCtx c = {vec(48), NULL, vec(48), NULL, vec(48)};
    real *dx = vec(48);
    fill_normal(c.x, 48, 1); fill_normal(c.R, 48, 1);
    memcpy(dx, c.R, 48 * sizeof(real));
    rope_backward(dx, 4, 2, 2, 6, 12);
    Var v[] = {{"x", c.x, dx, 48}};
    fd_check("rope", v, 1, rope_loss, &c, 0);
    // position 0 is the identity; position 1 rotates pair (i, i+3) by theta^(-2i/6) radians
    real y[12] = {1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6};
    rope_forward(y, 1, 1, 2, 6, 12, 0);
    CHECK(y[0] == 1 && y[5] == 6, "rope at t=0 is not the identity");
    real z[6] = {1, 0, 0, 0, 0, 0};
    real zz[12] = {0};
    memcpy(zz + 6, z, sizeof(z));
    rope_forward(zz, 2, 2, 1, 6, 6, 0); // row 1 is t = 1
    CHECK(fabs(zz[6] - cos(1.0)) < 1e-12 && fabs(zz[9] - sin(1.0)) < 1e-12, "rope rotate-half convention");
}

static double pair_loss(void *p) { NormCtx *c = p; pair_softmax_forward(c->y, c->x, 5); return dot_r(c->y, c->R, 10); }
static void test_grad_pair_softmax(void) {
    NormCtx c = {vec(10), NULL, vec(10), NULL, vec(10)};
    real *dx = vec(10);
    fill_normal(c.x, 10, 2); fill_normal(c.R, 10, 1);
    pair_loss(&c);
    pair_softmax_backward(dx, c.R, c.y, 5);
    Var v[] = {{"x", c.x, dx, 10}};
    fd_check("pair softmax", v, 1, pair_loss, &c, 0);
}

typedef struct { int R, n, two; real *o1, *w1, *o2, *w2, *om, *gate, *y, *rstd, *Rr; int act; } GnCtx;
// dgate: 2 rows a token, the token's at a row of 13 (its last 3 columns left alone)
static GatedNormArgs gn_args(const GnCtx *c) {
    GatedNormArgs a = {c->o1, c->w1, c->two ? c->o2 : NULL, c->two ? c->w2 : NULL, c->two ? c->om : NULL, c->gate, c->R, c->n,
                       2, 13, c->act};
    return a;
}
static double gn_loss(void *p) {
    GnCtx *c = p;
    GatedNormArgs a = gn_args(c);
    gated_norm_forward(c->y, c->rstd, &a);
    return dot_r(c->y, c->Rr, (size_t)c->R * c->n);
}
// both gate activations (§5.6 (5.6g)): silu and sigmoid
static void test_grad_gated_norm(void) {
    for (int k = 0; k < 4; k++) {
        int two = k % 2, act = k / 2 ? GATE_SIGMOID : GATE_SILU;
        GnCtx c = {6, 5, two, vec(30), vec(5), vec(30), vec(5), vec(12), vec(30), vec(30), vec(12), vec(30), act};
        real *d1 = vec(30), *dw1 = vec(5), *d2 = vec(30), *dw2 = vec(5), *dom = vec(12), *dg = vec(30), *dg13 = vec(39);
        fill_normal(c.o1, 30, 1); fill_normal(c.w1, 5, 1); fill_normal(c.o2, 30, 1); fill_normal(c.w2, 5, 1);
        fill_uniform(c.om, 12, 0.1, 0.9); fill_normal(c.gate, 30, 1.5); fill_normal(c.Rr, 30, 1);
        gn_loss(&c);
        GatedNormArgs a = gn_args(&c);
        gated_norm_backward(d1, dw1, two ? d2 : NULL, two ? dw2 : NULL, two ? dom : NULL, dg13, c.Rr, c.rstd, &a);
        for (int i = 0; i < 39; i++) CHECK(i % 13 < 10 || dg13[i] == 0, "the gated norm wrote outside dgate's rows");
        for (int i = 0; i < 30; i++) dg[i] = dg13[i / 10 * 13 + i % 10];
        Var v[] = {{"o1", c.o1, d1, 30}, {"w1", c.w1, dw1, 5}, {"gate", c.gate, dg, 30},
                   {"o2", c.o2, d2, 30}, {"w2", c.w2, dw2, 5}, {"omega", c.om, dom, 12}};
        char what[64];
        snprintf(what, sizeof(what), "gated norm, %s input%s, %s", two ? "two" : "one", two ? "s" : "", gate_act_name(act));
        fd_check(what, v, two ? 6 : 3, gn_loss, &c, 0);
    }
}

typedef struct { real *z, *loss, *lse; int *tg; } CeCtx;
static double ce_loss(void *p) { CeCtx *c = p; crossentropy_forward(c->loss, c->lse, c->z, c->tg, 3, 5, 7); return record_terms(c->loss, NULL, 3); }
static void test_grad_crossentropy(void) { // 3 rows, V = 5 real tokens padded to 7
    int tg[3] = {0, 4, 2};
    CeCtx c = {vec(21), vec(3), vec(3), tg};
    fill_normal(c.z, 21, 2);
    real *dz = vec(21);
    ce_loss(&c);
    memcpy(dz, c.z, 21 * sizeof(real));
    crossentropy_backward(dz, c.lse, tg, 1, 3, 5, 7);
    Var v[] = {{"logits", c.z, dz, 21}};
    fd_check("cross-entropy (padded vocab)", v, 1, ce_loss, &c, 0);
    for (int r = 0; r < 3; r++) CHECK(dz[r * 7 + 5] == 0 && dz[r * 7 + 6] == 0, "padded logits got a gradient");
}

// ---- the two ops with a real-valued mask (§5.3, §5.4, §6, §8) ------------------------------------------
// B = 2, T = 192 (3 chunks), GDN heads H = 2 (dk = 3, dv = 4); softmax heads 4 (dq = 3, dvh = 2), 2 per mask head.
enum { OB = 2, OT = 192, OH = 2, ODK = 3, ODV = 4, ONH = 4, ODQ = 3, ODVA = 2, ONC = 3, OLD = 14 };
typedef struct {
    real *q, *k, *v, *g, *beta, *m;           // inputs; q, k rows of stride OLD (extra columns unused)
    real *oa, *lse, *og, *state, *Ra, *Rg;
    int use_mask, which;                       // which: 1 softmax op, 2 GDN op, 3 both
} OpCtx;
static void op_ctx_init(OpCtx *c, int use_mask) {
    size_t BT = OB * OT;
    c->q = vec(BT * OLD); c->k = vec(BT * OLD); c->v = vec(BT * OLD);
    c->g = vec(BT * OH); c->beta = vec(BT * OH); c->m = vec(OB * ONC * OH * 2);
    c->oa = vec(BT * ONH * ODVA); c->lse = vec(OB * ONH * OT); c->og = vec(BT * OH * ODV);
    c->state = vec((size_t)OB * OH * ONC * ODK * ODV);
    c->Ra = vec(BT * ONH * ODVA); c->Rg = vec(BT * OH * ODV);
    fill_normal(c->q, BT * OLD, 0.6); fill_normal(c->k, BT * OLD, 0.6); fill_normal(c->v, BT * OLD, 1);
    fill_uniform(c->g, BT * OH, -0.15, -0.01); fill_uniform(c->beta, BT * OH, 0.1, 0.9);
    fill_normal(c->Ra, BT * ONH * ODVA, 1); fill_normal(c->Rg, BT * OH * ODV, 1);
    // 0/1 routing with both kinds in the first two chunks of each sequence; last chunk active for both
    int soft[OB][ONC - 1][OH] = {{{1, 0}, {0, 1}}, {{0, 0}, {1, 1}}};
    for (int b = 0; b < OB; b++)
        for (int cc = 0; cc < ONC; cc++)
            for (int h = 0; h < OH; h++) {
                real *mm = c->m + ((b * ONC + cc) * OH + h) * 2;
                mm[0] = cc == ONC - 1 ? 1 : soft[b][cc][h];
                mm[1] = cc == ONC - 1 ? 1 : 1 - soft[b][cc][h];
            }
    c->use_mask = use_mask;
    c->which = 3;
}
static AttnArgs op_attn_args(const OpCtx *c, const real *m) {
    AttnArgs a = {c->q, c->k, c->v, OLD, OLD, m, OB, OT, ONH, OH, ODQ, ODVA, 0, 0};
    return a;
}
static GdnArgs op_gdn_args(const OpCtx *c, const real *m) {
    GdnArgs a = {c->q, c->k, c->v, OLD, OLD, c->g, c->beta, m, OB, OT, OH, ODK, ODV, NULL, (c->which & 1) != 0, 0, NULL, 0};
    return a;
}
static double op_loss(void *p) {
    OpCtx *c = p;
    const real *m = c->use_mask ? c->m : NULL;
    double L = 0;
    if (c->which & 1) {
        AttnArgs a = op_attn_args(c, m);
        attention_forward(c->oa, c->lse, &a);
        L += dot_r(c->oa, c->Ra, (size_t)OB * OT * ONH * ODVA);
    }
    if (c->which & 2) {
        GdnArgs a = op_gdn_args(c, m);
        gdn_op_forward(c->og, c->state, &a);
        L += dot_r(c->og, c->Rg, (size_t)OB * OT * OH * ODV);
    }
    return L;
}
typedef struct { real *dq, *dk, *dv, *dg, *dbeta, *dA; } OpGrads;
static void op_grads(OpCtx *c, OpGrads *d) {
    size_t BT = OB * OT;
    d->dq = vec(BT * OLD); d->dk = vec(BT * OLD); d->dv = vec(BT * OLD);
    d->dg = vec(BT * OH); d->dbeta = vec(BT * OH); d->dA = vec(OB * ONC * OH * 2);
    const real *m = c->use_mask ? c->m : NULL;
    op_loss(c);
    AttnArgs aa = op_attn_args(c, m);
    GdnArgs ga = op_gdn_args(c, m);
    if (c->which & 1) attention_backward(d->dq, d->dk, d->dv, m ? d->dA : NULL, c->Ra, c->oa, c->lse, &aa); // writes
    if (c->which & 2) gdn_op_backward(d->dq, d->dk, d->dv, d->dg, d->dbeta, m ? d->dA : NULL, c->Rg, c->state, &ga);
}

static void test_grad_attention_causal(void) {
    OpCtx c; op_ctx_init(&c, 0); c.which = 1;
    OpGrads d; op_grads(&c, &d);
    Var v[] = {{"q", c.q, d.dq, OB * OT * OLD}, {"k", c.k, d.dk, OB * OT * OLD}, {"v", c.v, d.dv, OB * OT * OLD}};
    fd_check("attention, causal (A)", v, 3, op_loss, &c, 120);
}
static void test_grad_attention_routed(void) {
    OpCtx c; op_ctx_init(&c, 1); c.which = 1;
    OpGrads d; op_grads(&c, &d);
    Var v[] = {{"q", c.q, d.dq, OB * OT * OLD}, {"k", c.k, d.dk, OB * OT * OLD}, {"v", c.v, d.dv, OB * OT * OLD}};
    fd_check("softmax op, routed (N)", v, 3, op_loss, &c, 300);
    // keys of a GDN-routed chunk are invisible to later queries: their gradient comes from their own chunk only
    OpCtx c2 = c; // same tensors; zero the loss weights of chunk 0's queries
    for (int i = 0; i < CH; i++) for (int j = 0; j < ONH * ODVA; j++) c2.Ra[(size_t)i * ONH * ODVA + j] = 0;
    OpGrads d2; op_grads(&c2, &d2);
    // sequence 0, chunk 0, mask head 1 is GDN-routed: softmax heads 2, 3 of its keys get no gradient
    double s = 0;
    for (int t = 0; t < CH; t++) for (int j = 2 * ODQ; j < 4 * ODQ; j++) s += fabs(d2.dk[(size_t)t * OLD + j]);
    CHECK(s == 0, "a GDN-routed chunk's keys received softmax gradient from later queries (%g)", s);
}

// -L 1 (§6.2 (6.2e)): the backward is the gradient of the softmax op in which the pairs of a query's own chunk read frozen
// copies q0, k0, v0 of the inputs (sg), the other pairs the live q, k, v: this oracle, in double, by finite
// differences over the live inputs.
typedef struct { OpCtx *c; real *q0, *k0, *v0, *o; } SgCtx;
static double sg_loss(void *p) {
    SgCtx *s = p;
    OpCtx *c = s->c;
    double scale = 1 / sqrt((double)ODQ), e[OT];
    for (int b = 0; b < OB; b++)
        for (int j = 0; j < ONH; j++)
            for (int i = 0; i < OT; i++) {
                int ci = i / CH, n = j / (ONH / OH);
                size_t ri = (size_t)b * OT + i;
                double mx = -1e300, sum = 0, o[ODVA] = {0};
                for (int t = 0; t <= i; t++) {
                    int own = t / CH == ci;
                    size_t rt = (size_t)b * OT + t;
                    const real *q = (own ? s->q0 : c->q) + ri * OLD + j * ODQ, *k = (own ? s->k0 : c->k) + rt * OLD + j * ODQ;
                    e[t] = 0;
                    for (int d = 0; d < ODQ; d++) e[t] += q[d] * k[d] * scale;
                    if (e[t] > mx) mx = e[t];
                }
                for (int t = 0; t <= i; t++) {
                    int own = t / CH == ci;
                    double w = own ? 1 : c->m[(((size_t)b * ONC + t / CH) * OH + n) * 2];
                    double pe = w * exp(e[t] - mx);
                    const real *v = (own ? s->v0 : c->v) + ((size_t)b * OT + t) * OLD + j * ODVA;
                    sum += pe;
                    for (int d = 0; d < ODVA; d++) o[d] += pe * v[d];
                }
                for (int d = 0; d < ODVA; d++) s->o[ri * ONH * ODVA + j * ODVA + d] = o[d] / sum;
            }
    return record_terms(s->o, c->Ra, (size_t)OB * OT * ONH * ODVA);
}
static void test_grad_attention_own_sg(void) {
    OpCtx c; op_ctx_init(&c, 1); c.which = 1;
    size_t n = (size_t)OB * OT * OLD;
    SgCtx s = {&c, vec(n), vec(n), vec(n), vec((size_t)OB * OT * ONH * ODVA)};
    memcpy(s.q0, c.q, n * sizeof(real)); memcpy(s.k0, c.k, n * sizeof(real)); memcpy(s.v0, c.v, n * sizeof(real));
    OpGrads d; op_grads(&c, &d); // the forward pass (lse, output) as the training takes it
    AttnArgs a = op_attn_args(&c, c.m);
    a.own_sg = 1;
    attention_backward(d.dq, d.dk, d.dv, d.dA, c.Ra, c.oa, c.lse, &a);
    Var v[] = {{"q", c.q, d.dq, n}, {"k", c.k, d.dk, n}, {"v", c.v, d.dv, n}};
    fd_check("softmax op, own chunk sg (-L 1)", v, 3, sg_loss, &s, 300);
    // the first chunk's queries see only their own chunk: no gradient reaches their q
    double z = 0;
    for (int t = 0; t < CH; t++) for (int j = 0; j < ONH * ODQ; j++) z += fabs(d.dq[(size_t)t * OLD + j]);
    CHECK(z == 0, "a first-chunk query received gradient through its own chunk's pairs (%g)", z);
    free(s.q0); free(s.k0); free(s.v0); free(s.o);
}
// -p bf16 where the GPU runs its bf16 attention kernels (head dims 64/64, 64/128): the CPU's softmax op computes on
// bf16-rounded q, k, v (dout, out) and rounds its output, exactly as the fp32 op on pre-rounded operands would
static void test_attention_bf16_operands(void) {
    enum { B = 1, T = 128, NH = 2, DQ = 64, DV = 128, LD = NH * DQ, LV = NH * DV };
    real *q = vec(B * T * LD), *k = vec(B * T * LD), *v = vec(B * T * LV), *dout = vec(B * T * LV);
    real *qr = vec(B * T * LD), *kr = vec(B * T * LD), *vr = vec(B * T * LV), *doutr = vec(B * T * LV);
    real *o1 = vec(B * T * LV), *o2 = vec(B * T * LV), *l1 = vec(B * NH * T), *l2 = vec(B * NH * T);
    real *g1 = vec(3 * B * T * LV), *g2 = vec(3 * B * T * LV);
    uint64_t rng = g_rng; // the later tests' random inputs stay as they were
    fill_normal(q, B * T * LD, 1); fill_normal(k, B * T * LD, 1); fill_normal(v, B * T * LV, 1); fill_normal(dout, B * T * LV, 1);
    for (int i = 0; i < B * T * LD; i++) { qr[i] = round_bf16(q[i]); kr[i] = round_bf16(k[i]); }
    for (int i = 0; i < B * T * LV; i++) { vr[i] = round_bf16(v[i]); doutr[i] = round_bf16(dout[i]); }
    AttnArgs a = {q, k, v, LD, LV, NULL, B, T, NH, NH, DQ, DV, 0, 0}, ar = {qr, kr, vr, LD, LV, NULL, B, T, NH, NH, DQ, DV, 0, 0};
    g_bf16 = 1;
    attention_forward(o1, l1, &a);
    attention_backward(g1, g1 + B * T * LV, g1 + 2 * B * T * LV, NULL, dout, o1, l1, &a);
    g_bf16 = 0;
    attention_forward(o2, l2, &ar);
    for (int i = 0; i < B * T * LV; i++) o2[i] = round_bf16(o2[i]);
    attention_backward(g2, g2 + B * T * LV, g2 + 2 * B * T * LV, NULL, doutr, o2, l2, &ar);
    CHECK(!memcmp(o1, o2, B * T * LV * sizeof(real)) && !memcmp(l1, l2, B * NH * T * sizeof(real)),
          "bf16 attention output differs from the fp32 op on rounded operands");
    CHECK(!memcmp(g1, g2, 3 * B * T * LV * sizeof(real)), "bf16 attention gradients differ from the fp32 op on rounded operands");
    // operands stored in bf16 (the layers': AttnArgs.out_mp) on the TF32 kernels (NATSL_ATTN_BF16=0): q, k, v, the
    // output and its gradient dout rounded as stored
    a.out_mp = 1;
    setenv("NATSL_ATTN_BF16", "0", 1);
    g_bf16 = 1;
    attention_forward(o1, l1, &a);
    attention_backward(g1, g1 + B * T * LV, g1 + 2 * B * T * LV, NULL, dout, o1, l1, &a);
    g_bf16 = 0;
    attention_backward(g2, g2 + B * T * LV, g2 + 2 * B * T * LV, NULL, doutr, o2, l2, &ar);
    unsetenv("NATSL_ATTN_BF16");
    CHECK(!memcmp(o1, o2, B * T * LV * sizeof(real)), "bf16-stored attention output (TF32 path) is not the rounded fp32 op");
    CHECK(!memcmp(g1, g2, 3 * B * T * LV * sizeof(real)), "bf16-stored attention gradients (TF32 path) differ");
    real *ptrs[] = {q, k, v, dout, qr, kr, vr, doutr, o1, o2, l1, l2, g1, g2};
    for (size_t i = 0; i < sizeof(ptrs) / sizeof(ptrs[0]); i++) free(ptrs[i]);
    g_rng = rng;
}
static void test_grad_gdn_op_plain(void) {
    OpCtx c; op_ctx_init(&c, 0); c.which = 2;
    OpGrads d; op_grads(&c, &d);
    Var v[] = {{"q", c.q, d.dq, OB * OT * OLD}, {"k", c.k, d.dk, OB * OT * OLD}, {"v", c.v, d.dv, OB * OT * OLD},
               {"g", c.g, d.dg, OB * OT * OH}, {"beta", c.beta, d.dbeta, OB * OT * OH}};
    fd_check("GDN op, all committed (G)", v, 5, op_loss, &c, 300);
}
static void test_grad_gdn_op_routed(void) {
    OpCtx c; op_ctx_init(&c, 1); c.which = 2;
    OpGrads d; op_grads(&c, &d);
    Var v[] = {{"q", c.q, d.dq, OB * OT * OLD}, {"k", c.k, d.dk, OB * OT * OLD}, {"v", c.v, d.dv, OB * OT * OLD},
               {"g", c.g, d.dg, OB * OT * OH}, {"beta", c.beta, d.dbeta, OB * OT * OH}};
    fd_check("GDN op, routed (N)", v, 5, op_loss, &c, 300);
}

// Token-by-token oracle of §5.4 written the other way round: the committed state S_t per token
// (decay-only inside uncommitted chunks) and, for queries, a fresh virtual run from the committed state.
static void test_gdn_op_matches_token_oracle(void) {
    OpCtx c; op_ctx_init(&c, 1); c.which = 2;
    op_loss(&c);
    double worst = 0;
    size_t KV = ODK * ODV;
    for (int b = 0; b < OB; b++)
        for (int h = 0; h < OH; h++) {
            double S[ODK * ODV] = {0}, Z[ODK * ODV] = {0};
            for (int t = 0; t < OT; t++) {
                int cc = t / CH;
                size_t row = (size_t)b * OT + t;
                if (t % CH == 0) for (size_t i = 0; i < KV; i++) Z[i] = S[i];
                const real *q = c.q + row * OLD + h * ODK, *k = c.k + row * OLD + h * ODK, *v = c.v + row * OLD + h * ODV;
                double a = exp(c.g[row * OH + h]), be = c.beta[row * OH + h], u[ODV];
                for (int j = 0; j < ODV; j++) { double kz = 0; for (int i = 0; i < ODK; i++) kz += k[i] * a * Z[i * ODV + j]; u[j] = be * (v[j] - kz); }
                for (int i = 0; i < ODK; i++) for (int j = 0; j < ODV; j++) Z[i * ODV + j] = a * Z[i * ODV + j] + k[i] * u[j];
                for (int j = 0; j < ODV; j++) {
                    double o = 0;
                    for (int i = 0; i < ODK; i++) o += q[i] * Z[i * ODV + j];
                    worst = fmax(worst, fabs(o / sqrt(ODK) - c.og[row * OH * ODV + h * ODV + j]));
                }
                int commit = c.m[((b * ONC + cc) * OH + h) * 2 + 1] == 1;
                if (commit) { if (t % CH == CH - 1) for (size_t i = 0; i < KV; i++) S[i] = Z[i]; }
                else for (size_t i = 0; i < KV; i++) S[i] *= a; // decay only
            }
        }
    printf("  max abs diff vs token oracle %.2e\n", worst);
    CHECK(worst < 1e-12, "GDN op differs from the token-by-token oracle (%g)", worst);
}

// §8 router gradient: finite differences in m at the active entries equal dA; dA is exactly 0 at
// inactive entries and in the last chunk. Then the same at a real-valued interior mask.
static void test_router_mask_gradient(void) {
    for (int interior = 0; interior <= 1; interior++) {
        OpCtx c; op_ctx_init(&c, 1);
        if (interior) fill_uniform(c.m, OB * ONC * OH * 2, 0.2, 0.9);
        OpGrads d; op_grads(&c, &d);
        int n_active = 0;
        double worst = 0;
        for (int b = 0; b < OB; b++)
            for (int cc = 0; cc < ONC; cc++)
                for (int h = 0; h < OH; h++)
                    for (int op = 0; op < 2; op++) {
                        size_t i = ((b * ONC + cc) * OH + h) * 2 + op;
                        if (cc == ONC - 1) { CHECK(d.dA[i] == 0, "dA in the last chunk is %g, not 0", d.dA[i]); continue; }
                        if (c.m[i] == 0) { CHECK(d.dA[i] == 0, "dA at an inactive entry is %g, not 0", d.dA[i]); continue; }
                        Var v = {"m", c.m + i, d.dA + i, 1};
                        worst = fmax(worst, fd_check_var(&v, op_loss, &c, 0, NULL, NULL, NULL));
                        n_active++;
                    }
        printf("  %s mask: %d entries, max rel err %.2e\n", interior ? "real-valued" : "0/1", n_active, worst);
        CHECK(n_active >= 8, "too few active mask entries checked");
    }
}

// ---- router: relaxed mode is smooth in x and W_r, and its backward is the straight-through chain --------
typedef struct { real *x, *Wr, *mask, *pi, *logits, *pool, *R, *noise, tau, *dpi; } RouterCtx;
// B = 2, T = 192 (3 chunks), D = 5, H = 3
static RouterArgs router_args(const RouterCtx *c, int relaxed) {
    RouterArgs a = {c->x, c->Wr, 2, 192, 5, 3, c->noise, c->tau, relaxed, c->dpi};
    return a;
}
static double router_loss(void *p) {
    RouterCtx *c = p;
    RouterArgs a = router_args(c, 1);
    router_forward(c->mask, c->pi, c->logits, c->pool, &a);
    if (c->dpi) // the §7 terms: dpi[m] per routed s[…, m] (the last chunk excluded)
        for (int i = 0; i < 18; i++) if ((i / 3) % 3 != 2) record_terms(c->pi + 2 * i, c->dpi, 2);
    return dot_r(c->mask, c->R, 2 * 3 * 3 * 2);
}
static void test_grad_router_straight_through(void) {
    RouterCtx c = {vec(2 * 192 * 5), vec(6 * 5), vec(36), vec(36), vec(36), vec(30), vec(36), NULL, 1, NULL};
    real *dx = vec(2 * 192 * 5), *dWr = vec(30), *dpool = vec(30), *dlog = vec(36);
    fill_normal(c.x, 2 * 192 * 5, 1); fill_normal(c.Wr, 30, 1); fill_normal(c.R, 36, 1);
    router_loss(&c);
    RouterArgs a = router_args(&c, 1);
    router_backward(dx, dWr, dpool, dlog, c.R, c.pi, c.pool, &a);
    Var v[] = {{"x", c.x, dx, 2 * 192 * 5}, {"W_r", c.Wr, dWr, 30}};
    fd_check("router (relaxed, ST chain)", v, 2, router_loss, &c, 200);
    // hard mode: one-hot, ties to op 0, last chunk both
    a.relaxed = 0;
    router_forward(c.mask, c.pi, c.logits, c.pool, &a);
    for (int i = 0; i < 18; i++) {
        int last = (i / 3) % 3 == 2;
        CHECK(last ? (c.mask[2 * i] == 1 && c.mask[2 * i + 1] == 1)
                   : (c.mask[2 * i] == (c.logits[2 * i] >= c.logits[2 * i + 1]) && c.mask[2 * i] + c.mask[2 * i + 1] == 1),
              "hard routing decision %d wrong", i);
    }
}

// §7 at the router: the auxiliary gradient dpi on s = π (7.1c, 7.4a), then ST-Gumbel routing at fixed noise and
// τ = 0.7 (7.2a) with dpi, both relaxed (mask = s): dℓ = s ⊙ (dÃ + dpi − ⟨s, dÃ + dpi⟩)/τ against finite differences.
static void test_grad_router_gumbel_budget(void) {
    real dpi[2] = {0.37, -0.21};
    for (int gumbel = 0; gumbel <= 1; gumbel++) {
        RouterCtx c = {vec(2 * 192 * 5), vec(6 * 5), vec(36), vec(36), vec(36), vec(30), vec(36), NULL, gumbel ? 0.7 : 1, dpi};
        real *dx = vec(2 * 192 * 5), *dWr = vec(30), *dpool = vec(30), *dlog = vec(36);
        fill_normal(c.x, 2 * 192 * 5, 1); fill_normal(c.Wr, 30, 1); fill_normal(c.R, 36, 1);
        if (gumbel) { c.noise = vec(36); for (int i = 0; i < 36; i++) c.noise[i] = -log(-log(rng_uniform(&g_rng))); }
        router_loss(&c);
        RouterArgs a = router_args(&c, 1);
        router_backward(dx, dWr, dpool, dlog, c.R, c.pi, c.pool, &a);
        Var v[] = {{"x", c.x, dx, 2 * 192 * 5}, {"W_r", c.Wr, dWr, 30}};
        fd_check(gumbel ? "router, ST-Gumbel tau 0.7 + dpi" : "router, dpi (penalty + lb)", v, 2, router_loss, &c, 200);
        if (gumbel) { // hard mode: the choice is argmax(ℓ + g)
            a.relaxed = 0;
            router_forward(c.mask, c.pi, c.logits, c.pool, &a);
            int differ = 0;
            for (int i = 0; i < 18; i++) {
                int last = (i / 3) % 3 == 2, want = c.logits[2 * i] + c.noise[2 * i] >= c.logits[2 * i + 1] + c.noise[2 * i + 1];
                CHECK(last || c.mask[2 * i] == want, "Gumbel routing decision %d is not argmax(l + g)", i);
                differ += !last && want != (c.logits[2 * i] >= c.logits[2 * i + 1]);
            }
            CHECK(differ > 0, "the noise changed no decision (the test does not see it)");
            free(c.noise);
        }
        free(c.x); free(c.Wr); free(c.mask); free(c.pi); free(c.logits); free(c.pool); free(c.R);
        free(dx); free(dWr); free(dpool); free(dlog);
    }
}

// ---- whole layers and the whole model ----------------------------------------------------------------------
// A small model with every layer kind: D = 64, H = 2, dk = 8, dv = 16, Ha = 4, V = 90 padded to 96; the gated norm's
// gate activation g_gate_act (the sigmoid tests set it for their checks).
// H layers (§15): g_nha_m slots per head, window g_nha_w.
static int g_gate_act = GATE_SILU, g_nha_m = 4, g_nha_w = 3;
static Config small_config(const char *pattern, int rope) {
    Config c = {0};
    c.D = 64; c.H = 2; c.dk = 8; c.dv = 16; c.Ha = 4; c.F = 128; c.V = 90; c.Vp = 96; c.rope = rope; c.gate_act = g_gate_act;
    c.L = (int)strlen(pattern);
    strcpy(c.pattern, pattern);
    c.nha_m = strchr(pattern, 'H') ? g_nha_m : 0;
    for (int l = 0; l < c.L; l++) c.nha_w[l] = pattern[l] == 'H' ? g_nha_w : 0;
    return c;
}

typedef struct { Model *M; int l, B, T; real *x, *out, *R; LayerActs a; } LayerCtx;
static void layer_run(LayerCtx *c) {
    const Config *cf = &c->M->cfg;
    memcpy(c->a.xn, c->x, (size_t)c->B * c->T * cf->D * sizeof(real));
    const LayerParams *p = &c->M->p.layer[c->l];
    char k = cf->pattern[c->l];
    if (k == 'G') gdn_layer_forward(cf, &c->a, p, c->out, NULL, c->B, c->T);
    else if (k == 'A') attention_layer_forward(cf, &c->a, p, c->out, NULL, c->B, c->T);
    else if (k == 'H') nha_layer_forward(cf, &c->a, p, c->out, NULL, c->B, c->T, c->l);
    else {
        if (k == 'S') c->M->rb.sel[c->l] = select_gate(c->M, c->l);
        Routing r = {NULL, 1, NULL, &c->M->rb.sel[c->l], 0, c->M->router_relaxed, c->M->router_no_grad};
        if (k == 'S') select_layer_forward(cf, &c->a, p, c->out, NULL, c->B, c->T, &r);
        else natsl_layer_forward(cf, &c->a, p, c->out, NULL, c->B, c->T, &r);
    }
}
// A relaxed S layer's loss adds g_sel_dpen·y_A, a penalty term whose gradient select_layer_backward takes as dpen
// (7.3e); the hard one's does not depend on s_sel (its gate gradient is off).
static real g_sel_dpen = 0.37;
static double layer_loss(void *p) {
    LayerCtx *c = p;
    layer_run(c);
    double s = dot_r(c->out, c->R, (size_t)c->B * c->T * c->M->cfg.D);
    if (c->M->cfg.pattern[c->l] == 'S' && c->M->router_relaxed) s += record_terms(&g_sel_dpen, &(real){c->M->rb.sel[c->l].y_a}, 1);
    return s;
}
static real *g_decisions; // routing decisions of the unperturbed forward, for flip detection
static int layer_flipped(void *p) {
    LayerCtx *c = p;
    size_t n = (size_t)c->B * (c->T / CH) * c->M->cfg.H * 2;
    return c->M->cfg.pattern[c->l] == 'N' && memcmp(g_decisions, c->a.rmask, n * sizeof(real)) != 0;
}
// S layers (§7.3): s_sel = s_sel0; relaxed, under fixed Gumbel noise at τ = 0.7 and with the penalty term of layer_loss.
static void check_layer(const char *pattern, int rope, int relaxed, const char *what, double s_sel0) {
    Config cf = small_config(pattern, rope);
    Model M;
    model_build(&M, &cf);
    model_init(&M, 7);
    M.router_relaxed = relaxed;
    M.router_no_grad = !relaxed;
    if (pattern[0] == 'S') {
        M.p.layer[0].s_sel[0] = s_sel0;
        M.rb.sel_noise = relaxed; M.rb.sel_tau = 0.7; M.rb.sel_g[0][0] = 0.3f; M.rb.sel_g[0][1] = -0.8f;
    }
    int B = 2, T = 192;
    LayerCtx c = {&M, 0, B, T, vec((size_t)B * T * cf.D), vec((size_t)B * T * cf.D), vec((size_t)B * T * cf.D), {0}};
    real *abuf = vec(layer_acts_layout(&c.a, &cf, pattern[0], B, T, NULL, ACTS_ALL));
    layer_acts_layout(&c.a, &cf, pattern[0], B, T, abuf, ACTS_ALL);
    LayerActs d; // the mixer's gradient layout, as model_backward's
    size_t dn = layer_acts_layout(&d, &cf, pattern[0], B, T, NULL, ACTS_GRADS);
    real *dbuf = vec(dn), *dx = vec((size_t)B * T * cf.D);
    layer_acts_layout(&d, &cf, pattern[0], B, T, dbuf, ACTS_GRADS);
    fill_normal(c.x, (size_t)B * T * cf.D, 1); fill_normal(c.R, (size_t)B * T * cf.D, 1);
    // make the router's choices clear-cut (and mixed) so small perturbations rarely flip them
    if (pattern[0] == 'N') fill_normal(M.p.layer[0].wr, 2 * cf.H * cf.D, 0.5);
    layer_run(&c);
    size_t nmask = (size_t)B * (T / CH) * cf.H * 2;
    if (pattern[0] == 'N') { g_decisions = vec(nmask); memcpy(g_decisions, c.a.rmask, nmask * sizeof(real)); }
    memset(M.grads, 0, M.nparams * sizeof(real));
    if (pattern[0] == 'G') gdn_layer_backward(&cf, dx, c.R, &d, &M.g.layer[0], &c.a, &M.p.layer[0], B, T);
    else if (pattern[0] == 'A') attention_layer_backward(&cf, dx, c.R, &d, &M.g.layer[0], &c.a, &M.p.layer[0], B, T);
    else if (pattern[0] == 'H') nha_layer_backward(&cf, dx, c.R, &d, &M.g.layer[0], &c.a, &M.p.layer[0], B, T, 0);
    else { // the gate's gradient and the router's only in relaxed mode (router_no_grad)
        Routing r = {NULL, 1, NULL, &M.rb.sel[0], g_sel_dpen, M.router_relaxed, M.router_no_grad};
        if (pattern[0] == 'S') select_layer_backward(&cf, dx, c.R, &d, &M.g.layer[0], &c.a, &M.p.layer[0], B, T, &r);
        else natsl_layer_backward(&cf, dx, c.R, &d, &M.g.layer[0], &c.a, &M.p.layer[0], B, T, &r);
    }
    if (pattern[0] == 'S') { // the unchosen mixer's parameters get exactly zero gradient (hard), every one some (relaxed)
        const SelGate *g = &M.rb.sel[0];
        for (int i = 0; i < M.ntensors; i++) {
            const ParamTensor *t = &M.tensors[i];
            if (t->layer != 0 || t->slot == P_LN_MIX || t->slot == P_SSEL || t->slot >= P_LN_MLP) continue;
            int of_a = t->slot == P_WQKV_A || t->slot == P_WO_A, zero = 1;
            for (size_t j = 0; j < t->numel; j++) zero &= M.grads[t->offset + j] == 0;
            CHECK(relaxed ? !zero : zero == (of_a != g->a), "%s: gradient %s zero with the gate choosing %c", t->name,
                  zero ? "all" : "not", g->a ? 'A' : 'G');
        }
        printf("  gate: s_sel %.2f, y_A %.4f, chose %c, d s_sel %.6g\n", g->s, g->y_a, g->a ? 'A' : 'G', M.g.layer[0].s_sel[0]);
        CHECK(relaxed == (M.g.layer[0].s_sel[0] != 0), "d s_sel is %g", M.g.layer[0].s_sel[0]);
    }
    Var v[NSLOT + 1];
    int nv = 0, skipped = 0, tried = 0;
    v[nv++] = (Var){"x", c.x, dx, (size_t)B * T * cf.D};
    for (int i = 0; i < M.ntensors; i++)
        if (M.tensors[i].layer == 0 && M.tensors[i].slot != P_LN_MIX && M.tensors[i].slot != P_LN_MLP &&
            M.tensors[i].slot != P_WGU && M.tensors[i].slot != P_WDOWN)
            v[nv++] = (Var){M.tensors[i].name, M.params + M.tensors[i].offset, M.grads + M.tensors[i].offset, M.tensors[i].numel};
    double worst = 0;
    for (int k = 0; k < nv; k++) {
        double e = fd_check_var(&v[k], layer_loss, &c, 40, pattern[0] == 'N' && !relaxed ? layer_flipped : NULL, &skipped, &tried);
        worst = fmax(worst, e);
        if (v[k].x == M.p.layer[0].s_sel) printf("  %s: analytic %.10g, rel err %.2e\n", v[k].name, (double)v[k].dx[0], e);
    }
    printf("  %-28s max rel err %.2e over %d tensors, %d of %d coordinates skipped (decision flips)\n", what, worst, nv, skipped, tried);
    CHECK(skipped <= tried / 20, "too many decision flips (%d of %d)", skipped, tried);
    if (pattern[0] == 'N') {
        double f = 0;
        for (int b = 0; b < B; b++) for (int cc = 0; cc < T / CH - 1; cc++) for (int h = 0; h < cf.H; h++)
            f += c.a.rmask[((b * (T / CH) + cc) * cf.H + h) * 2];
        f /= B * (T / CH - 1) * cf.H;
        CHECK(relaxed || (f > 0 && f < 1), "the test routing is not mixed (softmax fraction %.2f)", f);
        free(g_decisions);
    }
    free(abuf); free(dbuf); free(dx); free(c.x); free(c.out); free(c.R);
    model_free(&M);
}
static void test_grad_gdn_layer(void) { check_layer("G", 0, 0, "G layer", 0); }
static void test_grad_attention_layer(void) { check_layer("A", 0, 0, "A layer (RoPE)", 0); }
static void test_grad_natsl_layer_hard(void) { check_layer("N", 0, 0, "N layer, hard routing", 0); }
static void test_grad_natsl_layer_rope(void) { check_layer("N", 1, 0, "N layer, hard, RoPE", 0); }
static void test_grad_natsl_layer_relaxed(void) { check_layer("N", 0, 1, "N layer, relaxed router", 0); }
// the sigmoid gate (-C sigmoid, §5.6 (5.6g)) in the G and N layers' gated norms (an S layer's G mixer is a G layer's)
static void test_grad_layers_sigmoid_gate(void) {
    g_gate_act = GATE_SIGMOID;
    check_layer("G", 0, 0, "G layer, sigmoid gate", 0);
    check_layer("N", 0, 0, "N layer, hard, sigmoid gate", 0);
    g_gate_act = GATE_SILU;
}
// §7.3: the S layer with its gate choosing A (s_sel < 0), choosing G (s_sel > 0), and relaxed at fixed noise with
// the penalty term (every parameter, s_sel included, against finite differences)

static void test_grad_select_layer_a(void) { check_layer("S", 0, 0, "S layer, A chosen", -0.5); }
static void test_grad_select_layer_g(void) { check_layer("S", 0, 0, "S layer, G chosen", 0.5); }
static void test_grad_select_layer_relaxed(void) { check_layer("S", 0, 1, "S layer, relaxed, tau 0.7 + pen", 0.2); }

typedef struct { Model *M; int *in, *tg, B, T; real *dec; char *hard; } ModelCtx;
// Σ losses, plus B·T·(L_pen + L_lb) in the form the backward differentiates (§7; zero when off): model_backward
// weights the auxiliary terms as the mean loss (by dloss_scale·B·T, here B·T).
static double model_loss(void *p) {
    ModelCtx *c = p;
    model_forward(c->M, c->in, c->tg, c->B, c->T);
    double s = record_terms(c->M->losses, NULL, (size_t)c->B * c->T);
    if (budget_aux_on(&c->M->rb) || c->M->rb.sel_lambda > 0) {
        real aux = (c->M->rb.pen_soft + c->M->rb.lb_soft) * c->B * c->T;
        s += record_terms(&aux, NULL, 1);
    }
    return s;
}
static size_t model_decisions(const Model *M, real *out, int B, int T) {
    size_t n = 0, per = (size_t)B * (T / CH) * M->cfg.H * 2;
    for (int l = 0; l < M->cfg.L; l++)
        if (M->cfg.pattern[l] == 'N') { if (out) memcpy(out + n, M->la[l].rmask, per * sizeof(real)); n += per; }
    return n;
}
static int model_flipped(void *p) {
    ModelCtx *c = p;
    size_t n = model_decisions(c->M, NULL, c->B, c->T);
    real *now = vec(n);
    model_decisions(c->M, now, c->B, c->T);
    int flip = memcmp(now, c->dec, n * sizeof(real)) != 0;
    free(now);
    return flip;
}
// relaxed mode with §7 terms: the hard choices s0 ≥ s1 (through f, constants of the gradient) must not change
static size_t model_hard_choices(const Model *M, char *out, int B, int T) {
    size_t n = 0, per = (size_t)B * (T / CH) * M->cfg.H;
    for (int l = 0; l < M->cfg.L; l++)
        if (M->cfg.pattern[l] == 'N')
            for (size_t i = 0; i < per; i++, n++) if (out) out[n] = M->la[l].rpi[2 * i] >= M->la[l].rpi[2 * i + 1];
    return n;
}
static int model_hard_flipped(void *p) {
    ModelCtx *c = p;
    size_t n = model_hard_choices(c->M, NULL, c->B, c->T);
    char *now = xcalloc(n, 1);
    model_hard_choices(c->M, now, c->B, c->T);
    int flip = memcmp(now, c->hard, n) != 0;
    free(now);
    return flip;
}
// rb: the §7 options (NULL = off); with rb->tau0 > 0 the forward passes use fixed Gumbel noise at τ = tau0.
// The §7 tests start their random draws from a fixed state, so that the point they check does not depend on
// which tests ran before (a full run and `./test_natsl grad_model_gumbel` check the same coordinates).
// S layers (§7.3) start at s_sel = −0.1 (the gate chooses A), then +0.1 (G), alternately; with rb their gates draw
// fixed noise (select_draw, at τ = tau0 when > 0).
static void check_model_opts(const char *pattern, int relaxed, const char *what, const RouterBudget *rb) {
    if (rb) g_rng = 20261123;
    Config cf = small_config(pattern, 0);
    Model M;
    model_build(&M, &cf);
    model_init(&M, 11);
    // A well-conditioned point: the loss is a sum over 384 tokens (~1e3), so evaluation noise is ~1e-13
    // and the step must be large (3e-4); with the 0.02 init the convs feed L2N inputs near its eps,
    // where such a step is too coarse. Larger conv and output-weight layers keep every op in its smooth range.
    for (int l = 0, nsel = 0; l < cf.L; l++) {
        LayerParams *p = &M.p.layer[l];
        if (cf.pattern[l] == 'N') { fill_normal(p->wr, 2 * cf.H * cf.D, 0.5); fill_normal(p->wow, 2 * cf.Ha * cfg_K(&cf), 0.3); }
        if (cf.pattern[l] != 'A' && cf.pattern[l] != 'H') fill_normal(p->conv, (2 * cfg_K(&cf) + cfg_Vt(&cf)) * NATSL_CONV, 0.3);
        if (cf.pattern[l] == 'S') p->s_sel[0] = (nsel++ % 2) ? 0.1 : -0.1;
    }
    g_fd_h = 3e-4;
    if (rb) { M.rb = *rb; M.rb.noise = rb->tau0 > 0; M.rb.tau = rb->tau0 > 0 ? rb->tau0 : 1; M.rb.rng = rng_seed(5); }
    M.router_relaxed = relaxed;
    M.router_no_grad = !relaxed;
    int B = 2, T = 192;
    model_alloc_acts(&M, B, T, 0);
    if (rb) select_draw(&M, 1);            // fixed noise for every evaluation: the S gates' (§7.3),
    if (M.rb.noise) gumbel_draw(&M, B, T, 1); // the routers' (§7.2)
    ModelCtx c = {&M, xcalloc(B * T, sizeof(int)), xcalloc(B * T, sizeof(int)), B, T, NULL, 0};
    for (int i = 0; i < B * T; i++) { c.in[i] = rng_u32(&g_rng) % cf.V; c.tg[i] = rng_u32(&g_rng) % cf.V; }
    memset(M.grads, 0, M.nparams * sizeof(real));
    model_forward(&M, c.in, c.tg, B, T);
    c.dec = vec(model_decisions(&M, NULL, B, T));
    model_decisions(&M, c.dec, B, T);
    model_backward(&M, c.in, c.tg, B, T, 1);
    c.hard = xcalloc(model_hard_choices(&M, NULL, B, T), 1);
    model_hard_choices(&M, c.hard, B, T);
    if (rb) printf("  softmax fraction %.3f, L_pen %.4f, L_lb %.4f\n", M.rb.frac, M.rb.pen, M.rb.lb);
    for (int l = 0; l < cf.L; l++)
        if (cf.pattern[l] == 'S') {
            const SelGate *g = &M.rb.sel[l];
            printf("  l%d gate: s_sel %.2f, y_A %.4f, chose %c, d s_sel %.6g\n", l, g->s, g->y_a, g->a ? 'A' : 'G', M.g.layer[l].s_sel[0]);
            CHECK(relaxed == (M.g.layer[l].s_sel[0] != 0), "l%d: d s_sel is %g", l, M.g.layer[l].s_sel[0]);
        }
    if (rb && rb->lambda > 0) CHECK(M.rb.pen > 0 && M.rb.dpi[0] > 0, "the penalty is not active at the test point");
    int skipped = 0, tried = 0;
    double worst = 0;
    for (int i = 0; i < M.ntensors; i++) {
        const ParamTensor *t = &M.tensors[i];
        Var v = {t->name, M.params + t->offset, M.grads + t->offset, t->numel};
        double e = fd_check_var(&v, model_loss, &c, 6, !relaxed ? model_flipped : rb ? model_hard_flipped : NULL, &skipped, &tried);
        worst = fmax(worst, e);
        if (t->slot == P_SSEL) printf("  %s: analytic %.10g, rel err %.2e\n", t->name, (double)M.grads[t->offset], e);
    }
    printf("  %-28s max rel err %.2e over %d tensors, %d of %d coordinates skipped (decision flips)\n", what, worst,
           M.ntensors, skipped, tried);
    CHECK(skipped <= tried / 20, "too many decision flips (%d of %d)", skipped, tried);
    g_fd_h = 1e-4;
    free(c.in); free(c.tg); free(c.dec); free(c.hard);
    model_free(&M);
}
static void test_grad_model_hard(void) { check_model_opts("GNAN", 0, "model GNAN, hard routing", NULL); }
static void test_grad_model_relaxed(void) { check_model_opts("GNAN", 1, "model GNAN, relaxed router", NULL); }
static void test_grad_model_sigmoid_gate(void) {
    g_gate_act = GATE_SIGMOID;
    check_model_opts("GNAN", 0, "model GNAN, sigmoid gate", NULL);
    g_gate_act = GATE_SILU;
}
// §7, whole model, relaxed router: the penalty (7.1c), its target form above f* (7.1d), the load-balancing loss
// (7.4a), and all of them under ST-Gumbel routing at fixed noise (7.2a). RouterBudget: λ, f*, α, τ (fixed).
static void test_grad_model_penalty(void) {
    RouterBudget rb = {.lambda = 0.5};
    check_model_opts("GNAN", 1, "model GNAN, penalty lambda", &rb);
}
static void test_grad_model_penalty_target(void) {
    RouterBudget rb = {.lambda = 0.5, .target = 0.1};
    check_model_opts("GNAN", 1, "model GNAN, penalty above f*", &rb);
}
static void test_grad_model_load_balance(void) {
    RouterBudget rb = {.alpha = 0.3};
    check_model_opts("GNAN", 1, "model GNAN, load balancing", &rb);
}
static void test_grad_model_gumbel(void) {
    RouterBudget rb = {.lambda = 0.5, .target = 0.1, .alpha = 0.3, .tau0 = 0.7};
    check_model_opts("GNAN", 1, "model GNAN, ST-Gumbel + all", &rb);
}

// §7.3, whole model SNAS: hard (gates held, one choosing A, one G; their gradient off), and relaxed at fixed noise
// (τ = 0.7, the routers' too) with the S penalty λ_S = 0.5 and the routers' penalty: ∂L/∂s_sel through (7.3a-e).
static void test_grad_model_select_hard(void) { check_model_opts("SNAS", 0, "model SNAS, hard gates", NULL); }
static void test_grad_model_select(void) {
    RouterBudget rb = {.lambda = 0.5, .sel_lambda = 0.5, .kappa = SEL_KAPPA, .tau0 = 0.7};
    check_model_opts("SNAS", 1, "model SNAS, ST-Gumbel + pen", &rb);
}

// ---- H: Native Hybrid Attention (§15) ------------------------------------------------------------------------------
// The layer's gradients (every parameter and x) at windows 0 (slots only), 3, 70 and ≥ T (full attention), m = 1 and 4,
// T = 192 (3 chunks: the backward replays the slots from chunk starts). Gates W_α drawn wide (std 0.5) so that α
// spreads over (0, 1).
static void check_nha_layer(int w, int m) {
    g_nha_w = w; g_nha_m = m;
    char what[64];
    snprintf(what, sizeof what, "H layer, w %d, m %d", w, m);
    check_layer("H", 0, 0, what, 0);
    g_nha_w = 3; g_nha_m = 4;
}
static void test_nha_grad_layer(void) {
    const int wm[][2] = {{0, 1}, {0, 4}, {3, 1}, {3, 4}, {70, 4}, {4096, 1}};
    for (int i = 0; i < 6; i++) check_nha_layer(wm[i][0], wm[i][1]);
}
static void test_nha_grad_model(void) {
    g_nha_w = 70;
    check_model_opts("GHAH", 0, "model GHAH, w 70, m 4", NULL);
    g_nha_w = 3;
}

// The op's oracle, from the definitions in double: query t's slots in closed form, K̃_j = Σ_{s ≤ t−w} (Π_{s<r≤t−w}
// α_r,j)(1 − α_s,j) k_s (the recurrence (15.1b) unrolled), then the softmax over slots (t ≥ w) and window (15.2a-c).
static void nha_oracle(double *out, const NhaArgs *a) {
    int B = a->B, T = a->T, Hh = a->heads, m = a->m, w = a->w, HD = NATSL_ATTN_HEAD;
    double *e = calloc(m + T, sizeof(double)), *Ks = calloc((size_t)m * HD, sizeof(double)), *Vs = calloc((size_t)m * HD, sizeof(double));
    for (int b = 0; b < B; b++) for (int h = 0; h < Hh; h++) for (int t = 0; t < T; t++) {
        size_t bt = (size_t)b * T + t;
        const real *q = a->q + bt * a->ldqkv + h * HD, *qr = a->qr + bt * a->ldr + h * HD;
        int n = 0, nslot = t >= w ? m : 0, lo = t - w + 1 > 0 ? t - w + 1 : 0;
        for (int j = 0; j < nslot; j++) {
            for (int d = 0; d < HD; d++) Ks[j * HD + d] = Vs[j * HD + d] = 0;
            for (int s = 0; s <= t - w; s++) {
                double wgt = 1 - exp(log(1 / (1 + exp(-(double)a->z[((size_t)b * T + s) * Hh * m + h * m + j]))) / NHA_TAU);
                for (int r = s + 1; r <= t - w; r++)
                    wgt *= exp(log(1 / (1 + exp(-(double)a->z[((size_t)b * T + r) * Hh * m + h * m + j]))) / NHA_TAU);
                for (int d = 0; d < HD; d++) {
                    Ks[j * HD + d] += wgt * a->k[((size_t)b * T + s) * a->ldqkv + h * HD + d];
                    Vs[j * HD + d] += wgt * a->v[((size_t)b * T + s) * a->ldqkv + h * HD + d];
                }
            }
            double sc = 0;
            for (int d = 0; d < HD; d++) sc += q[d] * Ks[j * HD + d];
            e[n++] = sc / 8;
        }
        for (int i = lo; i <= t; i++) {
            double sc = 0;
            for (int d = 0; d < HD; d++) sc += qr[d] * a->kr[((size_t)b * T + i) * a->ldr + h * HD + d];
            e[n++] = sc / 8;
        }
        double mx = -1e300, sum = 0;
        for (int i = 0; i < n; i++) mx = fmax(mx, e[i]);
        double *o = out + bt * Hh * HD + h * HD;
        for (int d = 0; d < HD; d++) o[d] = 0;
        for (int i = 0; i < n; i++) {
            double p = exp(e[i] - mx);
            sum += p;
            if (i < nslot) for (int d = 0; d < HD; d++) o[d] += p * Vs[i * HD + d];
            else for (int d = 0; d < HD; d++) o[d] += p * a->v[((size_t)b * T + lo + i - nslot) * a->ldqkv + h * HD + d];
        }
        for (int d = 0; d < HD; d++) o[d] /= sum;
    }
    free(e); free(Ks); free(Vs);
}
// nha_forward against the oracle: 2 heads, B = 2, T = 128, windows 0, 1, 5, 64, 65 and 200, m = 1 and 3
static void test_nha_matches_token_oracle(void) {
    int B = 2, T = 128, Hh = 2, HD = NATSL_ATTN_HEAD, D = Hh * HD;
    size_t BT = (size_t)B * T;
    real *qkv = vec(BT * 3 * D), *rot = vec(BT * 2 * D), *z = vec(BT * Hh * 3), *out = vec(BT * D), *lse = vec(BT * Hh);
    real *slots = vec((size_t)B * Hh * (T / CH) * 2 * 3 * HD);
    double *ref = calloc(BT * D, sizeof(double));
    fill_normal(qkv, BT * 3 * D, 1); fill_normal(rot, BT * 2 * D, 1); fill_normal(z, BT * Hh * 3, 2);
    const int ws[] = {0, 1, 5, 64, 65, 200};
    double worst = 0;
    for (int m = 1; m <= 3; m += 2)
        for (int i = 0; i < 6; i++) {
            NhaArgs a = {qkv, qkv + D, qkv + 2 * D, 3 * D, rot, rot + D, 2 * D, z, B, T, Hh, m, ws[i]};
            nha_forward(out, lse, slots, &a);
            nha_oracle(ref, &a);
            double e = 0;
            for (size_t j = 0; j < BT * D; j++) e = fmax(e, fabs(out[j] - ref[j]));
            CHECK(e < 1e-10, "w %d, m %d: max |nha_forward − oracle| = %.3g", ws[i], m, e);
            worst = fmax(worst, e);
        }
    printf("  max |nha_forward − oracle| %.3g over windows 0, 1, 5, 64, 65, 200 and m = 1, 3\n", worst);
    free(qkv); free(rot); free(z); free(out); free(lse); free(slots); free(ref);
}

// w ≥ T: the H layer is the A layer with the same W_qkv, W_o (no token leaves the window: no slots, (15.2c))
static void test_nha_full_window_is_attention(void) {
    g_nha_w = 256;
    Config ch = small_config("H", 0), ca = small_config("A", 0);
    g_nha_w = 3;
    ch.D = ca.D = 128;
    Model MH, MA;
    model_build(&MH, &ch); model_build(&MA, &ca);
    model_init(&MH, 3); model_init(&MA, 3);
    fill_normal(MA.p.layer[0].wqkv, 3 * 128 * 128, 0.2);
    memcpy(MH.p.layer[0].wqkv, MA.p.layer[0].wqkv, 3 * 128 * 128 * sizeof(real));
    memcpy(MH.p.layer[0].wo, MA.p.layer[0].wo, 128 * 128 * sizeof(real));
    int B = 2, T = 128;
    LayerCtx c[2] = {{&MH, 0, B, T, vec((size_t)B * T * 128), vec((size_t)B * T * 128), NULL, {0}},
                     {&MA, 0, B, T, vec((size_t)B * T * 128), vec((size_t)B * T * 128), NULL, {0}}};
    fill_normal(c[0].x, (size_t)B * T * 128, 1);
    memcpy(c[1].x, c[0].x, (size_t)B * T * 128 * sizeof(real));
    real *buf[2];
    for (int i = 0; i < 2; i++) {
        const Config *cf = &c[i].M->cfg;
        buf[i] = vec(layer_acts_layout(&c[i].a, cf, cf->pattern[0], B, T, NULL, ACTS_ALL));
        layer_acts_layout(&c[i].a, cf, cf->pattern[0], B, T, buf[i], ACTS_ALL);
        layer_run(&c[i]);
    }
    double e = 0, mx = 0;
    for (size_t j = 0; j < (size_t)B * T * 128; j++) { e = fmax(e, fabs(c[0].out[j] - c[1].out[j])); mx = fmax(mx, fabs(c[1].out[j])); }
    printf("  max |H(w = 256) − A| %.3g (outputs up to %.3g)\n", e, mx);
    CHECK(e < 1e-12 && mx > 1e-3, "H with w >= T differs from A by %.3g", e);
    for (int i = 0; i < 2; i++) { free(buf[i]); free(c[i].x); free(c[i].out); }
    model_free(&MH); model_free(&MA);
}

// A model with H layers learns the embedded characters: 30 steps of B = 4, T = 64 on tinyshakespeare_char
static void test_nha_model_trains(void) {
    char err[512];
    DataLoader d;
    int rc = dataloader_init(&d, "data/tinyshakespeare_char/train.bin", 4, 64, 66, err, sizeof err);
    CHECK(rc == 0, "train shard: %s", err);
    if (rc) return;
    g_nha_w = 16;
    Config c = small_config("HAH", 0);
    g_nha_w = 3;
    c.V = 66; c.Vp = 128;
    Model M;
    model_build(&M, &c);
    model_init(&M, 1);
    model_alloc_acts(&M, 4, 64, 0);
    model_alloc_moments(&M);
    double first = 0, last = 0;
    for (int t = 1; t <= 30; t++) {
        StepStats s = train_step(&M, &d, 1, 4, 64, 3e-3, 0.1, t, NULL);
        if (t <= 3) first += s.loss / 3;
        if (t > 27) last += s.loss / 3;
    }
    printf("  HAH (w 16, m 4): loss %.3f (steps 1-3) -> %.3f (steps 28-30)\n", first, last);
    CHECK(last < first - 0.5, "the loss did not decrease: %.3f -> %.3f", first, last);
    model_free(&M);
    dataloader_free(&d);
}


// §7.3 freezing: the model with every S layer frozen to its gate's choice (-f) computes what the S model computes
// without noise (evaluation), bit for bit: the same loss and logits; its S tensors are gone or renamed.
static void test_freeze_selection(void) {
    Config cf = small_config("SNSA", 0);
    Model M, F;
    model_build(&M, &cf);
    model_init(&M, 3);
    M.p.layer[0].s_sel[0] = -0.2; M.p.layer[2].s_sel[0] = 0.3; // A, then G
    for (size_t i = 0; i < M.nparams; i++) M.params[i] = (float)M.params[i]; // freezing copies float32, as a checkpoint
    int B = 2, T = 128;
    int *in = xcalloc(B * T, sizeof(int)), *tg = xcalloc(B * T, sizeof(int));
    for (int i = 0; i < B * T; i++) { in[i] = rng_u32(&g_rng) % cf.V; tg[i] = rng_u32(&g_rng) % cf.V; }
    model_alloc_acts(&M, B, T, 0);
    model_forward(&M, in, tg, B, T);
    freeze_selection(&F, &M);
    model_alloc_acts(&F, B, T, 0);
    model_forward(&F, in, tg, B, T);
    size_t nz = (size_t)B * T * cf.Vp;
    printf("  %s froze to %s: %zu -> %zu parameters, loss %.10f / %.10f\n", cf.pattern, F.cfg.pattern, M.nparams, F.nparams,
           (double)M.mean_loss, (double)F.mean_loss);
    CHECK(!strcmp(F.cfg.pattern, "ANGA"), "frozen pattern %s, not ANGA", F.cfg.pattern);
    CHECK(M.mean_loss == F.mean_loss && !memcmp(M.logits, F.logits, nz * sizeof(real)), "the frozen model's forward differs");
    CHECK(!memcmp(F.p.layer[0].wqkv, M.p.layer[0].wqkv_a, 3 * (size_t)cf.D * cf.D * sizeof(real)) &&
          !memcmp(F.p.layer[2].wqkv, M.p.layer[2].wqkv, (2 * (size_t)cfg_K(&cf) + cfg_Vt(&cf)) * cf.D * sizeof(real)),
          "the frozen layers do not hold the chosen mixers' weights");
    model_free(&M); model_free(&F);
    free(in); free(tg);
}

// -k 1 and -k 2 (recompute): keeping only each layer's input (and, at level 1, its GDN/softmax op outputs) and
// rerunning the layer in the backward pass gives the same loss, routing decisions (read after the forward pass,
// as logging does) and gradients as -k 0, bit for bit, over two accumulated micro-batches, in less memory. -k 0
// itself keeps one copy of the SHARED fields for all layers (block_rebuild refills what the backward reads; the
// gradient checks of whole models hold its values).
static void test_recompute_identical(void) {
    Config cf = small_config("GNASN", 0); // every layer kind, S (§7.3) with its gate gradient
    Model M[3];
    int B = 2, T = 192;
    int *in = xcalloc(B * T, sizeof(int)), *tg = xcalloc(B * T, sizeof(int));
    real *dec[3], loss[3][2];
    size_t nd = 0, size[3];
    uint64_t rng0 = g_rng;
    for (int k = 0; k < 3; k++) {
        model_build(&M[k], &cf);
        model_init(&M[k], 5);
        g_rng = rng0; // the same router weights in all three
        for (int l = 0; l < cf.L; l++)
            if (cf.pattern[l] == 'N') fill_normal(M[k].p.layer[l].wr, 2 * cf.H * cf.D, 0.5); // mixed routing
        model_alloc_acts(&M[k], B, T, k);
        size[k] = M[k].acts_size;
        uint64_t r = rng_seed(7);
        for (int micro = 0; micro < 2; micro++) {
            for (int i = 0; i < B * T; i++) { in[i] = rng_u32(&r) % cf.V; tg[i] = rng_u32(&r) % cf.V; }
            model_forward(&M[k], in, tg, B, T);
            loss[k][micro] = M[k].mean_loss;
            if (micro == 0) { nd = model_decisions(&M[k], NULL, B, T); dec[k] = vec(nd); model_decisions(&M[k], dec[k], B, T); }
            model_backward(&M[k], in, tg, B, T, (real)1 / (B * T));
        }
    }
    int soft = 0;
    for (size_t i = 0; i < nd; i += 2) soft += dec[0][i] > 0;
    printf("  losses %.6f %.6f; %d of %zu routed chunk-heads softmax; activations -k 0/1/2: %zu / %zu / %zu values\n",
           (double)loss[0][0], (double)loss[0][1], soft, nd / 2, size[0], size[1], size[2]);
    CHECK(soft > 0 && soft < (int)(nd / 2), "the routing is not mixed (%d of %zu softmax)", soft, nd / 2);
    for (int k = 1; k < 3; k++) {
        CHECK(!memcmp(loss[0], loss[k], sizeof(loss[0])), "-k %d changes the loss", k);
        CHECK(!memcmp(dec[0], dec[k], nd * sizeof(real)), "-k %d changes the routing decisions read after the forward", k);
        CHECK(!memcmp(M[0].grads, M[k].grads, M[0].nparams * sizeof(real)), "-k %d changes the gradients", k);
    }
    CHECK(size[2] < size[1] && size[1] < size[0], "recompute does not save memory (%zu, %zu, %zu values)", size[0], size[1], size[2]);
    const LayerActs *g = &M[0].la[0], *n1 = &M[0].la[1], *s = &M[0].la[3], *n2 = &M[0].la[4]; // G N A S N
    CHECK(n1->xn == n2->xn && n1->xn2 != n2->xn2 && n1->y != n2->y && n1->hmid == n2->hmid && n1->gate != n2->gate &&
          n1->v == n2->v && n1->qk != n2->qk && n1->proj != n2->proj && n1->gu != n2->gu && n1->r != n2->r,
          "-k 0: the N layers do not share exactly the SHARED fields");
    CHECK(g->qk == s->qk && g->xn == s->xn && g->hmid == s->hmid && g->gate != s->gate && g->v == s->v && g->proj != s->proj,
          "-k 0: the G and S layers do not share exactly the SHARED fields (their Q, K among them)");
    for (int k = 0; k < 3; k++) { free(dec[k]); model_free(&M[k]); }
    free(in); free(tg);
}

// ---- decoding with the cache (doc/model.md §14) -----------------------------------------------------------------
// The largest difference between what two decoders' caches hold for their sequences now (both at the same positions,
// as the int mismatches count): each G and N layer's committed state and conv inputs, an N layer's decisions, kept
// counts, kept chunks' keys and values and the current chunk's keys and values so far, an A layer's keys and values;
// the latest logits. (The current chunk's run, its Σg and the router's sum are left out: decoder_step starts each
// chunk afresh, so a cache at a chunk's first token holds none.)
static double cache_diff(const Decoder *x, const Decoder *y, int *mismatches) {
    const Config *c = &x->M->cfg;
    int B = x->B, D = c->D, K = cfg_K(c), Vt = cfg_Vt(c), H = c->H, W = 2 * K + Vt, dk = c->dk, dv = c->dv;
    size_t KV = (size_t)dk * dv;
    double worst = 0;
#define DIFF(p, q, n) do { for (size_t e_ = 0; e_ < (size_t)(n); e_++) worst = fmax(worst, fabs((p)[e_] - (q)[e_])); } while (0)
    for (int b = 0; b < B; b++) {
        int pos = x->pos[b], tau = pos % CH;
        *mismatches += pos != y->pos[b];
        DIFF(x->logits + (size_t)b * c->Vp, y->logits + (size_t)b * c->Vp, c->V);
        for (int l = 0; l < c->L; l++) {
            const DecLayer *a = &x->dl[l], *e = &y->dl[l];
            if (x->kind[l] == 'A') {
                DIFF(a->ck + (size_t)b * x->Tmax * D, e->ck + (size_t)b * y->Tmax * D, (size_t)pos * D);
                DIFF(a->cv + (size_t)b * x->Tmax * D, e->cv + (size_t)b * y->Tmax * D, (size_t)pos * D);
                continue;
            }
            if (x->kind[l] == 'H') { // the slots and the window's ring (§15)
                size_t HM = (size_t)cfg_attn_heads(c) * c->nha_m, ring = nha_ring(c, l, x->Tmax);
                DIFF(a->hs + (size_t)b * HM * 2 * NATSL_ATTN_HEAD, e->hs + (size_t)b * HM * 2 * NATSL_ATTN_HEAD,
                     HM * 2 * NATSL_ATTN_HEAD);
                DIFF(a->ck + (size_t)b * ring * D, e->ck + (size_t)b * ring * D, ring * D);
                DIFF(a->cv + (size_t)b * ring * D, e->cv + (size_t)b * ring * D, ring * D);
                DIFF(a->hk + (size_t)b * ring * D, e->hk + (size_t)b * ring * D, ring * D);
                DIFF(a->hz + (size_t)b * ring * HM, e->hz + (size_t)b * ring * HM, ring * HM);
                continue;
            }
            DIFF(a->S + (size_t)b * H * KV, e->S + (size_t)b * H * KV, H * KV);
            DIFF(a->tail + (size_t)b * NATSL_CONV * W, e->tail + (size_t)b * NATSL_CONV * W, 3 * W);
            if (x->kind[l] != 'N') continue;
            DIFF(a->ck + (size_t)b * CH * K, e->ck + (size_t)b * CH * K, (size_t)tau * K);
            DIFF(a->cv + (size_t)b * CH * Vt, e->cv + (size_t)b * CH * Vt, (size_t)tau * Vt);
            for (int h = 0; h < H; h++) {
                size_t at = ((size_t)l * B + b) * H + h, slot = ((size_t)b * H + h) * x->Ncmax * CH;
                *mismatches += x->nkept[at] != y->nkept[at];
                int nk = x->nkept[at] < y->nkept[at] ? x->nkept[at] : y->nkept[at];
                DIFF(a->kk + slot * dk, e->kk + slot * dk, (size_t)nk * CH * dk);
                DIFF(a->kv + slot * dv, e->kv + slot * dv, (size_t)nk * CH * dv);
                for (int ch = 0; ch < x->Ncmax; ch++)
                    *mismatches += x->route[(((size_t)l * B + b) * x->Ncmax + ch) * H + h] !=
                                   y->route[(((size_t)l * B + b) * y->Ncmax + ch) * H + h];
            }
        }
    }
#undef DIFF
    return worst;
}

// B sequences of T tokens, teacher-forced: sequence b's first plen[b] tokens go through decoder_prefill, the rest
// through decoder_step, the sequences advancing together (each at its own position); beside it a second decoder
// whose prefill is decoder_prefill_tokens (token by token: the oracle of the chunked prefill), fed the same tokens.
// Checks: the two caches hold the same after the prefill and after every step, and give the same logits, to 1e-10
// (cache_diff), with the same decisions, kept counts and positions. Against model_forward
// over the same tokens: the logits at every decoded position (and after the prompt's last token) to 1e-10, the
// router's decision for every completed chunk (the forward's last chunk is forced, §5.2f: not compared), and that
// each N layer keeps exactly the keys of its softmax-routed chunks (those of the forward's ka), kv[l] = kept chunks ×
// 64 × (d_k + d_v) reals; an A layer all T tokens' K and V. Returns the fraction of routed chunk-heads sent to
// softmax (-1: no N layer).
static double cache_check(Model *M, const int *in, int B, int T, const int *plen, const char *what) {
    const Config *c = &M->cfg;
    int Vp = c->Vp, H = c->H, Nc = T / CH, K = cfg_K(c), dk = c->dk, dv = c->dv;
    model_forward(M, in, NULL, B, T);
    Decoder d, o;
    decoder_init(&d, M, B, T);
    decoder_init(&o, M, B, T);
    const int **pr = xcalloc(B, sizeof(int *));
    int *tok = xcalloc(B, sizeof(int)), compared = 0, mismatches = 0;
    for (int b = 0; b < B; b++) pr[b] = in + (size_t)b * T;
    decoder_prefill(&d, pr, plen);
    decoder_prefill_tokens(&o, pr, plen);
    double worst = 0, prefill_diff = cache_diff(&d, &o, &mismatches), oracle_diff = prefill_diff;
    for (int first = 1;; first = 0) {
        for (int b = 0; b < B; b++) {
            if (first ? plen[b] == 0 : tok[b] < 0) continue;
            const real *full = M->logits + ((size_t)b * T + d.pos[b] - 1) * Vp, *dec = d.logits + (size_t)b * Vp;
            for (int i = 0; i < c->V; i++) worst = fmax(worst, fabs(full[i] - dec[i]));
            compared++;
        }
        int any = 0;
        for (int b = 0; b < B; b++) { tok[b] = d.pos[b] < T ? in[(size_t)b * T + d.pos[b]] : -1; any |= tok[b] >= 0; }
        if (!any) break;
        decoder_step(&d, tok);
        decoder_step(&o, tok);
        oracle_diff = fmax(oracle_diff, cache_diff(&d, &o, &mismatches));
    }
    int routed = 0, soft = 0, route_bad = 0, kept_bad = 0;
    DecoderStats st = decoder_stats(&d);
    for (int l = 0; l < c->L; l++) {
        const DecLayer *L = &d.dl[l];
        if (d.kind[l] == 'A') {
            CHECK(st.kv[l] == (double)B * T * 2 * c->D * sizeof(real), "%s: layer %d (A) holds %.0f bytes of K/V", what, l, st.kv[l]);
            continue;
        }
        if (d.kind[l] == 'H') { // the window's last min(w, T) tokens: k, RoPE'd k, v and gate logits (§15)
            int n = c->nha_w[l] < T ? c->nha_w[l] : T;
            double want = (double)B * n * (3 * c->D + cfg_attn_heads(c) * c->nha_m) * sizeof(real);
            CHECK(st.kv[l] == want, "%s: layer %d (H) holds %.0f bytes of its window, not %.0f", what, l, st.kv[l], want);
            continue;
        }
        if (d.kind[l] != 'N') { CHECK(st.kv[l] == 0, "%s: layer %d (G) holds keys", what, l); continue; }
        double kept = 0;
        for (int b = 0; b < B; b++)
            for (int n = 0; n < H; n++) {
                int nk = 0;
                for (int ch = 0; ch < Nc; ch++) {
                    int dec = d.route[(((size_t)l * B + b) * d.Ncmax + ch) * H + n];
                    route_bad += dec < 0;
                    if (dec != 1) continue;
                    if (ch < Nc - 1) // the kept keys are the forward's ka of this chunk, in chunk order
                        for (int t = 0; t < CH; t++)
                            for (int i = 0; i < dk; i++)
                                kept_bad += fabs(L->kk[((((size_t)b * H + n) * d.Ncmax + nk) * CH + t) * dk + i] -
                                                 M->la[l].ka[((size_t)b * T + ch * CH + t) * K + n * dk + i]) > 1e-12;
                    nk++;
                }
                for (int ch = 0; ch < Nc - 1; ch++) {
                    int dec = d.route[(((size_t)l * B + b) * d.Ncmax + ch) * H + n];
                    int fwd = M->la[l].rmask[(((size_t)b * Nc + ch) * H + n) * 2] == 1;
                    route_bad += dec != fwd;
                    routed++; soft += fwd;
                }
                kept_bad += nk != d.nkept[((size_t)l * B + b) * H + n];
                kept += (double)nk * CH * (dk + dv) * sizeof(real);
            }
        CHECK(st.kv[l] == kept, "%s: layer %d holds %.0f bytes of kept K/V, its softmax chunks %.0f", what, l, st.kv[l], kept);
    }
    printf("  %s: B=%d T=%d prompt", what, B, T);
    for (int b = 0; b < B; b++) printf(" %d", plen[b]);
    printf(": %d positions, max |logit diff| %.2e; %d of %d routed chunk-heads softmax; cache %.0f bytes (Transformer %.0f); "
           "chunked prefill vs token by token: cache %.2e after the prompt, %.2e after every step\n",
           compared, worst, soft, routed, st.held, st.transformer, prefill_diff, oracle_diff);
    int expect = 0;
    for (int b = 0; b < B; b++) expect += T - plen[b] + (plen[b] > 0);
    CHECK(compared == expect, "%s: %d positions compared, %d expected", what, compared, expect);
    CHECK(worst < 1e-10, "%s: cached logits differ from the forward's by %.3e", what, worst);
    CHECK(route_bad == 0, "%s: %d routing decisions differ from the forward's (or are missing)", what, route_bad);
    CHECK(kept_bad == 0, "%s: %d kept keys or counts differ from the softmax-routed chunks'", what, kept_bad);
    CHECK(oracle_diff < 1e-10, "%s: the chunked prefill's cache or logits differ from the token-by-token prefill's by %.3e",
          what, oracle_diff);
    CHECK(mismatches == 0, "%s: %d positions, decisions or kept counts differ between the chunked and the token-by-token "
          "prefill", what, mismatches);
    decoder_free(&d);
    decoder_free(&o);
    free(pr); free(tok);
    return routed ? (double)soft / routed : -1;
}
// cache_check of a batch with the prefill's forward passes at most `pass` tokens long (0: the default budget)
static double cache_check_passes(Model *M, const int *in, int B, int T, const int *plen, int pass, const char *what) {
    const int budget = g_prefill_tokens;
    char label[160];
    if (pass) g_prefill_tokens = pass;
    if (pass) snprintf(label, sizeof(label), "%s, passes of %d", what, pass);
    else snprintf(label, sizeof(label), "%s", what);
    const double f = cache_check(M, in, B, T, plen, label);
    g_prefill_tokens = budget;
    return f;
}
// A model of the pattern with router weights that mix the routing (as test_recompute_identical), random tokens; every
// prompt length of plens in turn, one sequence of T = 256 tokens (4 chunks; the activations hold 384). s_sel: the S
// layers' gate values; frozen: the pattern they decode as.
static void cache_check_pattern(const char *pattern, int rope, const double *s_sel, const char *frozen) {
    static const int plens[] = {0, 1, 63, 64, 65, 200};
    g_rng = 20261128; // the same model and tokens whichever tests ran before
    Config cf = small_config(pattern, rope);
    Model M;
    model_build(&M, &cf);
    model_init(&M, 11);
    for (int l = 0; l < cf.L; l++) {
        if (cf.pattern[l] == 'N') fill_normal(M.p.layer[l].wr, 2 * cf.H * cf.D, 0.5);
        if (cf.pattern[l] == 'S') M.p.layer[l].s_sel[0] = *s_sel++;
    }
    if (frozen) {
        Decoder d;
        decoder_init(&d, &M, 1, 64);
        CHECK(!strcmp(d.kind, frozen), "%s decodes as %s, not %s", pattern, d.kind, frozen);
        decoder_free(&d);
    }
    int T = 256, *in = xcalloc(T, sizeof(int));
    for (int i = 0; i < T; i++) in[i] = rng_u32(&g_rng) % cf.V;
    model_alloc_acts(&M, 1, T + 2 * CH, 0); // the forward on fewer tokens than its activations hold
    char what[64];
    double fmin = 1, fmax = 0;
    for (size_t i = 0; i < sizeof(plens) / sizeof(plens[0]); i++) {
        snprintf(what, sizeof(what), "%s%s", pattern, rope ? " (RoPE)" : "");
        double f = cache_check(&M, in, 1, T, &plens[i], what);
        fmin = fmin < f ? fmin : f; fmax = fmax > f ? fmax : f;
    }
    if (strchr(pattern, 'N')) CHECK(fmin > 0 && fmax < 1, "%s: the routing is not mixed (softmax fraction %.2f)", pattern, fmin);
    model_free(&M);
    free(in);
}
static void test_cache_gdn(void) { cache_check_pattern("G", 0, NULL, NULL); }
static void test_cache_attention(void) { cache_check_pattern("A", 0, NULL, NULL); }
static void test_cache_natsl(void) { cache_check_pattern("N", 0, NULL, NULL); }
static void test_cache_natsl_rope(void) { cache_check_pattern("N", 1, NULL, NULL); }
static void test_cache_mixed(void) { cache_check_pattern("GNAN", 0, NULL, NULL); }
// H layers (§15) at windows 0 (slots only), 5, 64, 100 and 300 (≥ T: no slots), m = 4 (the prompts' whole chunks, 0,
// 64 and 192 tokens, shorter and longer than the window); and among the other kinds
static void test_cache_nha(void) {
    const int ws[] = {0, 5, 64, 100, 300};
    for (int i = 0; i < 5; i++) {
        g_nha_w = ws[i];
        printf("  w %d:\n", ws[i]);
        cache_check_pattern("H", 0, NULL, NULL);
    }
    g_nha_w = 3;
}
// and three sequences together in HGHN with windows 100 and 0: prompts of 200, 64 and 0 tokens; of 130, 129 and 320,
// also in prefill passes of at most 128 tokens (each prompt its own pass)
static void test_cache_nha_mixed(void) {
    g_nha_w = 64;
    cache_check_pattern("GHAN", 0, NULL, NULL);
    g_nha_w = 3;
    g_rng = 20261131;
    Config cf = small_config("HGHN", 0);
    cf.nha_w[0] = 100;
    cf.nha_w[2] = 0;
    Model M;
    model_build(&M, &cf);
    model_init(&M, 14);
    fill_normal(M.p.layer[3].wr, 2 * cf.H * cf.D, 0.5);
    int B = 3, T = 320, plen[3][3] = {{200, 64, 0}, {130, 129, 320}, {130, 129, 320}};
    int *in = xcalloc((size_t)B * T, sizeof(int));
    for (int i = 0; i < B * T; i++) in[i] = rng_u32(&g_rng) % cf.V;
    model_alloc_acts(&M, B, T, 0);
    for (int k = 0; k < 3; k++) cache_check_passes(&M, in, B, T, plen[k], k == 2 ? 128 : 0, "HGHN (w 100, 0) batched");
    model_free(&M);
    free(in);
}
// S layers decode as the mixer their noise-free gate chooses (§7.3): the first one A, the second G
static void test_cache_select(void) { cache_check_pattern("SNS", 0, (const double[]){-0.3, 0.4}, "ANG"); }
// Three sequences of different prompt lengths decoded together, each with its own position and routing; and the
// cache's bytes: fixed state, the A layer's tokens, the N layers' kept chunks. The prefill's forward passes: one a
// length of whole chunks (1 130 63; 200 64 0), two prompts with as many whole chunks in one pass and the whole
// sequence in another (130 129 320), and the same with passes of at most 128 tokens (each prompt its own pass).
static void test_cache_batched(void) {
    g_rng = 20261129;
    Config cf = small_config("GNAN", 0);
    Model M;
    model_build(&M, &cf);
    model_init(&M, 12);
    for (int l = 0; l < cf.L; l++) if (cf.pattern[l] == 'N') fill_normal(M.p.layer[l].wr, 2 * cf.H * cf.D, 0.5);
    int B = 3, T = 320, plen[4][3] = {{1, 130, 63}, {200, 64, 0}, {130, 129, 320}, {130, 129, 320}};
    int *in = xcalloc((size_t)B * T, sizeof(int));
    for (int i = 0; i < B * T; i++) in[i] = rng_u32(&g_rng) % cf.V;
    model_alloc_acts(&M, B, T, 0);
    for (int k = 0; k < 4; k++) {
        double f = cache_check_passes(&M, in, B, T, plen[k], k == 3 ? 128 : 0, "GNAN batched");
        CHECK(f > 0 && f < 1, "the routing is not mixed (softmax fraction %.2f)", f);
    }
    model_free(&M);
    free(in);
}

// The same in the CPU's bf16 mode (-p bf16: what train_natsl_cu -p bf16 stores), where each chunk runs from its start
// state rounded to bf16 while the committed state keeps its full precision (5.4h): the chunked prefill must leave the
// state decoder_step carries, not the rounded one the forward stored. (GNAN without RoPE: the CPU's decoder equals its
// forward there in bf16 too, doc/model.md §14.6.)
static void test_cache_prefill_bf16(void) {
    g_rng = 20261130;
    Config cf = small_config("GNAN", 0);
    Model M;
    model_build(&M, &cf);
    model_init(&M, 13);
    for (int l = 0; l < cf.L; l++) if (cf.pattern[l] == 'N') fill_normal(M.p.layer[l].wr, 2 * cf.H * cf.D, 0.5);
    int B = 3, T = 320, plen[3] = {200, 64, 130};
    int *in = xcalloc((size_t)B * T, sizeof(int));
    for (int i = 0; i < B * T; i++) in[i] = rng_u32(&g_rng) % cf.V;
    model_alloc_acts(&M, B, T, 0);
    g_bf16 = 1;
    double f = cache_check(&M, in, B, T, plen, "GNAN bf16");
    g_bf16 = 0;
    CHECK(f > 0 && f < 1, "the routing is not mixed (softmax fraction %.2f)", f);
    model_free(&M);
    free(in);
}

// ---- parameter counts (§10) ------------------------------------------------------------------------------
static size_t mixer_params(const Config *c, char kind) {
    size_t n = 0, r, k;
    for (int s = 0; s < NSLOT; s++) {
        if (s == P_LN_MIX || s == P_LN_MLP || s == P_WGU || s == P_WDOWN) continue;
        slot_shape(c, kind, s, &r, &k);
        n += r * k;
    }
    return n;
}
// built with -ffast-math: non-finite gradient norms must still be recognized (the step is then skipped)
static void test_nonfinite_detection(void) {
    volatile double zero = 0, big = 1e308;
    CHECK(is_finite(1.5) && is_finite(-1e300) && is_finite(0), "finite values rejected");
    CHECK(!is_finite(big * 10) && !is_finite(-big * 10) && !is_finite(zero / zero), "inf or NaN taken for finite");
}
static void test_param_counts(void) {
    struct { const char *preset; int vocab; size_t gdn, nats, total; } want[] = {
        {"tiny", 0, 100452, 101780, 14069872},
        {"340m", 0, 6316300, 6347148, 417559804},
        {"760m", 0, 14193036, 14252940, 849374844},
        {"340m", 32000, 6316300, 6347148, 380073212},
        {"760m", 32000, 14193036, 14252940, 793144956},
        {"tiny", 66, 100452, 101780, 1224816}, // the main job's characters: Vp = 128
        {"small", 0, 1582342, 1590150, 67290264},
        {"small", 16, 1582342, 1590150, 15910040}, // a recall task's vocabulary: Vp = 128
    };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        Config c;
        CHECK(config_from_preset(&c, want[i].preset, want[i].vocab ? want[i].vocab : GPT2_VOCAB) == 0, "preset %s", want[i].preset);
        ParamTensor t[NATSL_MAX_TENSORS];
        size_t total;
        param_tensors(&c, t, &total);
        CHECK(total == want[i].total, "%s (V=%d): %zu parameters, §10 says %zu", want[i].preset, c.Vp, total, want[i].total);
        CHECK(mixer_params(&c, 'G') == want[i].gdn, "%s GDN mixer %zu", want[i].preset, mixer_params(&c, 'G'));
        CHECK(mixer_params(&c, 'N') == want[i].nats, "%s NAtS-L mixer %zu", want[i].preset, mixer_params(&c, 'N'));
        CHECK(mixer_params(&c, 'S') == want[i].gdn + 4 * (size_t)c.D * c.D + 1, "%s S mixer %zu (10.1f)", want[i].preset,
              mixer_params(&c, 'S'));
    }
    Config c;
    config_from_preset(&c, "340m", GPT2_VOCAB);
    CHECK(!strcmp(c.pattern, "GGGNGGGNGGGNGGGNGGGNN"), "340m hybrid pattern %s", c.pattern);
    CHECK(c.F == 2816 && cfg_K(&c) == 768 && cfg_Vt(&c) == 1536 && cfg_dka(&c) == 64 && cfg_dva(&c) == 128, "340m sizes");
    Config sm;
    config_from_preset(&sm, "small", 16);
    CHECK(!strcmp(sm.pattern, "GGGN"), "small hybrid pattern %s", sm.pattern);
    CHECK(sm.F == 1536 && cfg_K(&sm) == 384 && cfg_Vt(&sm) == 768 && cfg_dka(&sm) == 64 && cfg_dva(&sm) == 128, "small sizes");
    char err[256];
    CHECK(config_set_pattern(&c, "gdn-hybrid", err, sizeof(err)) == 0 && !strcmp(c.pattern, "GGGAGGGAGGGAGGGAGGGAG"), "gdn-hybrid %s", c.pattern);
    CHECK(config_set_pattern(&c, "natsl", err, sizeof(err)) == 0 && c.rope == 1, "pure natsl turns RoPE on");
    CHECK(config_set_pattern(&c, "GAX", err, sizeof(err)) == -1 && strstr(err, "'X'"), "bad pattern accepted: %s", err);
    CHECK(config_set_pattern(&c, "GAN", err, sizeof(err)) == 0 && c.L == 3, "literal pattern");
    // W_qkv, W_g, W_ab lie one after another in every G, N and S layer (gdn_inputs_backward's one product reads them so)
    CHECK(config_set_pattern(&c, "GNSA", err, sizeof(err)) == 0, "%s", err);
    ParamTensor t[NATSL_MAX_TENSORS];
    size_t total;
    int nt = param_tensors(&c, t, &total);
    for (int l = 0; l < 3; l++) {
        size_t at[NSLOT] = {0};
        for (int i = 0; i < nt; i++) if (t[i].layer == l) at[t[i].slot] = t[i].offset;
        CHECK(at[P_WG] == at[P_WQKV] + (size_t)(2 * cfg_K(&c) + cfg_Vt(&c)) * c.D && at[P_WAB] == at[P_WG] + (size_t)cfg_Vt(&c) * c.D,
              "layer %d (%c): W_qkv, W_g, W_ab not one after another", l, c.pattern[l]);
    }
}
// The GPU's bf16-mode activation layout (ACTS_BF16, common/layout.h): the fields stored in the matmul precision take
// half the room, so the planes of qk, qk_hat and qka start half as many reals apart, and the last plane of each ends
// inside its field (before the next field starts); the fp32 layout keeps whole planes. Checked for every layer kind,
// and for the gradient layout's qk (half in the G and S layers only).
static void test_acts_layout_bf16(void) {
    Config c;
    config_from_preset(&c, "tiny", 66);
    const int B = 2, T = 128;
    const size_t BT = (size_t)B * T, K = cfg_K(&c), Vt = cfg_Vt(&c), D = c.D;
    for (const char *k = "GNAS"; *k; k++)
        for (int half = 0; half <= 1; half++) {
            const int part = ACTS_ALL | (half ? ACTS_BF16 : 0);
            LayerActs a;
            size_t n = layer_acts_layout(&a, &c, *k, B, T, NULL, part);
            real *buf = vec(n);
            layer_acts_layout(&a, &c, *k, B, T, buf, part);
            const size_t plane = half ? BT * K / 2 : BT * K, vplane = half ? BT * Vt / 2 : BT * Vt;
            if (*k != 'A') {
                CHECK(a.q == a.qk && a.k - a.q == (ptrdiff_t)plane && a.k + plane <= a.v && a.v + vplane <= a.gate,
                      "%c layer (%s): q, k planes of qk or v misplaced", *k, half ? "bf16" : "fp32");
                CHECK(a.k_hat - a.q_hat == (ptrdiff_t)plane && a.k_hat + plane <= a.qk_rho, "%c layer (%s): q̂, k̂ planes misplaced",
                      *k, half ? "bf16" : "fp32");
            } else {
                const size_t col = half ? D / 2 : D;
                CHECK(a.k - a.q == (ptrdiff_t)col && a.v - a.q == (ptrdiff_t)(2 * col), "A layer (%s): q, k, v blocks misplaced",
                      half ? "bf16" : "fp32");
            }
            if (*k == 'N')
                CHECK(a.ka - a.qa == (ptrdiff_t)plane && a.ka + plane <= a.qka_rstd, "N layer (%s): qa, ka planes misplaced",
                      half ? "bf16" : "fp32");
            free(buf);
            if (*k == 'A') { // the gradient layout of an A layer: dq, dk, dv are the (fp32) column blocks of d proj
                const int gpart = ACTS_GRADS | (half ? ACTS_BF16 : 0);
                size_t n = layer_acts_layout(&a, &c, 'A', B, T, NULL, gpart);
                buf = vec(n);
                layer_acts_layout(&a, &c, 'A', B, T, buf, gpart);
                CHECK(a.xn && a.proj && a.att_out && a.q == a.proj && a.k - a.q == (ptrdiff_t)D &&
                      a.v - a.q == (ptrdiff_t)(2 * D) && a.att_out + BT * D / (half ? 2 : 1) <= buf + n,
                      "A layer (%s): the gradients' xn, proj (q, k, v) or att_out missing or misplaced", half ? "bf16" : "fp32");
                free(buf);
                continue;
            }
            // the gradient layout: a G or S layer's dQ, dK are stored in bf16 (GdnArgs.grads_mp), an N layer's in fp32
            const int gpart = ACTS_GRADS | (half ? ACTS_BF16 : 0);
            buf = vec(layer_acts_layout(&a, &c, *k, B, T, NULL, gpart));
            layer_acts_layout(&a, &c, *k, B, T, buf, gpart);
            const size_t gplane = half && *k != 'N' ? BT * K / 2 : BT * K;
            CHECK(a.q == a.qk && a.k - a.q == (ptrdiff_t)gplane, "%c layer (%s): the gradients' q, k planes misplaced", *k,
                  half ? "bf16" : "fp32");
            // the input projections' gradients: column blocks of rows of gdn_in_ld, after them the layout's next field
            const size_t W = 2 * K + Vt, ld = gdn_in_ld(&c), row = half ? ld / 2 : ld;
            CHECK(a.gate - a.proj == (ptrdiff_t)(half ? W / 2 : W) && a.ab - a.gate == (ptrdiff_t)(half ? Vt / 2 : Vt) &&
                  ld % 8 == 0 && ld >= W + Vt + 2 * c.H && ld < W + Vt + 2 * c.H + 8,
                  "%c layer (%s): d proj | d gate | d ab misplaced", *k, half ? "bf16" : "fp32");
            real *const fields[] = {a.xn, a.qk, a.v, a.g, a.beta, a.gdn_out, a.y};
            for (size_t f = 0; f < sizeof(fields) / sizeof(fields[0]); f++)
                CHECK(fields[f] >= a.proj + BT * row || fields[f] < a.proj, "%c layer (%s): a gradient field overlaps d proj's rows",
                      *k, half ? "bf16" : "fp32");
            free(buf);
        }
}

// The layout's field report (g_layout_report, bench_gpu mem's memory plan): the fields an activation layout
// reports add up to its size, for every layer kind, part and precision; gradient layouts report nothing.
static size_t g_reported;
static void add_reported(const char *field, size_t n) { (void)field; g_reported += n; }
static void test_acts_layout_report(void) {
    Config c;
    config_from_preset(&c, "tiny", 66);
    LayerActs a;
    g_layout_report = add_reported;
    for (const char *k = "GNAS"; *k; k++)
        for (int part = ACTS_KEPT; part <= ACTS_ALL; part++)
            for (int half = 0; half <= ACTS_BF16; half += ACTS_BF16) {
                g_reported = 0;
                size_t n = layer_acts_layout(&a, &c, *k, 2, 128, NULL, part | half);
                CHECK(g_reported == n, "%c layer, part %d%s: fields report %zu reals of %zu", *k, part, half ? " bf16" : "",
                      g_reported, n);
            }
    g_reported = 0;
    layer_acts_layout(&a, &c, 'N', 2, 128, NULL, ACTS_GRADS);
    CHECK(g_reported == 0, "the gradient layout reported %zu reals", g_reported);
    g_layout_report = NULL;
}

// bf16 mode stores a tensor in bf16 on the GPU where the layout gives it half the room (ACTS_BF16); the CPU's -p bf16
// must round exactly those tensors where it stores them, so that make test's CPU-vs-GPU comparison compares like with
// like. After a bf16 forward of a one-layer model of each kind (so that the shared scratch holds that layer's fields),
// each such activation field holds bf16 values only (the residual stream h^l, r among them). The fields are found by
// name from the layout's report, halved or not.
#define ACT_FIELD(f) {#f, offsetof(LayerActs, f)}
static const struct { const char *name; size_t off; } g_act_fields[] = {
    ACT_FIELD(res), ACT_FIELD(xn), ACT_FIELD(rstd1), ACT_FIELD(proj), ACT_FIELD(qk), ACT_FIELD(v), ACT_FIELD(gate),
    ACT_FIELD(ab), ACT_FIELD(g), ACT_FIELD(beta), ACT_FIELD(qk_hat), ACT_FIELD(qk_rho), ACT_FIELD(gdn_out),
    ACT_FIELD(state), ACT_FIELD(qka), ACT_FIELD(qka_rstd), ACT_FIELD(att_out), ACT_FIELD(lse), ACT_FIELD(omega_raw),
    ACT_FIELD(omega), ACT_FIELD(pool), ACT_FIELD(rlogits), ACT_FIELD(rpi), ACT_FIELD(rmask), ACT_FIELD(aproj),
    ACT_FIELD(sel_out), ACT_FIELD(norm_rstd), ACT_FIELD(y), ACT_FIELD(r), ACT_FIELD(xn2), ACT_FIELD(rstd2),
    ACT_FIELD(gu), ACT_FIELD(hmid)};
#undef ACT_FIELD
#define NFIELDS (sizeof(g_act_fields) / sizeof(g_act_fields[0]))
static size_t g_field_n[2][NFIELDS]; // [halved][field]: the reals each field takes in the layer kind at hand
static int g_field_half, g_field_unknown;
static void record_field(const char *field, size_t n) {
    for (size_t i = 0; i < NFIELDS; i++)
        if (!strcmp(field, g_act_fields[i].name)) { g_field_n[g_field_half][i] = n; return; }
    g_field_unknown++;
}
// M: a model of cf, built and initialized, after a bf16 forward pass (and, with backward, a backward pass) on random tokens
static void bf16_pass(Model *M, const Config *cf, int B, int T, int backward) {
    int *in = xcalloc(B * T, sizeof(int)), *tg = xcalloc(B * T, sizeof(int));
    model_build(M, cf);
    model_init(M, 3);
    model_alloc_acts(M, B, T, 0);
    uint64_t r = rng_seed(11);
    for (int i = 0; i < B * T; i++) { in[i] = rng_u32(&r) % cf->V; tg[i] = rng_u32(&r) % cf->V; }
    g_bf16 = 1;
    model_forward(M, in, tg, B, T);
    if (backward) model_backward(M, in, tg, B, T, (real)1 / (B * T));
    g_bf16 = 0;
    free(in); free(tg);
}
static void test_bf16_stored_fields_rounded(void) {
    const int B = 2, T = 128;
    int halved = 0, bad = 0;
    for (const char *k = "GNAS"; *k; k++) {
        char pat[2] = {*k, 0};
        Config cf = small_config(pat, *k == 'N'); // the N layer with RoPE: qa, ka rotated after rounding
        memset(g_field_n, 0, sizeof(g_field_n));
        g_field_unknown = 0;
        g_layout_report = record_field;
        LayerActs tmp;
        for (g_field_half = 0; g_field_half < 2; g_field_half++)
            layer_acts_layout(&tmp, &cf, *k, B, T, NULL, ACTS_ALL | (g_field_half ? ACTS_BF16 : 0));
        g_layout_report = NULL;
        CHECK(g_field_unknown == 0, "%c layer: %d reported fields are not in the test's list", *k, g_field_unknown);
        Model M;
        bf16_pass(&M, &cf, B, T, 0);
        for (size_t i = 0; i < NFIELDS; i++) {
            if (!g_field_n[0][i] || g_field_n[1][i] == g_field_n[0][i]) continue; // no such field, or stored in fp32
            halved++;
            const real *x = *(real *const *)((const char *)&M.la[0] + g_act_fields[i].off);
            size_t off = 0;
            for (size_t j = 0; j < g_field_n[0][i]; j++) off += x[j] != round_bf16(x[j]);
            if (off) printf("  %c layer, %s: %zu of %zu values not bf16\n", *k, g_act_fields[i].name, off, g_field_n[0][i]);
            bad += off > 0;
        }
        model_free(&M);
    }
    printf("  %d (layer kind, field) pairs stored in bf16 checked\n", halved);
    CHECK(halved >= 40, "only %d fields halve with ACTS_BF16", halved);
    CHECK(bad == 0, "%d fields the GPU stores in bf16 hold values the CPU's -p bf16 did not round", bad);
}
#undef NFIELDS

// Of the gradients the GPU stores in bf16, those no product reads (a product rounds its operands itself) must be
// rounded where the CPU's -p bf16 stores them: the GDN op's dO (G and N layers, doc/model.md §12.1 item 16) and a G
// layer's dQ, dK, dV (item 15). After a bf16 backward pass of a one-layer model the gradient scratch holds that layer's
// mixer gradients: each of those fields holds bf16 values only, and not only zeros.
static void test_bf16_stored_grads_rounded(void) {
    const int B = 2, T = 128;
    for (const char *k = "GN"; *k; k++) {
        char pat[2] = {*k, 0};
        Config cf = small_config(pat, 0);
        Model M;
        bf16_pass(&M, &cf, B, T, 1);
        LayerActs d;
        layer_acts_layout(&d, &cf, *k, B, T, M.dacts, ACTS_GRADS); // the mixer's layout, as the backward left it
        const size_t BT = (size_t)B * T, K = cfg_K(&cf), Vt = cfg_Vt(&cf);
        const struct { const char *name; const real *x; size_t n; } f[] = {
            {"dO (gdn_out)", d.gdn_out, BT * Vt}, {"dQ", d.q, BT * K}, {"dK", d.k, BT * K}, {"dV", d.v, BT * Vt}};
        for (int i = 0; i < (*k == 'G' ? 4 : 1); i++) {
            size_t off = 0, nonzero = 0;
            for (size_t j = 0; j < f[i].n; j++) { off += f[i].x[j] != round_bf16(f[i].x[j]); nonzero += f[i].x[j] != 0; }
            CHECK(off == 0 && nonzero > 0, "%c layer, %s: %zu of %zu values not bf16, %zu nonzero", *k, f[i].name, off,
                  f[i].n, nonzero);
        }
        model_free(&M);
    }
}

// The gradient scratch's two layouts (common/layout.h): the MLP's holds exactly dxn2, dhmid and dgu, the mixer's
// everything else, and the scratch is as large as the larger of the two (they take turns), not their sum.
static void test_grads_layout_phases(void) {
    Config c;
    config_from_preset(&c, "tiny", 66);
    char err[256];
    CHECK(config_set_pattern(&c, "GNAS", err, sizeof(err)) == 0, "%s", err);
    const int B = 2, T = 128;
    size_t dmax = 0, most = 0;
    LayerActs la[NATSL_MAX_LAYERS];
    model_acts_layout(la, &c, B, T, 0, 0, NULL, &dmax);
    for (const char *k = "GNAS"; *k; k++) {
        LayerActs m, x;
        real *buf = vec(dmax);
        size_t nm = layer_acts_layout(&m, &c, *k, B, T, buf, ACTS_GRADS | ACTS_GRADS_MLP);
        size_t nx = layer_acts_layout(&x, &c, *k, B, T, buf, ACTS_GRADS);
        int nonnull = 0;
        for (size_t i = 0; i < sizeof(m) / sizeof(real *); i++) nonnull += ((real **)&m)[i] != NULL;
        CHECK(nonnull == 3 && m.xn2 && m.hmid && m.gu, "%c layer: the MLP's gradient layout holds %d fields", *k, nonnull);
        CHECK(!x.xn2 && !x.hmid && !x.gu && x.xn && x.proj, "%c layer: the mixer's gradient layout is wrong", *k);
        most = nm > most ? nm : most;
        most = nx > most ? nx : most;
        free(buf);
    }
    CHECK(dmax == most, "the gradient scratch is %zu reals, the larger layout %zu", dmax, most);
}

// The gradient scratch's fields that GRADS_ACC leaves out are written whole by their one producer before anything
// reads them: a backward pass over a scratch full of garbage (and dlnf, which the classifier's backward writes) gives
// the gradients of one over a zeroed scratch, bit for bit. Every layer kind, bf16 emulation too.
static void test_grads_scratch_unzeroed(void) {
    Config cf = small_config("GNASN", 0);
    int B = 2, T = 128;
    int *in = xcalloc(B * T, sizeof(int)), *tg = xcalloc(B * T, sizeof(int));
    uint64_t r = rng_seed(11);
    for (int i = 0; i < B * T; i++) { in[i] = rng_u32(&r) % cf.V; tg[i] = rng_u32(&r) % cf.V; }
    for (int bf16 = 0; bf16 <= 1; bf16++) {
        g_bf16 = bf16;
        Model M;
        model_build(&M, &cf);
        model_init(&M, 5);
        for (int l = 0; l < cf.L; l++)
            if (cf.pattern[l] == 'N') fill_normal(M.p.layer[l].wr, 2 * cf.H * cf.D, 0.5); // mixed routing
        model_alloc_acts(&M, B, T, 0);
        real *g0 = vec(M.nparams);
        for (int pass = 0; pass < 2; pass++) {
            memset(M.grads, 0, M.nparams * sizeof(real));
            for (size_t i = 0; i < M.dacts_size; i++) M.dacts[i] = pass ? (real)1e3 * (1 + (real)(i % 7)) : 0;
            for (size_t i = 0; i < (size_t)B * T * cf.D; i++) M.dlnf[i] = pass ? (real)-1e3 : 0;
            model_forward(&M, in, tg, B, T);
            model_backward(&M, in, tg, B, T, (real)1 / (B * T));
            if (!pass) memcpy(g0, M.grads, M.nparams * sizeof(real));
        }
        CHECK(!memcmp(g0, M.grads, M.nparams * sizeof(real)),
              "%s: a backward pass over an unzeroed gradient scratch changes the gradients", bf16 ? "bf16" : "fp32");
        free(g0);
        model_free(&M);
    }
    g_bf16 = 0;
    free(in); free(tg);
}

// ---- data loader and tokenizer (common/) ------------------------------------------------------------------
#include <fcntl.h>
/* Write a shard with the given header fields and tokens (header_n may lie about the count). */
static void dt_write_shard(const char *path, int32_t magic, int32_t version, int32_t header_n,
                           const uint16_t *tok, size_t n) {
    int32_t header[256] = {0};
    header[0] = magic;
    header[1] = version;
    header[2] = header_n;
    FILE *f = fopen(path, "wb");
    if (!f) { CHECK(0, "cannot create %s", path); return; }
    fwrite(header, sizeof header, 1, f);
    if (n) fwrite(tok, sizeof(uint16_t), n, f);
    fclose(f);
}

/* A valid shard whose token i is base + i (keep base + n below 50257). */
static void dt_write_ramp(const char *path, int base, size_t n) {
    uint16_t *tok = (uint16_t *)malloc(n * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++) tok[i] = (uint16_t)(base + i);
    dt_write_shard(path, 20240520, 1, (int32_t)n, tok, n);
    free(tok);
}

static int dt_mkdir(char *dir, size_t len) {
    snprintf(dir, len, "/tmp/natsl_data_test_XXXXXX");
    if (!mkdtemp(dir)) { CHECK(0, "mkdtemp failed"); return -1; }
    return 0;
}

/* Delete the files in dir (the tests create no subdirectories), then dir itself. */
static void dt_rmdir(const char *dir) {
    DIR *dp = opendir(dir);
    if (dp) {
        struct dirent *e;
        char path[512];
        while ((e = readdir(dp)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            unlink(path);
        }
        closedir(dp);
    }
    rmdir(dir);
}

/* Does the current batch equal tokens first..first+B*T of a ramp shard starting at `base`? */
static int dt_batch_is(const DataLoader *d, int base, size_t first) {
    for (size_t i = 0; i < (size_t)d->B * d->T; i++) {
        if (d->inputs[i] != (int)(base + first + i)) return 0;
        if (d->targets[i] != (int)(base + first + i + 1)) return 0;
    }
    return 1;
}

/* Expect init on `pattern` to fail with a message containing both `name` and `word`. */
static void dt_expect_init_error(const char *pattern, int B, int T, const char *name, const char *word) {
    DataLoader d;
    char err[512] = "";
    int rc = dataloader_init(&d, pattern, B, T, GPT2_VOCAB, err, sizeof err);
    CHECK(rc == -1, "init of %s should fail (%s) but returned %d", pattern, word, rc);
    CHECK(strstr(err, name) != NULL, "message should name %s: \"%s\"", name, err);
    CHECK(strstr(err, word) != NULL, "message should contain \"%s\": \"%s\"", word, err);
    if (rc == 0) dataloader_free(&d);
}

/* ---- dataloader: normal operation ----------------------------------------------------------- */

static void test_dataloader_reads_batches(void) {
    char dir[64], path[128], err[512] = "";
    if (dt_mkdir(dir, sizeof dir)) return;
    snprintf(path, sizeof path, "%s/one.bin", dir);
    dt_write_ramp(path, 100, 100);   /* tokens 100..199 */
    DataLoader d;
    int rc = dataloader_init(&d, path, 2, 8, GPT2_VOCAB, err, sizeof err);   /* B*T = 16 */
    CHECK(rc == 0, "init: %s", err);
    if (rc == 0) {
        CHECK(d.nfiles == 1 && d.ntok == 100 && d.shard == 0 && d.pos == 0, "initial state");
        /* batches start at 0, 16, ..., 80 (80 + 17 <= 100); at 96 only 4 tokens remain -> wrap */
        for (size_t start = 0; start <= 80; start += 16) {
            rc = dataloader_next_batch(&d, err, sizeof err);
            CHECK(rc == 0, "next_batch: %s", err);
            CHECK(dt_batch_is(&d, 100, start), "batch at %lu has wrong inputs/targets", (unsigned long)start);
            CHECK(d.pos == start + 16, "pos after the batch at %lu is %lu", (unsigned long)start, (unsigned long)d.pos);
        }
        /* row 1 of the batch is the next T tokens; targets are inputs shifted by one */
        CHECK(d.inputs[8] == 100 + 80 + 8 && d.targets[7] == d.inputs[8], "row layout / target shift");
        rc = dataloader_next_batch(&d, err, sizeof err);
        CHECK(rc == 0 && d.shard == 0 && dt_batch_is(&d, 100, 0), "a single shard should wrap to pos 0");
        dataloader_free(&d);
    }
    dt_rmdir(dir);
}

/* Three shards written out of order plus a non-matching file: glob must pick the three, sorted,
 * and batches must advance through them and wrap back to the first. */
static void test_dataloader_glob_advance_wrap(void) {
    char dir[64], path[128], pattern[128], err[512] = "";
    if (dt_mkdir(dir, sizeof dir)) return;
    snprintf(path, sizeof path, "%s/shard_000002.bin", dir); dt_write_ramp(path, 20000, 33);
    snprintf(path, sizeof path, "%s/shard_000000.bin", dir); dt_write_ramp(path, 0, 40);
    snprintf(path, sizeof path, "%s/shard_000001.bin", dir); dt_write_ramp(path, 10000, 48);
    snprintf(path, sizeof path, "%s/other.bin", dir);        dt_write_ramp(path, 30000, 5); /* too small, must not match */
    snprintf(pattern, sizeof pattern, "%s/shard_*.bin", dir);
    DataLoader d;
    int rc = dataloader_init(&d, pattern, 2, 8, GPT2_VOCAB, err, sizeof err);
    CHECK(rc == 0, "init: %s", err);
    if (rc == 0) {
        CHECK(d.nfiles == 3, "expected 3 matches, got %d", d.nfiles);
        for (int i = 0; i < d.nfiles && i < 3; i++) {
            char want[32];
            snprintf(want, sizeof want, "shard_%06d.bin", i);
            CHECK(strstr(d.files[i], want) != NULL, "files[%d] = %s, expected %s", i, d.files[i], want);
        }
        /* B*T = 16. 40 tokens: batches at 0, 16. 48 tokens: at 0, 16, but not at 32 (its targets
         * would need token 48). 33 tokens: at 0 and 16 (the last target is the last token). Wrap. */
        const int want_shard[] = {0, 0, 1, 1, 2, 2, 0, 0};
        const size_t want_pos[] = {0, 16, 0, 16, 0, 16, 0, 16};
        for (int k = 0; k < 8; k++) {
            rc = dataloader_next_batch(&d, err, sizeof err);
            CHECK(rc == 0, "batch %d: %s", k, err);
            CHECK(d.shard == want_shard[k], "batch %d: shard %d, expected %d", k, d.shard, want_shard[k]);
            CHECK(dt_batch_is(&d, 10000 * want_shard[k], want_pos[k]), "batch %d: wrong tokens", k);
        }
        dataloader_free(&d);
    }
    dt_rmdir(dir);
}

/* Saving (shard, pos) and seeking to it in a fresh loader reproduces the following batches. */
static void test_dataloader_seek_resume(void) {
    char dir[64], path[128], pattern[128], err[512] = "";
    if (dt_mkdir(dir, sizeof dir)) return;
    snprintf(path, sizeof path, "%s/s_0.bin", dir); dt_write_ramp(path, 0, 50);
    snprintf(path, sizeof path, "%s/s_1.bin", dir); dt_write_ramp(path, 10000, 45);
    snprintf(pattern, sizeof pattern, "%s/s_*.bin", dir);
    DataLoader a, b;
    int rca = dataloader_init(&a, pattern, 1, 12, GPT2_VOCAB, err, sizeof err);
    CHECK(rca == 0, "init a: %s", err);
    int rcb = dataloader_init(&b, pattern, 1, 12, GPT2_VOCAB, err, sizeof err);
    CHECK(rcb == 0, "init b: %s", err);
    if (rca == 0 && rcb == 0) {
        int first[12], saved_shard = -1;
        size_t saved_pos = 0;
        for (int k = 0; k < 2; k++) dataloader_next_batch(&a, err, sizeof err);
        saved_shard = a.shard;
        saved_pos = a.pos;
        int rc = dataloader_seek(&b, saved_shard, saved_pos, err, sizeof err);
        CHECK(rc == 0, "seek: %s", err);
        for (int k = 0; k < 7; k++) {   /* crosses into shard 1 and wraps back to shard 0 */
            int ra = dataloader_next_batch(&a, err, sizeof err);
            int rb = dataloader_next_batch(&b, err, sizeof err);
            CHECK(ra == 0 && rb == 0, "batch %d: %s", k, err);
            CHECK(a.shard == b.shard && a.pos == b.pos, "batch %d: state differs", k);
            CHECK(memcmp(a.inputs, b.inputs, 12 * sizeof(int)) == 0 &&
                  memcmp(a.targets, b.targets, 12 * sizeof(int)) == 0, "batch %d: resumed batch differs", k);
        }
        /* reset gives the very first batch again */
        dataloader_reset(&b);
        dataloader_next_batch(&b, err, sizeof err);
        memcpy(first, b.inputs, sizeof first);
        CHECK(first[0] == 0 && first[11] == 11 && b.shard == 0, "reset: first batch should start at token 0");
        /* seeking out of range fails and names the file */
        rc = dataloader_seek(&b, 2, 0, err, sizeof err);
        CHECK(rc == -1 && strstr(err, "s_0.bin") && strstr(err, "shard 2"), "seek to a missing shard: \"%s\"", err);
        rc = dataloader_seek(&b, 1, 46, err, sizeof err);
        CHECK(rc == -1 && strstr(err, "s_1.bin") && strstr(err, "46"), "seek past the end: \"%s\"", err);
        rc = dataloader_seek(&b, 1, 45, err, sizeof err);   /* the very end is allowed: next batch moves on */
        CHECK(rc == 0, "seek to the end of a shard: %s", err);
        rc = dataloader_next_batch(&b, err, sizeof err);
        CHECK(rc == 0 && b.shard == 0 && b.inputs[0] == 0, "after the end of the last shard comes shard 0");
    }
    if (rca == 0) dataloader_free(&a);
    if (rcb == 0) dataloader_free(&b);
    dt_rmdir(dir);
}

/* ---- dataloader: bad input ------------------------------------------------------------------ */

static void test_dataloader_bad_headers(void) {
    char dir[64], path[128];
    uint16_t tok[100] = {0};
    if (dt_mkdir(dir, sizeof dir)) return;

    snprintf(path, sizeof path, "%s/truncated.bin", dir);   /* header says 100, file has 98 */
    dt_write_shard(path, 20240520, 1, 100, tok, 98);
    dt_expect_init_error(path, 2, 8, "truncated.bin", "header says 100 tokens but the file holds 98 (truncated?)");

    snprintf(path, sizeof path, "%s/magic.bin", dir);
    dt_write_shard(path, 20240521, 1, 100, tok, 100);
    dt_expect_init_error(path, 2, 8, "magic.bin", "magic");

    snprintf(path, sizeof path, "%s/version.bin", dir);
    dt_write_shard(path, 20240520, 2, 100, tok, 100);
    dt_expect_init_error(path, 2, 8, "version.bin", "version");

    snprintf(path, sizeof path, "%s/tiny.bin", dir);        /* 10 bytes: not even a header */
    FILE *f = fopen(path, "wb");
    if (f) { fwrite("0123456789", 1, 10, f); fclose(f); }
    dt_expect_init_error(path, 2, 8, "tiny.bin", "header");

    snprintf(path, sizeof path, "%s/small.bin", dir);       /* 16 tokens < B*T+1 = 17 */
    dt_write_ramp(path, 0, 16);
    dt_expect_init_error(path, 2, 8, "small.bin", "B*T+1");

    snprintf(path, sizeof path, "%s/nothing_*.bin", dir);
    dt_expect_init_error(path, 2, 8, "nothing_*.bin", "no files match");

    /* one bad shard among good ones is reported by init, naming that shard */
    snprintf(path, sizeof path, "%s/good_0.bin", dir); dt_write_ramp(path, 0, 40);
    snprintf(path, sizeof path, "%s/good_1.bin", dir); dt_write_shard(path, 20240520, 1, 40, tok, 39);
    snprintf(path, sizeof path, "%s/good_*.bin", dir);
    dt_expect_init_error(path, 2, 8, "good_1.bin", "truncated");
    dt_rmdir(dir);
}

static void test_dataloader_bad_tokens(void) {
    char dir[64], path[128], pattern[128], err[512] = "";
    uint16_t tok[40];
    if (dt_mkdir(dir, sizeof dir)) return;
    for (int i = 0; i < 40; i++) tok[i] = (uint16_t)i;
    tok[5] = 50304;   /* first bad token: byte offset 1024 + 2*5 = 1034 */
    tok[9] = 60000;
    snprintf(path, sizeof path, "%s/badtok.bin", dir);
    dt_write_shard(path, 20240520, 1, 40, tok, 40);
    dt_expect_init_error(path, 2, 8, "badtok.bin", "token 50304 at byte offset 1034 is out of range (vocab 50257)");

    /* a bad token in a later shard is found when that shard is loaded, not at init */
    snprintf(path, sizeof path, "%s/x_0.bin", dir); dt_write_ramp(path, 0, 20);
    snprintf(path, sizeof path, "%s/x_1.bin", dir); dt_write_shard(path, 20240520, 1, 40, tok, 40);
    snprintf(pattern, sizeof pattern, "%s/x_*.bin", dir);
    DataLoader d;
    int rc = dataloader_init(&d, pattern, 2, 8, GPT2_VOCAB, err, sizeof err);
    CHECK(rc == 0, "init: %s", err);
    if (rc == 0) {
        rc = dataloader_next_batch(&d, err, sizeof err);
        CHECK(rc == 0, "first batch: %s", err);
        rc = dataloader_next_batch(&d, err, sizeof err);   /* needs x_1.bin */
        CHECK(rc == -1, "moving to a shard with a bad token should fail");
        CHECK(strstr(err, "x_1.bin") && strstr(err, "byte offset 1034"), "message: \"%s\"", err);
        CHECK(d.shard == 0, "a failed advance must not change the position");
        rc = dataloader_seek(&d, 1, 0, err, sizeof err);
        CHECK(rc == -1 && strstr(err, "x_1.bin"), "seek into the bad shard should fail: \"%s\"", err);
        dataloader_free(&d);
    }
    dt_rmdir(dir);
}

/* ---- tokenizer ------------------------------------------------------------------------------ */

static void test_tokenizer_decode(void) {
    Tokenizer t;
    char err[512] = "";
    int rc = tokenizer_init(&t, "data/gpt2_tokenizer.bin", err, sizeof err);
    CHECK(rc == 0, "tokenizer_init: %s", err);
    if (rc != 0) return;
    CHECK(t.vocab_size == 50257 && t.eot == 50256 && t.ok, "vocab %u eot %u", (unsigned)t.vocab_size, (unsigned)t.eot);
    const char *s = tokenizer_decode(&t, 15496);
    CHECK(s && strcmp(s, "Hello") == 0, "15496 -> \"%s\"", s ? s : "(null)");
    s = tokenizer_decode(&t, 995);
    CHECK(s && strcmp(s, " world") == 0, "995 -> \"%s\"", s ? s : "(null)");
    s = tokenizer_decode(&t, 50256);
    CHECK(s && strcmp(s, "<|endoftext|>") == 0, "50256 -> \"%s\"", s ? s : "(null)");
    s = tokenizer_decode(&t, 198);
    CHECK(s && strcmp(s, "\n") == 0, "198 should be a newline");
    CHECK(tokenizer_decode(&t, 50257) == NULL && tokenizer_decode(&t, UINT32_MAX) == NULL, "ids >= 50257 are out of range");

    /* print_safe: capture stdout in a temp file. Token 7 is "(", 198 "\n", 197 "\t"; id 188+7 = 195 is
     * the single byte 0x07 (bell) and must be skipped; 126 is 0xC2 (a UTF-8 lead byte), kept. */
    char tmp[] = "/tmp/natsl_tok_out_XXXXXX";
    int fd = mkstemp(tmp);
    CHECK(fd >= 0, "mkstemp");
    if (fd >= 0) {
        fflush(stdout);
        int saved = dup(1);
        dup2(fd, 1);
        const uint32_t ids[] = {15496, 195, 198, 197, 7, 126};
        for (int i = 0; i < 6; i++) tokenizer_print_safe(tokenizer_decode(&t, ids[i]));
        tokenizer_print_safe(NULL);
        fflush(stdout);
        dup2(saved, 1);
        close(saved);
        char out[64] = "";
        FILE *f = fopen(tmp, "rb");
        size_t n = f ? fread(out, 1, sizeof out - 1, f) : 0;
        if (f) fclose(f);
        out[n] = '\0';
        CHECK(strcmp(out, "Hello\n\t(\xc2") == 0, "print_safe wrote \"%s\"", out);
        close(fd);
        unlink(tmp);
    }
    tokenizer_free(&t);
    CHECK(t.token_table == NULL && !t.ok && tokenizer_decode(&t, 0) == NULL, "freed tokenizer decodes nothing");
}

static void test_tokenizer_bad_files(void) {
    Tokenizer t;
    char dir[64], path[128], err[512] = "";
    int rc = tokenizer_init(&t, "/nonexistent/gpt2_tokenizer.bin", err, sizeof err);
    CHECK(rc == -1 && strstr(err, "/nonexistent/gpt2_tokenizer.bin"), "missing file: \"%s\"", err);
    if (dt_mkdir(dir, sizeof dir)) return;

    /* the real table cut off in the middle, with an extra byte at the end, with a bad magic */
    FILE *in = fopen("data/gpt2_tokenizer.bin", "rb");
    CHECK(in != NULL, "cannot read data/gpt2_tokenizer.bin");
    if (in) {
        static unsigned char buf[400000];
        size_t size = fread(buf, 1, sizeof buf - 1, in), n = 20000;
        fclose(in);
        snprintf(path, sizeof path, "%s/extra.bin", dir);
        FILE *f = fopen(path, "wb");
        if (f) { fwrite(buf, 1, size + 1, f); fclose(f); }
        rc = tokenizer_init(&t, path, err, sizeof err);
        CHECK(rc == -1 && strstr(err, "extra.bin") && strstr(err, "extra bytes"), "extra byte: \"%s\"", err);
        snprintf(path, sizeof path, "%s/cut.bin", dir);
        f = fopen(path, "wb");
        if (f) { fwrite(buf, 1, n, f); fclose(f); }
        rc = tokenizer_init(&t, path, err, sizeof err);
        CHECK(rc == -1 && strstr(err, "cut.bin") && strstr(err, "truncated"), "cut table: \"%s\"", err);
        CHECK(t.token_table == NULL && !t.ok, "a failed init leaves the tokenizer empty");
        buf[0] ^= 1;   /* wrong magic */
        snprintf(path, sizeof path, "%s/magic.bin", dir);
        f = fopen(path, "wb");
        if (f) { fwrite(buf, 1, n, f); fclose(f); }
        rc = tokenizer_init(&t, path, err, sizeof err);
        CHECK(rc == -1 && strstr(err, "magic.bin") && strstr(err, "magic"), "bad magic: \"%s\"", err);
    }
    /* a data shard is not a tokenizer */
    snprintf(path, sizeof path, "%s/shard.bin", dir);
    dt_write_ramp(path, 0, 100);
    rc = tokenizer_init(&t, path, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "shard.bin") && strstr(err, "magic"), "shard as tokenizer: \"%s\"", err);
    dt_rmdir(dir);
}

/* ---- the data's vocabulary (§1): a data set's own decoding table beside its shards -------------------- */

/* A decoding table of V tokens: ids 0..V-2 the letters a, b, ..., the last one <|endoftext|>. */
static void dt_write_table(const char *path, int V) {
    int32_t h[256] = {20251122, 1, V, V - 1};
    FILE *f = fopen(path, "wb");
    if (!f) { CHECK(0, "cannot create %s", path); return; }
    fwrite(h, sizeof h, 1, f);
    for (int i = 0; i < V - 1; i++) { unsigned char e[2] = {1, (unsigned char)('a' + i % 26)}; fwrite(e, 1, 2, f); }
    fputc(13, f); fputs("<|endoftext|>", f);
    fclose(f);
}

/* The data loader refuses ids at or above the vocabulary it is given; the decoding table of a glob's shards is
 * tokenizer.bin beside its first match. */
static void test_dataloader_vocab(void) {
    char dir[64], path[128], tpath[256], err[512] = "";
    uint16_t tok[40];
    if (dt_mkdir(dir, sizeof dir)) return;
    for (int i = 0; i < 40; i++) tok[i] = (uint16_t)(i % 9);
    tok[17] = 9;
    snprintf(path, sizeof path, "%s/v.bin", dir);
    dt_write_shard(path, 20240520, 1, 40, tok, 40);
    DataLoader d;
    int rc = dataloader_init(&d, path, 2, 8, 9, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "v.bin") && strstr(err, "token 9 at byte offset 1058 is out of range (vocab 9)"),
          "id 9 with a vocabulary of 9: \"%s\"", err);
    rc = dataloader_init(&d, path, 2, 8, 10, err, sizeof err);
    CHECK(rc == 0 && d.vocab == 10, "id 9 with a vocabulary of 10: %s", err);
    if (rc == 0) dataloader_free(&d);
    snprintf(path, sizeof path, "%s/*.bin", dir);
    rc = dataloader_tokenizer_path(path, tpath, sizeof tpath, err, sizeof err);
    CHECK(rc == 0 && !strcmp(tpath + strlen(dir), "/tokenizer.bin") && !strncmp(tpath, dir, strlen(dir)),
          "no table beside the shards: %d, '%s'", rc, tpath);
    dt_write_table(tpath, 10);
    snprintf(path, sizeof path, "%s/v.bin", dir);
    rc = dataloader_tokenizer_path(path, tpath, sizeof tpath, err, sizeof err);
    CHECK(rc == 1, "the table beside the shards not found: %d, '%s'", rc, tpath);
    snprintf(path, sizeof path, "%s/none_*.bin", dir);
    rc = dataloader_tokenizer_path(path, tpath, sizeof tpath, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "no files match"), "no match: %d, \"%s\"", rc, err);
    dt_rmdir(dir);
}

/* The main job's data: the character table and shards of dev/data/char_shards.py agree with each other. */
static void test_tokenizer_char_data(void) {
    Tokenizer t;
    char err[512] = "", text[32] = "";
    int rc = tokenizer_init(&t, "data/tinyshakespeare_char/tokenizer.bin", err, sizeof err);
    CHECK(rc == 0 && t.vocab_size == 66 && t.eot == 65, "table: %s (vocab %u, eot %u)", err, t.vocab_size, t.eot);
    if (rc) return;
    CHECK(!strcmp(tokenizer_decode(&t, 0), "\n") && !strcmp(tokenizer_decode(&t, 39), "a") &&
          !strcmp(tokenizer_decode(&t, 65), "<|endoftext|>"), "decoding of ids 0, 39, 65");
    DataLoader d;
    rc = dataloader_init(&d, "data/tinyshakespeare_char/train.bin", 1, 64, 66, err, sizeof err);
    CHECK(rc == 0, "train shard: %s", err);
    if (rc == 0) {
        CHECK(d.tokens[0] == 65, "the stream starts with <|endoftext|>, not %u", d.tokens[0]);
        for (int i = 1; i < 15; i++) strcat(text, tokenizer_decode(&t, d.tokens[i]));
        CHECK(!strcmp(text, "First Citizen:"), "the text starts \"%s\"", text);
        dataloader_free(&d);
    }
    tokenizer_free(&t);
}

/* The counting baselines of common/baseline.h: a deterministic bigram stream, then a noisy one whose best λ lies
 * inside (0, 1), against a search over a fine grid. */
static void test_baseline_bigram(void) {
    char dir[64], tr[128], va[128], err[512] = "";
    if (dt_mkdir(dir, sizeof dir)) return;
    snprintf(tr, sizeof tr, "%s/train.bin", dir);
    snprintf(va, sizeof va, "%s/val.bin", dir);
    uint16_t t[3000];
    uint64_t r = rng_seed(5);
    for (int noisy = 0; noisy <= 1; noisy++) {
        for (int i = 0; i < 3000; i++) t[i] = (uint16_t)(noisy && rng_u32(&r) % 4 != 0 ? (int)(rng_u32(&r) % 10) : i % 3);
        dt_write_shard(tr, 20240520, 1, 3000, t, 3000);
        dt_write_shard(va, 20240520, 1, 300, t + 2000, 300);
        DataLoader dtr, dva;
        CHECK(dataloader_init(&dtr, tr, 2, 64, 10, err, sizeof err) == 0 && dataloader_init(&dva, va, 2, 64, 10, err, sizeof err) == 0,
              "init: %s", err);
        double uni = 0, bi = 0, lambda = 0;
        size_t n = 0;
        CHECK(baseline_losses(&dtr, &dva, 2, 10, &uni, &bi, &lambda, &n, err, sizeof err) == 0, "baseline: %s", err);
        if (!noisy) { /* p(b|a) = 1 for every val pair: λ -> 1 and the bigram loss -> 0; the unigram is add-one */
            CHECK(bi < 1e-6 && lambda > 0.999999, "deterministic stream: bigram %.3g at lambda %.9f", bi, lambda);
            CHECK(fabs(uni - log(3010.0 / 1001)) < 1e-12 && n == 3000, "unigram %.12f, want log(3010/1001)", uni);
        } else { /* the same counts by brute force over λ = 0.0001 ... 0.9999 */
            double best = 1e300, cu[10] = {0}, cab[10][10] = {{0}};
            for (int i = 0; i < 3000; i++) { cu[t[i]]++; if (i + 1 < 3000) cab[t[i]][t[i + 1]]++; }
            for (int k = 1; k < 10000; k++) {
                double l = k * 1e-4, s = 0;
                for (int i = 2000; i < 2000 + 256; i++) {
                    double ca = cu[t[i]] - (t[i] == t[2999]), pu = (cu[t[i + 1]] + 1) / 3010;
                    s -= log(l * cab[t[i]][t[i + 1]] / ca + (1 - l) * pu);
                }
                if (s / 256 < best) best = s / 256;
            }
            CHECK(bi <= best + 1e-9 && bi > best - 1e-3 && lambda > 0.05 && lambda < 0.95,
                  "noisy stream: bigram %.9f at lambda %.4f, grid best %.9f", bi, lambda, best);
        }
        dataloader_free(&dtr); dataloader_free(&dva);
    }
    dt_rmdir(dir);
}

static void register_data_tests(void) {
    RUN(test_dataloader_reads_batches);
    RUN(test_dataloader_glob_advance_wrap);
    RUN(test_dataloader_seek_resume);
    RUN(test_dataloader_bad_headers);
    RUN(test_dataloader_bad_tokens);
    RUN(test_tokenizer_decode);
    RUN(test_tokenizer_bad_files);
    RUN(test_dataloader_vocab);
    RUN(test_tokenizer_char_data);
    RUN(test_baseline_bigram);
}

// ---- checkpoints ----------------------------------------------------------------------------------------
// An H model's file keeps its slots and per-layer windows (header fields 16, 96..); a window on a layer that is not H
// is refused
static void test_nha_checkpoint_roundtrip(void) {
    char dir[] = "/tmp/natsl_nha_XXXXXX", path[256], err[1024];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    g_nha_m = 3;
    Config cf = small_config("HAH", 0);
    g_nha_m = 4;
    cf.nha_w[0] = 0; cf.nha_w[2] = 4096;
    Model M, L;
    model_build(&M, &cf);
    model_init(&M, 3);
    snprintf(path, sizeof(path), "%s/model_00000001.bin", dir);
    CHECK(save_model(&M, path, err, sizeof(err)) == 0, "save: %s", err);
    CHECK(load_model(&L, path, err, sizeof(err)) == 0, "load: %s", err);
    CHECK(!memcmp(&L.cfg, &M.cfg, sizeof(Config)) && L.cfg.nha_m == 3 && L.cfg.nha_w[2] == 4096, "config did not round-trip");
    model_free(&L);
    int h[256];
    FILE *f = fopen(path, "r+b");
    CHECK(f && fread(h, sizeof(int), 256, f) == 256 && h[16] == 3 && h[96] == 0 && h[98] == 4096, "header fields");
    h[97] = 5; // layer 1 is A
    fseek(f, 0, SEEK_SET); fwrite(h, sizeof(int), 256, f); fclose(f);
    CHECK(load_model(&L, path, err, sizeof(err)) != 0 && strstr(err, "window"), "a window on an A layer loaded: %s", err);
    model_free(&M);
    snprintf(path, sizeof(path), "rm -rf %s", dir);
    CHECK(system(path) == 0, "cleanup");
}
static void test_checkpoint_roundtrip(void) {
    char dir[] = "/tmp/natsl_ckpt_XXXXXX", path[256], spath[256], err[1024];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    Config cf = small_config("GNA", 1);
    cf.gate_act = GATE_SIGMOID; // the header keeps the gate activation (field 15)
    Model M, L;
    model_build(&M, &cf);
    model_init(&M, 3);
    snprintf(path, sizeof(path), "%s/model_00000005.bin", dir);
    snprintf(spath, sizeof(spath), "%s/state_00000005.bin", dir);
    CHECK(save_model(&M, path, err, sizeof(err)) == 0, "save: %s", err);
    CHECK(load_model(&L, path, err, sizeof(err)) == 0, "load: %s", err);
    CHECK(!memcmp(&L.cfg, &M.cfg, sizeof(Config)) && L.nparams == M.nparams, "config did not round-trip");
    size_t bad = 0;
    for (size_t i = 0; i < M.nparams; i++) bad += L.params[i] != (real)(float)M.params[i];
    CHECK(bad == 0, "%zu parameters changed", bad);
    model_free(&L);
    { // a file from before the gate activation's field (0 there) loads as silu, the paper's; a value not 0 or 1 is refused
        int hm[256];
        Config silu = cf;
        silu.gate_act = GATE_SILU;
        config_to_header(&silu, M.nparams, hm);
        CHECK(hm[15] == 0, "a silu model's header field 15 is %d", hm[15]);
        FILE *fm = fopen(path, "r+b");
        CHECK(fm && fread(hm, sizeof(int), 256, fm) == 256 && hm[15] == GATE_SIGMOID, "read model header");
        hm[15] = 0;
        fseek(fm, 0, SEEK_SET); fwrite(hm, sizeof(int), 256, fm); fclose(fm);
        CHECK(load_model(&L, path, err, sizeof(err)) == 0 && L.cfg.gate_act == GATE_SILU, "old-format model: %s", err);
        model_free(&L);
        hm[15] = 2;
        fm = fopen(path, "r+b"); fwrite(hm, sizeof(int), 256, fm); fclose(fm);
        CHECK(load_model(&L, path, err, sizeof(err)) == -1 && strstr(err, path) && strstr(err, "gate activation"),
              "gate activation 2: %s", err);
        CHECK(save_model(&M, path, err, sizeof(err)) == 0 && load_model(&L, path, err, sizeof(err)) == 0 &&
              L.cfg.gate_act == GATE_SIGMOID, "save again: %s", err);
    }
    M.adam_m = vec(M.nparams); M.adam_v = vec(M.nparams);
    fill_normal(M.adam_m, M.nparams, 1); fill_uniform(M.adam_v, M.nparams, 0, 1);
    TrainState s = {5, 0x123456789abcdefull, 2, 3000000000ull, 0, 0xfedcba9876543210ull, 1, 0}, s2;
    CHECK(save_state(&M, &s, spath, err, sizeof(err)) == 0, "save state: %s", err);
    CHECK(load_state(&L, &s2, spath, err, sizeof(err)) == 0, "load state: %s", err);
    CHECK(s2.step == 5 && s2.rng == s.rng && s2.shard == 2 && s2.pos == s.pos && s2.noise_rng == s.noise_rng,
          "train state did not round-trip");
    { // a version-1 state file (before the §7.2 noise stream) still loads, with noise_rng = 0 (the driver seeds it)
        int hs[256];
        FILE *fs = fopen(spath, "r+b");
        CHECK(fs && fread(hs, sizeof(int), 256, fs) == 256, "read state header");
        hs[1] = 1; hs[12] = hs[13] = hs[14] = hs[15] = 0; // version 2 keeps the stream in 12-13, version 3 the ranks in 14-15
        fseek(fs, 0, SEEK_SET); fwrite(hs, sizeof(int), 256, fs); fclose(fs);
        CHECK(load_state(&L, &s2, spath, err, sizeof(err)) == 0 && s2.noise_rng == 0 && s2.rng == s.rng,
              "version-1 state: %s", err);
        CHECK(save_state(&M, &s, spath, err, sizeof(err)) == 0, "save state: %s", err);
    }
    bad = 0;
    for (size_t i = 0; i < M.nparams; i++) bad += L.adam_m[i] != (real)(float)M.adam_m[i] || L.adam_v[i] != (real)(float)M.adam_v[i];
    CHECK(bad == 0, "%zu moments changed", bad);
    model_free(&L);
    // no temp file is left behind
    char tmp[300];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    CHECK(access(tmp, F_OK) != 0, "temporary file left behind");
    // bad inputs: truncated file, wrong magic, header config that does not match the file, state for another model
    FILE *f = fopen(path, "r+b");
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fclose(f);
    CHECK(truncate(path, size - 4) == 0, "truncate");
    CHECK(load_model(&L, path, err, sizeof(err)) == -1 && strstr(err, path) && strstr(err, "truncated"), "truncated model: %s", err);
    int h[256];
    config_to_header(&cf, M.nparams, h);
    h[2] = 128; // D changed: the parameter count no longer matches the header's count
    f = fopen(path, "r+b"); fwrite(h, sizeof(int), 256, f); fclose(f);
    CHECK(load_model(&L, path, err, sizeof(err)) == -1 && strstr(err, path) && strstr(err, "parameters"), "wrong config: %s", err);
    h[0] = 1234;
    f = fopen(path, "r+b"); fwrite(h, sizeof(int), 256, f); fclose(f);
    CHECK(load_model(&L, path, err, sizeof(err)) == -1 && strstr(err, "magic"), "wrong magic: %s", err);
    Config other = small_config("GN", 0);
    model_build(&L, &other);
    CHECK(load_state(&L, &s2, spath, err, sizeof(err)) == -1 && strstr(err, "parameters"), "state for another model: %s", err);
    model_free(&L);
    model_free(&M);
    remove(path); remove(spath); rmdir(dir);
}

// ---- the trainer binary, end to end ------------------------------------------------------------------------
// The trainer these tests run: ./train_natsl, or $NATSL_TRAINER (make sanitize runs its sanitizer build).
static const char *g_trainer = "./train_natsl";
// Runs a shell command; returns its exit status and the first line of its stderr in msg.
// The outputs go to files of this process (two test runs at once, e.g. make test and make sanitize, do not
// read each other's); g_stdout_path: the last command's stdout.
static char g_stdout_path[64], g_stderr_path[64];
static int run_cmd(const char *cmd, char *msg, size_t n) {
    char full[2200];
    snprintf(g_stdout_path, sizeof(g_stdout_path), "/tmp/natsl_test_stdout.%ld", (long)getpid());
    snprintf(g_stderr_path, sizeof(g_stderr_path), "/tmp/natsl_test_stderr.%ld", (long)getpid());
    snprintf(full, sizeof(full), "%s 2>%s >%s", cmd, g_stderr_path, g_stdout_path);
    int st = system(full);
    msg[0] = 0;
    FILE *f = fopen(g_stderr_path, "r");
    if (f) { if (!fgets(msg, (int)n, f)) msg[0] = 0; fclose(f); }
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}
static void expect_error(const char *args, const char *word) {
    char cmd[1024], msg[1024];
    snprintf(cmd, sizeof(cmd), "%s %s", g_trainer, args);
    int rc = run_cmd(cmd, msg, sizeof(msg));
    CHECK(rc == 1 && strncmp(msg, "error: ", 7) == 0 && strstr(msg, word), "'%s': exit %d, stderr '%s' (wanted '%s')", args, rc, msg, word);
}
static int files_equal(const char *a, const char *b) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int eq = fa && fb;
    while (eq) { int x = fgetc(fa), y = fgetc(fb); if (x != y) eq = 0; if (x == EOF || y == EOF) break; }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return eq;
}
// ---- answer-only scoring, the answer files, the recall data and the evaluation-only mode (doc/model.md §13) -------
// (13.1a-b) on the cross-entropy alone: rows whose target is ANSWER_IGNORE have loss 0 and no gradient
static double ce_loss4(void *p) { CeCtx *c = p; crossentropy_forward(c->loss, c->lse, c->z, c->tg, 4, 5, 7); return record_terms(c->loss, NULL, 4); }
static void test_answer_crossentropy_grad(void) { // 4 rows, V = 5 padded to 7, rows 1 and 3 ignored
    int tg[4] = {0, ANSWER_IGNORE, 4, ANSWER_IGNORE};
    CeCtx c = {vec(28), vec(4), vec(4), tg};
    fill_normal(c.z, 28, 2);
    real *dz = vec(28);
    crossentropy_forward(c.loss, c.lse, c.z, tg, 4, 5, 7);
    memcpy(dz, c.z, 28 * sizeof(real));
    crossentropy_backward(dz, c.lse, tg, 1, 4, 5, 7);
    CHECK(c.loss[1] == 0 && c.loss[3] == 0 && c.loss[0] > 0 && c.loss[2] > 0, "losses %g %g %g %g", c.loss[0], c.loss[1],
          c.loss[2], c.loss[3]);
    for (int i = 0; i < 7; i++) CHECK(dz[7 + i] == 0 && dz[21 + i] == 0, "an ignored row got a gradient at %d", i);
    CHECK(targets_scored(tg, 4) == 2, "targets_scored %d", targets_scored(tg, 4));
    Var v[] = {{"logits", c.z, dz, 28}};
    fd_check("cross-entropy, 2 of 4 ignored", v, 1, ce_loss4, &c, 0);
    free(c.z); free(c.loss); free(c.lse); free(dz);
}

// (13.1a-b) through the whole model: the mean loss over the scored targets (1 in 4; the rest ANSWER_IGNORE) plus the
// routers' penalty, relaxed router: model_backward with dloss_scale = 1/n must give its gradient (the §7 terms weighted
// by dloss_scale·n, as the mean loss), by central differences on 4 coordinates of every tensor. NA at B = 1, T = 128
// (two chunks: the router acts): every layer kind's gradient is checked whole by test_grad_model_*; this checks what
// the mask changes.
typedef struct { ModelCtx m; real *scale; } AnsCtx; // m first: model_hard_flipped reads an AnsCtx as its ModelCtx
static double answer_model_loss(void *p) {
    AnsCtx *c = p;
    model_forward(c->m.M, c->m.in, c->m.tg, c->m.B, c->m.T);
    double s = record_terms(c->m.M->losses, c->scale, (size_t)c->m.B * c->m.T);
    real aux = c->m.M->rb.pen_soft + c->m.M->rb.lb_soft;
    return s + record_terms(&aux, NULL, 1);
}
static void test_answer_model_grad(void) {
    g_rng = 20261128;
    Config cf = small_config("NA", 0);
    Model M;
    model_build(&M, &cf);
    model_init(&M, 13);
    for (int l = 0; l < cf.L; l++) { // the well-conditioned point of check_model_opts
        LayerParams *p = &M.p.layer[l];
        if (cf.pattern[l] == 'N') { fill_normal(p->wr, 2 * cf.H * cf.D, 0.5); fill_normal(p->wow, 2 * cf.Ha * cfg_K(&cf), 0.3); }
        if (cf.pattern[l] != 'A' && cf.pattern[l] != 'H') fill_normal(p->conv, (2 * cfg_K(&cf) + cfg_Vt(&cf)) * NATSL_CONV, 0.3);
    }
    g_fd_h = 3e-4;
    M.rb.lambda = 0.5;
    M.router_relaxed = 1;
    int B = 1, T = 128, BT = B * T;
    model_alloc_acts(&M, B, T, 0);
    AnsCtx c = {{&M, xcalloc(BT, sizeof(int)), xcalloc(BT, sizeof(int)), B, T, NULL, NULL}, vec(BT)};
    for (int i = 0; i < BT; i++) {
        c.m.in[i] = rng_u32(&g_rng) % cf.V;
        c.m.tg[i] = i % 4 == 3 ? (int)(rng_u32(&g_rng) % cf.V) : ANSWER_IGNORE;
    }
    int n = targets_scored(c.m.tg, BT);
    for (int i = 0; i < BT; i++) c.scale[i] = (real)1 / n;
    memset(M.grads, 0, M.nparams * sizeof(real));
    model_forward(&M, c.m.in, c.m.tg, B, T);
    CHECK(n == BT / 4 && M.nscored == n, "scored %d, nscored %d", n, M.nscored);
    double s = 0;
    for (int i = 0; i < BT; i++) s += M.losses[i];
    CHECK(fabs(M.mean_loss - s / n) < 1e-12, "mean_loss %.12g, Σ/n %.12g", (double)M.mean_loss, s / n);
    CHECK(M.rb.pen > 0, "the penalty is not active at the test point");
    model_backward(&M, c.m.in, c.m.tg, B, T, (real)1 / n);
    c.m.hard = xcalloc(model_hard_choices(&M, NULL, B, T), 1);
    model_hard_choices(&M, c.m.hard, B, T);
    int skipped = 0, tried = 0;
    double worst = 0;
    for (int i = 0; i < M.ntensors; i++) {
        const ParamTensor *t = &M.tensors[i];
        Var v = {t->name, M.params + t->offset, M.grads + t->offset, t->numel};
        worst = fmax(worst, fd_check_var(&v, answer_model_loss, &c, 4, model_hard_flipped, &skipped, &tried));
    }
    printf("  %-28s max rel err %.2e over %d tensors, %d of %d coordinates skipped (decision flips)\n",
           "answers only, NA + penalty", worst, M.ntensors, skipped, tried);
    CHECK(skipped <= tried / 20, "too many decision flips (%d of %d)", skipped, tried);
    g_fd_h = 1e-4;
    free(c.m.in); free(c.m.tg); free(c.m.hard); free(c.scale);
    model_free(&M);
}

// (13.1c) by hand: the argmax over the V real logits (the padding never counts), ties to the lowest id, ignored
// targets never hit; token_scores hands the losses and hits over
static void test_answer_accuracy(void) {
    enum { R = 5, V = 4, VP = 6 };
    real z[R * VP] = {0.1, 2.0, -1, 0.5, 9, 9,  // argmax 1 (the padding's 9 excluded): target 1, a hit
                      1, 1, 0, 0, 0, 0,         // a tie of 0 and 1: argmax 0; target 1, a miss
                      1, 1, 0, 0, 0, 0,         // the same row, target 0: a hit
                      0, 0, 0, 3, 0, 0,         // argmax 3, target 2: a miss
                      5, 0, 0, 0, 0, 0};        // ignored
    int tg[R] = {1, 1, 0, 2, ANSWER_IGNORE};
    unsigned char want[R] = {1, 0, 1, 0, 0}, hit[R];
    crossentropy_hits(hit, z, tg, R, V, VP);
    for (int i = 0; i < R; i++) CHECK(hit[i] == want[i], "row %d: hit %d, want %d", i, hit[i], want[i]);
    Model M;
    memset(&M, 0, sizeof(M));
    M.cfg.V = V; M.cfg.Vp = VP;
    M.logits = z; M.losses = vec(R); M.lse = vec(R);
    crossentropy_forward(M.losses, M.lse, z, tg, R, V, VP);
    double l0 = log(exp(0.1) + exp(2.0) + exp(-1.0) + exp(0.5)) - 2.0;
    CHECK(fabs(M.losses[0] - l0) < 1e-12 && M.losses[4] == 0, "losses %.15g (want %.15g), %g", (double)M.losses[0], l0,
          (double)M.losses[4]);
    float loss[R];
    unsigned char hit2[R];
    token_scores(&M, tg, R, loss, hit2);
    for (int i = 0; i < R; i++)
        CHECK(hit2[i] == want[i] && loss[i] == (float)M.losses[i], "token_scores row %d: %d %g", i, hit2[i], loss[i]);
    free(M.losses); free(M.lse);
}

// An answer file: the header fields, then nb bytes
static void ans_write(const char *path, int32_t magic, int32_t n, int32_t rowT, int32_t count, const unsigned char *b, size_t nb) {
    int32_t h[256] = {magic, 1, n, rowT, count};
    FILE *f = fopen(path, "wb");
    if (!f) { CHECK(0, "cannot create %s", path); return; }
    fwrite(h, sizeof h, 1, f);
    fwrite(b, 1, nb, f);
    fclose(f);
}
// dataloader_init must fail with a message containing `word`
static void ans_expect_init_error(const char *pattern, int T, const char *word) {
    DataLoader d;
    char err[1024] = "";
    int rc = dataloader_init(&d, pattern, 1, T, 1000, err, sizeof(err));
    CHECK(rc == -1 && strstr(err, word), "%s at T=%d: rc %d, '%s' (wanted '%s')", pattern, T, rc, err, word);
    if (rc == 0) dataloader_free(&d);
}
// The answer files (common/dataloader.h): answers[i] is the byte of target i's token, mask_targets turns the others
// into ANSWER_IGNORE, and a wrong row length, a missing, foreign, short, non-0/1 or miscounted file is refused.
static void test_answer_file_reader(void) {
    char dir[64], a[128], aa[128], b[128], bb[128], pat[160], err[1024];
    if (dt_mkdir(dir, sizeof(dir))) return;
    snprintf(a, sizeof(a), "%s/a.bin", dir); snprintf(aa, sizeof(aa), "%s/a.ans", dir);
    snprintf(b, sizeof(b), "%s/b.bin", dir); snprintf(bb, sizeof(bb), "%s/b.ans", dir);
    enum { T = 64, N = 2 * T + 1 };
    unsigned char ans[N];
    int count = 0;
    for (int j = 0; j < N; j++) { ans[j] = j < 2 * T && j % T >= 40; count += ans[j]; }
    dt_write_ramp(a, 100, N);
    ans_write(aa, 20261128, N, T, count, ans, N);
    char p[256];
    dataloader_answers_path("x/y.bin", p, sizeof(p)); CHECK(!strcmp(p, "x/y.ans"), "%s", p);
    dataloader_answers_path("x/data", p, sizeof(p)); CHECK(!strcmp(p, "x/data.ans"), "%s", p);
    DataLoader d;
    CHECK(dataloader_init(&d, a, 1, T, 1000, err, sizeof(err)) == 0, "%s", err);
    CHECK(d.has_answers, "the answer file was not found");
    CHECK(dataloader_batches(&d, err, sizeof(err)) == 2, "dataloader_batches %ld", dataloader_batches(&d, err, sizeof(err)));
    for (int batch = 0; batch < 2; batch++) {
        d.mask_targets = batch == 1;
        CHECK(dataloader_next_batch(&d, err, sizeof(err)) == 0, "%s", err);
        int scored = 0;
        for (int i = 0; i < T; i++) {
            int j = batch * T + i + 1; // the target's token in the shard
            CHECK(d.answers[i] == ans[j], "batch %d: answers[%d] = %d, byte %d", batch, i, d.answers[i], ans[j]);
            int want = batch == 1 && !ans[j] ? ANSWER_IGNORE : 100 + j;
            CHECK(d.targets[i] == want, "batch %d: targets[%d] = %d, want %d", batch, i, d.targets[i], want);
            scored += ans[j];
        }
        if (batch == 1) CHECK(targets_scored(d.targets, T) == scored, "targets_scored %d, want %d", targets_scored(d.targets, T), scored);
    }
    dataloader_free(&d);
    ans_expect_init_error(a, 2 * T, "rows of 64 tokens"); // -t 128 would cut the rows elsewhere
    dt_write_ramp(b, 100, N);                              // b.bin without b.ans beside a.bin with a.ans
    snprintf(pat, sizeof(pat), "%s/*.bin", dir);
    ans_expect_init_error(pat, T, "b.ans: missing");
    remove(b);
    ans_write(aa, 42, N, T, count, ans, N);
    ans_expect_init_error(a, T, "not an answer file");
    ans_write(aa, 20261128, N, T, count, ans, N - 1);
    ans_expect_init_error(a, T, "answer bytes");
    ans[5] = 2;
    ans_write(aa, 20261128, N, T, count, ans, N);
    ans_expect_init_error(a, T, "not 0 or 1");
    ans[5] = 0;
    ans_write(aa, 20261128, N, T, count + 1, ans, N);
    ans_expect_init_error(a, T, "answers, the file marks");
    remove(aa); // no answer files at all: plain data
    CHECK(dataloader_init(&d, a, 1, T, 1000, err, sizeof(err)) == 0 && !d.has_answers, "plain shard: %s", err);
    dataloader_free(&d);
    dt_rmdir(dir);
}

// dev/data/recall.py's output read back through the dataloader (needs python3 with numpy, else skipped): the rows
// of every task as the generator documents them, answers where they belong, and the same bytes from the same seed.
static int py_numpy(void) { return system("python3 -c 'import numpy' > /dev/null 2>&1") == 0; }
static void recall_gen(const char *dir, const char *task, const char *args) {
    char cmd[1200], msg[1024];
    snprintf(cmd, sizeof(cmd), "python3 dev/data/recall.py %s %s --train_rows 8 --val_rows 8 --outdir %s/%s", task, args, dir, task);
    CHECK(run_cmd(cmd, msg, sizeof(msg)) == 0, "%s: %s", cmd, msg);
}
// The val rows of a task at row length T (B = 8 rows) into d; the tokenizer's pieces into tok
static int recall_load(DataLoader *d, Tokenizer *tok, const char *dir, const char *task, int T) {
    char glob[300], src[300], err[1024];
    snprintf(glob, sizeof(glob), "%s/%s/val.bin", dir, task);
    int V = data_vocab(glob, tok, src, sizeof(src), err, sizeof(err));
    if (V < 0 || dataloader_init(d, glob, 8, T, V, err, sizeof(err)) || dataloader_next_batch(d, err, sizeof(err))) {
        CHECK(0, "%s: %s", glob, err);
        return -1;
    }
    CHECK(d->has_answers, "%s: no answers", glob);
    return V;
}
static void test_answer_recall_generator(void) {
    if (!py_numpy()) { printf("  skipped: needs python3 with numpy (dev/data/requirements.txt)\n"); return; }
    char dir[64], cmd[400], a[200], b[200];
    if (dt_mkdir(dir, sizeof(dir))) return;
    recall_gen(dir, "copy", "--T 64 --V 16 --val_lengths 128");
    recall_gen(dir, "mqar", "--T 64 --V 16 --pairs 4");
    recall_gen(dir, "passkey", "--T 128");
    recall_gen(dir, "selcopy", "--T 64 --V 16 --tokens 8");
    DataLoader d;
    Tokenizer tok;
    // copy: [0] x [0] x, answers the second x (row positions 33..63)
    if (recall_load(&d, &tok, dir, "copy", 64) == 16) {
        for (int r = 0; r < 8; r++) {
            const int *in = d.inputs + r * 64, *tg = d.targets + r * 64;
            CHECK(in[0] == 0 && in[32] == 0, "copy row %d does not start [0] .. [0]", r);
            for (int t = 1; t < 32; t++) CHECK(in[t] == in[t + 32] && in[t] > 0, "copy row %d: position %d", r, t);
            for (int t = 0; t < 64; t++) CHECK(d.answers[r * 64 + t] == (t + 1 >= 33 && t + 1 <= 63), "copy row %d: answer at %d", r, t);
            CHECK(tg[63] == 0, "copy row %d: the next row does not start with 0", r);
        }
    }
    dataloader_free(&d); tokenizer_free(&tok);
    // mqar: each answer is the value its query key (the input before it) has in the row's pairs
    if (recall_load(&d, &tok, dir, "mqar", 64) == 16) {
        for (int r = 0; r < 8; r++) {
            const int *in = d.inputs + r * 64, *tg = d.targets + r * 64;
            int n = 0;
            for (int t = 0; t < 64; t++) {
                if (!d.answers[r * 64 + t]) continue;
                n++;
                int v = -1;
                for (int k = 1; k < 9; k += 2) if (in[k] == in[t]) v = in[k + 1];
                CHECK(t >= 9 && v == tg[t] && v >= 8, "mqar row %d position %d: key %d, value %d, target %d", r, t, in[t], v, tg[t]);
            }
            CHECK(n == 4, "mqar row %d: %d answers", r, n);
        }
    }
    dataloader_free(&d); tokenizer_free(&tok);
    // passkey: the last 5 tokens are the answers, the digits that follow "pass key is " in the needle
    if (recall_load(&d, &tok, dir, "passkey", 128) > 0) {
        for (int r = 0; r < 8; r++) {
            char text[200];
            const int *in = d.inputs + r * 128, *tg = d.targets + r * 128;
            for (int t = 0; t < 127; t++) text[t] = tokenizer_decode(&tok, tg[t])[0];
            text[127] = 0;
            const char *needle = strstr(text, " The pass key is "), *query = strstr(text, "\nThe pass key is ");
            CHECK(in[0] == 0 && needle && query && query > needle && !strncmp(needle + 17, text + 122, 5),
                  "passkey row %d: '%s'", r, text);
            for (int t = 0; t < 128; t++) CHECK(d.answers[r * 128 + t] == (t >= 122 && t <= 126), "passkey row %d: answer at %d", r, t);
        }
    }
    dataloader_free(&d); tokenizer_free(&tok);
    // selcopy: the 8 data tokens of the region, in order, after the marker (2) are the answers
    if (recall_load(&d, &tok, dir, "selcopy", 64) == 16) {
        for (int r = 0; r < 8; r++) {
            const int *in = d.inputs + r * 64;
            int data[8], n = 0;
            for (int t = 1; t < 55; t++) if (in[t] != 1 && n < 8) data[n++] = in[t];
            CHECK(n == 8 && in[55] == 2, "selcopy row %d: %d data tokens, marker %d", r, n, in[55]);
            for (int k = 0; k < 8; k++) CHECK(in[56 + k] == data[k], "selcopy row %d: output %d", r, k);
            for (int t = 0; t < 64; t++) CHECK(d.answers[r * 64 + t] == (t >= 55 && t < 63), "selcopy row %d: answer at %d", r, t);
        }
    }
    dataloader_free(&d); tokenizer_free(&tok);
    // the longer val rows exist, and the same command writes the same bytes
    snprintf(a, sizeof(a), "%s/copy/val_T128.ans", dir);
    CHECK(access(a, R_OK) == 0, "%s missing", a);
    snprintf(cmd, sizeof(cmd), "python3 dev/data/recall.py copy --T 64 --V 16 --train_rows 8 --val_rows 8 --outdir %s/again > /dev/null", dir);
    CHECK(system(cmd) == 0, "%s", cmd);
    snprintf(a, sizeof(a), "%s/copy/train.bin", dir); snprintf(b, sizeof(b), "%s/again/train.bin", dir);
    CHECK(files_equal(a, b), "copy: the same seed wrote different train shards");
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    CHECK(system(cmd) == 0, "cleanup");
}

// The evaluation-only mode (-E 1, doc/model.md §13.2) on a checkpoint written here, against the plain forward pass of
// the same weights: the loss over every position, the answers' count, loss and accuracy in all and per bucket. The
// model copies its input (head = embedding, large; the layers' 0.02 weights a small perturbation), and the data's
// answers in the first chunk repeat the token before them while those after it do not, so a wrong mask or bucket
// shows in every number. Then -o (the latest checkpoint, nothing written), and the errors: vocabulary, a missing
// answer file, rows of another length, no model, -w 1 without answers; and two -w 1 training steps.
static void ev_write_tokenizer(const char *path, int V) {
    int32_t h[256] = {20251122, 1, V, 0};
    FILE *f = fopen(path, "wb");
    if (!f) { CHECK(0, "cannot create %s", path); return; }
    fwrite(h, sizeof h, 1, f);
    for (int i = 0; i < V; i++) { unsigned char piece[2] = {1, (unsigned char)('a' + i)}; fwrite(piece, 1, 2, f); }
    fclose(f);
}
// rows of T tokens over 1..V-1 (+ a trailing 0) in DIR/NAME.bin, with DIR/NAME.ans unless ans = 0
static void ev_write_rows(const char *dir, const char *name, int rows, int T, int V, int ans) {
    size_t n = (size_t)rows * T + 1;
    uint16_t *tok = xcalloc(n, sizeof(uint16_t));
    unsigned char *a = xcalloc(n, 1);
    int count = 0;
    uint64_t rng = rng_seed(77);
    for (size_t j = 0; j < n - 1; j++) {
        int p = (int)(j % T);
        tok[j] = p == 0 ? 0 : (uint16_t)(1 + rng_u32(&rng) % (V - 1));
        if (p == 0 || rng_u32(&rng) % 3) continue;
        if (p < NATSL_CHUNK) tok[j] = tok[j - 1] ? tok[j - 1] : 1; // an answer that repeats its input
        else while (tok[j] == tok[j - 1]) tok[j] = (uint16_t)(1 + rng_u32(&rng) % (V - 1));
        a[j] = 1; count++;
    }
    char path[300];
    snprintf(path, sizeof(path), "%s/%s.bin", dir, name);
    dt_write_shard(path, 20240520, 1, (int32_t)n, tok, n);
    snprintf(path, sizeof(path), "%s/%s.ans", dir, name);
    if (ans) ans_write(path, 20261128, (int32_t)n, T, count, a, n);
    free(tok); free(a);
}
static void test_answer_eval_mode(void) {
    if (access(g_trainer, X_OK)) { CHECK(0, "%s not built (run make test)", g_trainer); return; }
    char dir[64], path[300], ckpt[300], args[1600], cmd[2000], msg[1024], err[1024];
    if (dt_mkdir(dir, sizeof(dir))) return;
    enum { T = 128, V = 16, B = 2 };
    ev_write_rows(dir, "val", 4, T, V, 1);
    snprintf(path, sizeof(path), "%s/tokenizer.bin", dir); ev_write_tokenizer(path, V);
    Config cf;
    config_from_preset(&cf, "tiny", V);
    CHECK(config_set_pattern(&cf, "NA", err, sizeof(err)) == 0, "%s", err);
    Model M;
    model_build(&M, &cf);
    model_init(&M, 5);
    uint64_t rng = rng_seed(3);
    for (int i = 0; i < cf.Vp * cf.D; i++) M.p.wte[i] = M.p.head[i] = 0.1 * rng_normal(&rng);
    snprintf(ckpt, sizeof(ckpt), "%s/m.bin", dir);
    CHECK(save_model(&M, ckpt, err, sizeof(err)) == 0, "%s", err);
    model_free(&M);
    // the expected numbers: the checkpoint as written (float32), the plain forward pass on the 2 batches
    double sum_loss = 0, bn[3] = {0}, bl[3] = {0}, bh[3] = {0};
    DataLoader d;
    snprintf(path, sizeof(path), "%s/val.bin", dir);
    CHECK(load_model(&M, ckpt, err, sizeof(err)) == 0 && dataloader_init(&d, path, B, T, V, err, sizeof(err)) == 0, "%s", err);
    model_alloc_acts(&M, B, T, 0);
    float loss[B * T];
    unsigned char hit[B * T];
    for (int b = 0; b < 2; b++) {
        CHECK(dataloader_next_batch(&d, err, sizeof(err)) == 0, "%s", err);
        model_forward(&M, d.inputs, d.targets, B, T);
        sum_loss += M.mean_loss / 2;
        token_scores(&M, d.targets, B * T, loss, hit);
        for (int i = 0; i < B * T; i++)
            if (d.answers[i]) { int k = position_bucket(i % T + 1); bn[k]++; bl[k] += loss[i]; bh[k] += hit[i]; }
    }
    dataloader_free(&d);
    model_free(&M);
    CHECK(bn[0] > 10 && bn[1] > 10 && bn[2] == 0, "answers per bucket %g %g %g", bn[0], bn[1], bn[2]);
    CHECK(bh[0] > 0.9 * bn[0] && bh[1] < 0.1 * bn[1], "the copying model: accuracy %g/%g, %g/%g", bh[0], bn[0], bh[1], bn[1]);
    snprintf(args, sizeof(args), "-j %s/val.bin -t %d -b %d -m 5", dir, T, B);
    for (int run = 0; run < 2; run++) { // -e the checkpoint; -o a run directory holding it as its latest
        char rd[200];
        snprintf(rd, sizeof(rd), "%s/run", dir);
        if (run == 0) snprintf(cmd, sizeof(cmd), "%s -E 1 -e %s %s", g_trainer, ckpt, args);
        else {
            snprintf(cmd, sizeof(cmd), "mkdir %s && cp %s %s/model_00000007.bin && touch %s/state_00000007.bin", rd, ckpt, rd, rd);
            CHECK(system(cmd) == 0, "%s", cmd);
            snprintf(cmd, sizeof(cmd), "%s -E 1 -o %s %s", g_trainer, rd, args);
        }
        CHECK(run_cmd(cmd, msg, sizeof(msg)) == 0, "%s: %s", cmd, msg);
        FILE *f = fopen(g_stdout_path, "r");
        char line[1024];
        int batches = 0, seen[3] = {0}, total = 0, sfr = 0, note = 0, named = 0;
        double l = -1, n, al, acc;
        long lo, hi;
        while (f && fgets(line, sizeof(line), f)) {
            int bb, bt;
            if (sscanf(line, "eval: %d batches of B=%d x T=%d | loss %lf", &batches, &bb, &bt, &l) == 4) continue;
            if (strstr(line, "note: -m 5: the val shards hold 2 batches")) note = 1;
            if (strstr(line, "model_00000007.bin")) named = 1;
            if (sscanf(line, "eval answers: n %lf | loss %lf | accuracy %lf", &n, &al, &acc) == 3) {
                total = 1;
                double N = bn[0] + bn[1];
                CHECK(n == N && fabs(al - (bl[0] + bl[1]) / N) < 1e-4 * (1 + fabs(al)) && fabs(acc * N - (bh[0] + bh[1])) <= 1,
                      "answers: n %g loss %g accuracy %g, the forward pass: %g, %g, %g", n, al, acc, N, (bl[0] + bl[1]) / N, (bh[0] + bh[1]) / N);
            }
            if (sscanf(line, "eval answers at positions %ld-%ld: n %lf | loss %lf | accuracy %lf", &lo, &hi, &n, &al, &acc) == 5) {
                int k = position_bucket(lo);
                CHECK(k < 2 && lo == (k ? 64 : 1) && hi == (k ? 127 : 63), "bucket %ld-%ld", lo, hi);
                if (k >= 2) continue;
                seen[k] = 1;
                CHECK(n == bn[k] && fabs(al - bl[k] / bn[k]) < 1e-4 * (1 + fabs(al)) && fabs(acc * n - bh[k]) <= 1,
                      "bucket %d: n %g loss %g accuracy %g, the forward pass: %g, %g, %g", k, n, al, acc, bn[k], bl[k] / bn[k], bh[k] / bn[k]);
            }
            double f0, f1;
            if (sscanf(line, "eval: | softmax frac l0: %lf %lf", &f0, &f1) == 2) sfr = f0 >= 0 && f0 <= 1 && f1 >= 0 && f1 <= 1;
        }
        if (f) fclose(f);
        CHECK(batches == 2 && note && fabs(l - sum_loss) < 1e-4 * (1 + sum_loss), "batches %d (note %d), loss %g, the forward pass %g",
              batches, note, l, sum_loss);
        CHECK(total && seen[0] && seen[1] && sfr, "missing lines: answers %d, buckets %d %d, softmax fractions %d", total, seen[0], seen[1], sfr);
        if (run == 1) {
            CHECK(named, "-o: the latest checkpoint is not named");
            snprintf(cmd, sizeof(cmd), "test $(ls -A %s | wc -l) -eq 2", rd);
            CHECK(system(cmd) == 0, "-E 1 -o wrote into the run directory");
        }
    }
    // errors: the data's vocabulary against the checkpoint's, a shard without its answer file, rows of another length
    char d2[300];
    snprintf(d2, sizeof(d2), "%s/v20", dir);
    mkdir(d2, 0755);
    ev_write_rows(d2, "val", 4, T, V, 1);
    snprintf(path, sizeof(path), "%s/tokenizer.bin", d2); ev_write_tokenizer(path, 20);
    snprintf(args, sizeof(args), "-E 1 -e %s -j %s/val.bin -t %d -b %d", ckpt, d2, T, B); expect_error(args, "the data's is V=20");
    snprintf(path, sizeof(path), "%s/tokenizer.bin", d2); ev_write_tokenizer(path, V);
    ev_write_rows(d2, "val2", 4, T, V, 0);
    snprintf(args, sizeof(args), "-E 1 -e %s -j '%s/val*.bin' -t %d -b %d", ckpt, d2, T, B); expect_error(args, "val2.ans: missing");
    snprintf(args, sizeof(args), "-E 1 -e %s -j %s/val.bin -t 64 -b %d", ckpt, dir, B); expect_error(args, "rows of 128 tokens");
    snprintf(args, sizeof(args), "-E 1 -j %s/val.bin -t %d", dir, T); expect_error(args, "-E 1 needs a model");
    expect_error("-w 1 -b 1 -t 64 -x 1 -v 0 -s 0", "-w 1");
    // two steps on the answers only, the val line with the answers' numbers
    snprintf(cmd, sizeof(cmd), "%s -i %s/val.bin -j %s/val.bin -t %d -b 1 -x 2 -v 2 -m 1 -s 0 -a NA -w 1", g_trainer, dir, dir, T);
    CHECK(run_cmd(cmd, msg, sizeof(msg)) == 0, "%s: %s", cmd, msg);
    snprintf(cmd, sizeof(cmd), "grep -q 'step 2: val loss .* | answers: loss .*, accuracy' %s && grep -q 'over the answers only' %s",
             g_stdout_path, g_stdout_path);
    CHECK(system(cmd) == 0, "-w 1: the val line or the note is missing");
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    CHECK(system(cmd) == 0, "cleanup");
}
// -E 1 -Q (doc/recall.md): the routing file of the first val row against the routing of a forward pass over that row
// alone (routers with 0.5 weights, so that both ops occur), every N layer, routed chunk and head; and its errors.
static void test_answer_routing_dump(void) {
    if (access(g_trainer, X_OK)) { CHECK(0, "%s not built (run make test)", g_trainer); return; }
    char dir[64], path[300], ckpt[300], args[1600], cmd[2000], msg[1024], err[1024];
    if (dt_mkdir(dir, sizeof(dir))) return;
    enum { T = 256, V = 16, Nc = T / NATSL_CHUNK };
    ev_write_rows(dir, "val", 4, T, V, 1);
    snprintf(path, sizeof(path), "%s/tokenizer.bin", dir); ev_write_tokenizer(path, V);
    Config cf;
    config_from_preset(&cf, "tiny", V);
    CHECK(config_set_pattern(&cf, "NGN", err, sizeof(err)) == 0, "%s", err);
    Model M;
    model_build(&M, &cf);
    model_init(&M, 5);
    for (int l = 0; l < cf.L; l++) if (cf.pattern[l] == 'N') fill_normal(M.p.layer[l].wr, 2 * cf.H * cf.D, 0.5);
    snprintf(ckpt, sizeof(ckpt), "%s/m.bin", dir);
    CHECK(save_model(&M, ckpt, err, sizeof(err)) == 0, "%s", err);
    model_free(&M);
    // the expected routing: the checkpoint as written (float32), the first row alone
    DataLoader d;
    snprintf(path, sizeof(path), "%s/val.bin", dir);
    CHECK(load_model(&M, ckpt, err, sizeof(err)) == 0 && dataloader_init(&d, path, 1, T, V, err, sizeof(err)) == 0 &&
          dataloader_next_batch(&d, err, sizeof(err)) == 0, "%s", err);
    model_alloc_acts(&M, 1, T, 0);
    model_forward(&M, d.inputs, d.targets, 1, T);
    snprintf(cmd, sizeof(cmd), "%s -E 1 -e %s -j %s/val.bin -t %d -b 2 -m 2 -Q %s/route.csv", g_trainer, ckpt, dir, T, dir);
    CHECK(run_cmd(cmd, msg, sizeof(msg)) == 0, "%s: %s", cmd, msg);
    snprintf(path, sizeof(path), "%s/route.csv", dir);
    FILE *f = fopen(path, "r");
    char line[1024];
    int t = 0, c = 0, h = 0, rows = 0, ops[2] = {0, 0};
    CHECK(f && fgets(line, sizeof(line), f) && sscanf(line, "# routing T=%d C=%d H=%d pattern=NGN ", &t, &c, &h) == 3 &&
          t == T && c == NATSL_CHUNK && h == cf.H, "%s: first line '%s'", path, f ? line : "(missing)");
    CHECK(f && fgets(line, sizeof(line), f) && !strcmp(line, "layer,chunk,head,softmax,p_softmax\n"), "%s: header '%s'", path, line);
    int l, cc, hh, soft;
    double p;
    while (f && fgets(line, sizeof(line), f)) {
        CHECK(sscanf(line, "%d,%d,%d,%d,%lf", &l, &cc, &hh, &soft, &p) == 5 && l >= 0 && l < cf.L && cf.pattern[l] == 'N' &&
              cc >= 0 && cc < Nc - 1 && hh >= 0 && hh < cf.H && (soft == 0 || soft == 1), "%s: line '%s'", path, line);
        if (l < 0 || l >= cf.L || cf.pattern[l] != 'N' || cc < 0 || cc >= Nc - 1 || hh < 0 || hh >= cf.H) break;
        size_t i = ((size_t)cc * cf.H + hh) * 2;
        double pref = M.la[l].rpi[i];
        CHECK(fabs(p - pref) < 1e-4 && (soft == (M.la[l].rmask[i] == 1) || fabs(pref - 0.5) < 1e-5),
              "layer %d chunk %d head %d: file %d %g, the forward pass %g %g", l, cc, hh, soft, p, (double)M.la[l].rmask[i], pref);
        CHECK(rows == ((l ? 1 : 0) * (Nc - 1) + cc) * cf.H + hh, "line %d is layer %d chunk %d head %d: out of order", rows, l, cc, hh);
        rows++; ops[soft & 1]++;
    }
    if (f) fclose(f);
    CHECK(rows == 2 * (Nc - 1) * cf.H && ops[0] && ops[1], "%d lines (of %d), %d GDN and %d softmax", rows, 2 * (Nc - 1) * cf.H, ops[0], ops[1]);
    dataloader_free(&d);
    model_free(&M);
    snprintf(args, sizeof(args), "-E 1 -e tiny -a GGA -j %s/val.bin -t %d -b 1 -Q %s/x.csv", dir, T, dir); expect_error(args, "has no N layer");
    snprintf(args, sizeof(args), "-Q %s/x.csv -x 1", dir); expect_error(args, "goes with -E 1");
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    CHECK(system(cmd) == 0, "cleanup");
}
static void test_cli_bad_input(void) {
    if (access(g_trainer, X_OK)) { CHECK(0, "%s not built (run make test)", g_trainer); return; }
    char dir[] = "/tmp/natsl_cli_XXXXXX", p[512], args[1200];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    expect_error("-t 100", "multiple of 64");
    expect_error("-a GXN", "pattern");
    expect_error("-k 3", "recompute level");
    expect_error("-p fp16", "precision must be fp32 or bf16");
    expect_error("-C tanh", "-C tanh: the output gate's activation is silu or sigmoid");
    expect_error("-a HH -W 1,x", "-W 1,x: one window, or a comma-separated list of 2");
    expect_error("-a GGGG -W 5", "has no H layer");
    expect_error("-a HH -U 0", "-U 0: out of range");
    expect_error("-B -0.5", "-B -0.5: out of range");
    expect_error("-F 1", "-F 1: out of range");
    expect_error("-G 1 -M 0", "-M 0: out of range");
    expect_error("-a GSNS -S -1", "-S -1: out of range");
    expect_error("-a GSNS -K 0", "-K 0: out of range");
    expect_error("-e nosuchpreset", "no such file");
    expect_error("-i /nonexistent/*.bin", "/nonexistent");
    // a truncated shard, a shard with a wrong magic, a shard with an out-of-range token
    int32_t h[256] = {20240520, 1, 20000};
    uint16_t *tok = xcalloc(20000, sizeof(uint16_t));
    snprintf(p, sizeof(p), "%s/trunc.bin", dir);
    FILE *f = fopen(p, "wb"); fwrite(h, 4, 256, f); fwrite(tok, 2, 19000, f); fclose(f);
    snprintf(args, sizeof(args), "-i %s -x 1", p); expect_error(args, "trunc.bin");
    h[0] = 42;
    snprintf(p, sizeof(p), "%s/magic.bin", dir);
    f = fopen(p, "wb"); fwrite(h, 4, 256, f); fwrite(tok, 2, 20000, f); fclose(f);
    snprintf(args, sizeof(args), "-i %s -x 1", p); expect_error(args, "magic.bin");
    h[0] = 20240520; tok[777] = 50300;
    snprintf(p, sizeof(p), "%s/range.bin", dir);
    f = fopen(p, "wb"); fwrite(h, 4, 256, f); fwrite(tok, 2, 20000, f); fclose(f);
    snprintf(args, sizeof(args), "-i %s -x 1", p); expect_error(args, "range.bin");
    // a checkpoint that is not one
    snprintf(p, sizeof(p), "%s/model_00000001.bin", dir);
    f = fopen(p, "wb"); fwrite(tok, 2, 20000, f); fclose(f);
    snprintf(args, sizeof(args), "-e %s", p); expect_error(args, "model_00000001.bin");
    free(tok);
    // a second fresh run into the same output dir must not overwrite the first one's log and checkpoints
    char cmd[1200], msg[1024];
    snprintf(cmd, sizeof(cmd), "%s -b 1 -t 64 -x 1 -v 0 -s 0 -o %s/run", g_trainer, dir);
    CHECK(run_cmd(cmd, msg, sizeof(msg)) == 0, "short run failed: %s", msg);
    snprintf(args, sizeof(args), "-b 1 -t 64 -x 1 -v 0 -s 0 -o %s/run", dir); expect_error(args, "already holds a run");
    snprintf(p, sizeof(p), "%s/run/model_00000001.bin", dir);
    CHECK(access(p, F_OK) == 0, "the first run's checkpoint is gone");
    snprintf(args, sizeof(args), "rm -rf %s", dir);
    CHECK(system(args) == 0, "cleanup");
}
// The generate mode (-N, doc/model.md §13) of the trainer: a prompt through the character vocabulary, the text, the
// speed and the cache line; the same seed gives the same text; bad prompts and flags get one-line errors.
static void test_cache_generate_cli(void) {
    char cmd[1024], msg[1024], out[2][4096];
    for (int run = 0; run < 2; run++) {
        snprintf(cmd, sizeof(cmd), "%s -a GNAN -N 100 -P 'ROMEO:' -T 0.8 -O 5 -r 3", g_trainer); // 107 tokens: a chunk routed
        int rc = run_cmd(cmd, msg, sizeof(msg));
        FILE *f = fopen(g_stdout_path, "r");
        size_t n = f ? fread(out[run], 1, sizeof(out[run]) - 1, f) : 0;
        out[run][n] = 0;
        if (f) fclose(f);
        CHECK(rc == 0, "%s: exit %d (%s)", cmd, rc, msg);
    }
    char *text = strstr(out[0], "---\nROMEO:"), *end = text ? strstr(text + 4, "\n---\n") : NULL;
    CHECK(end != NULL, "the output does not show the prompt and the text: %s", out[0]);
    CHECK(strstr(out[0], "decode: 100 tokens") && strstr(out[0], "cache: ") && strstr(out[0], "a Transformer of the same") &&
          strstr(out[0], "softmax fraction of the completed chunks: l1 "), "the speed or the cache line is missing: %s", out[0]);
    if (end) *end = 0;
    CHECK(end && strstr(out[1], text), "the same seed gave another text");
    expect_error("-N 5 -P 'caf\xc3\xa9'", "not in the vocabulary");
    expect_error("-P x", "go with -N");
    expect_error("-N 5 -I 1,x", "not a token id");
    expect_error("-N 5 -I 66", "below V = 66");
    expect_error("-N 5 -P a -I 3", "give one");
    expect_error("-N 5 -T -1", "temperature");
    expect_error("-N 5 -i data/tinyshakespeare_train.bin -j data/tinyshakespeare_val.bin -P hi", "not a character vocabulary");
}
// trainer with the flags common into dir/full (6 steps) and dir/split (3, a resume, 3 more; `before`: shell commands
// run before the split run): both runs' step-6 checkpoints must be equal.
static void check_resume(const char *trainer, const char *common, const char *dir, const char *before) {
    char cmd[2048], msg[1024], a[600], b[600];
    snprintf(cmd, sizeof(cmd), "%s %s -o %s/full", trainer, common, dir);
    CHECK(run_cmd(cmd, msg, sizeof(msg)) == 0, "full run failed: %s", msg);
    snprintf(cmd, sizeof(cmd), "%s%s %s -o %s/split -n 3 && rm %s/split/model_00000006.bin %s/split/state_00000006.bin"
             " && %s %s -o %s/split -y 1", before, trainer, common, dir, dir, dir, trainer, common, dir);
    CHECK(run_cmd(cmd, msg, sizeof(msg)) == 0, "split run failed: %s", msg);
    snprintf(a, sizeof(a), "%s/full/model_00000006.bin", dir);
    snprintf(b, sizeof(b), "%s/split/model_00000006.bin", dir);
    CHECK(files_equal(a, b), "%s: resumed model differs from the uninterrupted one (%s)", trainer, common);
    snprintf(a, sizeof(a), "%s/full/state_00000006.bin", dir);
    snprintf(b, sizeof(b), "%s/split/state_00000006.bin", dir);
    CHECK(files_equal(a, b), "%s: resumed optimizer state differs (%s)", trainer, common);
}
// Six steps in one go equal three steps, a resume from the checkpoint, and three more: bit for bit; plain, and with
// every §7 option on (the ST-Gumbel noise stream is part of the state file).
// dev/export_hf.py and dev/import_hf.py (doc/export.md) on checkpoints of the trainer (GNGN, and all N with RoPE):
// natsl.c -> HF -> natsl.c keeps the header and every parameter bit for bit except the vocabulary's padding rows of
// the embedding and the head, which the authors' model has no room for (the import writes them 0) and no output
// reads (-E 1 gives the same loss); a second round trip is byte-identical; bf16 rounds each value to the nearest.
// The trainer runs on one thread here: these tiny runs gain nothing from more, and on a busy machine OpenMP's
// barriers make them many times slower.
#define HF_ONE_THREAD "OMP_NUM_THREADS=1 "
static int py_safetensors(void) { return system("python3 -c 'import numpy, safetensors' > /dev/null 2>&1") == 0; }
static int hf_roundtrip(const char *from, const char *hf, const char *to, const char *dtype) {
    char cmd[1200], msg[1024];
    snprintf(cmd, sizeof(cmd), "(python3 dev/export_hf.py %s %s --dtype %s && python3 dev/import_hf.py %s %s)", from, hf,
             dtype, hf, to);
    int rc = run_cmd(cmd, msg, sizeof(msg));
    CHECK(rc == 0, "%s: %s", cmd, msg);
    return rc;
}
static float *hf_read_params(const char *path, Config *c, size_t *n) { // NULL (after a failed check) if unreadable
    char err[1024];
    ParamTensor t[NATSL_MAX_TENSORS];
    if (ckpt_read_model_config(path, c, err, sizeof(err))) { CHECK(0, "%s", err); return NULL; }
    param_tensors(c, t, n);
    float *w = xcalloc(*n, sizeof(float));
    if (ckpt_read_floats(path, CKPT_HEADER_BYTES, w, *n, 1, err, sizeof(err))) { CHECK(0, "%s", err); free(w); return NULL; }
    return w;
}
// The first line of the last command's stdout that holds word, into line (empty when none does)
static void stdout_line(const char *word, char *line, size_t n) {
    FILE *f = fopen(g_stdout_path, "r");
    line[0] = 0;
    while (f && fgets(line, (int)n, f) && !strstr(line, word)) line[0] = 0;
    if (f) fclose(f);
}
static int stdout_has(const char *word) { char line[1024]; stdout_line(word, line, sizeof(line)); return line[0] != 0; }
static void hf_eval_loss(const char *model, char *line, size_t n) { // the -E 1 loss line of a model on 2 val batches
    char cmd[1200], msg[1024];
    snprintf(cmd, sizeof(cmd), HF_ONE_THREAD "%s -E 1 -e %s -j data/tinyshakespeare_char/val.bin -b 1 -t 128 -m 2", g_trainer, model);
    CHECK(run_cmd(cmd, msg, sizeof(msg)) == 0, "%s: %s", cmd, msg);
    stdout_line("over every position", line, n);
    CHECK(line[0], "%s printed no loss line", model);
}
// The GNGN checkpoint a and its round trip b further: the same -E 1 loss, a second round trip byte-identical, and
// through bf16 every value rounded to its nearest bf16 (relative error at most 2^-8, the low 16 bits 0); and the part
// of dev/compare_hf.py that needs no torch runs on a (export, import, the token shard, natsl.c's dump).
static void hf_roundtrip_further(const char *dir, const char *a, const char *b) {
    char la[256], lb[256], hf[200], c[200], d[200], cmd[1200], msg[1024];
    snprintf(cmd, sizeof(cmd), HF_ONE_THREAD "python3 dev/compare_hf.py --natsl-only --trainer %s --model %s -b 1 -t 128 --workdir %s/cmp",
             g_trainer, a, dir);
    CHECK(run_cmd(cmd, msg, sizeof(msg)) == 0 && stdout_has("85 of 85 HF tensors bit-identical [ok]") &&
          stdout_has("natsl.c"), "%s: %s", cmd, msg);
    hf_eval_loss(a, la, sizeof(la));
    hf_eval_loss(b, lb, sizeof(lb));
    CHECK(!strcmp(la, lb), "-E 1 loss '%s' before the round trip, '%s' after", la, lb);
    snprintf(hf, sizeof(hf), "%s/hf2", dir);
    snprintf(c, sizeof(c), "%s/c.bin", dir);
    if (hf_roundtrip(b, hf, c, "fp32") == 0) CHECK(files_equal(b, c), "the second round trip changed bytes");
    snprintf(hf, sizeof(hf), "%s/hf3", dir);
    snprintf(d, sizeof(d), "%s/d.bin", dir);
    if (hf_roundtrip(b, hf, d, "bf16")) return;
    Config cb, cd;
    size_t nb, nd, bad = 0;
    float *wb = hf_read_params(b, &cb, &nb), *wd = hf_read_params(d, &cd, &nd);
    for (size_t i = 0; wb && wd && nd == nb && i < nb; i++) {
        uint32_t bits;
        memcpy(&bits, &wd[i], 4);
        bad += (bits & 0xffff) || fabsf(wd[i] - wb[i]) > fabsf(wb[i]) * 0x1p-8f;
    }
    CHECK(wb && wd && nd == nb && bad == 0, "%zu values not rounded to their nearest bf16", bad);
    free(wb); free(wd);
}
static void test_export_hf_roundtrip(void) {
    if (!py_safetensors()) { printf("  skipped: needs python3 with numpy and safetensors (pip install numpy safetensors)\n"); return; }
    if (access(g_trainer, X_OK)) { CHECK(0, "%s not built (run make test)", g_trainer); return; }
    const char *archs[2] = {"GNGN", "natsl"};
    for (int k = 0; k < 2; k++) {
        char dir[] = "/tmp/natsl_hf_XXXXXX", cmd[1200], msg[1024], a[200], b[200], hf[200];
        CHECK(mkdtemp(dir) != NULL, "mkdtemp");
        snprintf(cmd, sizeof(cmd), HF_ONE_THREAD "%s -a %s -b 1 -t 64 -x 1 -v 0 -s 0 -o %s/run", g_trainer, archs[k], dir);
        CHECK(run_cmd(cmd, msg, sizeof(msg)) == 0, "%s: %s", cmd, msg);
        snprintf(a, sizeof(a), "%s/run/model_00000001.bin", dir);
        snprintf(b, sizeof(b), "%s/b.bin", dir);
        snprintf(hf, sizeof(hf), "%s/hf", dir);
        if (hf_roundtrip(a, hf, b, "fp32") == 0) {
            int ha[256], hb[256];
            CHECK(!ckpt_read_header(a, ha, msg, sizeof(msg)) && !ckpt_read_header(b, hb, msg, sizeof(msg)) &&
                  !memcmp(ha, hb, sizeof(ha)), "%s: the header changed on the way through the HF format", archs[k]);
            Config ca, cb;
            size_t na, nb;
            float *wa = hf_read_params(a, &ca, &na), *wb = hf_read_params(b, &cb, &nb);
            if (wa && wb && na == nb) {
                size_t pad = (size_t)(ca.Vp - ca.V) * ca.D, wte_end = (size_t)ca.Vp * ca.D, moved = 0, unzeroed = 0;
                for (size_t i = 0; i < na; i++) {
                    if ((i >= wte_end - pad && i < wte_end) || i >= na - pad) unzeroed += wb[i] != 0;
                    else moved += memcmp(&wa[i], &wb[i], sizeof(float)) != 0;
                }
                CHECK(moved == 0 && unzeroed == 0, "%s: %zu parameters changed, %zu padding values not 0", archs[k], moved, unzeroed);
                printf("  %-6s rope %d: %zu parameters identical, %zu padding values 0\n", archs[k], ca.rope, na - 2 * pad, 2 * pad);
            }
            free(wa); free(wb);
            if (k == 0) hf_roundtrip_further(dir, a, b);
        }
        snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
        CHECK(system(cmd) == 0, "cleanup");
    }
}
// What the authors' model cannot express stops the export with one line naming the file, nonzero exit and no folder
// written: A and S layers, no N layer, the sigmoid gate; and the import refuses configs away from natsl.c's layers.
static void hf_expect_error(const char *cmd, const char *file, const char *word) {
    char msg[1024], line[1024];
    int rc = run_cmd(cmd, msg, sizeof(msg)), lines = 0;
    FILE *f = fopen(g_stderr_path, "r");
    while (f && fgets(line, sizeof(line), f)) lines++;
    if (f) fclose(f);
    CHECK(rc == 1 && lines == 1 && !strncmp(msg, "error: ", 7) && strstr(msg, file) && strstr(msg, word),
          "'%s': exit %d, %d stderr lines, '%s' (wanted one line naming %s, '%s')", cmd, rc, lines, msg, file, word);
}
static void test_export_hf_bad_input(void) {
    if (!py_safetensors()) { printf("  skipped: needs python3 with numpy and safetensors (pip install numpy safetensors)\n"); return; }
    if (access(g_trainer, X_OK)) { CHECK(0, "%s not built (run make test)", g_trainer); return; }
    const char *cases[5][3] = {{"-a GAGN", "A layer", ""}, {"-a SNGN", "S layer", ""}, {"-a GGGG", "no N layer", ""},
                               {"-a GN -C sigmoid", "sigmoid", ""}, {"-a GN", "", ""}};
    char dir[] = "/tmp/natsl_hf_XXXXXX", cmd[1200], msg[1024], model[200], hf[200];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    snprintf(hf, sizeof(hf), "%s/hf", dir);
    for (int k = 0; k < 5; k++) {
        snprintf(cmd, sizeof(cmd), "rm -rf %s/run && " HF_ONE_THREAD "%s %s -b 1 -t 64 -x 1 -v 0 -s 0 -o %s/run", dir, g_trainer,
                 cases[k][0], dir);
        CHECK(run_cmd(cmd, msg, sizeof(msg)) == 0, "%s: %s", cmd, msg);
        snprintf(model, sizeof(model), "%s/run/model_00000001.bin", dir);
        snprintf(cmd, sizeof(cmd), "python3 dev/export_hf.py %s %s", model, hf);
        if (k < 4) {
            hf_expect_error(cmd, model, cases[k][1]);
            CHECK(access(hf, F_OK) != 0, "%s: a failed export wrote %s", cases[k][0], hf);
        } else CHECK(run_cmd(cmd, msg, sizeof(msg)) == 0, "%s: %s", cmd, msg);
    }
    // configs natsl.c's layers do not implement, each edited into the good export's config.json in turn
    const char *edits[4][2] = {{"s/\"use_gate\": true/\"use_gate\": false/", "use_gate"},
                               {"s/\"nats_block_size\": 64/\"nats_block_size\": 32/", "nats_block_size"},
                               {"s/\"gdn_layers\": \\[/\"gdn_layers\": [7, /", "gdn_layers"},
                               {"s/\"model_type\": \"neural_attention_search_linear_attn_gdn\"/\"model_type\": \"gpt2\"/", "model_type"}};
    char json[256], out[200];
    snprintf(json, sizeof(json), "%s/config.json", hf);
    snprintf(out, sizeof(out), "%s/imported.bin", dir);
    for (int k = 0; k < 4; k++) {
        snprintf(cmd, sizeof(cmd), "cp %s %s.orig && sed -i '%s' %s && ! cmp -s %s %s.orig", json, json, edits[k][0], json, json, json);
        CHECK(system(cmd) == 0, "could not edit %s for %s", json, edits[k][1]);
        snprintf(cmd, sizeof(cmd), "python3 dev/import_hf.py %s %s", hf, out);
        hf_expect_error(cmd, "config.json", edits[k][1]);
        CHECK(access(out, F_OK) != 0, "%s: a failed import wrote %s", edits[k][1], out);
        snprintf(cmd, sizeof(cmd), "mv %s.orig %s", json, json);
        CHECK(system(cmd) == 0, "restore %s", json);
    }
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    CHECK(system(cmd) == 0, "cleanup");
}

static void test_resume_bit_identical(void) {
    if (access(g_trainer, X_OK)) { CHECK(0, "%s not built (run make test)", g_trainer); return; }
    const char *opts[3] = {"", "-B 0.3 -F 0.2 -A 0.01 -G 1 -R 0.9", "-a GSNS -S 0.5 -G 1 -R 0.9"};
    for (int o = 0; o < 3; o++) {
        char dir[] = "/tmp/natsl_resume_XXXXXX", cmd[2048], msg[1024], common[256];
        CHECK(mkdtemp(dir) != NULL, "mkdtemp");
        snprintf(common, sizeof(common), "-b 2 -t 128 -l 1e-3 -u 2 -x 6 -v 3 -m 2 -s 3 -g 8 %s", opts[o]);
        check_resume(g_trainer, common, dir, "");
        snprintf(cmd, sizeof(cmd), "grep -c '^s:6 trl:' %s/split/main.log | grep -q 1 && grep -q '^s:3 tel:' %s/split/main.log"
                 " && grep -q '^s:[0-9]* sfr:[12]:' %s/split/main.log", dir, dir, dir);
        CHECK(system(cmd) == 0, "main.log lacks the expected trl/tel/sfr lines");
        if (o == 1) {
            snprintf(cmd, sizeof(cmd), "grep -c '^s:[0-9]* pen:' %s/split/main.log | grep -q 6 && grep -c '^s:[0-9]* lb:' "
                     "%s/split/main.log | grep -q 6", dir, dir);
            CHECK(system(cmd) == 0, "main.log lacks the pen:/lb: lines of the six steps");
        }
        if (o == 2) { // §7.3: the sel: lines, and -f freezes the last checkpoint to a plain pattern that trains on
            snprintf(cmd, sizeof(cmd), "grep -c '^s:[0-9]* sel:[13]:[AG]:0\\.[0-9]*$' %s/split/main.log | grep -q 12 && "
                     "%s -e %s/split/model_00000006.bin -f %s/frozen.bin > %s/freeze.txt && grep -q 'froze pattern GSNS to G[AG]N[AG]' "
                     "%s/freeze.txt && %s -e %s/frozen.bin -b 2 -t 128 -x 1 -v 0 -s 0", dir, g_trainer, dir, dir, dir, dir, g_trainer, dir);
            CHECK(run_cmd(cmd, msg, sizeof(msg)) == 0, "sel: lines, freezing or training the frozen model failed: %s", msg);
        }
        snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
        CHECK(system(cmd) == 0, "cleanup");
    }
}


// ---- hardening: checkpoints, resume, the run directory, flags, messages ------------------------
// Each test drives the trainer binary (g_trainer) on files it wrote and then corrupted, one field at a time.
#include <malloc.h>
#include <sys/file.h>

// Runs the trainer with args under a time limit (a hang fails instead of stalling the suite): g_hz_limit seconds.
static int g_hz_limit = 120;
static int hz_run(const char *args, char *msg, size_t n) {
    char cmd[2000];
    snprintf(cmd, sizeof(cmd), "timeout %d %s %s", g_hz_limit, g_trainer, args);
    return run_cmd(cmd, msg, n);
}
// The trainer must stop with exit status 1 and a one-line "error: ..." holding every word in words (| separated).
static void hz_expect_error(const char *what, const char *args, const char *words) {
    char msg[2048], w[256];
    int rc = hz_run(args, msg, sizeof(msg));
    msg[strcspn(msg, "\n")] = 0;
    int ok = rc == 1 && !strncmp(msg, "error: ", 7);
    for (const char *p = words; ok && *p;) {
        size_t k = strcspn(p, "|");
        snprintf(w, sizeof(w), "%.*s", (int)k, p);
        ok = strstr(msg, w) != NULL;
        p += k + (p[k] == '|');
    }
    CHECK(ok, "%s: '%s' gave exit %d, stderr '%s' (wanted error with '%s')", what, args, rc, msg, words);
}
// Overwrites int32 number i of a file (header field i, or float i - 256 of the body) with v; returns the old value.
static int32_t hz_poke(const char *path, long i, int32_t v) {
    int32_t old = 0;
    FILE *f = fopen(path, "r+b");
    if (!f) { CHECK(0, "cannot open %s", path); return 0; }
    fseek(f, i * 4, SEEK_SET);
    if (fread(&old, 4, 1, f) != 1) CHECK(0, "short read of %s", path);
    fseek(f, i * 4, SEEK_SET);
    fwrite(&v, 4, 1, f);
    fclose(f);
    return old;
}
static int32_t hz_peek(const char *path, long i) {
    int32_t v = 0;
    FILE *f = fopen(path, "rb");
    if (!f || fseek(f, i * 4, SEEK_SET) || fread(&v, 4, 1, f) != 1) CHECK(0, "cannot read number %ld of %s", i, path);
    if (f) fclose(f);
    return v;
}
static int32_t hz_float_bits(float x) { int32_t b; memcpy(&b, &x, 4); return b; }
// A short run with checkpoints at steps 1 to `steps` in dir/sub (the fixture the corruptions start from).
static int hz_make_run(const char *dir, const char *sub, int steps) {
    char args[1200], msg[1024];
    snprintf(args, sizeof(args), "-b 1 -t 64 -x %d -n 1 -v 0 -s 0 -o %s/%s", steps, dir, sub);
    int rc = hz_run(args, msg, sizeof(msg));
    CHECK(rc == 0, "fixture run failed: %s", msg);
    return rc;
}
static long hz_file_size(const char *p) { struct stat sb; return stat(p, &sb) ? -1 : (long)sb.st_size; }

// Every field of a model file's header is checked, also against the data; the parameters
// must be finite. Loaded with -e and through a resume.
static void test_hz_model_file_fields(void) {
    char dir[] = "/tmp/natsl_hz_XXXXXX", model[600], e_args[1200], y_args[1200];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    if (hz_make_run(dir, "run", 1)) return;
    snprintf(model, sizeof(model), "%s/run/model_00000001.bin", dir);
    snprintf(e_args, sizeof(e_args), "-e %s -b 1 -t 64 -x 1 -v 0 -s 0", model);
    snprintf(y_args, sizeof(y_args), "-b 1 -t 64 -x 2 -v 0 -s 0 -y 1 -o %s/run", dir);
    // (words_y: what the resume says where it differs: a V or RoPE flag that is a valid model by itself no
    // longer matches the fingerprint its state file was written with)
    struct { const char *what; long field; int32_t value; const char *words, *words_y; } cases[] = {
        {"pattern letter X", 33, 'X', "layer 1|G, A, N, S or H", NULL},
        {"pattern letter NUL", 32, 0, "layer 0|G, A, N, S or H", NULL},
        {"pattern letter g", 34, 'g', "G, A, N, S or H", NULL},
        {"vocabulary 1", 9, 1, "vocabulary V=1|V=66", "not a pair"},
        {"vocabulary 100", 9, 100, "vocabulary V=100|V=66", "not a pair"},
        {"vocabulary above the padded rows", 9, 50000, "padded vocabulary must hold the vocabulary", NULL},
        {"RoPE flag 2", 11, 2, "RoPE flag must be 0 or 1", NULL},
        {"reserved field", 20, 7, "header field 20", NULL},
        {"field after the pattern", 32 + 4, 'G', "header field 36", NULL},
        {"D huge", 2, 1 << 30, "exceeds 65536", NULL},
        {"negative count", 14, -1, "parameter", NULL},
        {"parameter NaN", 256 + 1000, 0x7fc00000, "parameter 1000|NaN", NULL},
        {"parameter Inf", 256 + 5, 0x7f800000, "parameter 5|infinite", NULL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int32_t old = hz_poke(model, cases[i].field, cases[i].value);
        hz_expect_error(cases[i].what, e_args, cases[i].words);
        hz_expect_error(cases[i].what, y_args, cases[i].words_y ? cases[i].words_y : cases[i].words);
        hz_poke(model, cases[i].field, old);
    }
    // a flipped RoPE flag is a valid model by itself (GNGN has N layers), but not the one its state was written
    // for: the resume refuses the pair
    int32_t old = hz_poke(model, 11, 1);
    hz_expect_error("flipped RoPE flag", y_args, "state_00000001.bin|not a pair");
    hz_poke(model, 11, old);
    // -e/-a that describe another model than the checkpoint's are refused on resume
    char args[1400];
    snprintf(args, sizeof(args), "%s -a natsl", y_args);
    hz_expect_error("-a on resume", args, "-y 1|run/model_00000001.bin|drop -e/-a");
    snprintf(args, sizeof(args), "%s -a GNGN", y_args);
    char msg[1024];
    CHECK(hz_run(args, msg, sizeof(msg)) == 0, "-a naming the checkpoint's own pattern on resume: %s", msg);
    snprintf(args, sizeof(args), "rm -rf %s", dir);
    CHECK(system(args) == 0, "cleanup");
}

// Every field of a state file's header is checked against the model and the run.
static void test_hz_state_file_fields(void) {
    char dir[] = "/tmp/natsl_hz_XXXXXX", state[600], y_args[1200], args[1300], msg[1024];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    if (hz_make_run(dir, "run", 1)) return;
    snprintf(state, sizeof(state), "%s/run/state_00000001.bin", dir);
    snprintf(y_args, sizeof(y_args), "-b 1 -t 64 -x 2 -v 0 -s 0 -y 1 -o %s/run", dir);
    long nparams = hz_peek(state, 8);
    struct { const char *what; long field; int32_t value; const char *words; } cases[] = {
        {"step INT_MAX", 2, 0x7fffffff, "step 2147483647 out of range"},
        {"step -1", 2, -1, "step -1 out of range"},
        {"step 0", 2, 0, "step 0 out of range"},
        {"step other than the name", 2, 2, "holds step 2, its name says 1"},
        {"RNG 0", 6, 0, "RNG state 0"},
        {"shard -1", 3, -1, "shard index -1"},
        {"shard 5", 3, 5, "shard 5"},
        {"position past the shard", 4, 0x7ffffff0, "token position"},
        {"negative position", 5, -3, "negative data position"},
        {"parameter count", 8, 12345, "state holds 12345 parameters"},
        {"reserved field", 40, 1, "header field 40"},
        {"ranks 0", 14, 0, "0 ranks with ZeRO stage 0"},
        {"ZeRO stage 2", 15, 2, "ZeRO stage 2"},
        {"ZeRO-1 of one rank", 15, 1, "1 ranks with ZeRO stage 1"},
        {"fingerprint", 10, 99, "not a pair"},
        {"first moment NaN", 256 + 77, 0x7fc00000, "first moment 77"},
        {"second moment negative", 256 + nparams + 3, hz_float_bits(-1.0f), "second moment 3|not negative"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int32_t old7 = 0;
        if (!strcmp(cases[i].what, "RNG 0")) old7 = hz_poke(state, 7, 0);
        int32_t old = hz_poke(state, cases[i].field, cases[i].value);
        hz_expect_error(cases[i].what, y_args, cases[i].words);
        hz_poke(state, cases[i].field, old);
        if (!strcmp(cases[i].what, "RNG 0")) hz_poke(state, 7, old7);
    }
    // a run already at -x has nothing to train: refused, not a silent exit 0
    snprintf(args, sizeof(args), "-b 1 -t 64 -x 1 -v 0 -s 0 -y 1 -o %s/run", dir);
    hz_expect_error("step >= -x", args, "at step 1 and -x is 1|nothing left to train");
    // the untouched pair still resumes
    CHECK(hz_run(y_args, msg, sizeof(msg)) == 0, "resume of the restored pair failed: %s", msg);
    snprintf(args, sizeof(args), "rm -rf %s", dir);
    CHECK(system(args) == 0, "cleanup");
}

// -y 1 resumes only from a complete model+state pair; a directory with a run's files but no pair
// is refused (as a fresh run refuses it), not silently restarted over.
static void test_hz_resume_incomplete_pair(void) {
    char dir[] = "/tmp/natsl_hz_XXXXXX", p[700], args[1300], msg[1024];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    if (hz_make_run(dir, "run", 2)) return;
    // killed between the model and the state write of step 2: resume from step 1, leave the log's step 1
    snprintf(p, sizeof(p), "%s/run/state_00000002.bin", dir);
    remove(p);
    snprintf(args, sizeof(args), "-b 1 -t 64 -x 2 -v 0 -s 0 -y 1 -o %s/run", dir);
    CHECK(hz_run(args, msg, sizeof(msg)) == 0, "resume from the last complete pair failed: %s", msg);
    snprintf(args, sizeof(args), "grep -q 'resuming from .*state_00000001.bin (step 1)' %s && "
             "grep -q 'model_00000002.bin has no partner' %s", g_stdout_path, g_stdout_path);
    CHECK(system(args) == 0,
          "the resume did not say it starts from step 1 and ignores the lone model file");
    // no complete pair at all: only model files and the log
    snprintf(args, sizeof(args), "rm %s/run/state_0000000*.bin", dir);
    CHECK(system(args) == 0, "rm");
    snprintf(p, sizeof(p), "%s/run/model_00000001.bin", dir);
    long size = hz_file_size(p);
    snprintf(args, sizeof(args), "-b 1 -t 64 -x 2 -v 0 -s 0 -y 1 -o %s/run", dir);
    hz_expect_error("-y 1 without a pair", args, "no complete checkpoint pair");
    CHECK(hz_file_size(p) == size, "the lone model file changed");
    snprintf(p, sizeof(p), "%s/run/main.log", dir);
    CHECK(hz_file_size(p) > 0, "main.log was rewritten");
    // a fresh run refuses a directory holding a lone model file too (no log)
    snprintf(args, sizeof(args), "rm %s/run/main.log", dir);
    CHECK(system(args) == 0, "rm");
    snprintf(args, sizeof(args), "-b 1 -t 64 -x 1 -v 0 -s 0 -o %s/run", dir);
    hz_expect_error("fresh run over a lone model file", args, "already holds a run|model_0000000");
    // an empty directory with -y 1 starts fresh
    snprintf(args, sizeof(args), "-b 1 -t 64 -x 1 -v 0 -s 0 -y 1 -o %s/empty", dir);
    CHECK(hz_run(args, msg, sizeof(msg)) == 0, "-y 1 into an empty directory: %s", msg);
    snprintf(args, sizeof(args), "rm -rf %s", dir);
    CHECK(system(args) == 0, "cleanup");
}

// A run holds an exclusive lock on its directory; a second trainer (fresh or -y 1) is refused.
static void test_hz_run_dir_lock(void) {
    char dir[] = "/tmp/natsl_hz_XXXXXX", p[700], args[1300], msg[1024];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    snprintf(p, sizeof(p), "%s/.lock", dir);
    int fd = open(p, O_RDWR | O_CREAT, 0666);
    CHECK(fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0, "cannot take the lock in the test");
    CHECK(write(fd, "4242\n", 5) == 5, "write pid");
    snprintf(args, sizeof(args), "-b 1 -t 64 -x 1 -v 0 -s 0 -o %s", dir);
    hz_expect_error("second trainer, fresh", args, "in use by another trainer|pid 4242");
    snprintf(args, sizeof(args), "-b 1 -t 64 -x 1 -v 0 -s 0 -y 1 -o %s", dir);
    hz_expect_error("second trainer, -y 1", args, "in use by another trainer");
    snprintf(p, sizeof(p), "%s/main.log", dir);
    CHECK(access(p, F_OK) != 0, "the refused trainer wrote main.log");
    close(fd); // released: now a run may take the directory
    snprintf(args, sizeof(args), "-b 1 -t 64 -x 1 -v 0 -s 0 -o %s", dir);
    CHECK(hz_run(args, msg, sizeof(msg)) == 0, "run after the lock was released: %s", msg);
    // and a real concurrent run: a long one in the background, a second one is refused while it runs
    snprintf(args, sizeof(args), "timeout 60 %s -b 1 -t 64 -x 100000 -v 0 -s 0 -o %s/live >/dev/null 2>&1 & echo $! > %s/pid; "
             "for i in $(seq 300); do [ -s %s/live/main.log ] && break; sleep 0.1; done", g_trainer, dir, dir, dir);
    CHECK(system(args) == 0, "background run");
    snprintf(args, sizeof(args), "-b 1 -t 64 -x 5 -v 0 -s 0 -y 1 -o %s/live", dir);
    hz_expect_error("-y 1 into a live run", args, "in use by another trainer");
    snprintf(args, sizeof(args), "kill $(cat %s/pid); sleep 0.5; rm -rf %s", dir, dir);
    CHECK(system(args) == 0, "cleanup");
}

// Every number on the command line is parsed whole and range-checked, one message per flag.
static void test_hz_cli_numbers(void) {
    const char *base = "-b 1 -t 64 -x 1 -v 0 -s 0 -m 1"; // a bad flag that slips through would train one step
    struct { const char *args, *words; } cases[] = {
        {"-b 65536 -t 65536", "-b 65536 -t 65536: B*T"},
        {"-b 262144 -t 128", "B*T = 33554432"},
        {"-b 4x", "-b 4x: not an integer"},
        {"-b 0", "-b 0: out of range"},
        {"-b 99999999999999999999", "-b 99999999999999999999: out of range"},
        {"-t 100", "-t 100: sequence length must be a positive multiple of 64"},
        {"-t 6.4e1", "-t 6.4e1: not an integer"},
        {"-t -64", "-t -64: out of range"},
        {"-x 10000000000", "-x 10000000000: out of range"},
        {"-x abc", "-x abc: not an integer"},
        {"-x 0", "-x 0: out of range"},
        {"-x ''", "-x : empty value"},
        {"-o ''", "-o : empty value"},
        {"-i ''", "-i : empty value"},
        {"-d -1", "-d -1: out of range"},
        {"-d 100", "-d 100: total batch must be a positive multiple of B*T = 64"},
        {"-l nan", "-l nan: not finite"},
        {"-l inf", "-l inf: not finite"},
        {"-l -1", "-l -1: out of range"},
        {"-l 0", "-l 0: out of range"},
        {"-l 1e-3x", "-l 1e-3x: not a number"},
        {"-q 2", "-q 2: out of range"},
        {"-c -0.1", "-c -0.1: out of range"},
        {"-u -1", "-u -1: out of range"},
        {"-v -1", "-v -1: out of range"},
        {"-m 0", "-m 0: out of range"},
        {"-s -5", "-s -5: out of range"},
        {"-g -1", "-g -1: out of range"},
        {"-s 1 -g 64", "-g 64: a sample holds at most T-1 = 63"},
        {"-n -1", "-n -1: out of range"},
        {"-y 2", "-y 2: out of range"},
        {"-r -1", "-r -1: out of range"},
        {"-r 1.5", "-r 1.5: not an integer"},
        {"-k 1.0", "-k 1.0: not an integer"},
        {"-w 3", "-w 3: out of range"},
        {"-E 2", "-E 2: out of range"},
        {"-Z 3", "unknown flag '-Z'"},
        {"-x", "-x needs a value"},
        {"stray", "bad argument 'stray'"},
    };
    char args[1200], msg[1024];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        snprintf(args, sizeof(args), "%s %s", base, cases[i].args);
        hz_expect_error(cases[i].args, args, cases[i].words);
    }
    int rc = hz_run("--help", msg, sizeof(msg));
    snprintf(args, sizeof(args), "grep -q '^usage:' %s", g_stdout_path);
    CHECK(rc == 0 && system(args) == 0, "--help: %s", msg);
    CHECK(hz_run("-h", msg, sizeof(msg)) == 0, "-h: %s", msg);
}

// Messages that say what is wrong: a directory given as a shard or a checkpoint; an -o that
// cannot be created reports mkdir's own error.
static void test_hz_messages(void) {
    char dir[] = "/tmp/natsl_hz_XXXXXX", args[1300];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    snprintf(args, sizeof(args), "-i %s -x 1", dir);
    hz_expect_error("directory as a train shard", args, "a directory, not a token shard");
    snprintf(args, sizeof(args), "-j %s -x 1", dir);
    hz_expect_error("directory as a val shard", args, "a directory, not a token shard");
    snprintf(args, sizeof(args), "%s/sub", dir);
    mkdir(args, 0777);
    snprintf(args, sizeof(args), "-e %s/sub -x 1", dir);
    hz_expect_error("directory as a checkpoint", args, "a directory, not a checkpoint file");
    // a parent that is a file
    snprintf(args, sizeof(args), "%s/file", dir);
    FILE *f = fopen(args, "w"); if (f) fclose(f);
    snprintf(args, sizeof(args), "-x 1 -o %s/file/run", dir);
    hz_expect_error("-o under a file", args, "file exists and is not a directory");
    // a file system that refuses mkdir (sysfs): its own error, not "No such file or directory"
    struct stat sb;
    if (stat("/sys", &sb) == 0 && mkdir("/sys/natsl_hz_probe", 0777) != 0 && errno != ENOENT) {
        char want[200];
        snprintf(want, sizeof(want), "cannot create directory /sys/natsl_hz_x (%s)", strerror(errno));
        hz_expect_error("-o not writable", "-x 1 -o /sys/natsl_hz_x/run", want);
    }
    // nested -o: the parents are created
    snprintf(args, sizeof(args), "-b 1 -t 64 -x 1 -v 0 -s 0 -o %s/a/b/c", dir);
    char msg[1024];
    CHECK(hz_run(args, msg, sizeof(msg)) == 0, "nested -o: %s", msg);
    snprintf(args, sizeof(args), "rm -rf %s", dir);
    CHECK(system(args) == 0, "cleanup");
}

// Leftover temporary files are removed; a failing main.log write stops the run with its error;
// the directory is fsynced after each checkpoint rename.
static void test_hz_durability(void) {
    char dir[] = "/tmp/natsl_hz_XXXXXX", p[700], args[1600], msg[1024];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    if (hz_make_run(dir, "run", 2)) return;
    // (of a step this resume does not write: its own checkpoint would replace them anyway)
    const char *leftovers[] = {"model_00000009.bin.tmp", "state_00000009.bin.tmp"};
    for (int i = 0; i < 2; i++) {
        snprintf(p, sizeof(p), "%s/run/%s", dir, leftovers[i]);
        FILE *f = fopen(p, "w"); if (f) { fputs("partial", f); fclose(f); }
    }
    snprintf(p, sizeof(p), "%s/run/notes.tmp", dir); // not the trainer's: kept
    FILE *f = fopen(p, "w"); if (f) fclose(f);
    snprintf(args, sizeof(args), "-b 1 -t 64 -x 3 -v 0 -s 0 -y 1 -o %s/run", dir);
    CHECK(hz_run(args, msg, sizeof(msg)) == 0, "resume: %s", msg);
    for (int i = 0; i < 2; i++) {
        snprintf(p, sizeof(p), "%s/run/%s", dir, leftovers[i]);
        CHECK(access(p, F_OK) != 0, "%s was left behind", leftovers[i]);
    }
    snprintf(p, sizeof(p), "%s/run/notes.tmp", dir);
    CHECK(access(p, F_OK) == 0, "notes.tmp (not the trainer's) was removed");
    // main.log on a full disk: a file size limit (ulimit -f, 1 KiB blocks) makes its writes fail with EFBIG
    // (SIGXFSZ ignored); with the log padded to just under 1 KiB, the resumed run must stop with that error at
    // its first step's log lines, before any checkpoint is due
    snprintf(args, sizeof(args), "%s/run/main.log", dir);
    f = fopen(args, "a");
    long have = hz_file_size(args);
    for (long k = have; f && k < 1000; k += 10) fputs("s:1 x:pad\n", f);
    if (f) fclose(f);
    snprintf(args, sizeof(args), "bash -c 'ulimit -f 1; trap \"\" XFSZ; exec timeout 120 %s -b 1 -t 64 -x 6 -v 0 -s 0 -y 1 -o %s/run'",
             g_trainer, dir);
    int rc = run_cmd(args, msg, sizeof(msg));
    CHECK(rc == 1 && strstr(msg, "main.log: write failed (File too large)"), "main.log write error: exit %d, '%s'", rc, msg);
    // fsync of the directory after the renames (strace, where it exists)
    if (system("strace -V >/dev/null 2>&1") == 0) {
        // (LeakSanitizer cannot run under ptrace: off for this run of a sanitizer build)
        snprintf(args, sizeof(args), "ASAN_OPTIONS=detect_leaks=0 strace -f -e trace=openat,fsync -o %s/strace.txt %s -b 1 -t 64 -x 1 -v 0 -s 0 -o %s/st",
                 dir, g_trainer, dir);
        CHECK(run_cmd(args, msg, sizeof(msg)) == 0, "strace run: %s", msg);
        // count the fsyncs of a descriptor opened with O_DIRECTORY on the run directory (and not reopened since)
        snprintf(p, sizeof(p), "%s/strace.txt", dir);
        FILE *tf = fopen(p, "r");
        char line[4096], *q;
        int dirfd[1024] = {0}, nsync = 0;
        snprintf(args, sizeof(args), "%s/st\", O_RDONLY|O_DIRECTORY", dir);
        while (tf && fgets(line, sizeof(line), tf)) {
            if (strstr(line, "openat(") && (q = strstr(line, ") = ")) && atoi(q + 4) >= 0 && atoi(q + 4) < 1024)
                dirfd[atoi(q + 4)] = strstr(line, args) != NULL;
            if ((q = strstr(line, "fsync(")) && atoi(q + 6) >= 0 && atoi(q + 6) < 1024 && dirfd[atoi(q + 6)]) nsync++;
        }
        if (tf) fclose(tf);
        CHECK(nsync >= 2, "the run directory was fsynced %d times after the 2 checkpoint renames", nsync);
    } else printf("  (strace not installed: the directory-fsync check is skipped)\n");
    snprintf(args, sizeof(args), "rm -rf %s", dir);
    CHECK(system(args) == 0, "cleanup");
}

// A model file that fails to load leaves nothing allocated (LeakSanitizer found the leak).
static void test_hz_load_model_error_frees(void) {
    char dir[] = "/tmp/natsl_hz_XXXXXX", path[600], err[1024];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    Config cf = small_config("GNA", 0);
    Model M, L;
    model_build(&M, &cf);
    model_init(&M, 3);
    snprintf(path, sizeof(path), "%s/model_00000001.bin", dir);
    CHECK(save_model(&M, path, err, sizeof(err)) == 0, "save: %s", err);
    hz_poke(path, 256 + 10, 0x7fc00000); // a NaN: the header is fine, the load fails after model_build
    struct mallinfo2 before = mallinfo2();
    CHECK(load_model(&L, path, err, sizeof(err)) == -1 && strstr(err, "NaN"), "load of a NaN model: %s", err);
    struct mallinfo2 after = mallinfo2();
    long leaked = (long)(after.uordblks + after.hblkhd) - (long)(before.uordblks + before.hblkhd);
    CHECK(leaked <= 0, "a failed load_model kept %ld bytes", leaked);
    model_free(&M);
    remove(path); rmdir(dir);
}

// The dev/data scripts answer --help without their packages; the READMEs cite no machine paths.
static void test_hz_dev_scripts(void) {
    if (system("python3 -c 1 2>/dev/null")) { printf("  (python3 not installed: skipped)\n"); return; }
    const char *scripts[] = {"fineweb.py", "tokenize_text.py", "make_tokenizer_table.py", "gpt2_offline.py", "char_shards.py",
                             "recall.py", "olmo_eval.py"};
    char cmd[600], msg[1024];
    for (int i = 0; i < (int)(sizeof(scripts) / sizeof(scripts[0])); i++) { // -S: no site-packages, as on a machine without numpy, tiktoken, datasets
        snprintf(cmd, sizeof(cmd), "python3 -S dev/data/%s --help", scripts[i]);
        int rc = run_cmd(cmd, msg, sizeof(msg));
        CHECK(rc == 0, "%s --help without packages: exit %d, '%s'", scripts[i], rc, msg);
    }
    CHECK(access("dev/data/requirements.txt", R_OK) == 0, "dev/data/requirements.txt missing");
    CHECK(system("grep -nE '(/work/|/home/|/Users/|/root/|/mnt/|\\.\\./shared)' data/README.md dev/data/README.md") != 0,
          "a README cites a machine path outside the repository");
}

// The vocabulary comes from the data (§1): a data set's tokenizer.bin beside its train shards (else GPT-2's); the
// model, the checkpoints and the val shards must have the same, and a bad table or id is refused with one line.
static void test_hz_data_vocab(void) {
    char dir[] = "/tmp/natsl_hz_XXXXXX", p[700], args[2000], msg[1024], own[900], model[700];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    uint16_t tok[5000];
    uint64_t r = rng_seed(3);
    for (int i = 0; i < 5000; i++) tok[i] = (uint16_t)(rng_u32(&r) % 10);
    snprintf(p, sizeof(p), "%s/tokenizer.bin", dir); dt_write_table(p, 10);
    snprintf(p, sizeof(p), "%s/train.bin", dir); dt_write_shard(p, 20240520, 1, 5000, tok, 5000);
    snprintf(p, sizeof(p), "%s/val.bin", dir); dt_write_shard(p, 20240520, 1, 1000, tok, 1000);
    tok[321] = 10;
    snprintf(p, sizeof(p), "%s/bad.bin", dir); dt_write_shard(p, 20240520, 1, 5000, tok, 5000);
    snprintf(own, sizeof(own), "-i %s/train.bin -j %s/val.bin -b 1 -t 64 -v 2 -m 1 -s 2 -g 8", dir, dir);
    // a V of 10 from the table: the model, its checkpoint; a resume
    snprintf(args, sizeof(args), "%s -x 2 -o %s/run", own, dir);
    CHECK(hz_run(args, msg, sizeof(msg)) == 0, "training on a 10-token data set: %s", msg);
    snprintf(args, sizeof(args), "grep -q 'V=10 pattern=GNGN' %s && grep -q '^vocabulary: 10 tokens (%s/tokenizer.bin)' %s",
             g_stdout_path, dir, g_stdout_path);
    CHECK(system(args) == 0, "the run does not say it has V=10 from %s/tokenizer.bin", dir);
    snprintf(model, sizeof(model), "%s/run/model_00000002.bin", dir);
    CHECK(hz_peek(model, 9) == 10 && hz_peek(model, 10) == 128, "checkpoint V=%d Vp=%d, want 10 and 128", hz_peek(model, 9),
          hz_peek(model, 10));
    snprintf(args, sizeof(args), "%s -x 3 -o %s/run -y 1", own, dir);
    CHECK(hz_run(args, msg, sizeof(msg)) == 0, "resume on the 10-token data set: %s", msg);
    // that checkpoint with other data: the default (66 characters), GPT-2 shards, through -e and a resume
    snprintf(args, sizeof(args), "-e %s -b 1 -t 64 -x 1 -v 0 -s 0", model);
    hz_expect_error("V=10 checkpoint on the default data", args, "vocabulary V=10, but the data's is V=66 (data/tinyshakespeare_char/tokenizer.bin)");
    snprintf(args, sizeof(args), "-e %s -b 1 -t 64 -x 1 -v 0 -s 0 -i data/fineweb_edu_train.bin -j data/fineweb_edu_val.bin", model);
    hz_expect_error("V=10 checkpoint on GPT-2 shards", args, "vocabulary V=10, but the data's is V=50257 (GPT-2 ids");
    snprintf(args, sizeof(args), "-b 1 -t 64 -x 4 -v 0 -s 0 -o %s/run -y 1", dir);
    hz_expect_error("V=10 run resumed on the default data", args, "run/model_00000003.bin: vocabulary V=10, but the data's is V=66");
    // val shards of another vocabulary; an id beyond the table; tables that cannot be the data's
    snprintf(args, sizeof(args), "-i %s/train.bin -b 1 -t 64 -x 1 -s 0", dir);
    hz_expect_error("val shards of another vocabulary", args, "-j data/tinyshakespeare_char/val.bin: the val shards' vocabulary is V=66|train shards' V=10");
    snprintf(args, sizeof(args), "%s -x 1 -i %s/bad.bin", own, dir);
    hz_expect_error("id 10 of a 10-token table", args, "bad.bin: token 10 at byte offset 1666 is out of range (vocab 10)");
    snprintf(p, sizeof(p), "%s/tokenizer.bin", dir); dt_write_table(p, 70000);
    snprintf(args, sizeof(args), "%s -x 1", own);
    hz_expect_error("a table of 70000 tokens", args, "tokenizer.bin: 70000 tokens, but shards hold uint16 ids");
    remove(p); mkdir(p, 0777);
    hz_expect_error("a directory as the table", args, "tokenizer.bin: a directory, not a tokenizer file");
    snprintf(args, sizeof(args), "rm -rf %s", dir);
    CHECK(system(args) == 0, "cleanup");
}

// ---- inputs that hung the trainer, runs that end without saying why, saves that fail half-way ----------
// A FIFO (no writer, no reader), a device or a directory where a file belongs is refused at once with one line naming
// it: every path the flags lead to (-e, -i, -j and a glob of shards, the data's tokenizer.bin, -D, the resumed state
// and main.log). Each run is bounded (g_hz_limit 20 s): a regression that blocks in open() fails, it does not hang.
static void test_hz_cli_nonregular_files(void) {
    char dir[] = "/tmp/natsl_hz_XXXXXX", p[700], args[1600];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    if (hz_make_run(dir, "run", 1)) return;
    g_hz_limit = 20;
    const char *fifos[] = {"fifo", "shards/b.bin", "own/tokenizer.bin"};
    snprintf(p, sizeof(p), "%s/shards", dir); mkdir(p, 0777);
    snprintf(p, sizeof(p), "%s/own", dir); mkdir(p, 0777);
    snprintf(p, sizeof(p), "%s/shards/a.bin", dir); dt_write_ramp(p, 0, 5000);
    snprintf(p, sizeof(p), "%s/own/train.bin", dir); dt_write_ramp(p, 0, 5000);
    for (int i = 0; i < 3; i++) { snprintf(p, sizeof(p), "%s/%s", dir, fifos[i]); CHECK(mkfifo(p, 0666) == 0, "mkfifo %s", p); }
    const char *base = "-b 1 -t 64 -x 1 -v 1 -m 1 -s 0";
    struct { const char *what, *flags, *words; } cases[] = {
        {"-e FIFO", "-e %s/fifo", "fifo: a FIFO, not a checkpoint file"},
        {"-i FIFO", "-i %s/fifo", "fifo: a FIFO, not a token shard"},
        {"-j FIFO", "-j %s/fifo", "fifo: a FIFO, not a token shard"},
        {"a glob matching a FIFO", "-i '%s/shards/*.bin'", "shards/b.bin: a FIFO, not a token shard"},
        {"a FIFO as the data's tokenizer.bin", "-i %s/own/train.bin", "own/tokenizer.bin: a FIFO, not a tokenizer file"},
        {"-D FIFO", "-D %s/fifo", "fifo: a FIFO, not a dump file"},
        {"-e character device", "-e /dev/null%.0s", "/dev/null: a character device, not a checkpoint file"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char flags[800];
        snprintf(flags, sizeof(flags), cases[i].flags, dir);
        snprintf(args, sizeof(args), "%s %s", base, flags);
        double t0 = now_s();
        hz_expect_error(cases[i].what, args, cases[i].words);
        if (now_s() - t0 > 10) printf("  note: %s took %.1f s to fail\n", cases[i].what, now_s() - t0);
    }
    // the resumed state file and the run's log
    snprintf(p, sizeof(p), "%s/run/state_00000001.bin", dir);
    snprintf(args, sizeof(args), "cp %s %s/state.keep", p, dir);
    CHECK(system(args) == 0 && remove(p) == 0 && mkfifo(p, 0666) == 0, "state FIFO");
    snprintf(args, sizeof(args), "-b 1 -t 64 -x 2 -v 0 -s 0 -y 1 -o %s/run", dir);
    hz_expect_error("state file FIFO", args, "state_00000001.bin: a FIFO, not a checkpoint file");
    snprintf(args, sizeof(args), "rm %s && cp %s/state.keep %s && rm %s/run/main.log && mkfifo %s/run/main.log", p, dir, p, dir, dir);
    CHECK(system(args) == 0, "main.log FIFO");
    snprintf(args, sizeof(args), "-b 1 -t 64 -x 2 -v 0 -s 0 -y 1 -o %s/run", dir);
    hz_expect_error("main.log FIFO", args, "main.log: a FIFO, not a log file");
    g_hz_limit = 120;
    snprintf(args, sizeof(args), "rm -rf %s", dir);
    CHECK(system(args) == 0, "cleanup");
}

// -m beyond the val data's batches is refused before the baselines count them (-m 1000000 counted for hours).
static void test_hz_cli_val_batches(void) {
    char dir[] = "/tmp/natsl_hz_XXXXXX", p[700], args[1600], msg[1024];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    g_hz_limit = 20;
    hz_expect_error("-m 1000000", "-b 1 -t 64 -x 1 -v 1 -m 1000000 -s 0",
                    "-m 1000000: the val shards (data/tinyshakespeare_char/val.bin) hold 1742 batches|give -m 1742 or less");
    g_hz_limit = 120;
    // 5 batches of B*T = 64 (and one token): -m 5 runs, -m 6 does not
    uint16_t tok[5 * 64 + 1];
    for (int i = 0; i < 5 * 64 + 1; i++) tok[i] = (uint16_t)(i % 66);
    snprintf(p, sizeof(p), "%s/val.bin", dir); dt_write_shard(p, 20240520, 1, 5 * 64 + 1, tok, 5 * 64 + 1);
    snprintf(p, sizeof(p), "%s/tokenizer.bin", dir); dt_write_table(p, 66);
    snprintf(args, sizeof(args), "-j %s/val.bin -b 1 -t 64 -x 1 -v 1 -m 6 -s 0", dir);
    hz_expect_error("-m 6 of 5 batches", args, "-m 6: the val shards|hold 5 batches of B*T = 64 tokens");
    snprintf(args, sizeof(args), "-j %s/val.bin -b 1 -t 64 -x 1 -v 1 -m 5 -s 0", dir);
    CHECK(hz_run(args, msg, sizeof(msg)) == 0, "-m 5 of 5 batches: %s", msg);
    snprintf(args, sizeof(args), "-j %s/val.bin -b 1 -t 64 -x 1 -v 0 -m 6 -s 0", dir);
    CHECK(hz_run(args, msg, sizeof(msg)) == 0, "-m 6 without validation (-v 0) is not used: %s", msg);
    snprintf(args, sizeof(args), "rm -rf %s", dir);
    CHECK(system(args) == 0, "cleanup");
}

// Sets the first weight of a model file's final norm (ln_f) to v.
static void hz_poke_ln_f(const char *model, float v) {
    int32_t n = hz_peek(model, 13), D = hz_peek(model, 2), Vp = hz_peek(model, 10);
    hz_poke(model, 256 + (long)n - (long)Vp * D - D, hz_float_bits(v)); // ln_f precedes the head (common/config.h)
}

// A model with one parameter huge but finite (3e38: the final norm's first weight) makes every step's loss NaN: the run
// stops after NATSL_MAX_SKIPPED (5) skipped steps in a row with exit 1 and an error naming the file, and keeps what it
// saved; started with -e and resumed.
static void test_hz_cli_nonfinite_stop(void) {
    char dir[] = "/tmp/natsl_hz_XXXXXX", p[700], args[1600];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    if (hz_make_run(dir, "run", 2)) return;
    snprintf(p, sizeof(p), "%s/huge.bin", dir);
    snprintf(args, sizeof(args), "cp %s/run/model_00000002.bin %s", dir, p);
    CHECK(system(args) == 0, "cp");
    hz_poke_ln_f(p, 3e38f);
    snprintf(args, sizeof(args), "-e %s -b 1 -t 64 -x 50 -v 0 -s 0 -o %s/e", p, dir);
    hz_expect_error("-e a model with a parameter of 3e38", args, "steps 1-5: the loss is not finite|-e /tmp/natsl_hz_|huge.bin");
    snprintf(p, sizeof(p), "%s/e/main.log", dir);
    CHECK(hz_file_size(p) > 0, "main.log of the stopped run is missing");
    // resumed from such a checkpoint: the error names it; the checkpoints before it stay
    snprintf(p, sizeof(p), "%s/run/model_00000002.bin", dir);
    hz_poke_ln_f(p, 3e38f);
    snprintf(args, sizeof(args), "-b 1 -t 64 -x 50 -n 1 -v 0 -s 0 -y 1 -o %s/run", dir);
    hz_expect_error("resumed from a model with a parameter of 3e38", args, "steps 3-7: the loss is not finite|run/model_00000002.bin");
    snprintf(p, sizeof(p), "%s/run/model_00000001.bin", dir);
    CHECK(hz_file_size(p) > 0, "the run's first checkpoint is gone");
    snprintf(p, sizeof(p), "%s/run/state_00000001.bin", dir);
    CHECK(hz_file_size(p) > 0, "the run's first state file is gone");
    snprintf(args, sizeof(args), "rm -rf %s", dir);
    CHECK(system(args) == 0, "cleanup");
}

// The first save of a run on a full disk (a file size limit: ulimit -f, SIGXFSZ ignored, so writes fail with EFBIG)
// leaves no file of that checkpoint, neither half-written nor a model without its state; the same command with -y 1
// (the run saved no checkpoint: it starts over) then runs in the same directory.
static void test_hz_cli_save_full_disk(void) {
    char dir[] = "/tmp/natsl_hz_XXXXXX", p[700], args[1600], msg[1024];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    if (hz_make_run(dir, "ref", 1)) return;
    snprintf(p, sizeof(p), "%s/ref/model_00000001.bin", dir);
    long model_kib = hz_file_size(p) / 1024; // the state file is twice the model file
    // room for the model file, not the state file; then not even for the model file
    struct { long kib; const char *words; } cases[] = {{model_kib + 64, "state_00000002.bin.tmp: write failed (File too large)"},
                                                      {model_kib / 2, "model_00000002.bin.tmp: write failed (File too large)"}};
    for (int i = 0; i < 2; i++) {
        snprintf(args, sizeof(args), "rm -rf %s/full && bash -c 'ulimit -f %ld; trap \"\" XFSZ; exec timeout 120 %s -b 1 -t 64 "
                 "-x 2 -v 0 -s 0 -o %s/full'", dir, cases[i].kib, g_trainer, dir);
        int rc = run_cmd(args, msg, sizeof(msg));
        CHECK(rc == 1 && strstr(msg, cases[i].words), "save on a full disk (%ld KiB): exit %d, '%s' (wanted '%s')", cases[i].kib, rc,
              msg, cases[i].words);
        snprintf(args, sizeof(args), "ls %s/full | grep -v '^main.log$'", dir);
        CHECK(system(args) != 0, "a failed first save left files in the run directory:");
        snprintf(args, sizeof(args), "-b 1 -t 64 -x 2 -v 0 -s 0 -y 1 -o %s/full", dir);
        CHECK(hz_run(args, msg, sizeof(msg)) == 0, "-y 1 after the failed save: %s", msg);
        snprintf(args, sizeof(args), "grep -q 'starting fresh (its main.log starts over)' %s", g_stdout_path);
        CHECK(system(args) == 0, "the retry did not say it starts over");
        snprintf(p, sizeof(p), "%s/full/state_00000002.bin", dir);
        CHECK(hz_file_size(p) > 0, "the retry wrote no checkpoint");
    }
    snprintf(args, sizeof(args), "rm -rf %s", dir);
    CHECK(system(args) == 0, "cleanup");
}

// A state file whose shard or position field does not fit the train data is named in the error (not the data shard).
static void test_hz_cli_state_position(void) {
    char dir[] = "/tmp/natsl_hz_XXXXXX", state[600], args[1300];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    if (hz_make_run(dir, "run", 1)) return;
    snprintf(state, sizeof(state), "%s/run/state_00000001.bin", dir);
    snprintf(args, sizeof(args), "-b 1 -t 64 -x 2 -v 0 -s 0 -y 1 -o %s/run", dir);
    int32_t old = hz_poke(state, 3, 5);
    hz_expect_error("shard 5 of 1", args, "run/state_00000001.bin: its data position (shard 5|shard 5");
    hz_poke(state, 3, old);
    old = hz_poke(state, 4, 0x7ffffff0);
    hz_expect_error("position past the shard", args, "run/state_00000001.bin: its data position|token position");
    hz_poke(state, 4, old);
    snprintf(args, sizeof(args), "rm -rf %s", dir);
    CHECK(system(args) == 0, "cleanup");
}

// The run ends with a summary: steps, time, tokens/s, the last val loss against the counting baselines.
static void test_hz_cli_summary(void) {
    char msg[1024], cmd[1200];
    CHECK(hz_run("-b 1 -t 64 -x 2 -v 1 -m 2 -s 0", msg, sizeof(msg)) == 0, "short run: %s", msg);
    snprintf(cmd, sizeof(cmd), "grep -Eq '^done: 2 steps in [0-9.]+ s \\([0-9]+ tok/s over the steps, [0-9]+ with validation and "
             "samples\\) \\| val loss [0-9.]+ at step 2 against the baselines unigram [0-9.]+, bigram [0-9.]+$' %s", g_stdout_path);
    CHECK(system(cmd) == 0, "no summary line at the end of the run");
}

// dev/plot_log.py answers --help without matplotlib, and says in one line that plotting needs it.
static void test_hz_cli_plot_log_help(void) {
    if (system("python3 -c 1 2>/dev/null")) { printf("  (python3 not installed: skipped)\n"); return; }
    char msg[1024];
    int rc = run_cmd("python3 -S dev/plot_log.py --help", msg, sizeof(msg)); // -S: no site-packages
    CHECK(rc == 0, "plot_log.py --help without matplotlib: exit %d, '%s'", rc, msg);
    rc = run_cmd("python3 -S dev/plot_log.py /dev/null", msg, sizeof(msg));
    CHECK(rc == 1 && strstr(msg, "needs matplotlib"), "plot_log.py without matplotlib: exit %d, '%s'", rc, msg);
}

static void register_hardening_tests(void) {
    RUN(test_hz_model_file_fields);
    RUN(test_hz_state_file_fields);
    RUN(test_hz_resume_incomplete_pair);
    RUN(test_hz_run_dir_lock);
    RUN(test_hz_cli_numbers);
    RUN(test_hz_messages);
    RUN(test_hz_durability);
    RUN(test_hz_load_model_error_frees);
    RUN(test_hz_dev_scripts);
    RUN(test_hz_data_vocab);
    RUN(test_hz_cli_nonregular_files);
    RUN(test_hz_cli_val_batches);
    RUN(test_hz_cli_nonfinite_stop);
    RUN(test_hz_cli_save_full_disk);
    RUN(test_hz_cli_state_position);
    RUN(test_hz_cli_summary);
    RUN(test_hz_cli_plot_log_help);
}

/* ---- standard evaluation: eval files (common/evalset.h) and their scoring (evalset_run, common/train_main.inc) ---- */

/* Appends one example to the body w (*n words so far): C choices, K = 1 (a shared context) or C contexts;
 * ctx[k] and comp[c] are token lists ended by -1; chars[c] the choices' text lengths. */
static void ev_example(uint16_t *w, int *n, int C, int K, int label, const int *const *ctx, const int *const *comp, const int *chars) {
    w[(*n)++] = (uint16_t)C; w[(*n)++] = (uint16_t)K; w[(*n)++] = (uint16_t)label;
    for (int k = 0; k < K + C; k++) {
        const int *t = k < K ? ctx[k] : comp[k - K];
        int L = 0;
        while (t[L] >= 0) L++;
        w[(*n)++] = (uint16_t)L;
        if (k >= K) w[(*n)++] = (uint16_t)chars[k - K];
        for (int j = 0; j < L; j++) w[(*n)++] = (uint16_t)t[j];
    }
}
/* An eval file: the header's fields as given, then the first `written` words of w. */
static void ev_write(const char *path, int magic, int version, int kind, int nex, int nwords, int vocab, const char *task,
                     const uint16_t *w, int written) {
    int32_t h[256] = {magic, version, kind, nex, nwords, vocab};
    strncpy((char *)(h + 6), task, 32);
    FILE *f = fopen(path, "wb");
    if (!f) { CHECK(0, "cannot write %s", path); return; }
    fwrite(h, 4, 256, f);
    fwrite(w, 2, (size_t)written, f);
    fclose(f);
}
static void ev_expect_error(const char *path, int vocab, const char *word) {
    EvalSet e;
    char err[512] = "";
    int rc = evalset_load(&e, path, vocab, err, sizeof err);
    const char *name = strrchr(path, '/') + 1;
    CHECK(rc == -1 && strstr(err, name) && strstr(err, word) && !strchr(err, '\n'),
          "%s: rc %d, message \"%s\" (wanted the file's name and \"%s\" on one line)", name, rc, err, word);
    if (rc == 0) evalset_free(&e);
}
/* The toy set of the reader tests: 2 examples, 5 choices, 34 words (the second's two contexts differ, as WinoGrande's). */
static int ev_toy(uint16_t *w) {
    static const int c0[] = {5, 6, 7, -1}, a0[] = {8, -1}, a1[] = {9, 10, -1}, a2[] = {11, 12, 13, -1};
    static const int c1[] = {1, 2, -1}, c2[] = {3, -1}, b0[] = {4, 4, -1}, b1[] = {20, -1};
    const int *ctx0[] = {c0}, *comp0[] = {a0, a1, a2}, *ctx1[] = {c1, c2}, *comp1[] = {b0, b1};
    const int chars0[] = {3, 7, 12}, chars1[] = {5, 2};
    int n = 0;
    ev_example(w, &n, 3, 1, 2, ctx0, comp0, chars0);
    ev_example(w, &n, 2, 2, 1, ctx1, comp1, chars1);
    return n;
}

static void test_eval_reader(void) {
    char dir[64], path[128], err[512] = "";
    uint16_t w[64];
    if (dt_mkdir(dir, sizeof dir)) return;
    int n = ev_toy(w);
    CHECK(n == 34, "toy body: %d words", n);
    snprintf(path, sizeof path, "%s/good.bin", dir);
    ev_write(path, EVALSET_MAGIC, EVALSET_VERSION, EVALSET_MC, 2, n, 90, "toy", w, n);
    EvalSet e;
    int rc = evalset_load(&e, path, 90, err, sizeof err);
    CHECK(rc == 0, "good file: %s", err);
    if (rc == 0) {
        CHECK(!strcmp(e.task, "toy") && e.kind == EVALSET_MC && e.n == 2 && e.nchoices == 5, "header: '%s' kind %d, %d examples, %d choices",
              e.task, e.kind, e.n, e.nchoices);
        CHECK(e.first[0] == 0 && e.first[1] == 3 && e.first[2] == 5 && e.label[0] == 2 && e.label[1] == 1, "examples' choices or labels");
        const EvalChoice *c = e.choice;
        CHECK(c[0].ctx == c[2].ctx && c[2].ctx_len == 3 && e.words[c[2].ctx + 2] == 7, "shared context");
        CHECK(c[2].comp_len == 3 && e.words[c[2].comp] == 11 && c[2].chars == 12 && c[1].chars == 7, "choice 2 of example 0");
        CHECK(c[3].ctx_len == 2 && c[4].ctx_len == 1 && e.words[c[4].ctx] == 3 && e.words[c[3].comp + 1] == 4 && e.words[c[4].comp] == 20,
              "the per-choice contexts of example 1");
        int in[8], tg[8]; // choice 4 as a row: 3 | 20, then padding
        evalset_row(&e, 4, in, tg, 8, 0);
        CHECK(evalset_row_positions(&e, 4) == 1 && in[0] == 3 && tg[0] == 20 && in[1] == 0 && tg[7] == 0, "row of choice 4");
        evalset_row(&e, 2, in, tg, 8, 0); // 5 6 7 | 11 12 13: 5 positions
        CHECK(in[0] == 5 && in[3] == 11 && in[4] == 12 && tg[2] == 11 && tg[4] == 13 && in[5] == 0, "row of choice 2");
        CHECK(evalset_fits(&e, 0, 5) && !evalset_fits(&e, 0, 4) && evalset_fits(&e, 1, 3), "fits");
        evalset_free(&e);
    }
    snprintf(path, sizeof path, "%s/truncated.bin", dir); // header says 34 words, the file holds 33
    ev_write(path, EVALSET_MAGIC, EVALSET_VERSION, EVALSET_MC, 2, n, 90, "toy", w, n - 1);
    ev_expect_error(path, 90, "header says 34 words but the file holds 66 bytes after the header (truncated?)");
    snprintf(path, sizeof path, "%s/short.bin", dir); // consistent sizes, but the body ends inside the second example
    ev_write(path, EVALSET_MAGIC, EVALSET_VERSION, EVALSET_MC, 2, n - 2, 90, "toy", w, n - 2);
    ev_expect_error(path, 90, "example 1 runs past the end of the file (truncated?)");
    snprintf(path, sizeof path, "%s/header.bin", dir);
    FILE *f = fopen(path, "wb");
    if (f) { fwrite("0123456789", 1, 10, f); fclose(f); }
    ev_expect_error(path, 90, "shorter than the 1024-byte header");
    snprintf(path, sizeof path, "%s/magic.bin", dir);
    ev_write(path, 20240520, EVALSET_VERSION, EVALSET_MC, 2, n, 90, "toy", w, n);
    ev_expect_error(path, 90, "bad magic 20240520");
    snprintf(path, sizeof path, "%s/version.bin", dir);
    ev_write(path, EVALSET_MAGIC, 2, EVALSET_MC, 2, n, 90, "toy", w, n);
    ev_expect_error(path, 90, "unsupported version 2");
    snprintf(path, sizeof path, "%s/kind.bin", dir);
    ev_write(path, EVALSET_MAGIC, EVALSET_VERSION, 7, 2, n, 90, "toy", w, n);
    ev_expect_error(path, 90, "unknown kind 7");
    snprintf(path, sizeof path, "%s/vocab.bin", dir); // a GPT-2 file for a model of another vocabulary
    ev_write(path, EVALSET_MAGIC, EVALSET_VERSION, EVALSET_MC, 2, n, 50257, "toy", w, n);
    ev_expect_error(path, 90, "token ids of a 50257-token vocabulary, but the model's is 90 tokens");
    snprintf(path, sizeof path, "%s/extra.bin", dir); // the header counts one example of two
    ev_write(path, EVALSET_MAGIC, EVALSET_VERSION, EVALSET_MC, 1, n, 90, "toy", w, n);
    ev_expect_error(path, 90, "15 words after the last of the 1 examples");
    snprintf(path, sizeof path, "%s/greedy.bin", dir); // a greedy file has one choice per example
    ev_write(path, EVALSET_MAGIC, EVALSET_VERSION, EVALSET_GREEDY, 2, n, 90, "toy", w, n);
    ev_expect_error(path, 90, "example 0 (word 0): 3 choices");
    uint16_t bad[64];
    memcpy(bad, w, sizeof bad);
    bad[21] = 3; // example 1's label: 3 of 2 choices
    snprintf(path, sizeof path, "%s/label.bin", dir);
    ev_write(path, EVALSET_MAGIC, EVALSET_VERSION, EVALSET_MC, 2, n, 90, "toy", bad, n);
    ev_expect_error(path, 90, "example 1 (word 19): 2 choices, 2 contexts, label 3");
    memcpy(bad, w, sizeof bad);
    bad[16] = 90; // example 0, choice 2's first token: word 16, byte 1024 + 32
    snprintf(path, sizeof path, "%s/token.bin", dir);
    ev_write(path, EVALSET_MAGIC, EVALSET_VERSION, EVALSET_MC, 2, n, 90, "toy", bad, n);
    ev_expect_error(path, 90, "example 0: token 90 at byte offset 1056 is out of range (vocab 90)");
    ev_expect_error(dir, 90, "not a regular file");
    dt_rmdir(dir);
}

/* The scores on hand-made losses: acc, acc_norm (per token) and acc_char (per character) each pick their own choice. */
static void test_eval_scoring_math(void) {
    char dir[64], path[128], err[512] = "", line[256];
    uint16_t w[256];
    if (dt_mkdir(dir, sizeof dir)) return;
    static const int ctx[] = {1, 2, -1}, a0[] = {3, 3, 3, -1}, a1[] = {4, -1}, a2[] = {5, 5, 5, 5, 5, 5, -1}, b[] = {6, -1};
    int longctx[72];
    for (int i = 0; i < 71; i++) longctx[i] = 7;
    longctx[71] = -1;
    const int *c0[] = {ctx}, *comp0[] = {a0, a1, a2}, *comp1[] = {b, b}, *c2[] = {longctx}, *comp2[] = {b, a1};
    const int chars0[] = {30, 2, 18}, chars1[] = {1, 1};
    int n = 0;
    ev_example(w, &n, 3, 1, 1, c0, comp0, chars0);  // label 1
    ev_example(w, &n, 2, 1, 0, c0, comp1, chars1);  // label 0
    ev_example(w, &n, 2, 1, 1, c2, comp2, chars1);  // 71 context tokens: 71 positions
    snprintf(path, sizeof path, "%s/math.bin", dir);
    ev_write(path, EVALSET_MAGIC, EVALSET_VERSION, EVALSET_MC, 3, n, 90, "math", w, n);
    EvalSet e;
    int rc = evalset_load(&e, path, 90, err, sizeof err);
    CHECK(rc == 0, "%s", err);
    if (rc == 0) {
        // example 0: ℓ = 6, 4, 9 over 3, 1, 6 tokens and 30, 2, 18 characters: acc picks 1 (4), acc_norm 2 (1.5 per
        // token), acc_char 0 (0.2 per character); example 1: a tie, the lowest index (0) wins; example 2: the losses
        // would make it wrong, but at T = 64 it is skipped.
        double loss[7] = {6, 4, 9, 2, 2, 0, 1}, ntok[3] = {3, 1, 6}, chars[3] = {30, 2, 18};
        CHECK(evalset_argmin(loss, NULL, 3) == 1 && evalset_argmin(loss, ntok, 3) == 2 && evalset_argmin(loss, chars, 3) == 0 &&
              evalset_argmin(loss + 3, NULL, 2) == 0, "argmin");
        EvalResult r;
        evalset_score(&e, 64, loss, NULL, &r);
        CHECK(r.scored == 2 && r.skipped == 1 && r.acc == 1 && r.acc_norm == 0.5 && r.acc_char == 0.5,
              "T=64: %d scored, %d skipped, acc %g acc_norm %g acc_char %g (wanted 2, 1, 1, 0.5, 0.5)", r.scored, r.skipped,
              r.acc, r.acc_norm, r.acc_char);
        evalset_format(line, sizeof line, &e, &r, 64);
        CHECK(!strcmp(line, "math: acc 1.0000 acc_norm 0.5000 acc_char 0.5000 (2 examples; 1 longer than T=64 skipped)"), "line '%s'", line);
        evalset_score(&e, 128, loss, NULL, &r);
        CHECK(r.scored == 3 && r.skipped == 0 && fabs(r.acc - 2 / 3.0) < 1e-15, "T=128: %d scored, acc %g", r.scored, r.acc);
        evalset_free(&e);
    }
    // a greedy set: acc = the fraction of hits, ppl = exp(mean target loss)
    static const int t1[] = {9, 9, -1};
    const int *g0[] = {ctx}, *gt[] = {t1};
    const int gchars[] = {4};
    n = 0;
    for (int i = 0; i < 4; i++) ev_example(w, &n, 1, 1, 0, g0, gt, gchars);
    snprintf(path, sizeof path, "%s/greedy.bin", dir);
    ev_write(path, EVALSET_MAGIC, EVALSET_VERSION, EVALSET_GREEDY, 4, n, 90, "last", w, n);
    rc = evalset_load(&e, path, 90, err, sizeof err);
    CHECK(rc == 0, "%s", err);
    if (rc == 0) {
        double loss[4] = {1, 2, 3, 6}, hit[4] = {1, 0, 1, 1};
        EvalResult r;
        evalset_score(&e, 64, loss, hit, &r);
        CHECK(r.scored == 4 && r.acc == 0.75 && fabs(r.ppl - exp(3.0)) < 1e-12, "greedy: acc %g ppl %g (wanted 0.75, e^3)", r.acc, r.ppl);
        evalset_format(line, sizeof line, &e, &r, 64);
        CHECK(!strcmp(line, "last: acc 0.7500 ppl 20.09 (4 examples)"), "line '%s'", line);
        evalset_free(&e);
    }
    dt_rmdir(dir);
}

/* The scorer against the plain forward pass it must equal: each choice's ℓ_c from evalset_losses (choices packed B = 3
 * rows to a pass, rows cut to the shortest multiple of 64 that holds them) equals the sum of the per-token losses of a
 * forward pass of that choice alone in a row of T; a greedy hit is exactly "every target token is that pass's argmax". */
static void test_eval_matches_forward(void) {
    char dir[64], path[128], err[512] = "";
    if (dt_mkdir(dir, sizeof dir)) return;
    Config cf = small_config("GNA", 0);
    Model M;
    model_build(&M, &cf);
    model_init(&M, 3);
    for (int l = 0; l < cf.L; l++)
        if (cf.pattern[l] == 'N') fill_normal(M.p.layer[l].wr, 2 * cf.H * cf.D, 0.5); // mixed routing
    int B = 3, T = 128;
    model_alloc_acts(&M, B, T, 0);
    int *in = xcalloc(T, sizeof(int)), *tg = xcalloc(T, sizeof(int));
    // a multiple-choice set: 9 examples of 1 to 4 choices, shared or per-choice contexts of 1 to 90 tokens and
    // completions of 1 to 30; example 4 has a choice of 140 positions (skipped at T = 128)
    uint16_t *w = xcalloc(20000, sizeof(uint16_t));
    int n = 0, toks[4][160], ctoks[4][40], chars[4];
    uint64_t r = rng_seed(11);
    for (int i = 0; i < 9; i++) {
        int C = 1 + rng_u32(&r) % 4, K = rng_u32(&r) % 2 ? C : 1;
        const int *ctx[4], *comp[4];
        for (int k = 0; k < K; k++) {
            int L = i == 4 && k == 0 ? 135 : 1 + rng_u32(&r) % 90;
            for (int j = 0; j < L; j++) toks[k][j] = rng_u32(&r) % cf.V;
            toks[k][L] = -1;
            ctx[k] = toks[k];
        }
        for (int c = 0; c < C; c++) {
            int L = 1 + rng_u32(&r) % 30;
            for (int j = 0; j < L; j++) ctoks[c][j] = rng_u32(&r) % cf.V;
            ctoks[c][L] = -1;
            comp[c] = ctoks[c];
            chars[c] = 1 + rng_u32(&r) % 100;
        }
        ev_example(w, &n, C, K, rng_u32(&r) % C, ctx, comp, chars);
    }
    snprintf(path, sizeof path, "%s/mc.bin", dir);
    ev_write(path, EVALSET_MAGIC, EVALSET_VERSION, EVALSET_MC, 9, n, cf.V, "mc", w, n);
    EvalSet e;
    int rc = evalset_load(&e, path, cf.V, err, sizeof err);
    CHECK(rc == 0, "%s", err);
    if (rc == 0) {
        double *x = xcalloc(2 * (size_t)e.nchoices, sizeof(double)), worst = 0;
        evalset_losses(&M, &e, B, T, x);
        int scored = 0;
        for (int i = 0; i < e.n; i++)
            for (int c = e.first[i]; c < e.first[i + 1]; c++) {
                if (!evalset_fits(&e, i, T)) { CHECK(x[c] == 0, "choice %d of a skipped example was scored", c); continue; }
                evalset_row(&e, c, in, tg, T, 0);
                model_forward(&M, in, tg, 1, T);
                double ref = 0;
                for (int j = 0; j < e.choice[c].comp_len; j++) ref += M.losses[e.choice[c].ctx_len - 1 + j];
                worst = fmax(worst, fabs(x[c] - ref) / fmax(1, fabs(ref)));
                scored++;
            }
        EvalResult res;
        evalset_run(&M, &e, B, T, &res);
        printf("  %d examples (%d skipped), %d choices scored: worst relative difference from the plain forward %.2e; acc %.3f acc_norm %.3f\n",
               e.n, res.skipped, scored, worst, res.acc, res.acc_norm);
        CHECK(res.skipped == 1 && res.scored == 8 && scored == e.nchoices - (e.first[5] - e.first[4]), "the skipped example");
        CHECK(worst < 1e-10, "the eval's choice losses differ from the plain forward's by %.2e", worst);
        free(x);
        evalset_free(&e);
    }
    // a greedy set: the target is the plain forward's 2-token argmax continuation (examples 0, 2, 4), or that with its
    // second token changed (1, 3, 5)
    n = 0;
    int want[6];
    for (int g = 0; g < 6; g++) {
        int L = 2 + rng_u32(&r) % 80, *tgt = ctoks[0];
        for (int j = 0; j < L; j++) toks[0][j] = rng_u32(&r) % cf.V;
        for (int s = 0; s < 2; s++) { // the argmax after the context, then after the context and that token
            for (int t = 0; t < T; t++) in[t] = t < L + s ? toks[0][t] : 0;
            model_forward(&M, in, NULL, 1, T);
            float *z = logits_to_float32(&M, L + s - 1, 1);
            int best = 0;
            for (int v = 1; v < cf.V; v++) if (z[v] > z[best]) best = v;
            free(z);
            toks[0][L + s] = tgt[s] = best;
        }
        if (g % 2) tgt[1] = (tgt[1] + 1) % cf.V;
        want[g] = g % 2 == 0;
        tgt[2] = -1;
        toks[0][L] = -1;
        const int *ctx[1] = {toks[0]}, *comp[1] = {tgt};
        int gc[1] = {3};
        ev_example(w, &n, 1, 1, 0, ctx, comp, gc);
    }
    snprintf(path, sizeof path, "%s/greedy.bin", dir);
    ev_write(path, EVALSET_MAGIC, EVALSET_VERSION, EVALSET_GREEDY, 6, n, cf.V, "greedy", w, n);
    rc = evalset_load(&e, path, cf.V, err, sizeof err);
    CHECK(rc == 0, "%s", err);
    if (rc == 0) {
        double x[12] = {0};
        evalset_losses(&M, &e, B, T, x);
        for (int g = 0; g < 6; g++) CHECK(x[6 + g] == want[g], "greedy example %d: hit %g, wanted %d", g, x[6 + g], want[g]);
        EvalResult res;
        evalset_run(&M, &e, B, T, &res);
        CHECK(res.acc == 0.5 && res.scored == 6, "greedy acc %g of %d examples (wanted 0.5 of 6)", res.acc, res.scored);
        evalset_free(&e);
    }
    free(w); free(in); free(tg);
    model_free(&M);
    dt_rmdir(dir);
}

/* The trainer's -H: a bad eval file or -H without a val interval stop it with one line; a short run prints and logs
 * the scores. */
static void test_eval_cli(void) {
    if (access(g_trainer, X_OK)) { CHECK(0, "%s not built (run make test)", g_trainer); return; }
    char dir[64], path[128], args[600], cmd[1200], msg[1024];
    uint16_t w[64];
    if (dt_mkdir(dir, sizeof dir)) return;
    int n = ev_toy(w);
    snprintf(path, sizeof path, "%s/bad.bin", dir);
    ev_write(path, 42, EVALSET_VERSION, EVALSET_MC, 2, n, GPT2_VOCAB, "toy", w, n);
    snprintf(args, sizeof args, "-i data/tinyshakespeare_train.bin -j data/tinyshakespeare_val.bin -b 1 -t 64 -x 1 -v 1 -m 1 -s 0 -H %s", path);
    expect_error(args, "bad.bin: bad magic 42");
    snprintf(args, sizeof args, "-v 0 -H %s", path);
    expect_error(args, "-H is scored with the val loss");
    snprintf(path, sizeof path, "%s/toy.bin", dir);
    ev_write(path, EVALSET_MAGIC, EVALSET_VERSION, EVALSET_MC, 2, n, GPT2_VOCAB, "toy", w, n);
    snprintf(args, sizeof args, "-H %s", path); // the main job's character vocabulary: not GPT-2's
    expect_error(args, "toy.bin: token ids of a 50257-token vocabulary, but the model's is");
    snprintf(cmd, sizeof cmd, "%s -i data/tinyshakespeare_train.bin -j data/tinyshakespeare_val.bin -b 1 -t 64 -x 1 -v 1 -m 1 -s 0 "
             "-H %s -o %s/run", g_trainer, path, dir);
    CHECK(run_cmd(cmd, msg, sizeof msg) == 0, "run with -H: %s", msg);
    snprintf(cmd, sizeof cmd, "grep -q '^step 1: toy: acc [0-9.]* acc_norm [0-9.]* acc_char [0-9.]* (2 examples)$' %s && "
             "grep -q '^s:1 eval:toy:acc_char:' %s/run/main.log", g_stdout_path, dir);
    CHECK(system(cmd) == 0, "the run's output or main.log lacks the eval lines");
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0, "cleanup");
}

static void register_eval_tests(void) {
    RUN(test_eval_reader);
    RUN(test_eval_scoring_math);
    RUN(test_eval_matches_forward);
    RUN(test_eval_cli);
}

// ---- several processes (common/dist.h; doc/model.md §9.4) ---------------------------------------------
// The launchers' variables: which set wins, and every bad value named.
static void test_dist_env(void) {
    const char *vars[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                          "OMPI_COMM_WORLD_LOCAL_RANK", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "SLURM_PROCID",
                          "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID", "SLURM_NTASKS"};
    char *saved[13];
    for (int i = 0; i < 13; i++) { saved[i] = getenv(vars[i]) ? strdup(getenv(vars[i])) : NULL; unsetenv(vars[i]); }
    DistEnv d;
    char err[300] = "";
    CHECK(dist_env(&d, err, sizeof(err)) == 0 && d.rank == 0 && d.world == 1 && d.local_rank == 0, "no launcher: one process");
    setenv("SLURM_PROCID", "0", 1); setenv("SLURM_NTASKS", "8", 1); setenv("SLURM_LOCALID", "0", 1);
    CHECK(dist_env(&d, err, sizeof(err)) == 0 && d.world == 1, "a Slurm batch script (no srun step): one process");
    setenv("SLURM_PROCID", "3", 1); setenv("SLURM_LOCALID", "1", 1); setenv("SLURM_STEP_NUM_TASKS", "4", 1); // srun
    CHECK(dist_env(&d, err, sizeof(err)) == 0 && d.rank == 3 && d.world == 4 && d.local_rank == 1, "srun: %s", err);
    setenv("RANK", "1", 1); setenv("WORLD_SIZE", "2", 1); // torchrun's variables come first
    CHECK(dist_env(&d, err, sizeof(err)) == 0 && d.rank == 1 && d.world == 2 && d.local_rank == 1 && !d.mpi,
          "torchrun, no LOCAL_RANK");
    setenv("LOCAL_RANK", "0", 1);
    CHECK(dist_env(&d, err, sizeof(err)) == 0 && d.local_rank == 0, "LOCAL_RANK");
    setenv("RANK", "2", 1);
    CHECK(dist_env(&d, err, sizeof(err)) == -1 && strstr(err, "RANK=2 is not below WORLD_SIZE=2"), "rank >= world: %s", err);
    setenv("RANK", "x1", 1);
    CHECK(dist_env(&d, err, sizeof(err)) == -1 && strstr(err, "RANK=x1: not an integer"), "bad RANK: %s", err);
    setenv("RANK", "0", 1); unsetenv("WORLD_SIZE");
    CHECK(dist_env(&d, err, sizeof(err)) == -1 && strstr(err, "RANK is set but WORLD_SIZE is not"), "RANK alone: %s", err);
    unsetenv("RANK"); unsetenv("LOCAL_RANK");
    setenv("OMPI_COMM_WORLD_RANK", "5", 1); setenv("OMPI_COMM_WORLD_SIZE", "6", 1); setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
    CHECK(dist_env(&d, err, sizeof(err)) == 0 && d.rank == 5 && d.world == 6 && d.local_rank == 1 && d.mpi &&
          !strcmp(d.launcher, "Open MPI"), "Open MPI: %s", err);
    for (int i = 0; i < 13; i++) { if (saved[i]) setenv(vars[i], saved[i], 1); else unsetenv(vars[i]); free(saved[i]); }
}

// Rank 0's id reaches every other rank, through TCP and through a directory, in processes of their own; a rank
// whose rank 0 never comes stops after the timeout with a message that says what it waited for.
static void test_dist_exchange(void) {
    const int world = 3;
    char dir[] = "/tmp/natsl_dist_XXXXXX", err[600];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    char port[16];
    snprintf(port, sizeof(port), "%d", 20000 + (int)(getpid() % 20000));
    setenv("NATSL_PORT", port, 1);
    setenv("NATSL_JOB_ID", "test", 1);
    const char *methods[2] = {"tcp", "fs"};
    for (int m = 0; m < 2; m++) {
        pid_t kids[3];
        for (int r = 0; r < world; r++) {
            kids[r] = fork();
            if (kids[r] == 0) {
                DistEnv d = {r, world, r, "", 0};
                unsigned char blob[128];
                for (int i = 0; i < 128; i++) blob[i] = r == 0 ? (unsigned char)(i * 7 + 1) : 0;
                if (r == 2) usleep(200000); // a late rank
                char e[600];
                if (dist_exchange(&d, blob, sizeof(blob), methods[m], dir, "127.0.0.1", 20, e, sizeof(e))) {
                    fprintf(stderr, "rank %d: %s\n", r, e);
                    _exit(2);
                }
                for (int i = 0; i < 128; i++) if (blob[i] != (unsigned char)(i * 7 + 1)) _exit(3);
                _exit(0);
            }
        }
        for (int r = 0; r < world; r++) {
            int st = -1;
            waitpid(kids[r], &st, 0);
            CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: rank %d ended with status %d", methods[m], r, st);
        }
        if (m == 1) {
            DistEnv d0 = {0, world, 0, "", 0};
            dist_fs_done(&d0, dir);
            char p[300];
            snprintf(p, sizeof(p), "%s/natsl_nccl_id.test", dir);
            CHECK(access(p, F_OK) != 0, "rank 0 did not remove %s", p);
        }
    }
    DistEnv d1 = {1, 2, 1, "", 0};
    unsigned char blob[16];
    double t0 = now_s();
    CHECK(dist_exchange(&d1, blob, sizeof(blob), "tcp", dir, "127.0.0.1", 1, err, sizeof(err)) == -1 &&
          strstr(err, "no NCCL id from rank 0 after 1 s") && now_s() - t0 < 10, "tcp without rank 0: %s", err);
    CHECK(dist_exchange(&d1, blob, sizeof(blob), "fs", dir, "127.0.0.1", 1, err, sizeof(err)) == -1 &&
          strstr(err, "no NCCL id from rank 0") && strstr(err, dir), "fs without rank 0: %s", err);
    DistEnv d0 = {0, 3, 0, "", 0};
    CHECK(dist_exchange(&d0, blob, sizeof(blob), "tcp", dir, "127.0.0.1", 1, err, sizeof(err)) == -1 &&
          strstr(err, "1 of 3 ranks connected"), "tcp rank 0 alone: %s", err);
    unsetenv("NATSL_PORT"); unsetenv("NATSL_JOB_ID");
    snprintf(err, sizeof(err), "rm -rf %s", dir);
    CHECK(system(err) == 0, "cleanup");
}

// A step's micro-batches dealt out over N ranks (next_micro_batch) are exactly the ones one process reads, and
// every rank ends the step where one process does (the checkpointed data position holds for any N).
static void test_dist_batches(void) {
    char err[300];
    const int B = 2, T = 64, accum = 4, world = 2;
    DataLoader one, r[2];
    const char *glob = "data/tinyshakespeare_char/val.bin";
    CHECK(dataloader_init(&one, glob, B, T, 66, err, sizeof(err)) == 0, "%s", err);
    for (int k = 0; k < world; k++) CHECK(dataloader_init(&r[k], glob, B, T, 66, err, sizeof(err)) == 0, "%s", err);
    size_t n = (size_t)B * T, bad = 0;
    for (int step = 0; step < 3; step++)
        for (int k = 0; k < accum; k++) {
            dataloader_next_batch(&one, err, sizeof(err));
            int owner = k % world;
            for (int rr = 0; rr < world; rr++) // what next_micro_batch does on rank rr for its micro-step k / world
                if (rr == owner) {
                    for (int q = 0; q < world; q++)
                        (q == rr ? dataloader_next_batch : dataloader_skip_batch)(&r[rr], err, sizeof(err));
                    for (size_t i = 0; i < n; i++)
                        bad += r[rr].inputs[i] != one.inputs[i] || r[rr].targets[i] != one.targets[i];
                }
        }
    CHECK(bad == 0, "%zu tokens differ from one process's batches", bad);
    for (int k = 0; k < world; k++)
        CHECK(r[k].shard == one.shard && r[k].pos == one.pos, "rank %d ends at (%d, %zu), one process at (%d, %zu)", k,
              r[k].shard, r[k].pos, one.shard, one.pos);
    dataloader_free(&one);
    for (int k = 0; k < world; k++) dataloader_free(&r[k]);
}

// ZeRO-1 checkpoints: a rank's shard file round-trips and is checked against the run; the state file of such a run
// holds no moments and says so; the CPU trainer refuses to resume it with a message that says how to go on; a run
// directory holding only a shard counts as a run; the CPU trainer refuses to be one of several processes.
static void test_dist_zero_checkpoint(void) {
    char dir[] = "/tmp/natsl_zero_XXXXXX", p[600], err[1024], args[1400];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    size_t n = 1000;
    float *mv = (float *)malloc(2 * n * sizeof(float)), *back = (float *)malloc(2 * n * sizeof(float));
    for (size_t i = 0; i < 2 * n; i++) mv[i] = i < n ? (float)i - 500 : (float)i;
    snprintf(p, sizeof(p), "%s/zero1_00000003_r001.bin", dir);
    CHECK(ckpt_write_zero_shard(p, 3, 1, 2, 0xabcdef12345ull, mv, mv + n, n, err, sizeof(err)) == 0, "%s", err);
    CHECK(ckpt_read_zero_shard(p, 3, 1, 2, 0xabcdef12345ull, back, n, err, sizeof(err)) == 0 &&
          !memcmp(mv, back, 2 * n * sizeof(float)), "shard round trip: %s", err);
    CHECK(ckpt_read_zero_shard(p, 3, 0, 2, 0xabcdef12345ull, back, n, err, sizeof(err)) == -1 && strstr(err, "rank 1 of 2") &&
          strstr(err, "rank 0 of 2"), "another rank's shard: %s", err);
    CHECK(ckpt_read_zero_shard(p, 3, 1, 2, 0x1ull, back, n, err, sizeof(err)) == -1 && strstr(err, "model"), "another model: %s", err);
    CHECK(ckpt_read_zero_shard(p, 3, 1, 2, 0xabcdef12345ull, back, n - 1, err, sizeof(err)) == -1 && strstr(err, "999 moments"),
          "another size: %s", err);
    CHECK(is_run_file("zero1_00000003_r001.bin", 0) && is_run_file("zero1_00000003_r001.bin.tmp", 1) &&
          !is_run_file("zero1_00000003_r01.bin", 0), "is_run_file and the shard names");
    snprintf(args, sizeof(args), "-b 1 -t 64 -x 1 -v 0 -s 0 -o %s", dir);
    hz_expect_error("fresh run over a lone shard", args, "already holds a run|zero1_00000003_r001.bin");
    // a ZeRO-1 run's state: no moments, world 2, stage 1; the CPU trainer's resume says what to do instead
    snprintf(args, sizeof(args), "-b 1 -t 64 -x 1 -v 0 -s 0 -o %s/run", dir);
    char msg[1024];
    CHECK(hz_run(args, msg, sizeof(msg)) == 0, "fixture run: %s", msg);
    snprintf(p, sizeof(p), "%s/run/state_00000001.bin", dir);
    TrainState st = {1, 7, 0, 0, 0, 9, 2, 1};
    int h[256];
    CHECK(ckpt_read_header(p, h, err, sizeof(err)) == 0, "%s", err);
    st.model_fp = (uint64_t)(uint32_t)h[10] | ((uint64_t)(uint32_t)h[11] << 32);
    CHECK(ckpt_write_state(p, &st, NULL, NULL, (size_t)(uint32_t)h[8] | ((size_t)(uint32_t)h[9] << 31), err, sizeof(err)) == 0,
          "%s", err);
    CHECK(hz_file_size(p) == 1024, "a ZeRO-1 state file holds the header only (%ld bytes)", hz_file_size(p));
    snprintf(args, sizeof(args), "-b 1 -t 64 -x 2 -v 0 -s 0 -y 1 -o %s/run", dir);
    hz_expect_error("CPU resume of a ZeRO-1 checkpoint", args, "written by 2 ranks with -z 1|-e");
    setenv("WORLD_SIZE", "2", 1); setenv("RANK", "0", 1);
    hz_expect_error("CPU trainer as one of two processes", "-b 1 -t 64 -d 128 -x 1 -v 0 -s 0", "train_natsl trains in one process");
    hz_expect_error("a rank of a job with -D", "-b 1 -t 64 -x 1 -s 0 -D /tmp/x.bin", "rank 0: -D and -f run in one process");
    hz_expect_error("-d not a multiple of the ranks", "-b 1 -t 64 -d 192 -x 1 -s 0", "rank 0: -d 192: with 2 ranks|128");
    unsetenv("WORLD_SIZE"); unsetenv("RANK");
    hz_expect_error("bad -pi", "-pi udp", "-pi udp: the NCCL id goes by tcp, fs or mpi");
    // dev/launch.sh: N ranks with their variables; a failing rank's status is the launcher's
    snprintf(args, sizeof(args), "dev/launch.sh 2 %s -b 1 -t 64 -d 128 -x 1 -v 0 -s 0 > %s/launch.out 2> %s/launch.err", g_trainer,
             dir, dir);
    int rc = system(args);
    snprintf(p, sizeof(p), "grep -c 'error: rank [01]: train_natsl trains in one process' %s/launch.err | grep -q 2 && "
             "grep -q 'launch: a rank exited with status 1' %s/launch.err", dir, dir);
    int launch_ok = WIFEXITED(rc) && WEXITSTATUS(rc) == 1 && system(p) == 0;
    CHECK(launch_ok, "dev/launch.sh: status %d, or the ranks' errors missing", rc);
    if (!launch_ok) { // what the launcher and the ranks said
        snprintf(p, sizeof(p), "sed 's/^/    launch.err: /' %s/launch.err; sed 's/^/    launch.out: /' %s/launch.out | tail -5", dir, dir);
        fflush(stdout);
        if (system(p) != 0) printf("    (launch.err / launch.out unreadable)\n");
    }
    CHECK(system("dev/launch.sh 0 ./train_natsl 2> /dev/null") != 0, "dev/launch.sh 0 accepted");
    free(mv); free(back);
    snprintf(args, sizeof(args), "rm -rf %s", dir);
    CHECK(system(args) == 0, "cleanup");
}


// ---- CPU vs GPU (§8): the same dump (-D, common/dump.h) from train_natsl and train_natsl_cu -------------------------
static double normwise(const float *a, const float *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) { num += ((double)a[i] - ref[i]) * ((double)a[i] - ref[i]); den += (double)ref[i] * ref[i]; }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}
// The largest relative difference of the losses over the 10 AdamW steps.
static double dump_steps_diff(const Dump *a, const Dump *ref) {
    DumpParts p = dump_parts(ref);
    double d = 0;
    for (size_t i = 0; i <= p.ns; i++) d = fmax(d, fabs(a->x[p.steps + i] - ref->x[p.steps + i]) / fabs(ref->x[p.steps + i]));
    return d;
}
// The largest normwise difference of one gradient tensor, and its name (infinite when the dump is not of cf).
// The GDN gate parameters (a_log, dt_bias: H values per layer). Their gradients are sums over every token with heavy
// cancellation, which amplifies bf16 rounding the most (doc/model.md §12.2 item 4).
// the tensors whose bf16 gradients sums with cancellation amplify (doc/model.md §12.2 item 4): the GDN gates and the N
// layers' router weights W_r
static int is_amplified_tensor(const char *name) { return strstr(name, ".a_log") || strstr(name, ".dt_bias") || strstr(name, ".wr"); }
// the worst normwise error over the tensors with is_amplified_tensor == gates (gates < 0: every tensor)
static double dump_worst_tensor(const Dump *a, const Dump *ref, const Config *cf, const char **name, int gates) {
    DumpParts p = dump_parts(ref);
    ParamTensor t[NATSL_MAX_TENSORS];
    size_t total;
    int nt = param_tensors(cf, t, &total);
    double worst = 0;
    *name = "";
    if (total != p.np) { *name = "(the dump is not of this config)"; return 1e300; } // (no INFINITY under -ffast-math)
    for (int i = 0; i < nt; i++) {
        if (gates >= 0 && is_amplified_tensor(t[i].name) != gates) continue;
        double e = normwise(a->x + p.grads + t[i].offset, ref->x + p.grads + t[i].offset, t[i].numel);
        if (e > worst) { worst = e; *name = t[i].name; }
    }
    return worst;
}
// gpu vs cpu (the reference); tolerances from §8 for the precision. per_tensor: the gradient bar holds for every
// tensor (else for all gradients together, the worst tensor reported); in bf16 the gate and router weight tensors
// (is_amplified_tensor) are held to 1e-1 per tensor instead (doc/model.md §12.2 item 4).
static void compare_dumps(const char *what, const Dump *g, const Dump *c, const Config *cf, int bf16, int per_tensor) {
    double tl = bf16 ? 1e-2 : 1e-5, tg = bf16 ? 3e-2 : 1e-4, ts = bf16 ? 2e-2 : 1e-4, tie = bf16 ? 1e-2 : 1e-5;
    double tgate = bf16 ? 1e-1 : tg;
    CHECK(g->n == c->n && !memcmp(g->h, c->h, 8 * sizeof(int)), "%s: dump headers/sizes differ", what);
    if (g->n != c->n) return;
    DumpParts p = dump_parts(c);
    double dl = fabs(g->x[0] - c->x[0]) / fabs(c->x[0]);
    double dz = normwise(g->x + 1, c->x + 1, p.BT * p.V);
    const char *worst_name, *gate_name;
    double worst = dump_worst_tensor(g, c, cf, &worst_name, 0), all = normwise(g->x + p.grads, c->x + p.grads, p.np);
    double gate = dump_worst_tensor(g, c, cf, &gate_name, 1);
    const float *rlc = c->x + p.rlogits, *rdc = c->x + p.rdec, *rdg = g->x + p.rdec;
    int mism = 0, ties = 0;
    for (size_t i = 0; i + 1 < p.nr; i += 2)
        if (rdc[i] != rdg[i] || rdc[i + 1] != rdg[i + 1]) {
            if (fabs(rlc[i] - rlc[i + 1]) < tie) ties++; else mism++;
        }
    double dsteps = dump_steps_diff(g, c);
    printf("  %s: loss %.2e, logits %.2e, gradients %.2e (all tensors), worst tensor %.2e (%s), worst gate or router tensor %.2e (%s), "
           "routing %d mismatches (+%d near-ties), 10-step losses %.2e\n", what, dl, dz, all, worst, worst_name, gate, gate_name,
           mism, ties, dsteps);
    if (per_tensor) {
        CHECK(worst < tg, "%s: gradient of %s differs by %.2e (normwise)", what, worst_name, worst);
        CHECK(gate < tgate, "%s: gradient of %s differs by %.2e (normwise)", what, gate_name, gate);
    } else CHECK(all < tg, "%s: the gradients differ by %.2e (normwise, all tensors)", what, all);
    CHECK(dl < tl, "%s: loss differs by %.2e", what, dl);
    CHECK(dz < tg, "%s: logits differ by %.2e", what, dz);
    CHECK(mism == 0, "%s: %d routing decisions differ", what, mism);
    CHECK(dsteps < ts, "%s: losses over 10 AdamW steps differ by %.2e", what, dsteps);
}
// train_natsl_cu -k 1 or 2 against -k 0: the forward pass (loss, logits, routing) is deterministic and must match
// bit for bit; the gradients may differ only by the order of the backward pass's float atomics (~1e-7), which
// bf16 rounding amplifies over the 10 AdamW steps (to ~2e-5): bars 1e-5 and, for the
// 10-step losses, 1e-5 in fp32 and 1e-4 in bf16.
static void compare_recompute(const char *what, int level, const Dump *k1, const Dump *k0, int bf16) {
    CHECK(k1->n == k0->n && !memcmp(k1->h, k0->h, 8 * sizeof(int)), "%s: -k %d dump headers/sizes differ", what, level);
    if (k1->n != k0->n) return;
    DumpParts p = dump_parts(k0);
    int fwd = !memcmp(k1->x, k0->x, p.grads * sizeof(float)) &&
              !memcmp(k1->x + p.rlogits, k0->x + p.rlogits, 2 * p.nr * sizeof(float));
    double dg = normwise(k1->x + p.grads, k0->x + p.grads, p.np), ds = dump_steps_diff(k1, k0);
    printf("  %s, recompute (-k %d) vs -k 0: forward %s, gradients %.2e, 10-step losses %.2e\n", what, level,
           fwd ? "bit-identical" : "DIFFERS", dg, ds);
    CHECK(fwd, "%s: -k %d changes the forward pass", what, level);
    CHECK(dg < 1e-5 && ds < (bf16 ? 1e-4 : 1e-5), "%s: -k %d changes the gradients (%.2e) or the 10-step losses (%.2e)",
          what, level, dg, ds);
}
// The bf16 GPU run against the fp32 CPU run: how far bf16 rounding moves the results (reported; the loss and the
// 10-step losses are held to §8's bf16 bars; per-tensor gradients are not, see the README: rounding
// every matmul operand to bf16 moves the two-element a_log/dt_bias gradients of this tiny model by 3-5e-2).
static void report_bf16_vs_fp32(const char *what, const Dump *g, const Dump *c, const Config *cf) {
    if (g->n != c->n) { CHECK(0, "%s: dump sizes differ", what); return; }
    DumpParts p = dump_parts(c);
    const char *wn;
    double worst = dump_worst_tensor(g, c, cf, &wn, -1), all = normwise(g->x + p.grads, c->x + p.grads, p.np);
    double dl = fabs(g->x[0] - c->x[0]) / fabs(c->x[0]), ds = dump_steps_diff(g, c);
    printf("  %s vs the fp32 CPU: loss %.2e, gradient %.2e (all tensors), worst tensor %.2e (%s), 10-step losses %.2e\n",
           what, dl, all, worst, wn, ds);
    CHECK(dl < 1e-2 && ds < 2e-2, "%s: bf16 moves the loss (%.2e) or the 10-step losses (%.2e) too far from fp32", what, dl, ds);
}
static int gpu_available(char *why, size_t n) {
    if (access("./train_natsl_cu", X_OK)) { snprintf(why, n, "./train_natsl_cu is not built (needs nvcc)"); return 0; }
    if (system("nvidia-smi -L >/dev/null 2>&1")) { snprintf(why, n, "no GPU (nvidia-smi finds none)"); return 0; }
    return 1;
}
// Each precision against the CPU in the same precision (-p bf16 on the CPU rounds the matmul operands as the GPU
// does), at §8's tolerances for that precision; then -k 1 against -k 0 on the GPU, and bf16 against fp32.
// bf16 is compared twice: with the GDN op's block matmuls in fp32 FMA and attention on the TF32 kernels
// (NATSL_GDN_TF32=0 NATSL_ATTN_BF16=0, the CPU with NATSL_ATTN_BF16=0 too: exactly what the CPU emulates; every
// gradient tensor within 3e-2), and as trained, with the GDN op on the TF32 tensor cores and attention on the bf16
// kernels, whose internal roundings (TF32 products; P and dS rounded to bf16) the CPU does not emulate (§8's bf16
// bars with the gradient bar over all tensors: they move the tiny model's two-element, cancellation-prone
// dt_bias/a_log gradients by up to about 6e-2, as bf16 rounding itself does).
// The third run turns every §7 option on (penalty above f*, load balancing, ST-Gumbel routing in the 10 steps: both
// programs draw the same noise from the same stream; the first batch's forward pass is noise-free, as -D's is).
// The fourth has two S layers (§7.3) with their penalty: their gates (z_A, z_G) and choices are compared as router
// pairs, the first batch's noise-free, the 10 steps' under the same noise.
// The fifth is two layers of the 760m preset (d_k = 192, d_v = 384, D = 1536; the character data's small vocabulary):
// the GPU's GDN op on its bf16 kernels at that head size in bf16 mode (the token recurrence in fp32 mode). It trains at
// 3e-4, a learning rate models of that width train at: at the tiny model's 1e-3 its 10 AdamW steps on 128-token batches
// amplify any difference (AdamW's first steps go by the gradients' signs) to 1-2% of the loss, whichever roundings
// differ, the GPU's atomics included (two runs of the same code differ so): bar 2e-2.
// The model of a run: its -e preset (else tiny) and -a pattern, for the vocabulary V of the data
// (and -W, -U: the H layers' windows and slots)
static void run_config(Config *cf, const char *run_args, int V) {
    char msg[256], pat[NATSL_MAX_LAYERS + 1], preset[16] = "tiny", wins[256] = "";
    const char *e = strstr(run_args, "-e "), *a = strstr(run_args, "-a "), *w = strstr(run_args, "-W "), *u = strstr(run_args, "-U ");
    int slots = 0;
    if (e) sscanf(e, "-e %15s", preset);
    config_from_preset(cf, preset, V);
    if (a && sscanf(a, "-a %64s", pat) == 1) config_set_pattern(cf, pat, msg, sizeof(msg));
    if (w) sscanf(w, "-W %255s", wins);
    if (u) sscanf(u, "-U %d", &slots);
    if (w || u) config_set_nha(cf, w ? wins : NULL, slots, msg, sizeof(msg));
}
static void cpu_vs_gpu_runs(const char *runs[][2], size_t nruns);
static void test_cpu_vs_gpu(void) {
    const char *runs[][2] = {{"tiny GNGN", ""}, {"tiny GNA", "-a GNA"}, {"tiny GNGN, budget options", "-B 0.5 -F 0.2 -A 0.05 -G 1 -R 0.9"},
                             {"tiny GNGN, sigmoid gate, own-chunk sg", "-C sigmoid -L 1"},
                             {"tiny GSNS, layer selection", "-a GSNS -S 0.5"},
                             {"tiny GNGN, answers only", "-w 1 -i @/ans/train.bin -j @/ans/val.bin"},
                             {"760m GN", "-e 760m -a GN -b 1 -t 128 -l 3e-4 -i data/tinyshakespeare_char/train.bin -j data/tinyshakespeare_char/val.bin"}};
    cpu_vs_gpu_runs(runs, sizeof(runs) / sizeof(runs[0]));
}
// H layers (§15) at windows 70 and 0 (slots only), 8 slots, among G and A layers (no samples: -s 0)
static void test_nha_cpu_vs_gpu(void) {
    const char *runs[][2] = {{"tiny HAHG, NHA", "-a HAHG -W 70,0 -U 8 -s 0"}};
    cpu_vs_gpu_runs(runs, 1);
}
// Each run's flags with every '@' replaced by dir (the run's own directory, so that test processes run side by side)
static void cvg_flags(char *out, size_t n, const char *flags, const char *dir) {
    size_t k = 0;
    for (const char *p = flags; *p && k + strlen(dir) + 1 < n; p++) {
        if (*p == '@') { memcpy(out + k, dir, strlen(dir)); k += strlen(dir); }
        else out[k++] = *p;
    }
    out[k] = '\0';
}
static void cpu_vs_gpu_runs(const char *runs[][2], size_t nruns) {
    // every GPU run takes cuBLASLt's first algorithm for each product, untimed: the runs compared bit for bit (-k 1,
    // -k 2 against -k 0) run the same products, and each make test compares the same GPU bits with the CPU
    setenv("NATSL_GEMM_TIMED", "0", 1);
    // the dumps in a directory of this process's own; the answers-only run's data there: rows with answer files
    // (ev_write_rows), V = 16
    char dir[] = "/tmp/natsl_cvg_XXXXXX", ans[64], cmd[4096];
    if (!mkdtemp(dir)) { CHECK(0, "mkdtemp %s", dir); return; }
    snprintf(ans, sizeof(ans), "%s/ans", dir);
    CHECK(mkdir(ans, 0700) == 0, "mkdir %s", ans);
    ev_write_rows(ans, "train", 64, 256, 16, 1);
    ev_write_rows(ans, "val", 16, 256, 16, 1);
    snprintf(cmd, sizeof(cmd), "%s/tokenizer.bin", ans);
    ev_write_tokenizer(cmd, 16);
    char files[7][96]; // the dumps: the CPU's in fp32 and bf16, then the GPU's, -k 1, -k 2, FMA, the CPU's exact
    const char *names[7] = {"cpu_fp32", "cpu_bf16", "gpu", "gpu_k1", "gpu_k2", "gpu_fma", "cpu_exact"};
    for (int i = 0; i < 7; i++) snprintf(files[i], sizeof(files[i]), "%s/%s.bin", dir, names[i]);
    const char *f_gpu = files[2], *f_k1 = files[3], *f_k2 = files[4], *f_fma = files[5], *f_exact = files[6];
    for (size_t r = 0; r < nruns; r++) {
        Config cf;
        char msg[1024], flags[1024];
        cvg_flags(flags, sizeof(flags), runs[r][1], dir);
        for (int bf16 = 0; bf16 <= 1; bf16++) {
            // on the FineWeb-Edu shards (the GPT-2 vocabulary's 50304-row head, as in real runs); the 760m run on the characters
            char what[64];
            const char *args = "-b 2 -t 256 -l 1e-3 -u 2 -i data/fineweb_edu_train.bin -j data/fineweb_edu_val.bin";
            const char *prec = bf16 ? "bf16" : "fp32", *f_c = files[bf16];
            snprintf(what, sizeof(what), "%s %s", runs[r][0], prec);
            snprintf(cmd, sizeof(cmd), "./train_natsl %s %s -p %s -D %s && ./train_natsl_cu %s %s -p %s "
                     "-D %s && ./train_natsl_cu %s %s -p %s -k 1 -D %s && ./train_natsl_cu %s %s "
                     "-p %s -k 2 -D %s && NATSL_GDN_TF32=0 NATSL_ATTN_BF16=0 ./train_natsl_cu %s %s -p %s "
                     "-D %s && NATSL_ATTN_BF16=0 ./train_natsl %s %s -p %s -D %s",
                     args, flags, prec, f_c, args, flags, prec, f_gpu, args, flags, prec, f_k1, args, flags, prec, f_k2,
                     args, flags, prec, f_fma, args, flags, prec, f_exact);
            CHECK(run_cmd(cmd, msg, sizeof(msg)) == 0, "%s: %s", what, msg);
            Dump c, g, k1, k2, c32, fma, cx;
            if (dump_read(f_c, &c) || dump_read(f_gpu, &g) || dump_read(f_k1, &k1) || dump_read(f_k2, &k2)) {
                CHECK(0, "%s: cannot read the dumps", what);
                continue;
            }
            run_config(&cf, flags, c.h[4]); // the data's vocabulary, from the dump's header
            // answers only: a third of the positions carry the loss, and bf16 rounding alone moves the GDN gates'
            // cancelling sums by more than their per-tensor bar (l3.a_log 6.9e-2 against the fp32 CPU): in bf16
            // this run's gradients are held to the bar over all tensors (its fp32 run checks every tensor)
            int answers = strstr(flags, "-w 1") != NULL;
            if (bf16 && dump_read(f_fma, &fma) == 0 && dump_read(f_exact, &cx) == 0) {
                char w2[96];
                snprintf(w2, sizeof(w2), "%s, GDN op in fp32, attention in TF32", what);
                compare_dumps(w2, &fma, &cx, &cf, 1, !answers);
                free(fma.x); free(cx.x);
            } else if (bf16) CHECK(0, "%s: cannot read the NATSL_GDN_TF32=0 NATSL_ATTN_BF16=0 dumps", what);
            compare_dumps(what, &g, &c, &cf, bf16, !bf16);
            compare_recompute(what, 1, &k1, &g, bf16);
            compare_recompute(what, 2, &k2, &g, bf16);
            if (bf16 && dump_read(files[0], &c32) == 0) { report_bf16_vs_fp32(what, &g, &c32, &cf); free(c32.x); }
            free(c.x); free(g.x); free(k1.x); free(k2.x);
        }
    }
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    CHECK(system(cmd) == 0, "%s", cmd);
    unsetenv("NATSL_GEMM_TIMED");
}

// The GPU scores an eval set as the CPU does: a fresh tiny model on ARC-Easy (570 examples, 2281 rows of B = 16 at
// T = 128), in fp32 on both; a fresh model finds the choices nearly equal (acc_norm compares per-token losses that
// differ by ~1e-3), so a few near-ties may fall the other way: at most 3 examples per number. The bf16 run's numbers
// are printed beside them.
static void test_eval_cpu_vs_gpu(void) {
    const char *args = "-i data/fineweb_edu_train.bin -j data/fineweb_edu_val.bin -b 16 -t 128 -x 1 -v 1 -m 1 -s 0 -H data/arc_easy_val.bin";
    const char *progs[3][2] = {{"./train_natsl", "fp32"}, {"./train_natsl_cu", "fp32"}, {"./train_natsl_cu", "bf16"}};
    double v[3][3] = {{0}};
    for (int k = 0; k < 3; k++) {
        char cmd[1024], msg[1024], line[512];
        snprintf(cmd, sizeof(cmd), "%s %s -p %s", progs[k][0], args, progs[k][1]);
        CHECK(run_cmd(cmd, msg, sizeof(msg)) == 0, "%s: %s", cmd, msg);
        FILE *f = fopen(g_stdout_path, "r");
        int found = 0;
        while (f && fgets(line, sizeof(line), f))
            found |= sscanf(line, "step 1: arc_easy: acc %lf acc_norm %lf acc_char %lf", &v[k][0], &v[k][1], &v[k][2]) == 3;
        if (f) fclose(f);
        CHECK(found, "%s: no 'step 1: arc_easy:' line", cmd);
    }
    printf("  acc / acc_norm / acc_char: CPU fp32 %.4f %.4f %.4f | GPU fp32 %.4f %.4f %.4f | GPU bf16 %.4f %.4f %.4f\n", v[0][0],
           v[0][1], v[0][2], v[1][0], v[1][1], v[1][2], v[2][0], v[2][1], v[2][2]);
    for (int m = 0; m < 3; m++)
        CHECK(fabs(v[0][m] - v[1][m]) <= 3.5 / 570, "number %d: CPU %.4f, GPU %.4f: more than 3 of 570 examples apart", m, v[0][m], v[1][m]);
}

// The GPU trainer in bf16 resumes bit-identically too: a run keeps the products' algorithms that it chose by timing in
// dir/gemm_algos.bin and a resume takes them from there (the split run starts from the full run's choices, as the
// two would otherwise time their own); a cache that does not read whole is timed again with a note, and the run
// goes on.
static void test_gpu_resume_bit_identical(void) {
    char dir[] = "/tmp/natsl_gpu_resume_XXXXXX", cmd[2048], msg[1024], before[600];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    const char *common = "-b 2 -t 128 -l 1e-3 -u 2 -x 6 -v 3 -m 2 -s 3 -g 8 -a GNA";
    snprintf(before, sizeof(before), "mkdir %s/split && cp %s/full/gemm_algos.bin %s/split/ && ", dir, dir, dir);
    check_resume("./train_natsl_cu", common, dir, before);
    snprintf(cmd, sizeof(cmd), "test -s %s/split/gemm_algos.bin && head -c 20 %s/split/gemm_algos.bin > %s/cut.bin && "
             "mv %s/cut.bin %s/split/gemm_algos.bin && ./train_natsl_cu %s -o %s/split -y 1 -x 7 | grep -q "
             "'gemm_algos.bin does not read whole: the products are timed again'", dir, dir, dir, dir, dir, common, dir);
    CHECK(run_cmd(cmd, msg, sizeof(msg)) == 0, "a cut gemm_algos.bin: %s", msg);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    CHECK(system(cmd) == 0, "cleanup");
}

// The GPU's cached decoder against the CPU's and each against its forward pass (doc/model.md §14, §8): both programs
// decode, in the same precision, from the same untrained model (-a pattern, seed 0) with NATSL_GEN_DUMP: three
// sequences in one batch, prompts of n, n/2 and 0 tokens, then 70 fixed tokens each, every position's logits of the
// three, and the forward pass's over the first sequence (generate_dump). fp32: the GPU's logits within 1e-5 of the
// CPU's at every position (normwise), each program's within 1e-5 of its forward pass; bf16 (the CPU's -p bf16
// emulation): 2e-2; the softmax fraction of every N layer's completed chunks the same in both programs. Where a prompt
// holds a whole chunk (n ≥ 64), the GPU's prefill by the forward pass (doc/model.md §14.5) against its token-by-token
// one (NATSL_GEN_DUMP_TOKENS=1): every position's logits of the three sequences within the same bar. H layers (§15):
// HAHG at windows 70 and 0 (prompts of 130 and 200: whole chunks longer than the window), HGHN at 150 and 5 (130:
// shorter than the first window), 8 and 4 slots.
typedef struct { int head[4]; float *z, *fwd; double sfr[NATSL_MAX_LAYERS]; } GenDump;
static int gen_dump_read(const char *path, GenDump *g) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    int *h = g->head, ok = fread(h, sizeof(int), 4, f) == 4 && h[0] == 3 && h[3] <= NATSL_MAX_LAYERS;
    size_t n = ok ? (size_t)h[0] * h[1] * h[2] : 0, nf = ok ? (size_t)h[1] * h[2] : 0;
    g->z = xcalloc(n ? n : 1, sizeof(float));
    g->fwd = xcalloc(nf ? nf : 1, sizeof(float));
    ok = ok && fread(g->z, sizeof(float), n, f) == n && fread(g->sfr, sizeof(double), h[3], f) == (size_t)h[3] &&
         fread(g->fwd, sizeof(float), nf, f) == nf;
    fclose(f);
    return ok;
}
// The largest normwise difference of rows x from rows y (rows of V values, ldx and ldy apart)
static double rows_diff(const float *x, size_t ldx, const float *y, size_t ldy, int rows, int V) {
    double worst = 0;
    for (int i = 0; i < rows; i++) {
        double dd = 0, nn = 0;
        for (int v = 0; v < V; v++) {
            double a = x[i * ldx + v], b = y[i * ldy + v];
            dd += (a - b) * (a - b); nn += b * b;
        }
        if (nn > 0) worst = fmax(worst, sqrt(dd / nn));
        else if (dd > 0) worst = INFINITY;
    }
    return worst;
}
static void test_cache_cpu_vs_gpu(void) {
    struct { const char *pattern; int n; const char *prec; const char *opts; } runs[] = {
        {"G", 63, "fp32", NULL}, {"G", 200, "fp32", NULL}, {"A", 65, "fp32", NULL}, {"A", 200, "fp32", NULL},
        {"N", 63, "fp32", NULL}, {"N", 200, "fp32", NULL}, {"natsl", 65, "fp32", NULL}, {"natsl", 200, "fp32", NULL},
        {"GNAN", 1, "fp32", NULL}, {"GNAN", 63, "fp32", NULL}, {"GNAN", 64, "fp32", NULL}, {"GNAN", 65, "fp32", NULL},
        {"GNAN", 200, "fp32", NULL}, {"SNS", 130, "fp32", NULL}, {"GNAN", 200, "bf16", NULL}, {"natsl", 130, "bf16", NULL},
        {"HAHG", 63, "fp32", "-W 70,0 -U 8"}, {"HAHG", 130, "fp32", "-W 70,0 -U 8"}, {"HAHG", 200, "fp32", "-W 70,0 -U 8"},
        {"HGHN", 130, "fp32", "-W 150,5 -U 4"}, {"HAHG", 130, "bf16", "-W 70,0 -U 8"},
        {"HGHN", 200, "bf16", "-W 150,5 -U 4"}};
    char dir[] = "/tmp/natsl_gendump_XXXXXX", cmd[4096], msg[1024], ids[1200];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    for (size_t k = 0; k < sizeof(runs) / sizeof(runs[0]); k++) {
        GenDump g[3];
        double bar = strcmp(runs[k].prec, "bf16") ? 1e-5 : 2e-2, fwd[2] = {0, 0}, chunked = 0;
        int runs_k = runs[k].n >= 64 ? 3 : 2; // the third: the GPU's token-by-token prefill
        memset(g, 0, sizeof(g));
        ids[0] = 0;
        for (int i = 1; i < runs[k].n; i++) // the prompt after <|endoftext|>: n tokens in all
            snprintf(ids + strlen(ids), sizeof(ids) - strlen(ids), "%s%d", i > 1 ? "," : "", (5 * i + 2) % 60);
        int ok = 1;
        for (int p = 0; p < runs_k; p++) {
            snprintf(cmd, sizeof(cmd), "NATSL_GEN_DUMP=%s/%d.bin %s%s -a %s %s -p %s -N 70 %s%s", dir, p,
                     p == 2 ? "NATSL_GEN_DUMP_TOKENS=1 " : "", p ? "./train_natsl_cu" : g_trainer, runs[k].pattern,
                     runs[k].opts ? runs[k].opts : "", runs[k].prec, ids[0] ? "-I " : "", ids);
            CHECK(run_cmd(cmd, msg, sizeof(msg)) == 0, "%s: %s", cmd, msg);
            snprintf(cmd, sizeof(cmd), "%s/%d.bin", dir, p);
            ok &= gen_dump_read(cmd, &g[p]);
            CHECK(ok, "%s: not a generate dump", cmd);
        }
        for (int p = 1; p < runs_k; p++) ok = ok && !memcmp(g[0].head, g[p].head, sizeof(g[0].head));
        CHECK(ok, "%s n=%d: the dumps differ in shape", runs[k].pattern, runs[k].n);
        if (!ok) { for (int p = 0; p < runs_k; p++) { free(g[p].z); free(g[p].fwd); } continue; }
        int S = g[0].head[1], V = g[0].head[2], L = g[0].head[3], route_bad = 0;
        double worst = rows_diff(g[1].z, V, g[0].z, V, 3 * S, V);
        for (int p = 0; p < 2; p++) fwd[p] = rows_diff(g[p].z, 3 * (size_t)V, g[p].fwd, V, S, V); // sequence 0
        for (int l = 0; l < L; l++) route_bad += g[0].sfr[l] != g[1].sfr[l];
        if (runs_k == 3) {
            chunked = rows_diff(g[1].z, V, g[2].z, V, 3 * S, V);
            for (int l = 0; l < L; l++) route_bad += g[2].sfr[l] != g[1].sfr[l];
        }
        printf("  %s%s%s %s prompt %d (batch of 3: %d, %d, 0 tokens, then 70): GPU vs CPU %.2e, decoder vs forward: CPU %.2e "
               "GPU %.2e", runs[k].pattern, runs[k].opts ? " " : "", runs[k].opts ? runs[k].opts : "", runs[k].prec, runs[k].n, runs[k].n, runs[k].n / 2, worst, fwd[0], fwd[1]);
        if (runs_k == 3) printf(", GPU prefill by the forward vs token by token %.2e", chunked);
        for (int l = 0; l < L; l++) if (g[0].sfr[l] >= 0) printf(" | sfr l%d %.3f %.3f", l, g[0].sfr[l], g[1].sfr[l]);
        printf("\n");
        CHECK(worst <= bar, "%s %s n=%d: GPU logits %.2e from the CPU's", runs[k].pattern, runs[k].prec, runs[k].n, worst);
        CHECK(fwd[0] <= bar && fwd[1] <= bar, "%s %s n=%d: the decoders' logits from their forward passes' %.2e (CPU), "
              "%.2e (GPU)", runs[k].pattern, runs[k].prec, runs[k].n, fwd[0], fwd[1]);
        CHECK(chunked <= bar, "%s %s n=%d: the GPU's prefill by the forward pass %.2e from its token-by-token prefill",
              runs[k].pattern, runs[k].prec, runs[k].n, chunked);
        CHECK(route_bad == 0, "%s %s n=%d: %d layers' softmax fractions differ", runs[k].pattern, runs[k].prec, runs[k].n,
              route_bad);
        for (int p = 0; p < runs_k; p++) { free(g[p].z); free(g[p].fwd); }
    }
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    CHECK(system(cmd) == 0, "cleanup");
}

int main(int argc, char **argv) {
    if (argc > 1) g_filter = argv[1];
    if (getenv("NATSL_TRAINER")) g_trainer = getenv("NATSL_TRAINER");
#ifdef _OPENMP
    printf("threads: %d\n", omp_get_max_threads());
#endif
    double t0 = now_s();
    RUN(test_grad_matmul);
    RUN(test_grad_rmsnorm);
    RUN(test_grad_swiglu);
    RUN(test_grad_conv_silu);
    RUN(test_grad_l2norm);
    RUN(test_grad_gdn_gates);
    RUN(test_grad_rope);
    RUN(test_grad_pair_softmax);
    RUN(test_grad_gated_norm);
    RUN(test_grad_crossentropy);
    RUN(test_grad_attention_causal);
    RUN(test_grad_attention_routed);
    RUN(test_grad_attention_own_sg);
    RUN(test_attention_bf16_operands);
    RUN(test_grad_gdn_op_plain);
    RUN(test_grad_gdn_op_routed);
    RUN(test_gdn_op_matches_token_oracle);
    RUN(test_router_mask_gradient);
    RUN(test_grad_router_straight_through);
    RUN(test_grad_gdn_layer);
    RUN(test_grad_attention_layer);
    RUN(test_grad_natsl_layer_hard);
    RUN(test_grad_natsl_layer_rope);
    RUN(test_grad_natsl_layer_relaxed);
    RUN(test_grad_layers_sigmoid_gate);
    RUN(test_nha_grad_layer);
    RUN(test_nha_grad_model);
    RUN(test_nha_matches_token_oracle);
    RUN(test_nha_full_window_is_attention);
    RUN(test_nha_model_trains);
    RUN(test_grad_select_layer_a);
    RUN(test_grad_select_layer_g);
    RUN(test_grad_select_layer_relaxed);
    RUN(test_grad_model_hard);
    RUN(test_grad_model_relaxed);
    RUN(test_grad_model_sigmoid_gate);
    RUN(test_grad_router_gumbel_budget); // after the tests above, whose random inputs do not depend on it
    RUN(test_grad_model_penalty);
    RUN(test_grad_model_penalty_target);
    RUN(test_grad_model_load_balance);
    RUN(test_grad_model_gumbel);
    RUN(test_grad_model_select_hard);
    RUN(test_grad_model_select);
    RUN(test_freeze_selection);
    RUN(test_recompute_identical);
    RUN(test_cache_gdn);
    RUN(test_cache_attention);
    RUN(test_cache_natsl);
    RUN(test_cache_natsl_rope);
    RUN(test_cache_mixed);
    RUN(test_cache_select);
    RUN(test_cache_nha);
    RUN(test_cache_nha_mixed);
    RUN(test_cache_batched);
    RUN(test_cache_prefill_bf16);
    RUN(test_nonfinite_detection);
    RUN(test_param_counts);
    RUN(test_acts_layout_bf16);
    RUN(test_acts_layout_report);
    RUN(test_grads_layout_phases);
    RUN(test_bf16_stored_fields_rounded);
    RUN(test_bf16_stored_grads_rounded);
    RUN(test_grads_scratch_unzeroed);
    register_data_tests();
    RUN(test_checkpoint_roundtrip);
    RUN(test_nha_checkpoint_roundtrip);
    RUN(test_cli_bad_input);
    RUN(test_cache_generate_cli);
    RUN(test_resume_bit_identical);
    RUN(test_export_hf_roundtrip);
    RUN(test_export_hf_bad_input);
    register_hardening_tests();
    register_eval_tests();
    RUN(test_dist_env);
    RUN(test_dist_exchange);
    RUN(test_dist_batches);
    RUN(test_dist_zero_checkpoint);
    RUN(test_answer_crossentropy_grad);
    RUN(test_answer_model_grad);
    RUN(test_answer_accuracy);
    RUN(test_answer_file_reader);
    RUN(test_answer_recall_generator);
    RUN(test_answer_eval_mode);
    RUN(test_answer_routing_dump);
    char why[256];
    if (gpu_available(why, sizeof(why))) {
        RUN(test_gpu_resume_bit_identical);
        RUN(test_cpu_vs_gpu);
        RUN(test_nha_cpu_vs_gpu);
        RUN(test_eval_cpu_vs_gpu);
        RUN(test_cache_cpu_vs_gpu);
    } else printf("GPU tests (resume, CPU vs GPU comparison): skipped (%s)\n", why);
    printf("time: %.1f s\n", now_s() - t0);
    if (g_stdout_path[0]) { remove(g_stdout_path); remove(g_stderr_path); }
    printf("%d passed, %d failed\n", g_passed, g_failed);
    return g_failed ? 1 : 0;
}
