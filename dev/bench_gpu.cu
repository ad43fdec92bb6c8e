/*
bench_gpu.cu — speed and memory of the GPU trainer (train_natsl.cu, included with TESTING):
  step:  one full training step (forward, backward, gradient norm + clip, AdamW) of a preset for several
         patterns, in -p bf16 and fp32: ms/step, tokens/s, MFU and peak GPU memory; with NATSL_PROFILE=1 in the
         environment, then as many steps again with every op timed (each synchronized) and their per-op table;
         NATSL_PROFILE=2: the ops timed without synchronizing, and the GPU time between them (launch gaps);
  gemm:  the 340m model's linear layers alone (bf16): matmul_forward / matmul_backward as the trainer calls
         them (input stored in bf16; weight and dout copied to bf16) and the bare cuBLAS products on ready bf16
         operands, in TFLOP/s,
         with cuBLAS's default workspace and with a 64 MiB one;
  layer: one token-mixer layer alone (N, G, A, H: RMSNorm'd input → mixer → output projection, no MLP),
         forward + backward, at B·T = 32768 tokens for T = 4096, 16384, 32768; the H layer with the defaults
         of -a nha-hybrid (m = NHA_SLOTS slots, window NHA_WINDOW); the N layer with its softmax
         fraction forced to 1.0 / 0.5 / 0.25 / 0.1 (a fixed routing mask replaces the router's decisions
         after router_forward: g_bench_rmask) and with the router's own decisions.
  decode: the cached decoder (train_natsl.cu section 3b, doc/model.md §14), bf16, for the natsl-hybrid and the
         transformer pattern at prompts of 4096 and 32768 tokens, B = 1 and 32: the prefill's time (decoder_prefill:
         the prompts' whole chunks through the forward pass, doc/model.md §14.5; beside it the forward pass alone,
         model_forward over the same rows as the prefill's passes, tokens/s), then 256 decoded tokens a sequence
         (tokens/s summed over the B sequences, each step waited for as a sampler would), and the cache held against
         what a Transformer holds; the router's own decisions (random weights). The hybrid again with its cache
         filled by decode_fill (benchmark only: the positions and the N layers' kept chunks set, their contents left
         zero, which the speed does not depend on), the N layers keeping a forced softmax fraction 0.1 / 0.25 / 0.5
         of the prompt's chunks. Combinations whose cache (with the prefill's activations) does not fit are skipped
         with a note.
         NATSL_PROFILE=1: each op timed alone (the step then runs uncaptured, each op waited for), a table a row.
  mem:   where the step's GPU memory goes, planned from the layout code alone (runs without a GPU): parameters,
         gradients and AdamW, activations, gradient scratch, the GDN op's workspace, the classifier's buffers,
         and the activations by field summed over the layers.
Times: CUDA events, median of N (default 10) after 2 warm-ups.

Model FLOPs per step (as dev/bench_cpu.c counts them):
  linear layers   6 · tokens · Σ(weights of every matmul) (the classifier head included)
  softmax attn    6 · Σ_heads Σ_queries (keys attended) · (d_q + d_v)   (routed pairs counted from the masks)
  GDN             12 · tokens · H · d_k · d_v per G/N layer
MFU = FLOPs / time / 989e12 (H100 SXM dense bf16 peak; the fp32 rows are measured against the same number).
Peak memory: cudaMemGetInfo's used memory after the timed steps minus before the model was built (every
buffer is allocated up front or on the first step and kept). B is lowered (halved) until the estimated
footprint fits the free memory; the printed B is the one that ran.

build: nvcc -O3 -arch=compute_90a -code=sm_90a -std=c++17 --default-stream per-thread -I. dev/bench_gpu.cu -o bench_gpu -lcublasLt -lcublas -lnccl
run:   ./bench_gpu [step|layer|gemm|decode|mem|all] [-e preset] [-V vocab] [-B B] [-T T] [-n iters] [-a pattern,pattern,...]
                   [-k 0|1|2] [-p bf16|fp32|both]
       defaults: all (layer, step, gemm; decode runs when asked), -e 340m, -V 32000, -B 8, -T 4096, -n 10,
                 -a natsl-hybrid,gdn,gdn-hybrid,transformer, -k 0, -p both
       (-k: the step with train_natsl_cu's recompute level; -p: the step's precisions)
*/
#define TESTING
#include "../train_natsl.cu"
#include "model_flops.h"
#include <vector>
#include <algorithm>
#include <string>

static float median(std::vector<float> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; }

