// What both trainers do with a model in the same way, written once: the router statistics and the checkpoint
// files. Included by train_natsl.c and train_natsl.cu after they define their Model and these four functions
// (the CPU's work on host memory, the GPU's copy to and from the device):
//   to_float32(buf, n)        a new host float32 copy of n values of a model buffer
//   from_float32(buf, f, n)   the host float32 values f into a model buffer
//   model_build(M, config)    the parameter and gradient buffers of a model of that config
//   model_alloc_moments(M)    AdamW's two moment buffers (zero), if not there yet
// File formats: common/checkpoint.h.
#ifndef NATSL_MODEL_IO_H
#define NATSL_MODEL_IO_H

// Fraction of softmax-routed chunks of N layer l (the last chunk is excluded: it is forced, §5.2), over the batch
// of the last forward pass, for one head (h >= 0) or all heads (h = -1).
static double softmax_fraction(const Model *M, int l, int h, int B, int T) {
    int Nc = T / NATSL_CHUNK, H = M->cfg.H, n = 0, soft = 0;
    if (Nc < 2) return 0;
    float *mask = to_float32(M->la[l].rmask, (size_t)B * Nc * H * 2);
    for (int b = 0; b < B; b++)
        for (int c = 0; c < Nc - 1; c++)
            for (int k = 0; k < H; k++) {
                if (h >= 0 && k != h) continue;
                n++;
                soft += mask[(((size_t)b * Nc + c) * H + k) * 2] == 1;
            }
    free(mask);
    return (double)soft / n;
}

// ---- checkpoints: model_%08d.bin (header + float32 parameters), state_%08d.bin (AdamW moments, step, RNG,
// data position); each returns 0, or -1 with a one-line message in err

static int save_model(const Model *M, const char *path, char *err, size_t errlen) {
    float *f = to_float32(M->params, M->nparams);
    int rc = ckpt_write_model(path, &M->cfg, f, M->nparams, err, errlen);
    free(f);
    return rc;
}

// Reads a model checkpoint: builds M from its header and loads the parameters.
static int load_model(Model *M, const char *path, char *err, size_t errlen) {
    Config c;
    if (ckpt_read_model_config(path, &c, err, errlen)) return -1;
    model_build(M, &c);
    float *f = (float *)calloc(M->nparams, sizeof(float));
    if (!f) { snprintf(err, errlen, "%s: out of memory for %zu parameters", path, M->nparams); return -1; }
    int rc = ckpt_read_model_params(path, f, M->nparams, err, errlen);
    if (!rc) from_float32(M->params, f, M->nparams);
    free(f);
    if (rc) model_free(M); // nothing of a model that failed to load is kept
    return rc;
}

// The moments exist after the first update; a state saved before (every step so far skipped) holds zeros.
static int save_state(Model *M, const TrainState *s, const char *path, char *err, size_t errlen) {
    model_alloc_moments(M);
    float *m = to_float32(M->adam_m, M->nparams), *v = to_float32(M->adam_v, M->nparams);
    int rc = ckpt_write_state(path, s, m, v, M->nparams, err, errlen);
    free(m); free(v);
    return rc;
}

static int load_state(Model *M, TrainState *s, const char *path, char *err, size_t errlen) {
    size_t n = M->nparams;
    float *f = (float *)calloc(2 * n, sizeof(float));
    if (!f) { snprintf(err, errlen, "%s: out of memory for %zu moments", path, 2 * n); return -1; }
    int rc = ckpt_read_state(path, s, f, n, err, errlen);
    if (!rc) {
        model_alloc_moments(M);
        from_float32(M->adam_m, f, n);
        from_float32(M->adam_v, f + n, n);
    }
    free(f);
    return rc;
}

#endif
