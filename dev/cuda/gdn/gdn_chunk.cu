// gdn_chunk.cu -- test harness of the chunked (WY/UT) masked Gated-DeltaNet op of NAtS-L (§5.4 forward,
// §6.1 backward, §6.4 router gradient): checks against a double-precision token-by-token CPU oracle, then times
// it at the 340M and 760M sizes. The kernels themselves live in train_natsl.cu (namespace gdnc, entry points
// gdn_op_forward / gdn_op_backward), included here with TESTING defined; see NOTES.md beside this file.
//
// Build + run (device):  nvcc -O3 -arch=compute_90a -code=sm_90a -std=c++17 --default-stream per-thread -I. -o gdn_chunk dev/cuda/gdn/gdn_chunk.cu -lcublasLt -lcublas -lnccl && ./gdn_chunk
//   ./gdn_chunk test   -> correctness only;  ./gdn_chunk time -> timing only; no argument -> both.
//   A second argument fp32 or bf16 runs that mode only (./gdn_chunk time bf16: for ncu); a third runs only the cases
//   whose names contain it (./gdn_chunk test bf16 dk192: e.g. for a racecheck that would not reach them in time).
// (NATSL_GDN_TOKENS=1 ./gdn_chunk runs the same checks and timings on the token-recurrence fallback.)
// Semantics checked: out, state, dq, dk, dg, dbeta and dA[...,1] written (dA exactly 0 where m == 0 and at the
// last chunk, dA[...,0] untouched); dv written (the unmasked cases, a G layer's: over poison) or ACCUMULATED (the masked
// cases, an N layer's dv_add: the harness zeroes it first); padding columns untouched. dq, dk leave through the L2
// norm's backward (GdnArgs.rho, the layers' use: dQ, dK) in all cases but two (dq̂, dk̂). bf16 mode adds three cases of a
// G layer's use, dQ, dK, dV stored in bf16 (GdnArgs.grads_mp).

#include <vector>
#include <algorithm>
#include <cuda_runtime.h>

// per-kernel timing hook (used by train_natsl.cu's gdnc::fwd_impl / bwd_impl)
static bool g_kprof = false;
static int g_nev = 0;
static cudaEvent_t g_ev[32];
static const char *g_evname[32];
#define GDN_KERNEL_MARK(name) do { if (g_kprof && g_nev < 32) { g_evname[g_nev] = name; cudaEventRecord(g_ev[g_nev++], 0); } } while (0)

