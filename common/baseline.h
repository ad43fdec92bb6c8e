// What a model must beat: the val loss of counting models of the training data, printed at the start of a
// run next to the model's own val loss. Shared by both trainers (header-only, C99, libc + libm).
//   unigram   p(b) = (c(b) + 1) / (N + V)                       (add-one: every id has some mass)
//   bigram    p(b | a) = λ · c(a, b) / c(a) + (1 − λ) · p_uni(b)  (interpolated; p_uni(b) alone where c(a) = 0)
// counted on the first shard of the train glob (up to 2^24 tokens of it) and scored on exactly the
// (input, target) pairs of the val loss: the first n val batches. λ is the best in (0, 1) on those pairs (the
// loss is convex in λ: a golden-section search), which favours the baseline (the bar is, if anything, set too
// high).
#ifndef NATSL_BASELINE_H
#define NATSL_BASELINE_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dataloader.h"

static int baseline_cmp_u32_(const void *x, const void *y) {
    uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
    return a < b ? -1 : a > b;
}

// Count of key in the sorted array k[n] (binary search for the first and last occurrence).
static size_t baseline_count_(const uint32_t *k, size_t n, uint32_t key) {
    size_t lo = 0, hi = n;
    while (lo < hi) { size_t m = (lo + hi) / 2; if (k[m] < key) lo = m + 1; else hi = m; }
    size_t first = lo;
    hi = n;
    while (lo < hi) { size_t m = (lo + hi) / 2; if (k[m] <= key) lo = m + 1; else hi = m; }
    return lo - first;
}

// The interpolated bigram's mean loss with weight l: pb[i] the bigram probability of pair i (-1 where its first
// token was never seen), pu[i] the unigram one of its target.
static double baseline_bigram_(const double *pb, const double *pu, size_t n, double l) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s -= log(pb[i] < 0 ? pu[i] : l * pb[i] + (1 - l) * pu[i]);
    return s / n;
}

// Unigram and interpolated-bigram val losses (nats per token) into *uni, *bi, the best λ into *lambda and
// the tokens counted into *ntrain. val is reset and read for nbatches batches (then reset again). 0, or -1
// with a message.
static int baseline_losses(const DataLoader *train, DataLoader *val, int nbatches, int V, double *uni, double *bi,
                           double *lambda, size_t *ntrain, char *err, size_t errlen) {
    /* the first train shard: the train loader holds it already unless it moved on (it has not at the start) */
    DataLoader t0;
    const DataLoader *tr = train;
    int own = 0;
    if (train->loaded_shard != 0) {
        if (dataloader_init(&t0, train->files[0], train->B, train->T, train->vocab, err, errlen)) return -1;
        tr = &t0;
        own = 1;
    }
    size_t n = tr->ntok < ((size_t)1 << 24) ? tr->ntok : ((size_t)1 << 24);
    uint32_t *pairs = (uint32_t *)malloc((n ? n : 1) * sizeof(uint32_t));
    double *cu = (double *)calloc((size_t)V, sizeof(double));
    size_t nval = (size_t)nbatches * val->B * val->T;
    int *vin = (int *)malloc(nval * sizeof(int)), *vtg = (int *)malloc(nval * sizeof(int));
    double *pb = (double *)malloc(nval * sizeof(double)), *pu = (double *)malloc(nval * sizeof(double));
    int rc = -1;
    double lu = 0; /* (declared before the gotos: nvcc's C++ forbids jumping over an initialization) */
    if (!pairs || !cu || !vin || !vtg || !pb || !pu) { snprintf(err, errlen, "baseline: out of memory"); goto done; }
    for (size_t i = 0; i < n; i++) {
        cu[tr->tokens[i]] += 1;
        if (i + 1 < n) pairs[i] = (uint32_t)tr->tokens[i] << 16 | tr->tokens[i + 1];
    }
    qsort(pairs, n - 1, sizeof(uint32_t), baseline_cmp_u32_);
    dataloader_reset(val);
    for (int b = 0; b < nbatches; b++) {
        if (dataloader_next_batch(val, err, errlen)) goto done;
        memcpy(vin + (size_t)b * val->B * val->T, val->inputs, (size_t)val->B * val->T * sizeof(int));
        memcpy(vtg + (size_t)b * val->B * val->T, val->targets, (size_t)val->B * val->T * sizeof(int));
    }
    dataloader_reset(val);
    for (size_t i = 0; i < nval; i++) {
        pu[i] = (cu[vtg[i]] + 1) / ((double)n + V);
        lu -= log(pu[i]);
        /* c(a) as the first of a pair: the last token of the counted stream starts no pair */
        double ca = cu[vin[i]] - ((size_t)vin[i] == tr->tokens[n - 1]);
        pb[i] = ca > 0 ? baseline_count_(pairs, n - 1, (uint32_t)vin[i] << 16 | (uint32_t)vtg[i]) / ca : -1;
    }
    *uni = lu / nval;
    { /* golden-section search of λ in (0, 1): 40 steps narrow it to 1e-8 (λ < 1: every p > 0) */
        const double g = 0.6180339887498949;
        double lo = 0, hi = 1, x1 = hi - g * (hi - lo), x2 = lo + g * (hi - lo);
        double f1 = baseline_bigram_(pb, pu, nval, x1), f2 = baseline_bigram_(pb, pu, nval, x2);
        for (int k = 0; k < 40; k++) {
            if (f1 <= f2) { hi = x2; x2 = x1; f2 = f1; x1 = hi - g * (hi - lo); f1 = baseline_bigram_(pb, pu, nval, x1); }
            else { lo = x1; x1 = x2; f1 = f2; x2 = lo + g * (hi - lo); f2 = baseline_bigram_(pb, pu, nval, x2); }
        }
        *lambda = f1 <= f2 ? x1 : x2;
        *bi = f1 <= f2 ? f1 : f2;
    }
    *ntrain = n;
    rc = 0;
done:
    free(pairs); free(cu); free(vin); free(vtg); free(pb); free(pu);
    if (own) dataloader_free(&t0);
    return rc;
}

// Prints the two baselines (one line) and keeps them in out[2] (unigram, bigram); a failure only prints a note (the run
// does not depend on them) and leaves out as it was.
static void print_baselines(const DataLoader *train, DataLoader *val, int nbatches, int V, double *out) {
    double uni = 0, bi = 0, lambda = 0;
    size_t n = 0;
    char err[1024];
    if (baseline_losses(train, val, nbatches, V, &uni, &bi, &lambda, &n, err, sizeof(err))) {
        printf("note: no baselines (%s)\n", err);
        return;
    }
    printf("baselines on the val batches, counted on %zu tokens of %s: unigram %.3f, interpolated bigram %.3f (lambda %.3f)\n",
           n, train->files[0], uni, bi, lambda);
    out[0] = uni; out[1] = bi;
}

#endif
