// masked_attention.cu — test harness of the flash-attention-style tiled softmax attention of natsl.c (fp32 I/O,
// TF32 tensor cores). The kernels and entry points live in train_natsl.cu (included below with TESTING defined).
//
// Serves both the plain causal `A` layer (§4) and the NAtS-L softmax op (§5.3, §6.2, §6.3, §8).
// Forward and backward; never materializes T×T. Tiles are 64 queries × 64 keys = one NAtS chunk each way,
// so the routing mask is a per-tile decision: key tiles (chunks) with m == 0 are skipped (never loaded).
// See NOTES.md beside this file for the algorithm, the measured errors and timings.
//
// Matrix products use mma.sync.m16n8k8 TF32 with fp32 accumulation. Two precisions (attention_set_tf32_passes):
//   3 (default): "3xTF32" — x = hi + lo (hi = x with the low 13 mantissa bits cleared), a·b ≈ a_hi·b_hi + a_hi·b_lo +
//                a_lo·b_hi: fp32-level accuracy (measured normwise errors ~1e-6 against a double oracle).
//   1          : plain TF32 (cvt.rna, one pass): ~4e-4..1e-3 normwise error, ~1.4x faster end to end.
//
// Build + test:  nvcc -O3 -arch=compute_90a -code=sm_90a -std=c++17 --default-stream per-thread -I. -o masked_attention dev/cuda/attention/masked_attention.cu -lcublasLt -lcublas -lnccl
//                ./masked_attention [all|check|time|tiny|prof]      (all = checks vs the CPU oracle, then timings)
//
// Requirements: T % 64 == 0; (dq, dvh) ∈ {(24,48), (64,128), (64,64)} (add more in ATT_SHAPES; dq % 8, dvh % 16);
// q, k, v, dq, dk, dv 16-byte aligned with ldqk % 4 == 0 and ldv % 4 == 0; NH % NHm == 0. Not thread-safe: one static
// scratch buffer of 2·B·NH·T floats (the backward's δ and lse·log2e), grown with cudaMalloc on first use.
// dq is zeroed then accumulated with float4 atomics (run-to-run bit differences in dq, ~1e-7 relative).


#define TESTING
#include "../../../train_natsl.cu"

// ==================================================================================================================
// test harness: double-precision CPU oracle (§5.3 / §6.2 / §6.3 / §8, materializing scores), then timings
// ==================================================================================================================
#include <vector>
#include <algorithm>
#include <string.h>

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static double urand() {   // xorshift64*
    g_rng ^= g_rng >> 12; g_rng ^= g_rng << 25; g_rng ^= g_rng >> 27;
    return (double)((g_rng * 2685821657736338717ull) >> 11) * (1.0 / 9007199254740992.0);
}
static float nrand() {    // approx N(0,1)
    double s = 0; for (int i = 0; i < 12; ++i) s += urand(); return (float)(s - 6.0);
}

static float frand() { return (float)(urand() * 3.4641016 - 1.7320508); }   // uniform, std 1 (timing data)

struct Shape { int B, T, NH, NHm, dq, dv; };

// layouts used by the test: one packed row per token [q | k | v | pad], ld = W for all three
struct Packed { int W, oq, ok, ov; };
static Packed make_packed(const Shape &s) { Packed p; p.oq = 0; p.ok = s.NH * s.dq; p.ov = 2 * s.NH * s.dq; p.W = p.ov + s.NH * s.dv + 4; return p; }