static size_t used_bytes(void) {
    size_t fr, tot;
    CUDA_CHECK(cudaMemGetInfo(&fr, &tot));
    return tot - fr;
}

static void set_precision(int bf16) {
    g_bf16 = bf16;
    CUBLAS_CHECK(cublasSetMathMode(g_cublas, g_bf16 ? CUBLAS_DEFAULT_MATH : CUBLAS_PEDANTIC_MATH));
    attention_set_tf32_passes(g_bf16 ? 1 : 3);
    gdn_set_lowp(g_bf16);
}

static int make_config(Config *c, const char *preset, const char *pattern, int V) {
    char err[256];
    if (config_from_preset(c, preset, V)) { fprintf(stderr, "unknown preset %s\n", preset); return -1; }
    if (config_set_pattern(c, pattern, err, sizeof(err))) { fprintf(stderr, "%s\n", err); return -1; }
    if (config_check(c, err, sizeof(err))) { fprintf(stderr, "%s\n", err); return -1; }
    return 0;
}

// the bf16 mode's weight copies (weight_copies_layout)
static size_t weight_copies_bytes(const Config *c) {
    ParamTensor t[NATSL_MAX_TENSORS];
    size_t np, at[NATSL_MAX_TENSORS], end[NATSL_MAX_TENSORS];
    int nt = param_tensors(c, t, &np);
    return g_bf16 ? weight_copies_layout(c, t, nt, at, end) * sizeof(__nv_bfloat16) : 0;
}
// bytes model_build + model_alloc_acts + AdamW take (bench_gpu mem's plan); *np gets the parameter count
static size_t planned_bytes(const Config *c, int B, int T, int recompute, size_t *np, size_t *parts = NULL) {
    ParamTensor t[NATSL_MAX_TENSORS];
    param_tensors(c, t, np);
    return 4 * *np * sizeof(float) + weight_copies_bytes(c) + model_acts_bytes(c, B, T, recompute, parts);
}
// the plan + the attention scratch + cuBLAS and the context (a slightly generous estimate)
static size_t estimate_bytes(const Config *c, int B, int T, int recompute) {
    size_t np, att = 2 * (size_t)B * T * std::max(cfg_attn_heads(c), c->Ha);
    return planned_bytes(c, B, T, recompute, &np) + att * sizeof(float) + ((size_t)1 << 30);
}

// mem: where one step's GPU memory goes, from the layout code alone (no GPU needed): the buffers model_build,
// model_alloc_acts and AdamW allocate, with the activations each layer keeps by field, summed over the layers.
static std::vector<std::pair<std::string, size_t>> g_fields;
static void count_field(const char *field, size_t n) {
    for (auto &f : g_fields)
        if (f.first == field) { f.second += n; return; }
    g_fields.push_back({field, n});
}
static void bench_mem(const char *preset, const char *pattern, int V, int B, int T, int recompute, int prec) {
    Config c;
    if (make_config(&c, preset, pattern, V)) exit(1);
    g_bf16 = prec;
    const double GiB = 1073741824.0;
    size_t np, parts[ACTS_BYTES_PARTS], all = planned_bytes(&c, B, T, recompute, &np, parts);
    size_t model = 4 * np * sizeof(real);
    printf("mem %s %s %s: V=%d B=%d T=%d recompute %d: %.2f GiB planned\n", preset, pattern, prec ? "bf16" : "fp32", V,
           B, T, recompute, all / GiB);
    printf("  parameters, gradients, AdamW m and v  %6.2f GiB  (%zu parameters, fp32)\n", model / GiB, np);
    if (prec) printf("  the matmul weights' bf16 copies       %6.2f GiB\n", weight_copies_bytes(&c) / GiB);
    const char *what[ACTS_BYTES_PARTS] = {"activations", "gradient scratch", "GDN op workspace beyond the logits'",
                                          "final norm, classifier, ids"};
    for (int k = 0; k < ACTS_BYTES_PARTS; k++) printf("  %-38s %6.2f GiB\n", what[k], parts[k] / GiB);
    printf("  not planned here: the lazily grown scratch (bf16 operand copies, the token mixers' operand copies),\n"
           "  cuBLAS's workspace, the CUDA context (bench_gpu step's peak includes them)\n");
    LayerActs la;
    size_t acts = parts[ACTS_BYTES_ACTS] / sizeof(real), kept = 0;
    g_fields.clear();
    g_layout_report = count_field;
    for (int l = 0; l < c.L; l++)
        kept += layer_acts_layout(&la, &c, c.pattern[l], B, T, NULL, acts_kept(recompute) | (prec ? ACTS_BF16 : 0));
    g_layout_report = NULL;
    std::sort(g_fields.begin(), g_fields.end(), [](const auto &a, const auto &b) { return a.second > b.second; });
    printf("  activations by field, what the %d layers (%s) keep, summed:\n", c.L, c.pattern);
    for (auto &f : g_fields)
        if (f.second * 1000 >= acts)
            printf("    %-10s %6.2f GiB  %4.1f%%\n", f.first.c_str(), f.second * sizeof(real) / GiB, 100.0 * f.second / acts);
    printf("    (fields under 0.1%% left out)\n");
    printf("    the scratch all layers share (the largest layer's other fields) %6.2f GiB  %4.1f%%\n",
           (acts - kept) * sizeof(real) / GiB, 100.0 * (acts - kept) / acts);
}

