// The -D comparison dump: what train_natsl and train_natsl_cu compute on the same batches, written by either so
// test_natsl.c can hold one against the other (§8).
//
// File: a header of 256 int32 [DUMP_MAGIC, 1, B, T, V, nparams, nrouter, nsteps], then float32:
//   the loss on the first train batch                                        [1]
//   its logits over the V real tokens                                        [B*T][V]
//   the gradient of its mean loss, every parameter in buffer order           [nparams]
//   every N layer's router logits, then its routing decisions (mask Ã)        [nrouter], [nrouter]
//     (an S layer's gate counts as one router pair: logits (z_A, z_G), decisions (Ã_A, Ã_G), §7.3)
//   the train loss of each of nsteps AdamW steps (the first on that batch)   [nsteps]
//   the loss on the first batch after them                                   [1]
// The file's format and its reader (test_natsl.c); the writer, which runs a program's model, is dump_write in
// common/train_main.inc.
#ifndef NATSL_DUMP_H
#define NATSL_DUMP_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

#endif
