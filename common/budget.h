// The softmax-budget controls of doc/model.md §7, shared by train_natsl.c and train_natsl.cu: the options and
// per-step state of the router's auxiliary terms (RouterBudget, a field of each program's Model), the τ
// schedule and the Gumbel noise stream. What needs the model's buffers (the statistics of a forward pass, the
// noise draw) is in common/model_io.h; the gradient enters in router_backward of each program.
// All options off (λ = 0, α = 0, τ_0 = 0: the defaults) leaves the model exactly §5 (no extra work, the same bits).
#ifndef NATSL_BUDGET_H
#define NATSL_BUDGET_H

#include <math.h>
#include <stdint.h>
#include "config.h"

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

#endif