// precs ("bf16", "fp32" or "both") includes precision prec (1: bf16)
static bool wants_precision(const char *precs, int prec) {
    return !strcmp(precs, "both") || !strcmp(precs, prec ? "bf16" : "fp32");
}

// One model per precision (the activation layout depends on it: bf16 fields take half the room in bf16 mode).
// precs: "bf16", "fp32" or "both" (bf16 first)
static void bench_step(const char *preset, const char *pattern, int V, int B0, int T, int iters, int recompute, const char *precs,
                       int profile) {
    Config c;
    if (make_config(&c, preset, pattern, V)) exit(1);
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0)); CUDA_CHECK(cudaEventCreate(&e1));
    for (int prec = 1; prec >= 0; prec--) {
        if (!wants_precision(precs, prec)) continue;
        set_precision(prec);
        size_t fr, tot;
        CUDA_CHECK(cudaDeviceSynchronize());
        CUDA_CHECK(cudaMemGetInfo(&fr, &tot));
        int B = B0;
        while (B > 1 && estimate_bytes(&c, B, T, recompute) > fr) B /= 2;
        printf("step %s %s %s: V=%d B=%d T=%d recompute %d (asked B=%d; estimate %.1f GiB of %.1f GiB free)\n", preset,
               pattern, prec ? "bf16" : "fp32", V, B, T, recompute, B0, estimate_bytes(&c, B, T, recompute) / 1073741824.0,
               fr / 1073741824.0);
        fflush(stdout);
        size_t base = used_bytes();
        Model M;
        model_build(&M, &c);
        model_init(&M, 1);
        model_alloc_acts(&M, B, T, recompute);
        std::vector<int> in((size_t)B * T), tg((size_t)B * T);
        uint64_t r = rng_seed(2);
        for (size_t i = 0; i < in.size(); i++) { in[i] = rng_u32(&r) % c.V; tg[i] = rng_u32(&r) % c.V; }
        std::vector<float> ts;
        int t = 0; // AdamW's step count
        M.fused_dloss = (real)1 / ((real)B * T); // as train_step: the cross-entropy's forward writes its gradient
        auto step = [&]() {
            CUDA_CHECK(cudaEventRecord(e0));
            CUDA_CHECK(cudaMemsetAsync(M.grads, 0, M.nparams * sizeof(real)));
            model_forward(&M, in.data(), tg.data(), B, T);
            model_backward(&M, in.data(), tg.data(), B, T, M.fused_dloss);
            double norm = grad_norm(&M);
            adamw_update(&M, 1e-4, 0.1, norm > GRAD_CLIP ? GRAD_CLIP / norm : 1, ++t);
            CUDA_CHECK(cudaEventRecord(e1));
            CUDA_CHECK(cudaEventSynchronize(e1));
            float ms;
            CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
            return ms;
        };
        for (int it = 0; it < iters + 2; it++) {
            float ms = step();
            if (it >= 2) ts.push_back(ms);
        }
        double mm, att, gdn;
        step_flops(&M, B, T, &mm, &att, &gdn);
        double ms = median(ts), fl = mm + att + gdn, peak = (used_bytes() - base) / 1073741824.0;
        printf("RESULT step %-13s %s B=%d T=%d k=%d: %8.1f ms/step (min %.1f)  %8.0f tok/s  %.2f TFLOP/step (linear %.2f, attn %.2f, "
               "GDN %.2f)  %.0f TFLOP/s  MFU %.1f%%  peak %.1f GiB  loss %.4f\n",
               pattern, prec ? "bf16" : "fp32", B, T, recompute, ms, *std::min_element(ts.begin(), ts.end()), (double)B * T / (ms / 1e3),
               fl / 1e12, mm / 1e12, att / 1e12, gdn / 1e12, fl / (ms / 1e3) / 1e12, 100 * fl / (ms / 1e3) / 989e12, peak,
               (double)M.mean_loss);
        size_t np;
        double plan = planned_bytes(&c, B, T, recompute, &np) / 1073741824.0;
        printf("  memory: %.2f GiB planned (bench_gpu mem), %.2f GiB more at the peak (the lazily grown operand copies, "
               "cuBLAS's workspace)\n", plan, peak - plan);
        if (profile) { // as many steps again with every op timed (NATSL_PROFILE=1: each synchronized), then their table
            g_prof = profile;
            g_prof_n = 0;
            prof_reset();
            double total = 0;
            for (int it = 0; it < iters; it++) {
                total += step();
                prof_flush();
            }
            prof_print(total, iters);
            g_prof = 0;
        }
        fflush(stdout);
        model_free(&M);
    }
    CUDA_CHECK(cudaEventDestroy(e0)); CUDA_CHECK(cudaEventDestroy(e1));
}