static void cpu_reference(const Shape &S, const Packed &P, const std::vector<float> &qkv, const float *m,
                          const std::vector<float> &dout, std::vector<double> &O, std::vector<double> &L,
                          std::vector<double> &dqkv, std::vector<double> &dA) {
    const int B = S.B, T = S.T, NH = S.NH, NHm = m ? S.NHm : S.NH, Dq = S.dq, Dv = S.dv, W = P.W, Nc = T / 64;
    const int G = NH / NHm;
    const double sc = 1.0 / sqrt((double)Dq);
    O.assign((size_t)B * T * NH * Dv, 0.0); L.assign((size_t)B * NH * T, 0.0);
    dqkv.assign((size_t)B * T * W, 0.0); dA.assign((size_t)B * Nc * NHm * 2, 0.0);
    std::vector<double> e(T), wgt(T), dP(T);
    for (int b = 0; b < B; ++b)
        for (int h = 0; h < NH; ++h) {
            const int n = h / G;
            for (int i = 0; i < T; ++i) {
                const int ci = i / 64;
                const float *qi = &qkv[((size_t)b * T + i) * W + P.oq + h * Dq];
                double mx = -1e300;
                for (int j = 0; j <= i; ++j) {
                    const int cj = j / 64;
                    wgt[j] = (cj == ci) ? 1.0 : (m ? (double)m[((size_t)(b * Nc + cj) * NHm + n) * 2] : 1.0);
                    if (wgt[j] == 0.0) continue;
                    const float *kj = &qkv[((size_t)b * T + j) * W + P.ok + h * Dq];
                    double d = 0; for (int x = 0; x < Dq; ++x) d += (double)qi[x] * kj[x];
                    e[j] = d * sc; mx = std::max(mx, e[j]);
                }
                double Z = 0; for (int j = 0; j <= i; ++j) if (wgt[j] != 0.0) Z += wgt[j] * exp(e[j] - mx);
                const double lse = mx + log(Z);
                L[((size_t)b * NH + h) * T + i] = lse;
                double *oi = &O[((size_t)b * T + i) * NH * Dv + h * Dv];
                for (int j = 0; j <= i; ++j) {
                    if (wgt[j] == 0.0) continue;
                    const double p = wgt[j] * exp(e[j] - lse);
                    const float *vj = &qkv[((size_t)b * T + j) * W + P.ov + h * Dv];
                    for (int x = 0; x < Dv; ++x) oi[x] += p * vj[x];
                }
                // backward for row i
                const float *doi = &dout[((size_t)b * T + i) * NH * Dv + h * Dv];
                double delta = 0; for (int x = 0; x < Dv; ++x) delta += (double)doi[x] * oi[x];
                double *dqi = &dqkv[((size_t)b * T + i) * W + P.oq + h * Dq];
                for (int j = 0; j <= i; ++j) {
                    if (wgt[j] == 0.0) continue;
                    const int cj = j / 64;
                    const float *vj = &qkv[((size_t)b * T + j) * W + P.ov + h * Dv];
                    const float *kj = &qkv[((size_t)b * T + j) * W + P.ok + h * Dq];
                    double dp = 0; for (int x = 0; x < Dv; ++x) dp += (double)doi[x] * vj[x];
                    const double pe = exp(e[j] - lse), p = wgt[j] * pe;
                    const double dE = p * (dp - delta);
                    double *dkj = &dqkv[((size_t)b * T + j) * W + P.ok + h * Dq];
                    double *dvj = &dqkv[((size_t)b * T + j) * W + P.ov + h * Dv];
                    for (int x = 0; x < Dq; ++x) { dqi[x] += sc * dE * kj[x]; dkj[x] += sc * dE * qi[x]; }
                    for (int x = 0; x < Dv; ++x) dvj[x] += p * doi[x];
                    if (m && cj < ci) dA[((size_t)(b * Nc + cj) * NHm + n) * 2] += pe * (dp - delta);
                }
            }
        }
}

static double nrel(const double *ref, const float *got, size_t n, size_t stride_sel_count, const std::vector<size_t> *idx) {
    double num = 0, den = 0;
    if (idx) {
        for (size_t ii = 0; ii < idx->size(); ++ii) { size_t i = (*idx)[ii]; double d = (double)got[i] - ref[i]; num += d * d; den += ref[i] * ref[i]; }
    } else {
        for (size_t i = 0; i < n; ++i) { double d = (double)got[i] - ref[i]; num += d * d; den += ref[i] * ref[i]; }
    }
    (void)stride_sel_count;
    if (den == 0) return sqrt(num);
    return sqrt(num / den);
}

