// The softmax-budget controls of doc/model.md §7, shared by train_natsl.c and train_natsl.cu: the options and
// per-step state of the router's auxiliary terms and of the S layers' gates (RouterBudget, a field of each
// program's Model), the terms' math (the penalty, the load balancing and their gradient), the τ schedule, the Gumbel
// noise stream and the S gate's math (SelGate, §7.3). What needs the model's buffers (the statistics of a forward
// pass, the noise draw, an S layer's s_sel) is in common/model_routing.inc; the gradient enters in router_backward
// and select_layer_backward of each program.
// All options off (λ = 0, α = 0, τ_0 = 0: the defaults) leaves the model exactly §5 (no extra work, the same bits).
#ifndef NATSL_BUDGET_H
#define NATSL_BUDGET_H

#include <math.h>
#include <stdint.h>
#include "config.h"

// §7.3: the gate of one S layer in one forward pass. s: s_sel; y_a, y_g: the straight-through probabilities
// (7.3b); a: the hard choice (1 = the A mixer); relaxed (tests only, §8): the layer outputs y_A·A(x) + y_G·G(x).
typedef struct { double s, kappa, tau, y_a, y_g; int a, relaxed; } SelGate;

// (7.3a-b): z = (−(κ/2)·tanh s, +(κ/2)·tanh s), y = softmax((z + g)/τ) with noise g = (g_A, g_G) (NULL: none);
// the hard choice is A iff y_A > y_G (so without noise A iff z_A > z_G: a tie, s = 0, is G).
static inline SelGate sel_gate(double s, double kappa, const float *g, double tau) {
    SelGate r = {s, kappa, tau, 0, 0, 0, 0};
    double za = -0.5 * kappa * tanh(s), zg = -za;
    double u = (za + (g ? g[0] : 0)) - (zg + (g ? g[1] : 0));
    r.y_a = 1 / (1 + exp(-u / tau));
    r.y_g = 1 - r.y_a;
    r.a = r.y_a > r.y_g;
    return r;
}
// (7.3c-d): ∂L/∂s_sel from ∂L/∂y_A and ∂L/∂y_G: ∂y_A/∂u = −∂y_G/∂u = y_A·y_G/τ with u = z_A + g_A − z_G − g_G,
// ∂u/∂s = −κ·(1 − tanh² s)
static inline double sel_grad(const SelGate *g, double dya, double dyg) {
    double t = tanh(g->s);
    return (dya - dyg) * g->y_a * g->y_g / g->tau * -g->kappa * (1 - t * t);
}

typedef struct {
    // options (flags -B -F -A -G -M -R; common/train_util.h)
    double lambda;      // §7.1 softmax-budget penalty λ ≥ 0 (0 = off)
    double target;      // §7.1 target fraction f* (≤ 0: the plain form λ·f, (7.1b); > 0: λ·max(0, f − f*), (7.1d))
    double alpha;       // §7.4 load-balancing weight α ≥ 0 (0 = off)
    double tau0, tau_min, tau_decay; // §7.2 ST-Gumbel routing when tau0 > 0: τ_s = max(τ_min, τ_0·r^(s−1)) at step s
    uint64_t rng;       // §7.2 the Gumbel noise stream (saved in the optimizer-state file)
    // per optimizer step (train_step): noise on in this step's forward passes, at temperature tau
    int noise;
    double tau;
    // the last forward pass with targets (router_aux_forward), over its micro-batch's set 𝒮 (all N layers)
    double frac;        // f_hard (7.1a): fraction of routed chunks whose hard choice is softmax
    double pen, lb;     // L_pen (7.1b/d) and L_lb (7.4a), the logged values
    double pen_soft, lb_soft; // the functions whose gradient the backward pass takes (tests: their FD)
    double dpi[2];      // ∂(L_pen + L_lb)/∂s[…, m] per routed (b, c, n) of every N layer (s = π, or y with noise)
    // §7.3 layer-level selection (flags -S -K): options, this step's noise and temperature, the last forward's gates
    double sel_lambda;  // λ_S ≥ 0 of (7.3e) (0 = off)
    double kappa;       // κ > 0 of (7.3a)
    int sel_noise;      // the S gates draw noise in this step's forward passes (training: always)
    double sel_tau;     // at this temperature: τ_s of (7.2b) with -G τ_0 > 0, else 1
    float sel_g[NATSL_MAX_LAYERS][2]; // this step's Gumbel draws (g_A, g_G) per S layer
    SelGate sel[NATSL_MAX_LAYERS];    // per S layer, its gate in the last forward pass
} RouterBudget;