__global__ void fill_kernel(float *x, size_t n, uint32_t seed, float scale) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    uint32_t h = (uint32_t)i * 2654435761u ^ seed;
    h ^= h >> 16; h *= 0x7feb352du; h ^= h >> 15; h *= 0x846ca68bu; h ^= h >> 16;
    x[i] = scale * ((h >> 8) * (1.f / 16777216.f) * 2.f - 1.f);
}
static void fill(float *x, size_t n, uint32_t seed, float scale) {
    fill_kernel<<<(unsigned)CEIL_DIV(n, 256), 256>>>(x, n, seed, scale);
    CUDA_CHECK(cudaGetLastError());
}

// One mixer layer, fwd + bwd. frac < 0: the router decides; else a fixed mask with that fraction of
// softmax chunks (per (b, head), the last chunk forced to both ops as the router does).
static void bench_layer(const char *preset, char kind, int V, int B, int T, double frac, int iters, float *out_ms) {
    Config c;
    char pat[2] = {kind, 0};
    if (make_config(&c, preset, pat, V)) exit(1);
    Model M;
    model_build(&M, &c);
    model_init(&M, 1);
    model_alloc_acts(&M, B, T, 0);
    int BT = B * T, Nc = T / CH;
    LayerActs *a = &M.la[0];
    const LayerParams *p = &M.p.layer[0];
    LayerParams *gp = &M.g.layer[0];
    // the layer input and the gradient at its output (the residual stream and its gradient, in the matmul precision),
    // filled in fp32 through M.dlnf
    for (int k = 0; k < 2; k++) {
        real *dst = k ? M.dres : a->res;
        fill(M.dlnf, (size_t)BT * c.D, k + 1, k ? 1e-3f : 1.7f);
        if (g_bf16) rows_to_bf16((bf16 *)dst, c.D, M.dlnf, c.D, BT, c.D);
        else CUDA_CHECK(cudaMemcpy(dst, M.dlnf, (size_t)BT * c.D * sizeof(real), cudaMemcpyDeviceToDevice));
    }
    rmsnorm_forward(a->xn, a->rstd1, a->res, p->ln_mix, BT, 1, c.D, c.D, c.D, 1, 1);
    real *fixed = NULL;
    if (kind == 'N' && frac >= 0) {
        std::vector<float> m((size_t)B * Nc * c.H * 2);
        uint64_t r = rng_seed(3);
        for (int b = 0; b < B; b++)
            for (int ch = 0; ch < Nc; ch++)
                for (int h = 0; h < c.H; h++) {
                    size_t i = (((size_t)b * Nc + ch) * c.H + h) * 2;
                    int soft = rng_uniform(&r) < frac;
                    m[i] = ch == Nc - 1 ? 1.f : (float)soft;
                    m[i + 1] = ch == Nc - 1 ? 1.f : (float)!soft;
                }
        fixed = (real *)xcudamalloc(m.size() * sizeof(real));
        CUDA_CHECK(cudaMemcpy(fixed, m.data(), m.size() * sizeof(real), cudaMemcpyHostToDevice));
    }
    g_bench_rmask = fixed;
    cudaEvent_t e0, e1, e2;
    CUDA_CHECK(cudaEventCreate(&e0)); CUDA_CHECK(cudaEventCreate(&e1)); CUDA_CHECK(cudaEventCreate(&e2));
    std::vector<float> tf, tb;
    for (int it = 0; it < iters + 2; it++) {
        CUDA_CHECK(cudaEventRecord(e0));
        if (kind == 'G') gdn_layer_forward(&c, a, p, a->r, a->res, B, T, 0);
        else if (kind == 'A') attention_layer_forward(&c, a, p, a->r, a->res, B, T, 0);
        else if (kind == 'H') nha_layer_forward(&c, a, p, a->r, a->res, B, T, 0, 0);
        else natsl_layer_forward(&c, a, p, a->r, a->res, B, T, 0, 0, NULL, 1);
        CUDA_CHECK(cudaEventRecord(e1));
        LayerActs d;
        grads_scratch(&M, &d, kind, B, T, 0);
        if (kind == 'G') gdn_layer_backward(&c, d.xn, M.dres, &d, gp, a, p, B, T);
        else if (kind == 'A') attention_layer_backward(&c, d.xn, M.dres, &d, gp, a, p, B, T);
        else if (kind == 'H') nha_layer_backward(&c, d.xn, M.dres, &d, gp, a, p, B, T, 0);
        else natsl_layer_backward(&c, d.xn, M.dres, &d, gp, a, p, B, T, 0, NULL, 1);
        CUDA_CHECK(cudaEventRecord(e2));
        CUDA_CHECK(cudaEventSynchronize(e2));
        float f, b2;
        CUDA_CHECK(cudaEventElapsedTime(&f, e0, e1)); CUDA_CHECK(cudaEventElapsedTime(&b2, e1, e2));
        if (it >= 2) { tf.push_back(f); tb.push_back(b2); }
    }
    double sfr = kind == 'N' ? softmax_fraction(&M, 0, -1, B, T) : -1;
    std::vector<float> tt(tf.size());
    for (size_t i = 0; i < tf.size(); i++) tt[i] = tf[i] + tb[i];
    *out_ms = median(tt);
    char fr[32];
    if (kind != 'N') snprintf(fr, sizeof(fr), "-");
    else snprintf(fr, sizeof(fr), "%s%.2f", frac < 0 ? "router " : "", sfr);
    printf("RESULT layer %c B=%d T=%5d softmax-frac %-12s fwd %7.2f ms  bwd %7.2f ms  fwd+bwd %7.2f ms\n", kind, B, T, fr,
           median(tf), median(tb), *out_ms);
    fflush(stdout);
    g_bench_rmask = NULL;
    if (fixed) CUDA_CHECK(cudaFree(fixed));
    CUDA_CHECK(cudaEventDestroy(e0)); CUDA_CHECK(cudaEventDestroy(e1)); CUDA_CHECK(cudaEventDestroy(e2));
    model_free(&M);
}

