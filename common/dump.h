// The -D comparison dump: what train_natsl and train_natsl_cu compute on the same batches, written by either so
// test_natsl.c can hold one against the other (§8). Its writer and its reader are both here.
//
// File: a header of 256 int32 [DUMP_MAGIC, 1, B, T, V, nparams, nrouter, nsteps], then float32:
//   the loss on the first train batch                                        [1]
//   its logits over the V real tokens                                        [B*T][V]
//   the gradient of its mean loss, every parameter in buffer order           [nparams]
//   every N layer's router logits, then its routing decisions (mask Ã)        [nrouter], [nrouter]
//     (an S layer's gate counts as one router pair: logits (z_A, z_G), decisions (Ã_A, Ã_G), §7.3)
//   the train loss of each of nsteps AdamW steps (the first on that batch)   [nsteps]
//   the loss on the first batch after them                                   [1]
// Included by common/train_main.h, after a program's model, whose functions the writer calls.
#ifndef NATSL_DUMP_H
#define NATSL_DUMP_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fileio.h"

#define DUMP_MAGIC 20261124
#define DUMP_STEPS 10

typedef struct { int h[256]; float *x; size_t n; } Dump; // header, then the n floats after it
// Where the parts start in Dump.x, and their sizes
typedef struct { size_t BT, V, np, nr, ns, grads, rlogits, rdec, steps; } DumpParts;

static int dump_read(const char *path, Dump *d) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    d->n = size > 1024 ? (size - 1024) / sizeof(float) : 0;
    d->x = (float *)calloc(d->n ? d->n : 1, sizeof(float));
    int ok = d->x && fread(d->h, sizeof(int), 256, f) == 256 && fread(d->x, sizeof(float), d->n, f) == d->n &&
             d->h[0] == DUMP_MAGIC;
    fclose(f);
    return ok ? 0 : -1;
}
static DumpParts dump_parts(const Dump *d) {
    DumpParts p = {(size_t)d->h[2] * d->h[3], (size_t)d->h[4], (size_t)d->h[5], (size_t)d->h[6], (size_t)d->h[7], 0, 0, 0, 0};
    p.grads = 1 + p.BT * p.V; p.rlogits = p.grads + p.np; p.rdec = p.rlogits + p.nr; p.steps = p.rdec + p.nr;
    return p;
}

// Writes the dump of the first DUMP_STEPS batches of train (the model's forward, backward and train_step) and
// ends the program on an error. lr, warmup, final_frac, wd: the run's schedule, squeezed into DUMP_STEPS steps.
static void dump_write(Model *M, DataLoader *train, const char *path, double lr, int warmup, double final_frac,
                       double wd, int B, int T) {
    const Config *c = &M->cfg;
    char err[1024];
    size_t BT = (size_t)B * T, nrouter = 0, per = BT / NATSL_CHUNK * 2 * c->H;
    for (int l = 0; l < c->L; l++) nrouter += c->pattern[l] == 'N' ? per : c->pattern[l] == 'S' ? 2 : 0;
    FILE *f = fopen_regular(path, "wb", "a dump file", err, sizeof(err));
    if (!f) die(err);
    int h[256] = {DUMP_MAGIC, 1, B, T, c->V, (int)M->nparams, (int)nrouter, DUMP_STEPS};
    fwrite(h, sizeof(int), 256, f);
    if (dataloader_next_batch(train, err, sizeof(err))) die(err);
    int *first = (int *)calloc(2 * BT, sizeof(int));
    if (!first) die("out of memory");
    memcpy(first, train->inputs, BT * sizeof(int));
    memcpy(first + BT, train->targets, BT * sizeof(int));
    model_zero_grad(M);
    model_forward(M, first, first + BT, B, T);
    float loss = M->mean_loss, loss0 = loss;
    fwrite(&loss, sizeof(float), 1, f);
    float *z = logits_to_float32(M, 0, BT);
    for (size_t r = 0; r < BT; r++) fwrite(z + r * c->Vp, sizeof(float), c->V, f);
    free(z);
    float *router = (float *)calloc(2 * nrouter + 1, sizeof(float)); // logits, then decisions
    if (!router) die("out of memory");
    for (int l = 0, o = 0; l < c->L; l++)
        if (c->pattern[l] == 'N') {
            float *rl = to_float32(M->la[l].rlogits, per), *rd = to_float32(M->la[l].rmask, per);
            memcpy(router + o, rl, per * sizeof(float));
            memcpy(router + nrouter + o, rd, per * sizeof(float));
            free(rl); free(rd);
            o += per;
        } else if (c->pattern[l] == 'S') { // (7.3a): z_A = −z_G = −(κ/2)·tanh(s_sel); the hard choice
            const SelGate *sg = &M->rb.sel[l];
            router[o] = (float)(-0.5 * sg->kappa * tanh(sg->s)); router[o + 1] = -router[o];
            router[nrouter + o] = (float)sg->a; router[nrouter + o + 1] = (float)!sg->a;
            o += 2;
        }
    model_backward(M, first, first + BT, B, T, (real)1 / BT);
    float *g = to_float32(M->grads, M->nparams);
    fwrite(g, sizeof(float), M->nparams, f);
    fwrite(router, sizeof(float), 2 * nrouter, f);
    free(g); free(router);
    for (int step = 1; step <= DUMP_STEPS; step++) { // the first step updates with the gradient just written
        double step_lr = lr_at(step - 1, warmup, DUMP_STEPS, lr, final_frac);
        float l = loss;
        if (step == 1) {
            double norm = grad_norm(M);
            adamw_update(M, step_lr, wd, norm > GRAD_CLIP ? GRAD_CLIP / norm : 1, step);
        } else l = train_step(M, train, 1, B, T, step_lr, wd, step, NULL).loss;
        fwrite(&l, sizeof(float), 1, f);
    }
    model_forward(M, first, first + BT, B, T);
    loss = M->mean_loss;
    fwrite(&loss, sizeof(float), 1, f);
    free(first);
    if (fclose(f)) { fprintf(stderr, "error: %s: write failed\n", path); exit(1); }
    printf("wrote %s: loss %.6f, after %d steps %.6f\n", path, loss0, DUMP_STEPS, loss);
}

#endif