static inline int budget_aux_on(const RouterBudget *rb) { return rb->lambda > 0 || rb->alpha > 0; }

// N layers before layer l (an N layer's index into the per-N-layer router arrays), and the number of N layers
static inline int natsl_layer_index(const Config *c, int l) {
    int n = 0;
    for (int i = 0; i < l; i++) n += c->pattern[i] == 'N';
    return n;
}
// Elements of the Gumbel noise of one micro-batch of B×T: [N layers][B][Nc][H][2] (at least 1)
static inline size_t router_noise_size(const Config *c, int B, int T) {
    size_t n = (size_t)natsl_layer_index(c, c->L) * B * (T / NATSL_CHUNK) * c->H * 2;
    return n ? n : 1;
}

// (7.2b), at optimizer step s (1-based)
static inline double budget_tau(const RouterBudget *rb, int s) {
    double t = rb->tau0 * pow(rb->tau_decay, s - 1);
    return t > rb->tau_min ? t : rb->tau_min;
}

// ---- the auxiliary terms of a forward pass with targets (router_aux_forward gathers what they read) ---------------
// Over the micro-batch's set 𝒮 of (N layer, b, chunk c < Nc−1, head group n), with s = the probability the
// straight-through uses (π, or y under ST-Gumbel routing) and the hard choice s0 ≥ s1:
//   f = fraction of hard softmax choices (7.1a);  L_pen = λ·f, or λ·max(0, f − f*) for f* > 0 (7.1b, 7.1d);
//   L_lb = 2α·(f·P_0 + (1 − f)·P_1), P_m = mean of s[…, m] (7.4a);
// and the gradient dpi[m] of L_pen + L_lb on each s[…, m] (f constant; the penalty's through s0: (7.1c)), which
// model_backward scales as the mean loss and router_backward adds to dÃ. With gradient accumulation each
// micro-batch contributes its own terms, weighted 1/accum (doc/model.md §7.1).
// The S layers' penalty (7.3e) joins L_pen: (λ_S/L)·Σ hard choices of A, its gradient λ_S/L on each y_A
// (model_backward hands it to select_layer_backward).

// Starts a pass's terms: zero, but for the S layers' penalty (7.3e) from their gates in rb->sel.
static inline void budget_aux_begin(RouterBudget *rb, const Config *c) {
    rb->frac = rb->pen = rb->lb = rb->pen_soft = rb->lb_soft = rb->dpi[0] = rb->dpi[1] = 0;
    for (int l = 0; l < c->L; l++)
        if (c->pattern[l] == 'S') {
            rb->pen += rb->sel_lambda / c->L * rb->sel[l].a;
            rb->pen_soft += rb->sel_lambda / c->L * rb->sel[l].y_a;
        }
}
// Adds the router's terms from 𝒮: its n > 0 members, of which `hard` chose softmax, and s0, s1 the sums of s[…, 0],
// s[…, 1] over them.
static inline void budget_aux_router(RouterBudget *rb, double n, double hard, double s0, double s1) {
    double f = hard / n, gate = rb->target <= 0 || f > rb->target;
    rb->frac = f;
    rb->pen += rb->lambda * (rb->target > 0 ? (f > rb->target ? f - rb->target : 0) : f);
    rb->pen_soft += gate * rb->lambda * s0 / n;
    rb->lb = rb->lb_soft = 2 * rb->alpha * (f * s0 / n + (1 - f) * s1 / n);
    rb->dpi[0] = (gate * rb->lambda + 2 * rb->alpha * f) / n;
    rb->dpi[1] = 2 * rb->alpha * (1 - f) / n;
}

#endif