// One linear layer's products at BT tokens: the trainer's calls (conversions included) and the bare products.
static void bench_gemm(int BT, int iters) {
    struct { const char *name; int C, OC; } sh[] = {{"wqkv", 1024, 3072}, {"wg", 1024, 1536}, {"wab", 1024, 12},
        {"wo", 1536, 1024}, {"wow", 768, 24}, {"wgu", 1024, 5632}, {"wdown", 2816, 1024}, {"head", 1024, 32000}};
    size_t mx = 0, mw = 0;
    for (auto &q : sh) { mx = std::max(mx, (size_t)BT * std::max(q.C, q.OC)); mw = std::max(mw, (size_t)q.C * q.OC); }
    float *x = (float *)xcudamalloc(mx * 4), *y = (float *)xcudamalloc(mx * 4), *dx = (float *)xcudamalloc(mx * 4);
    float *w = (float *)xcudamalloc(mw * 4), *dw = (float *)xcudamalloc(mw * 4);
    fill(x, mx, 1, 1.f); fill(y, mx, 2, 1e-3f); fill(w, mw, 3, 0.02f); fill(dx, mx, 4, 0.f); fill(dw, mw, 5, 0.f);
    __nv_bfloat16 *xb, *yb, *wb;
    CUDA_CHECK(cudaMalloc(&xb, mx * 2)); CUDA_CHECK(cudaMalloc(&yb, mx * 2)); CUDA_CHECK(cudaMalloc(&wb, mw * 2));
    to_bf16_kernel<<<2048, 256>>>(xb, x, mx); to_bf16_kernel<<<2048, 256>>>(yb, y, mx); to_bf16_kernel<<<2048, 256>>>(wb, w, mw);
    void *ws = NULL;
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0)); CUDA_CHECK(cudaEventCreate(&e1));
    auto timed = [&](auto f) {
        std::vector<float> t;
        for (int it = 0; it < iters + 2; it++) {
            CUDA_CHECK(cudaEventRecord(e0)); f(); CUDA_CHECK(cudaEventRecord(e1)); CUDA_CHECK(cudaEventSynchronize(e1));
            float ms; CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
            if (it >= 2) t.push_back(ms);
        }
        return median(t);
    };
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) { CUDA_CHECK(cudaMalloc(&ws, 64 << 20)); CUBLAS_CHECK(cublasSetWorkspace(g_cublas, ws, 64 << 20)); }
        printf("-- linear layers at BT=%d, bf16, cuBLAS workspace %s: ms and TFLOP/s\n", BT, pass ? "64 MiB" : "default");
        double tot_call = 0, tot_bare = 0, fl_tot = 0;
        for (auto &q : sh) {
            double fl = 2.0 * BT * q.C * q.OC;
            const real *xs = (const real *)xb; // the trainer's matmul inputs are stored in bf16 (matmul_forward)
            float f = timed([&] { matmul_forward(y, xs, w, BT, q.C, q.OC, 0, NULL); });
            float b = timed([&] { matmul_backward(dx, dw, y, xs, w, BT, q.C, q.OC, DINP_ADD); });
            float fb = timed([&] { gemm(CUBLAS_OP_T, CUBLAS_OP_N, q.OC, BT, q.C, wb, q.C, xb, q.C, 0.f, y, q.OC); });
            float bb = timed([&] {
                gemm(CUBLAS_OP_N, CUBLAS_OP_N, q.C, BT, q.OC, wb, q.C, yb, q.OC, 1.f, dx, q.C);
                gemm(CUBLAS_OP_N, CUBLAS_OP_T, q.C, q.OC, BT, xb, q.C, yb, q.OC, 1.f, dw, q.C);
            });
            printf("RESULT gemm %-6s C=%5d OC=%5d  fwd %6.3f ms %4.0f TF/s (bare %6.3f ms %4.0f)  bwd %6.3f ms %4.0f TF/s "
                   "(bare %6.3f ms %4.0f)\n", q.name, q.C, q.OC, f, fl / f / 1e9, fb, fl / fb / 1e9, b, 2 * fl / b / 1e9, bb,
                   2 * fl / bb / 1e9);
            tot_call += f + b; tot_bare += fb + bb; fl_tot += 3 * fl;
        }
        printf("RESULT gemm total per layer set: trainer calls %.2f ms (%.0f TF/s), bare products %.2f ms (%.0f TF/s)\n",
               tot_call, fl_tot / tot_call / 1e9, tot_bare, fl_tot / tot_bare / 1e9);
    }
    void *ps[] = {x, y, dx, w, dw, xb, yb, wb}; // ws stays cuBLAS's workspace to the end (gemm runs last)
    for (void *p : ps) if (p) CUDA_CHECK(cudaFree(p));
    CUDA_CHECK(cudaEventDestroy(e0)); CUDA_CHECK(cudaEventDestroy(e1));
}