// mask_kind: 0 = none (plain causal), 1 = random 0/1 (p active 0.5), 2 = real in [0,1] (some exact zeros)
static bool run_check(const char *name, const Shape &S, int mask_kind, int passes, double tol) {
    attention_set_tf32_passes(passes);
    const int B = S.B, T = S.T, NH = S.NH, NHm = S.NHm, Nc = T / 64;
    const Packed P = make_packed(S);
    const size_t nqkv = (size_t)B * T * P.W, nout = (size_t)B * T * NH * S.dv, nl = (size_t)B * NH * T, nm = (size_t)B * Nc * NHm * 2;
    std::vector<float> qkv(nqkv), dout(nout), mh(nm);
    for (auto &x : qkv) x = nrand();
    for (auto &x : dout) x = nrand();
    for (int b = 0; b < B; ++b) for (int c = 0; c < Nc; ++c) for (int n = 0; n < NHm; ++n) {
        float a;
        if (c == Nc - 1) a = 1.f;
        else if (mask_kind == 1) a = urand() < 0.5 ? 1.f : 0.f;
        else { double r = urand(); a = r < 0.25 ? 0.f : (float)urand(); }
        mh[((size_t)(b * Nc + c) * NHm + n) * 2 + 0] = a;
        mh[((size_t)(b * Nc + c) * NHm + n) * 2 + 1] = (c == Nc - 1) ? 1.f : 1.f - a;
    }
    const float *mptr_h = mask_kind ? mh.data() : nullptr;
    std::vector<double> O, L, dqkv, dA;
    cpu_reference(S, P, qkv, mptr_h, dout, O, L, dqkv, dA);

    float *d_qkv, *d_out, *d_lse, *d_dout, *d_m, *d_dqkv, *d_dA;
    CUDA_CHECK(cudaMalloc(&d_qkv, nqkv * 4)); CUDA_CHECK(cudaMalloc(&d_out, nout * 4)); CUDA_CHECK(cudaMalloc(&d_lse, nl * 4));
    CUDA_CHECK(cudaMalloc(&d_dout, nout * 4)); CUDA_CHECK(cudaMalloc(&d_m, nm * 4)); CUDA_CHECK(cudaMalloc(&d_dqkv, nqkv * 4));
    CUDA_CHECK(cudaMalloc(&d_dA, nm * 4));
    CUDA_CHECK(cudaMemcpy(d_qkv, qkv.data(), nqkv * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_dout, dout.data(), nout * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_m, mh.data(), nm * 4, cudaMemcpyHostToDevice));
    // poison: NaN everywhere in outputs; dA with a sentinel so we can check [...,1] is untouched
    CUDA_CHECK(cudaMemset(d_out, 0xFF, nout * 4)); CUDA_CHECK(cudaMemset(d_lse, 0xFF, nl * 4));
    CUDA_CHECK(cudaMemset(d_dqkv, 0xFF, nqkv * 4));
    std::vector<float> sentinel(nm, 12345.0f);
    CUDA_CHECK(cudaMemcpy(d_dA, sentinel.data(), nm * 4, cudaMemcpyHostToDevice));
    const float *dm = mask_kind ? d_m : nullptr;
    const int NHm_arg = mask_kind ? NHm : NH;

    AttnArgs args = {d_qkv + P.oq, d_qkv + P.ok, d_qkv + P.ov, P.W, P.W, dm, B, T, NH, NHm_arg, S.dq, S.dv, 0, 0};
    attention_forward(d_out, d_lse, &args);
    CUDA_CHECK(cudaDeviceSynchronize());
    attention_backward(d_dqkv + P.oq, d_dqkv + P.ok, d_dqkv + P.ov, d_dA, d_dout, d_out, d_lse, &args);
    CUDA_CHECK(cudaDeviceSynchronize());

    std::vector<float> go(nout), gl(nl), gd(nqkv), gA(nm);
    CUDA_CHECK(cudaMemcpy(go.data(), d_out, nout * 4, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(gl.data(), d_lse, nl * 4, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(gd.data(), d_dqkv, nqkv * 4, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(gA.data(), d_dA, nm * 4, cudaMemcpyDeviceToHost));

    std::vector<size_t> iq, ik, iv, ipad, iA0;
    for (size_t r = 0; r < (size_t)B * T; ++r) {
        for (int x = 0; x < NH * S.dq; ++x) { iq.push_back(r * P.W + P.oq + x); ik.push_back(r * P.W + P.ok + x); }
        for (int x = 0; x < NH * S.dv; ++x) iv.push_back(r * P.W + P.ov + x);
        for (int x = P.ov + NH * S.dv; x < P.W; ++x) ipad.push_back(r * P.W + x);
    }
    for (size_t i = 0; i < nm; i += 2) iA0.push_back(i);
    const double eo = nrel(O.data(), go.data(), nout, 0, nullptr);
    const double el = nrel(L.data(), gl.data(), nl, 0, nullptr);
    const double eq = nrel(dqkv.data(), gd.data(), 0, 0, &iq);
    const double ek = nrel(dqkv.data(), gd.data(), 0, 0, &ik);
    const double ev = nrel(dqkv.data(), gd.data(), 0, 0, &iv);
    double eA = 0; int badA = 0, touched1 = 0, padw = 0;
    if (mask_kind) {
        eA = nrel(dA.data(), gA.data(), 0, 0, &iA0);
        for (size_t i = 0; i < nm; i += 2) {
            if (mh[i] == 0.f && gA[i] != 0.f) ++badA;            // inactive chunk must be exactly 0
            if (gA[i + 1] != 12345.0f) ++touched1;               // [...,1] never touched
        }
        for (int b = 0; b < B; ++b) for (int n = 0; n < NHm; ++n)   // last chunk must be exactly 0
            if (gA[((size_t)(b * Nc + Nc - 1) * NHm + n) * 2] != 0.f) ++badA;
    }
    for (size_t i : ipad) if (!std::isnan(gd[i])) ++padw;                   // gradient pad columns untouched
    double worst = std::max(std::max(std::max(eo, el), std::max(eq, ek)), std::max(ev, eA));
    if (std::isnan(worst)) worst = 1e30;
    for (auto x : go) if (std::isnan(x)) worst = 1e30;
    const bool ok = worst < tol && badA == 0 && touched1 == 0 && padw == 0;
    printf("%-28s %s  out %.2e lse %.2e dq %.2e dk %.2e dv %.2e dA %.2e  (dA bad %d, dA[1] touched %d, pad written %d) %s\n",
           name, passes == 3 ? "3xTF32" : "1xTF32", eo, el, eq, ek, ev, eA, badA, touched1, padw, ok ? "PASS" : "FAIL");
    cudaFree(d_qkv); cudaFree(d_out); cudaFree(d_lse); cudaFree(d_dout); cudaFree(d_m); cudaFree(d_dqkv); cudaFree(d_dA);
    return ok;
}

static int g_reps = 10;
static void time_case(const char *name, int B, int T, int NH, int NHm, int Dq, int Dv, double frac, int passes) {
    attention_set_tf32_passes(passes);
    const int Nc = T / 64;
    const bool masked = frac >= 0;
    const size_t nq = (size_t)B * T * NH * Dq, nv = (size_t)B * T * NH * Dv, nl = (size_t)B * NH * T, nm = (size_t)B * Nc * NHm * 2;
    std::vector<float> hq(nq), hv(nv), hm(nm);
    float *dq_, *dk_, *dv_, *dQ, *dK, *dV, *dO, *dOut, *dL, *dM, *dA;
    CUDA_CHECK(cudaMalloc(&dq_, nq * 4)); CUDA_CHECK(cudaMalloc(&dk_, nq * 4)); CUDA_CHECK(cudaMalloc(&dv_, nv * 4));
    CUDA_CHECK(cudaMalloc(&dQ, nq * 4)); CUDA_CHECK(cudaMalloc(&dK, nq * 4)); CUDA_CHECK(cudaMalloc(&dV, nv * 4));
    CUDA_CHECK(cudaMalloc(&dO, nv * 4)); CUDA_CHECK(cudaMalloc(&dOut, nv * 4)); CUDA_CHECK(cudaMalloc(&dL, nl * 4));
    CUDA_CHECK(cudaMalloc(&dM, nm * 4)); CUDA_CHECK(cudaMalloc(&dA, nm * 4));
    for (auto &x : hq) x = frand(); CUDA_CHECK(cudaMemcpy(dq_, hq.data(), nq * 4, cudaMemcpyHostToDevice));
    for (auto &x : hq) x = frand(); CUDA_CHECK(cudaMemcpy(dk_, hq.data(), nq * 4, cudaMemcpyHostToDevice));
    for (auto &x : hv) x = frand(); CUDA_CHECK(cudaMemcpy(dv_, hv.data(), nv * 4, cudaMemcpyHostToDevice));
    for (auto &x : hv) x = frand(); CUDA_CHECK(cudaMemcpy(dO, hv.data(), nv * 4, cudaMemcpyHostToDevice));
    double act = 0;
    for (int b = 0; b < B; ++b) for (int c = 0; c < Nc; ++c) for (int n = 0; n < NHm; ++n) {
        float a = (c == Nc - 1) ? 1.f : (urand() < frac ? 1.f : 0.f);
        hm[((size_t)(b * Nc + c) * NHm + n) * 2] = a; hm[((size_t)(b * Nc + c) * NHm + n) * 2 + 1] = 1.f - a; act += a;
    }
    act /= (double)B * Nc * NHm;
    CUDA_CHECK(cudaMemcpy(dM, hm.data(), nm * 4, cudaMemcpyHostToDevice));
    const float *mp = masked ? dM : nullptr;
    const int nhm = masked ? NHm : NH;
    cudaEvent_t e0, e1, e2;
    CUDA_CHECK(cudaEventCreate(&e0)); CUDA_CHECK(cudaEventCreate(&e1)); CUDA_CHECK(cudaEventCreate(&e2));
    std::vector<float> tf, tb;
    const int warm = g_reps > 1 ? 3 : 0;
    for (int r = 0; r < g_reps + warm; ++r) {
        CUDA_CHECK(cudaEventRecord(e0));
        AttnArgs args = {dq_, dk_, dv_, NH * Dq, NH * Dv, mp, B, T, NH, nhm, Dq, Dv, 0, 0};
        attention_forward(dOut, dL, &args);
        CUDA_CHECK(cudaEventRecord(e1));
        attention_backward(dQ, dK, dV, dA, dO, dOut, dL, &args);
        CUDA_CHECK(cudaEventRecord(e2));
        CUDA_CHECK(cudaEventSynchronize(e2));
        float a, b2; CUDA_CHECK(cudaEventElapsedTime(&a, e0, e1)); CUDA_CHECK(cudaEventElapsedTime(&b2, e1, e2));
        if (r >= warm) { tf.push_back(a); tb.push_back(b2); }
    }
    std::sort(tf.begin(), tf.end()); std::sort(tb.begin(), tb.end());
    const double f = tf[tf.size() / 2], bw = tb[tb.size() / 2];
    // useful attention FLOPs: pairs × 2·(dq + dv) forward, pairs × 2·(2dq + 2dv + dq) backward (incl. S recompute)
    double pairs = 0;
    {   // pairs actually attended (per head, averaged mask): own chunk causal + active earlier chunks
        for (int b = 0; b < B; ++b) for (int n = 0; n < nhm; ++n) for (int c = 0; c < Nc; ++c) {
            double own = 64.0 * 65.0 / 2.0, earlier = 0;
            for (int c2 = 0; c2 < c; ++c2) earlier += masked ? (hm[((size_t)(b * Nc + c2) * NHm + n) * 2] != 0.f) : 1.0;
            pairs += (own + earlier * 64.0 * 64.0) * (NH / nhm);
        }
    }
    const double ff = pairs * 2.0 * (Dq + Dv), fb = pairs * 2.0 * (3.0 * Dq + 2.0 * Dv);
    printf("%-34s %s active %.3f  fwd %8.3f ms (%5.1f TFLOP/s)  bwd %8.3f ms (%5.1f TFLOP/s)  total %8.3f ms\n", name,
           passes == 3 ? "3xTF32" : "1xTF32", masked ? act : 1.0, f, ff / f * 1e-9, bw, fb / bw * 1e-9, f + bw);
    cudaFree(dq_); cudaFree(dk_); cudaFree(dv_); cudaFree(dQ); cudaFree(dK); cudaFree(dV); cudaFree(dO); cudaFree(dOut);
    cudaFree(dL); cudaFree(dM); cudaFree(dA);
    cudaEventDestroy(e0); cudaEventDestroy(e1); cudaEventDestroy(e2);
}

int main(int argc, char **argv) {
    int dev = 0; cudaDeviceProp prop; CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
    printf("device: %s, %d SMs, smem/block optin %zu\n", prop.name, prop.multiProcessorCount, prop.sharedMemPerBlockOptin);
    const char *mode = argc > 1 ? argv[1] : "all";          // all | check | time | prof
    if (strcmp(mode, "prof") == 0) {
        g_reps = 1;
        for (int passes : {3, 1}) time_case("NAtS B8 T4096 NH12 64/128 f=1.0", 8, 4096, 12, 6, 64, 128, 1.0, passes);
        return 0;
    }
    bool ok = true;
    if (strcmp(mode, "tiny") == 0) {   // small run for compute-sanitizer
        const Shape tiny = {2, 256, 4, 2, 24, 48}, causal = {2, 256, 2, 2, 64, 64}, mid = {1, 256, 12, 6, 64, 128};
        for (int passes : {3, 1}) {
            ok &= run_check("tiny 0/1 mask", tiny, 1, passes, passes == 3 ? 1e-4 : 2e-3);
            ok &= run_check("T256 NH12 real mask", mid, 2, passes, passes == 3 ? 1e-4 : 2e-3);
            ok &= run_check("causal B2 T256 NH2 d64", causal, 0, passes, passes == 3 ? 1e-4 : 2e-3);
        }
        printf("TINY %s\n", ok ? "ALL PASS" : "SOME FAIL");
        return ok ? 0 : 1;
    }
    if (strcmp(mode, "time") != 0) {
        const Shape tiny = {2, 256, 4, 2, 24, 48}, mid = {1, 512, 12, 6, 64, 128}, causal = {2, 256, 2, 2, 64, 64};
        for (int passes : {3, 1}) {
            const double tol = passes == 3 ? 1e-4 : 1e-3;
            ok &= run_check("tiny 0/1 mask", tiny, 1, passes, tol);
            ok &= run_check("tiny real mask", tiny, 2, passes, tol);
            ok &= run_check("B1 T512 NH12 0/1 mask", mid, 1, passes, tol);
            ok &= run_check("B1 T512 NH12 real mask", mid, 2, passes, tol);
            ok &= run_check("causal B2 T256 NH2 d64", causal, 0, passes, tol);
        }
        printf("CORRECTNESS %s (3xTF32 tol 1e-4, 1xTF32 tol 1e-3)\n", ok ? "ALL PASS" : "SOME FAIL");
    }
    if (strcmp(mode, "check") != 0) {
        for (int passes : {3, 1}) {
            time_case("NAtS B8 T4096 NH12 64/128 f=1.0", 8, 4096, 12, 6, 64, 128, 1.0, passes);
            time_case("NAtS B8 T4096 NH12 64/128 f=0.5", 8, 4096, 12, 6, 64, 128, 0.5, passes);
            time_case("NAtS B8 T4096 NH12 64/128 f=0.25", 8, 4096, 12, 6, 64, 128, 0.25, passes);
            time_case("causal B8 T4096 NH16 64/64", 8, 4096, 16, 16, 64, 64, -1.0, passes);
        }
    }
    return ok ? 0 : 1;
}