#define TESTING
#include "../../../train_natsl.cu"
// ================================================================================================
// test harness
// ================================================================================================
static unsigned long long rng_s = 0x9E3779B97F4A7C15ULL;
static double urand() { rng_s ^= rng_s << 13; rng_s ^= rng_s >> 7; rng_s ^= rng_s << 17; return ((rng_s >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
static double nrand() { return sqrt(-2.0 * log(urand())) * cos(6.283185307179586 * urand()); }

struct Prob {
    int B, T, H, dk, dv, Nc, ldqk, ldv;
    std::vector<float> qk, v, g, beta, m, dout;  // q at qk[row*ldqk + h*dk], k at qk[row*ldqk + H*dk + h*dk]
    std::vector<float> rho;                      // 1/norms of Q, K [2][B*T][H] (GdnArgs.rho: the layers'), empty: none
    bool use_m;
};

static void make_prob(Prob &p, int B, int T, int H, int dk, int dv, int mmode /*0 none,1 binary p=frac,2 real*/, double frac, int pad = 0) {
    p.B = B; p.T = T; p.H = H; p.dk = dk; p.dv = dv; p.Nc = T / CH;
    p.ldqk = 2 * H * dk + pad; p.ldv = H * dv + 32 + pad;
    p.qk.assign((size_t)B * T * p.ldqk, 0.f);
    p.v.assign((size_t)B * T * p.ldv, 0.f);
    p.g.resize((size_t)B * T * H); p.beta.resize((size_t)B * T * H);
    p.dout.resize((size_t)B * T * H * dv);
    for (size_t r = 0; r < (size_t)B * T; r++) {
        for (int w = 0; w < 2 * H; w++) {
            double n2 = 0; std::vector<double> x(dk);
            for (int d = 0; d < dk; d++) { x[d] = nrand(); n2 += x[d] * x[d]; }
            double inv = 1.0 / sqrt(n2 + 1e-6);
            for (int d = 0; d < dk; d++) p.qk[r * p.ldqk + (size_t)w * dk + d] = (float)(x[d] * inv);
        }
        for (int j = 0; j < H * dv; j++) p.v[r * p.ldv + j] = (float)nrand();
        for (int h = 0; h < H; h++) {
            double A = 0.03 * (1 + h % 3);  // exp(A_log)
            double z = std::min(1.5, std::max(-3.0, nrand()));
            p.g[r * H + h] = (float)(-A * log1p(exp(z)));  // alpha in (0.85, 1)
            p.beta[r * H + h] = (float)(1.0 / (1.0 + exp(-nrand())));
        }
    }
    for (auto &x : p.dout) x = (float)nrand();
    if (g_gdn_st16)  // bf16 mode: q̂, k̂, v and dO are stored in bf16 (the oracle computes on the same rounded values)
        for (auto *x : {&p.qk, &p.v, &p.dout})
            for (float &f : *x) f = __bfloat162float(__float2bfloat16_rn(f));
    p.rho.resize((size_t)2 * B * T * H);
    for (auto &x : p.rho) x = (float)(0.5 + 1.5 * urand()); // the unnormalized Q, K rows' 1/norms (any positive values)
    p.use_m = mmode != 0;
    p.m.assign((size_t)B * p.Nc * H * 2, 0.f);
    for (int b = 0; b < B; b++)
        for (int c = 0; c < p.Nc; c++)
            for (int h = 0; h < H; h++) {
                float mv = mmode == 2 ? (float)urand() : (urand() < frac ? 1.f : 0.f);
                if (c == p.Nc - 1) mv = 1.f;
                size_t i = ((size_t)(b * p.Nc + c) * H + h) * 2;
                p.m[i + 1] = mv; p.m[i] = 1.f - mv;
            }
}

struct Grads { std::vector<double> o, dq, dk, dv, dg, dbeta, dA; };

// CPU oracle: token-by-token recurrence with chunk commits (§5.4) and its BPTT (§6.1, §6.4), double.
static void cpu_ref(const Prob &p, Grads &r) {
    const int B = p.B, T = p.T, H = p.H, dk = p.dk, dv = p.dv, Nc = p.Nc;
    const double s = 1.0 / sqrt((double)dk);
    const size_t KV = (size_t)dk * dv;
    r.o.assign((size_t)B * T * H * dv, 0); r.dq.assign((size_t)B * T * H * dk, 0); r.dk = r.dq;
    r.dv.assign((size_t)B * T * H * dv, 0); r.dg.assign((size_t)B * T * H, 0); r.dbeta = r.dg;
    r.dA.assign((size_t)B * Nc * H, 0);
    std::vector<double> Zp((size_t)T * KV), U((size_t)T * dv), R((size_t)T * dv), Ss((size_t)Nc * KV), DS((size_t)Nc * KV);
    std::vector<double> S(KV), Z(KV), D(KV), dZ(KV), dSe(KV), q(dk), k(dk), dO(dv), du(dv), dr(dv), Pk(dv);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            auto Q = [&](int t, int d) { return (double)p.qk[((size_t)b * T + t) * p.ldqk + (size_t)h * dk + d]; };
            auto Kf = [&](int t, int d) { return (double)p.qk[((size_t)b * T + t) * p.ldqk + (size_t)H * dk + (size_t)h * dk + d]; };
            auto V = [&](int t, int j) { return (double)p.v[((size_t)b * T + t) * p.ldv + (size_t)h * dv + j]; };
            auto G = [&](int t) { return (double)p.g[((size_t)b * T + t) * H + h]; };
            auto Be = [&](int t) { return (double)p.beta[((size_t)b * T + t) * H + h]; };
            auto M = [&](int c) { return p.use_m ? (double)p.m[((size_t)(b * Nc + c) * H + h) * 2 + 1] : 1.0; };
            std::fill(S.begin(), S.end(), 0.0);
            for (int c = 0; c < Nc; c++) {
                std::copy(S.begin(), S.end(), Ss.begin() + c * KV);
                Z = S;
                double sg = 0;
                for (int t = c * CH; t < (c + 1) * CH; t++) {
                    std::copy(Z.begin(), Z.end(), Zp.begin() + (size_t)t * KV);
                    const double al = exp(G(t)), be = Be(t);
                    sg += G(t);
                    for (auto &x : Z) x *= al;  // P
                    for (int j = 0; j < dv; j++) Pk[j] = 0;
                    for (int d = 0; d < dk; d++) { const double kd = Kf(t, d); for (int j = 0; j < dv; j++) Pk[j] += Z[(size_t)d * dv + j] * kd; }
                    for (int j = 0; j < dv; j++) { R[(size_t)t * dv + j] = V(t, j) - Pk[j]; U[(size_t)t * dv + j] = be * R[(size_t)t * dv + j]; }
                    for (int d = 0; d < dk; d++) { const double kd = Kf(t, d); for (int j = 0; j < dv; j++) Z[(size_t)d * dv + j] += kd * U[(size_t)t * dv + j]; }
                    for (int j = 0; j < dv; j++) { double acc = 0; for (int d = 0; d < dk; d++) acc += Z[(size_t)d * dv + j] * Q(t, d); r.o[(((size_t)b * T + t) * H + h) * dv + j] = s * acc; }
                }
                const double dec = exp(sg), mc = M(c);
                for (size_t e = 0; e < KV; e++) { DS[c * KV + e] = Z[e] - dec * S[e]; S[e] = dec * S[e] + mc * DS[c * KV + e]; }
            }
            // backward
            std::fill(dSe.begin(), dSe.end(), 0.0);
            for (int c = Nc - 1; c >= 0; c--) {
                const double mc = M(c);
                double sg = 0; for (int t = c * CH; t < (c + 1) * CH; t++) sg += G(t);
                const double dec = exp(sg);
                if (mc != 0) { double a = 0; for (size_t e = 0; e < KV; e++) a += dSe[e] * DS[c * KV + e]; r.dA[(size_t)(b * Nc + c) * H + h] = a; }
                for (size_t e = 0; e < KV; e++) dZ[e] = mc * dSe[e];
                for (int t = (c + 1) * CH - 1; t >= c * CH; t--) {
                    const double al = exp(G(t)), be = Be(t);
                    const size_t row = ((size_t)b * T + t) * H + h;
                    const double *zp = &Zp[(size_t)t * KV];
                    for (int d = 0; d < dk; d++) { q[d] = Q(t, d); k[d] = Kf(t, d); }
                    for (int j = 0; j < dv; j++) dO[j] = p.dout[row * dv + j];
                    // Z_t = al*zp + k u^T;  D = dZ + s q dO^T
                    for (int d = 0; d < dk; d++)
                        for (int j = 0; j < dv; j++) {
                            const size_t e = (size_t)d * dv + j;
                            Z[e] = al * zp[e] + k[d] * U[(size_t)t * dv + j];
                            D[e] = dZ[e] + s * q[d] * dO[j];
                        }
                    for (int d = 0; d < dk; d++) {
                        double a1 = 0, a2 = 0;
                        for (int j = 0; j < dv; j++) { a1 += Z[(size_t)d * dv + j] * dO[j]; a2 += D[(size_t)d * dv + j] * U[(size_t)t * dv + j]; }
                        r.dq[row * dk + d] = s * a1;
                        r.dk[row * dk + d] = a2;
                    }
                    for (int j = 0; j < dv; j++) { double a = 0; for (int d = 0; d < dk; d++) a += D[(size_t)d * dv + j] * k[d]; du[j] = a; }
                    double dbe = 0;
                    for (int j = 0; j < dv; j++) { dbe += du[j] * R[(size_t)t * dv + j]; dr[j] = be * du[j]; r.dv[row * dv + j] = dr[j]; }
                    r.dbeta[row] = dbe;
                    // dP = D - k dr^T ; dk -= P dr ; dg = <dP, P> ; dZ = al dP
                    double dgt = 0;
                    for (int d = 0; d < dk; d++) {
                        double pdr = 0;
                        for (int j = 0; j < dv; j++) {
                            const size_t e = (size_t)d * dv + j;
                            const double P = al * zp[e];
                            const double dP = D[e] - k[d] * dr[j];
                            pdr += P * dr[j];
                            dgt += dP * P;
                            dZ[e] = al * dP;
                        }
                        r.dk[row * dk + d] -= pdr;
                    }
                    r.dg[row] = dgt;
                }
                if (mc != 1.0) {
                    double a = 0; for (size_t e = 0; e < KV; e++) a += dSe[e] * dec * Ss[c * KV + e];
                    for (int t = c * CH; t < (c + 1) * CH; t++) r.dg[((size_t)b * T + t) * H + h] += (1 - mc) * a;
                }
                for (size_t e = 0; e < KV; e++) dSe[e] = dZ[e] + (1 - mc) * dec * dSe[e];
            }
            if (p.rho.empty()) continue;
            for (int t = 0; t < T; t++) // the L2 norm's backward (3.4i): dQ = ρ(dq̂ − q̂(q̂·dq̂)), dK likewise
                for (int w = 0; w < 2; w++) {
                    const size_t row = ((size_t)b * T + t) * H + h;
                    double *d = (w ? r.dk.data() : r.dq.data()) + row * dk, dot = 0;
                    const double rho = p.rho[(size_t)w * B * T * H + row];
                    for (int e = 0; e < dk; e++) dot += (w ? Kf(t, e) : Q(t, e)) * d[e];
                    for (int e = 0; e < dk; e++) d[e] = rho * (d[e] - (w ? Kf(t, e) : Q(t, e)) * dot);
                }
        }
}

struct Dev {
    float *qk, *v, *g, *beta, *m, *dout, *o, *state, *dqk, *dv, *dg, *dbeta, *dA, *ws, *rho;
};
static void dev_alloc(const Prob &p, Dev &d) {
    const size_t BT = (size_t)p.B * p.T;
    CUDA_CHECK(cudaMalloc(&d.qk, BT * p.ldqk * 4)); CUDA_CHECK(cudaMalloc(&d.v, BT * p.ldv * 4));
    CUDA_CHECK(cudaMalloc(&d.g, BT * p.H * 4)); CUDA_CHECK(cudaMalloc(&d.beta, BT * p.H * 4));
    CUDA_CHECK(cudaMalloc(&d.m, p.m.size() * 4)); CUDA_CHECK(cudaMalloc(&d.dout, p.dout.size() * 4));
    CUDA_CHECK(cudaMalloc(&d.o, p.dout.size() * 4)); CUDA_CHECK(cudaMalloc(&d.state, (size_t)p.B * p.H * p.Nc * p.dk * p.dv * 4));
    CUDA_CHECK(cudaMalloc(&d.dqk, BT * p.ldqk * 4)); CUDA_CHECK(cudaMalloc(&d.dv, BT * p.ldv * 4));
    CUDA_CHECK(cudaMalloc(&d.dg, BT * p.H * 4)); CUDA_CHECK(cudaMalloc(&d.dbeta, BT * p.H * 4)); CUDA_CHECK(cudaMalloc(&d.dA, p.m.size() * 4));
    CUDA_CHECK(cudaMalloc(&d.ws, gdn_op_workspace_floats(p.B, p.T, p.H, p.dk, p.dv) * 4));
    d.rho = nullptr;
    if (!p.rho.empty()) {
        CUDA_CHECK(cudaMalloc(&d.rho, p.rho.size() * 4));
        CUDA_CHECK(cudaMemcpy(d.rho, p.rho.data(), p.rho.size() * 4, cudaMemcpyHostToDevice));
    }
    for (auto [dst, src] : {std::make_pair(d.qk, &p.qk), std::make_pair(d.v, &p.v), std::make_pair(d.dout, &p.dout)}) {
        if (g_gdn_st16) {  // bf16 mode: q̂, k̂, v and dO in bf16, as the model stores them (GdnArgs.out_mp)
            std::vector<__nv_bfloat16> h(src->size());
            for (size_t i = 0; i < h.size(); i++) h[i] = __float2bfloat16_rn((*src)[i]);
            CUDA_CHECK(cudaMemcpy(dst, h.data(), h.size() * 2, cudaMemcpyHostToDevice));
        } else CUDA_CHECK(cudaMemcpy(dst, src->data(), src->size() * 4, cudaMemcpyHostToDevice));
    }
    CUDA_CHECK(cudaMemcpy(d.g, p.g.data(), BT * p.H * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d.beta, p.beta.data(), BT * p.H * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d.m, p.m.data(), p.m.size() * 4, cudaMemcpyHostToDevice));
}
static void dev_free(Dev &d) {
    float *ps[] = {d.qk, d.v, d.g, d.beta, d.m, d.dout, d.o, d.state, d.dqk, d.dv, d.dg, d.dbeta, d.dA, d.ws, d.rho};
    for (float *x : ps) CUDA_CHECK(cudaFree(x));
}
// k̂: the second half of each qk row (bf16 values in bf16 mode)
static const float *k_of(const Prob &p, const Dev &d) {
    const size_t off = (size_t)p.H * p.dk;
    return g_gdn_st16 ? (const float *)((const __nv_bfloat16 *)d.qk + off) : d.qk + off;
}
static void run_fwd(const Prob &p, Dev &d) {
    const float *mm_ = p.use_m ? d.m : nullptr;
    GdnArgs a = {d.qk, k_of(p, d), d.v, p.ldqk, p.ldv, d.g, d.beta, mm_, p.B, p.T, p.H, p.dk, p.dv, d.ws, 0, g_gdn_st16};
    gdn_op_forward(d.o, d.state, &a);
}
// dv_add 0: the op writes dv (a G layer's; test_case poisons it first); 1: it accumulates, as in an N layer (its data
// columns zeroed first unless `zero` is false: the timing loop). g16 (bf16 mode, dv_add 0, with rho: a G layer's
// GdnArgs.grads_mp): dQ, dK, dV are stored in bf16, in the rows of dqk and dv as the fp32 ones.
static void run_bwd(const Prob &p, Dev &d, int dv_add = 0, bool zero = true, bool g16 = false) {
    const float *mm_ = p.use_m ? d.m : nullptr; // (the padding keeps its poison)
    if (dv_add && zero) CUDA_CHECK(cudaMemset2D(d.dv, (size_t)p.ldv * 4, 0, (size_t)p.H * p.dv * 4, (size_t)p.B * p.T));
    GdnArgs a = {d.qk, k_of(p, d), d.v, p.ldqk, p.ldv, d.g, d.beta, mm_, p.B, p.T, p.H, p.dk, p.dv, d.ws, dv_add, g_gdn_st16,
                 d.rho, g16};
    const size_t off = (size_t)p.H * p.dk;
    float *dk = g16 ? (float *)((__nv_bfloat16 *)d.dqk + off) : d.dqk + off;
    gdn_op_backward(d.dqk, dk, d.dv, d.dg, d.dbeta, d.dA, d.dout, d.state, &a);
}
static void run_op(const Prob &p, Dev &d, int dv_add = 0, bool g16 = false) { run_fwd(p, d); run_bwd(p, d, dv_add, true, g16); }

static double relerr(const std::vector<float> &a, const std::vector<double> &r) {
    double n = 0, dd = 0;
    for (size_t i = 0; i < r.size(); i++) { const double e = (double)a[i] - r[i]; dd += e * e; n += r[i] * r[i]; }
    if (!(dd == dd)) return NAN;
    return n > 0 ? sqrt(dd / n) : sqrt(dd);
}

// Relative error bars: 1e-4 for the fp32 op (fp32 mode; measured ≤ 1e-6). In bf16 mode q̂, k̂, v and the backward's dO
// arrive in bf16 (make_prob rounds them, so the oracle computes on the op's own inputs: what is measured is the op's
// error). It stores the chunk-start states in bf16 (each chunk runs from its rounded start state, doc/model.md (5.4h);
// the oracle does not round), runs the block matmuls in TF32 (10-bit mantissas) and, for dk ∈ {64, 128, 192}, the state
// recurrences on bf16 operands (8-bit mantissas: unit roundoff 2^-9 ≈ 2e-3 per rounded operand; the state, W, Vn and dVn
// are each rounded once per chunk), and stores its output in bf16 (as the layers ask: GdnArgs.out_mp).
// Bar 1e-2: 5x the unit roundoff, the errors of a few independently rounded operands adding in quadrature; the long-T
// cases show that they do not grow with the number of chunks (the carried state stays fp32).
static double case_bar(int, int) { return gdnc::g_lowp ? 1e-2 : 1e-4; }
// h.size() values of the device tensor d into h: fp32, or bf16 (b16) widened, its poison (0xFFFF) to the fp32 poison's
// bits (the untouched checks)
static void fetch(std::vector<float> &h, const void *d, bool b16) {
    if (!b16) {
        CUDA_CHECK(cudaMemcpy(h.data(), d, h.size() * 4, cudaMemcpyDeviceToHost));
        return;
    }
    std::vector<uint16_t> b(h.size());
    CUDA_CHECK(cudaMemcpy(b.data(), d, b.size() * 2, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < b.size(); i++) {
        const uint32_t bits = b[i] == 0xFFFFu ? 0xFFFFFFFFu : (uint32_t)b[i] << 16;
        memcpy(&h[i], &bits, 4);
    }
}
static const char *g_case_filter = ""; // run only the cases whose names contain it (main's third argument)
// mmode: 0 m = NULL (every chunk commits), 1 random 0/1, 2 random real, 3 none committed, 4 all committed (0/1 mask).
// With l2 (the layers' use) the op returns dQ, dK through the L2 norm's backward (GdnArgs.rho), else dq̂, dk̂. g16
// (bf16 mode, mmode 0, l2: a G layer's use): it stores dQ, dK, dV in bf16 (run_bwd; the bar takes their rounding, 2^-9).
static bool test_case(const char *name, int B, int T, int H, int dk, int dv, int mmode, int pad = 0, bool l2 = true,
                      bool g16 = false) {
    if (!strstr(name, g_case_filter)) return true;
    Prob p;
    make_prob(p, B, T, H, dk, dv, mmode >= 3 ? 1 : mmode, mmode == 3 ? 0.0 : mmode == 4 ? 1.0 : 0.5, pad);
    if (!l2) p.rho.clear();
    const double bar = case_bar(dk, dv);
    Grads r;
    cpu_ref(p, r);
    Dev d;
    dev_alloc(p, d);
    const size_t BT = (size_t)B * T;
    CUDA_CHECK(cudaMemset(d.o, 0xFF, p.dout.size() * 4)); CUDA_CHECK(cudaMemset(d.state, 0xFF, (size_t)B * H * p.Nc * dk * dv * 4));
    CUDA_CHECK(cudaMemset(d.dqk, 0xFF, BT * p.ldqk * 4)); CUDA_CHECK(cudaMemset(d.dv, 0xFF, BT * p.ldv * 4));
    CUDA_CHECK(cudaMemset(d.dg, 0xFF, BT * H * 4)); CUDA_CHECK(cudaMemset(d.dbeta, 0xFF, BT * H * 4)); CUDA_CHECK(cudaMemset(d.dA, 0xFF, p.m.size() * 4));
    run_op(p, d, p.use_m, g16); // masked: dv accumulated (an N layer's, zeroed first); unmasked: written into the poison
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<float> o(p.dout.size()), dqk(BT * p.ldqk), dvv(BT * p.ldv), dg(BT * H), db(BT * H), dA(p.m.size());
    fetch(o, d.o, g_gdn_st16); // bf16 mode: the op stores its output in bf16 (GdnArgs.out_mp, as the layers ask)
    fetch(dqk, d.dqk, g16);
    fetch(dvv, d.dv, g16);
    fetch(dg, d.dg, false);
    fetch(db, d.dbeta, false);
    fetch(dA, d.dA, false);
    std::vector<float> gq(BT * H * dk), gk(BT * H * dk), gv(BT * H * dv), gA(r.dA.size());
    for (size_t rr = 0; rr < BT; rr++) {
        for (int e = 0; e < H * dk; e++) { gq[rr * H * dk + e] = dqk[rr * p.ldqk + e]; gk[rr * H * dk + e] = dqk[rr * p.ldqk + H * dk + e]; }
        for (int e = 0; e < H * dv; e++) gv[rr * H * dv + e] = dvv[rr * p.ldv + e];
    }
    bool untouched = true;
    for (size_t i = 0; i < gA.size(); i++) {
        gA[i] = dA[2 * i + 1];
        uint32_t bits; memcpy(&bits, &dA[2 * i], 4);
        if (bits != 0xFFFFFFFFu) untouched = false;
    }
    for (size_t rr = 0; rr < BT; rr++)
        for (int e = H * dv; e < p.ldv; e++) { uint32_t bits; memcpy(&bits, &dvv[rr * p.ldv + e], 4); if (bits != 0xFFFFFFFFu) untouched = false; }
    double e[7] = {relerr(o, r.o), relerr(gq, r.dq), relerr(gk, r.dk), relerr(gv, r.dv), relerr(dg, r.dg), relerr(db, r.dbeta), relerr(gA, r.dA)};
    // dA must be exactly 0 where m == 0 and at the last chunk
    bool zeros_ok = true;
    for (int b = 0; b < B; b++) for (int c = 0; c < p.Nc; c++) for (int h = 0; h < H; h++) {
        size_t i = (size_t)(b * p.Nc + c) * H + h;
        if ((p.use_m && p.m[2 * i + 1] == 0.f) || c == p.Nc - 1) if (gA[i] != 0.f) zeros_ok = false;
    }
    bool ok = untouched && zeros_ok;
    // Without a mask (a G layer) no caller asks for dA: the chunked kernels still compute ⟨dSe, ΔS_c⟩, the token
    // recurrence (fp32 mode's op at d_k = 192, or NATSL_GDN_TOKENS=1) leaves it at 0, so there it is not compared.
    const bool check_dA = p.use_m || gdn_use_chunked(dk, dv);
    for (int i = 0; i < (check_dA ? 7 : 6); i++) if (!(e[i] < bar)) ok = false;
    char da[16] = "n/a (token)";
    if (check_dA) snprintf(da, sizeof(da), "%.2e", e[6]);
    printf("%-40s o %.2e dq %.2e dk %.2e dv %.2e dg %.2e dbeta %.2e dA %s  untouched %s zeros %s bar %.0e -> %s\n", name, e[0], e[1],
           e[2], e[3], e[4], e[5], da, untouched ? "y" : "N", zeros_ok ? "y" : "N", bar, ok ? "PASS" : "FAIL");
    fflush(stdout);
    dev_free(d);
    return ok;
}

static void time_size(int B, int T, int H, int dk, int dv) {
    Prob p;
    make_prob(p, B, T, H, dk, dv, 1, 1.0);
    Dev d;
    dev_alloc(p, d);
    cudaEvent_t e0, e1, e2;
    CUDA_CHECK(cudaEventCreate(&e0)); CUDA_CHECK(cudaEventCreate(&e1)); CUDA_CHECK(cudaEventCreate(&e2));
    for (int i = 0; i < 32; i++) CUDA_CHECK(cudaEventCreate(&g_ev[i]));
    for (double frac : {1.0, 0.5}) {
        for (int b = 0; b < B; b++) for (int c = 0; c < p.Nc; c++) for (int h = 0; h < H; h++) {
            float mv = (urand() < frac || c == p.Nc - 1) ? 1.f : 0.f;
            size_t i = ((size_t)(b * p.Nc + c) * H + h) * 2;
            p.m[i + 1] = mv; p.m[i] = 1.f - mv;
        }
        CUDA_CHECK(cudaMemcpy(d.m, p.m.data(), p.m.size() * 4, cudaMemcpyHostToDevice));
        for (int w = 0; w < 3; w++) run_op(p, d);
        CUDA_CHECK(cudaDeviceSynchronize());
        std::vector<float> tf, tb, tt;
        for (int rep = 0; rep < 15; rep++) {
            CUDA_CHECK(cudaEventRecord(e0));
            run_fwd(p, d);
            CUDA_CHECK(cudaEventRecord(e1));
            run_bwd(p, d, 1, false);
            CUDA_CHECK(cudaEventRecord(e2));
            CUDA_CHECK(cudaEventSynchronize(e2));
            float a, b2; CUDA_CHECK(cudaEventElapsedTime(&a, e0, e1)); CUDA_CHECK(cudaEventElapsedTime(&b2, e1, e2));
            tf.push_back(a); tb.push_back(b2); tt.push_back(a + b2);
        }
        CUDA_CHECK(cudaGetLastError());
        auto med = [](std::vector<float> x) { std::sort(x.begin(), x.end()); return x[x.size() / 2]; };
        printf("TIME B=%d T=%d H=%d dk=%d dv=%d mask_frac=%.1f: fwd %.3f ms  bwd %.3f ms  fwd+bwd %.3f ms (median of 15; min %.3f)\n", B, T, H,
               dk, dv, frac, med(tf), med(tb), med(tt), *std::min_element(tt.begin(), tt.end()));
        // model FLOPs (dev/model_flops.h's count): 6·dk·dv + 2·64·(3·dk + 2·dv) per token and head forward, ×3 forward + backward
        const double gf = ((double)B * T * H * (6.0 * dk * dv + 2.0 * 64 * (3.0 * dk + 2.0 * dv))) * 1e-9;
        printf("  model FLOPs: fwd %.1f GFLOP, %.1f TFLOP/s;  fwd+bwd %.1f GFLOP, %.1f TFLOP/s\n", gf, gf / med(tf), 3 * gf,
               3 * gf / med(tt));
        g_kprof = true; g_nev = 0;
        GDN_KERNEL_MARK("start");
        run_op(p, d);
        g_kprof = false;
        CUDA_CHECK(cudaDeviceSynchronize());
        printf("  kernels (ms):");
        for (int i = 1; i < g_nev; i++) { float ms; CUDA_CHECK(cudaEventElapsedTime(&ms, g_ev[i - 1], g_ev[i])); printf(" %s %.3f", g_evname[i], ms); }
        printf("\n");
        fflush(stdout);
    }
    dev_free(d);
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "all";
    bool ok = true;
    const char *only = argc > 2 ? argv[2] : "";  // "fp32" or "bf16": that mode only
    if (argc > 3) g_case_filter = argv[3];
    for (int lowp = 0; lowp <= 1; lowp++) {
        if ((!strcmp(only, "fp32") && lowp) || (!strcmp(only, "bf16") && !lowp)) continue; // the fp32 op (fp32 mode), then bf16 mode's (TF32 block matmuls, bf16 state kernels)
        gdn_set_lowp(lowp);
        printf("== %s\n", lowp ? "bf16 mode: block matmuls in TF32; state recurrences on bf16 tensor cores where dk ∈ {64, 128, 192}" : "fp32 op");
        if (strcmp(mode, "time") != 0) {
            ok &= test_case("tiny B2 T256 H2 dk48 dv96 m01", 2, 256, 2, 48, 96, 1);
            ok &= test_case("tiny B2 T256 H2 dk48 dv96 m-real", 2, 256, 2, 48, 96, 2);
            ok &= test_case("tiny B2 T256 H2 dk48 dv96 m=NULL", 2, 256, 2, 48, 96, 0);
            ok &= test_case("tiny m01 unaligned ld (scalar path)", 2, 256, 2, 48, 96, 1, 1);
            ok &= test_case("B1 T512 H2 dk128 dv256 m01", 1, 512, 2, 128, 256, 1);
            ok &= test_case("B1 T512 H2 dk128 dv256 m01 (dq̂, dk̂: no L2)", 1, 512, 2, 128, 256, 1, 0, false);
            ok &= test_case("B1 T256 H2 dk64 dv128 m-real", 1, 256, 2, 64, 128, 2);
            ok &= test_case("tiny B2 T256 H2 dk48 dv96 m-real (no L2)", 2, 256, 2, 48, 96, 2, 0, false);
            ok &= test_case("B4 T256 H6 dk128 dv256 m01 (32-col)", 4, 256, 6, 128, 256, 1); // 192 state blocks
            ok &= test_case("B2 T64 H2 dk128 dv128 (one chunk)", 2, 64, 2, 128, 128, 1);
            ok &= test_case("B1 T1024 H2 dk64 dv128 none committed", 1, 1024, 2, 64, 128, 3);
            ok &= test_case("B1 T1024 H2 dk128 dv256 all committed", 1, 1024, 2, 128, 256, 4);
            ok &= test_case("B8 T128 H6 dk128 dv256 m01", 8, 128, 6, 128, 256, 1);   // bf16 state: 4-warp blocks, two an SM
            ok &= test_case("B16 T128 H6 dk128 dv256 m-real", 16, 128, 6, 128, 256, 2); // bf16 state: the same in two waves
            ok &= test_case("B1 T4096 H2 dk128 dv256 m01", 1, 4096, 2, 128, 256, 1);
            ok &= test_case("B1 T32768 H1 dk128 dv128 m01", 1, 32768, 1, 128, 128, 1);
            ok &= test_case("B1 T512 H2 dk192 dv384 m01 (760m heads)", 1, 512, 2, 192, 384, 1);
            ok &= test_case("B2 T256 H3 dk192 dv384 m-real", 2, 256, 3, 192, 384, 2);
            ok &= test_case("B1 T256 H2 dk192 dv384 m=NULL", 1, 256, 2, 192, 384, 0);
            ok &= test_case("B1 T4096 H1 dk192 dv384 m01", 1, 4096, 1, 192, 384, 1);
            ok &= test_case("B4 T128 H6 dk192 dv384 m01 (8-warp bwd state)", 4, 128, 6, 192, 384, 1);
            ok &= test_case("B2 T2048 H3 dk192 dv384 m-real", 2, 2048, 3, 192, 384, 2);
            ok &= test_case("B2 T4096 H2 dk64 dv64 m-real (one value tile)", 2, 4096, 2, 64, 64, 2);
            if (lowp) { // a G layer's: dQ, dK, dV stored in bf16 (the bf16 kernels' folded stores; else the rounding pass)
                ok &= test_case("B2 T512 H2 dk128 dv256 m=NULL, grads bf16", 2, 512, 2, 128, 256, 0, 0, true, true);
                ok &= test_case("B1 T256 H2 dk192 dv384 m=NULL, grads bf16", 1, 256, 2, 192, 384, 0, 0, true, true);
                ok &= test_case("tiny B2 T256 H2 dk48 dv96 m=NULL, grads bf16", 2, 256, 2, 48, 96, 0, 0, true, true);
            }
            printf("(fp32 state kernels: 16-column tiles unless B·H·dv/32 >= the SM count; bf16 state kernels: 4 or 8 warps\n"
                   " (a warpgroup: 64 value columns) per block, 4 unless 8 need fewer waves)\n");
            printf("CORRECTNESS %s\n", ok ? "PASS" : "FAIL");
        }
        if (strcmp(mode, "test") != 0) {
            time_size(8, 4096, 6, 128, 256);              // the 340m's GDN op
            if (lowp) time_size(8, 4096, 6, 192, 384);    // the 760m's (fp32 mode: the token recurrence, not timed)
        }
    }
    return ok ? 0 : 1;
}