// decode (benchmark only): B sequences of T0 tokens each in the cache, the N layers keeping frac of the chunks per head
// group (the contents stay zero)
static void decode_fill(Decoder *d, int T0, double frac) {
    const Config *c = &d->M->cfg;
    std::vector<int> kept((size_t)c->L * d->B * c->H, 0);
    for (int l = 0; l < c->L; l++)
        if (d->kind[l] == 'N')
            for (int i = 0; i < d->B * c->H; i++) kept[(size_t)l * d->B * c->H + i] = (int)(frac * (T0 / CH) + 0.5);
    CUDA_CHECK(cudaMemcpy(d->nkept, kept.data(), kept.size() * sizeof(int), cudaMemcpyHostToDevice));
    for (int b = 0; b < d->B; b++) d->pos[b] = T0;
    CUDA_CHECK(cudaMemcpy(d->d_pos, d->pos, d->B * sizeof(int), cudaMemcpyHostToDevice));
}
// The device bytes decoder_init takes for B sequences of Tmax tokens
static size_t decode_bytes(Model *M, int B, int Tmax) {
    const Config *c = &M->cfg;
    Decoder d;
    LayerActs w;
    memset(&d, 0, sizeof(d));
    d.M = M; d.B = B; d.Tmax = Tmax; d.Ncmax = CEIL_DIV(Tmax, CH);
    strcpy(d.kind, c->pattern);
    size_t heads = std::max(c->Ha, cfg_attn_heads(c));
    return (decoder_layout(&d, NULL) + decoder_work_layout(&w, c, B, NULL) + (size_t)B * c->Vp * 2 +
            (size_t)B * heads * DEC_ATT_SPLITS * DEC_ATT_PART) * sizeof(float);
}
static void bench_decode(const char *preset, int V) {
    const int steps = 256;
    set_precision(1);
    g_prof = prof_level(); // NATSL_PROFILE: each op timed (uncaptured), a table per row
    for (const char *pattern : {"natsl-hybrid", "transformer"}) {
        Config c;
        if (make_config(&c, preset, pattern, V)) exit(1);
        Model M;
        model_build(&M, &c);
        model_init(&M, 1);
        for (int T0 : {4096, 32768})
            for (int B : {1, 32})
                for (double frac : {-1.0, 0.1, 0.25, 0.5}) {
                    const int prefill = frac < 0, rows = std::min(B, std::max(1, g_prefill_tokens / T0));
                    if (!strchr(c.pattern, 'N') && !prefill) continue;
                    size_t fr, tot, need = decode_bytes(&M, B, T0 + steps) + (prefill ? model_acts_bytes(&c, rows, T0, 2) : 0);
                    CUDA_CHECK(cudaDeviceSynchronize());
                    CUDA_CHECK(cudaMemGetInfo(&fr, &tot));
                    printf("decode %s %s prompt %d B=%d", preset, pattern, T0, B);
                    if (frac > 0) printf(" softmax fraction %.2f", frac);
                    if (need + ((size_t)1 << 30) > fr) {
                        printf(": skipped (the cache needs %.1f GiB, %.1f GiB free)\n", need / 1073741824.0, fr / 1073741824.0);
                        continue;
                    }
                    Decoder d;
                    decoder_init(&d, &M, B, T0 + steps);
                    std::vector<int> tok(B), prompt(T0);
                    uint64_t r = rng_seed(3);
                    for (int i = 0; i < T0; i++) prompt[i] = rng_u32(&r) % c.V;
                    double t_forward = -1;
                    if (prefill) { // the forward pass alone over the rows of one prefill pass (a warm-up first)
                        Model F;
                        model_share(&F, &M);
                        model_alloc_acts(&F, rows, T0, 2);
                        std::vector<int> ids((size_t)rows * T0);
                        for (int i = 0; i < rows; i++) std::copy(prompt.begin(), prompt.end(), ids.begin() + (size_t)i * T0);
                        for (int k = 0; k < 2; k++) {
                            CUDA_CHECK(cudaDeviceSynchronize());
                            double f0 = now_s();
                            model_forward(&F, ids.data(), NULL, rows, T0);
                            CUDA_CHECK(cudaDeviceSynchronize());
                            t_forward = now_s() - f0;
                        }
                        model_free_acts(&F);
                    }
                    double t0 = now_s(), t_prefill = -1;
                    if (prefill) {
                        std::vector<const int *> ps(B, prompt.data());
                        std::vector<int> lens(B, T0);
                        decoder_prefill(&d, ps.data(), lens.data());
                        CUDA_CHECK(cudaDeviceSynchronize());
                        t_prefill = now_s() - t0;
                    } else decode_fill(&d, T0, frac);
                    double t_host = 0; // the time decoder_step itself takes on the host (launches, the rows' copy)
                    for (int s = 0; s < steps; s++) {
                        if (s == 2) { CUDA_CHECK(cudaDeviceSynchronize()); t0 = now_s(); t_host = 0; if (g_prof) prof_reset(); } // after two warm-up steps
                        for (int b = 0; b < B; b++) tok[b] = rng_u32(&r) % c.V;
                        const double h0 = now_s();
                        decoder_step(&d, tok.data());
                        t_host += now_s() - h0;
                        CUDA_CHECK(cudaDeviceSynchronize());
                    }
                    const double dt = now_s() - t0;
                    DecoderStats st = decoder_stats(&d);
                    if (t_prefill >= 0)
                        printf(": prefill %.2f s (%.0f tokens/s; the forward pass alone %.0f tokens/s)", t_prefill,
                               (double)B * T0 / t_prefill, (double)rows * T0 / t_forward);
                    else printf(": (cache filled)");
                    printf(" | decode %.0f tokens/s (%.3f ms a step, %.3f in decoder_step on the host) | cache %.1f MiB held, a Transformer's %.1f MiB (%.2fx)\n",
                           (double)B * (steps - 2) / dt, 1e3 * dt / (steps - 2), 1e3 * t_host / (steps - 2), st.held / 1048576.0,
                           st.transformer / 1048576.0, st.transformer / st.held);
                    if (g_prof) prof_print(1e3 * dt, steps - 2);
                    fflush(stdout);
                    decoder_free(&d);
                }
        model_free(&M);
    }
}

int main(int argc, char **argv) {
    const char *mode = "all", *preset = "340m", *pats = "natsl-hybrid,gdn,gdn-hybrid,transformer";
    const char *precs = "both";
    int V = 32000, B = 8, T = 4096, iters = 10, recompute = 0;
    int i = 1;
    if (argc > 1 && argv[1][0] != '-') mode = argv[i++];
    for (; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-e")) preset = argv[i + 1];
        else if (!strcmp(argv[i], "-V")) V = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-B")) B = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-T")) T = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-n")) iters = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-a")) pats = argv[i + 1];
        else if (!strcmp(argv[i], "-k")) recompute = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-p")) precs = argv[i + 1];
        else { fprintf(stderr, "unknown option %s\n", argv[i]); return 1; }
    }
    if (strcmp(mode, "step") && strcmp(mode, "layer") && strcmp(mode, "gemm") && strcmp(mode, "decode") && strcmp(mode, "mem") &&
        strcmp(mode, "all")) {
        fprintf(stderr, "bench_gpu: unknown mode %s (step, layer, gemm, decode, mem or all)\n", mode);
        return 1;
    }
    if (recompute < 0 || recompute > 2 || B < 1 || T < 64 || T % 64) {
        fprintf(stderr, "bench_gpu: -k is 0, 1 or 2, -B at least 1, -T a multiple of 64 (got -k %d -B %d -T %d)\n",
                recompute, B, T);
        return 1;
    }
    if (strcmp(precs, "bf16") && strcmp(precs, "fp32") && strcmp(precs, "both")) {
        fprintf(stderr, "-p %s: the step's precision is bf16, fp32 or both\n", precs);
        return 1;
    }
    std::vector<std::string> patterns; // -a's comma-separated list
    for (const char *s = pats; *s;) {
        size_t n = strcspn(s, ",");
        if (n) patterns.emplace_back(s, n);
        s += n + (s[n] == ',');
    }
    if (!strcmp(mode, "mem")) {
        for (const auto &pat : patterns)
            for (int prec = 1; prec >= 0; prec--)
                if (wants_precision(precs, prec)) bench_mem(preset, pat.c_str(), V, B, T, recompute, prec);
        return 0;
    }
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s, %d SMs, %.1f GiB; GDN op: %s\n", prop.name, prop.multiProcessorCount,
           prop.totalGlobalMem / 1073741824.0, getenv("NATSL_GDN_TOKENS") ? "token recurrence (forced)" : "chunked where supported");
    cublas_start();
    if (!strcmp(mode, "layer") || !strcmp(mode, "all")) {
        set_precision(1);
        printf("-- one mixer layer, %s head sizes, bf16 matmuls, fwd+bwd, B*T = 32768\n", preset);
        for (int t : {4096, 16384, 32768}) {
            int b = 32768 / t;
            float ms_a = 0, ms_n = 0, ms_h = 0, ms;
            bench_layer(preset, 'A', 128, b, t, -1, iters, &ms_a); // vocabulary 128: no classifier runs here
            bench_layer(preset, 'G', 128, b, t, -1, iters, &ms);
            bench_layer(preset, 'H', 128, b, t, -1, iters, &ms_h);
            bench_layer(preset, 'N', 128, b, t, -1, iters, &ms);
            for (double f : {1.0, 0.5, 0.25, 0.1}) {
                bench_layer(preset, 'N', 128, b, t, f, iters, &ms);
                if (f == 0.25) ms_n = ms;
            }
            printf("RESULT ratio T=%d: N(frac 0.25) / A = %.2f, H / A = %.2f\n", t, ms_n / ms_a, ms_h / ms_a);
        }
    }
    if (!strcmp(mode, "step") || !strcmp(mode, "all")) {
        int profile = prof_level();
        for (const auto &pat : patterns) bench_step(preset, pat.c_str(), V, B, T, iters, recompute, precs, profile);
    }
    if (!strcmp(mode, "gemm") || !strcmp(mode, "all")) {
        set_precision(1);
        bench_gemm(B * T, iters);
    }
    if (!strcmp(mode, "decode")) bench_decode(preset, V);
    CUBLAS_CHECK(cublasDestroy(g_cublas));
    return 0;
}
