// Checkpoint files of natsl.c, shared by train_natsl.c and train_natsl.cu (either program loads the
// other's): a header of 256 int32 followed by float32 arrays.
//   model_%08d.bin  the config (header below) and the parameters in param_tensors order
//   state_%08d.bin  [magic, version, step, shard, position lo31, hi, RNG lo32, hi32, parameter count lo31, hi,
//                   Gumbel noise RNG lo32, hi32 (version 2)], then AdamW's first and second moments
//                   (version 1 files, written before §7.2 existed, load with noise_rng = 0: the driver seeds it)
// (the -z comparison dump has its own file, common/dump.h). Writes are atomic: the data goes to PATH.tmp, is flushed to disk, and only then
// renamed over PATH, so a killed run never leaves a half-written checkpoint under the real name.
// Every function returns 0, or -1 with a one-line message "PATH: problem" in err.
#ifndef NATSL_CHECKPOINT_H
#define NATSL_CHECKPOINT_H

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <stdint.h>
#include <unistd.h>
#include "config.h"

#define CKPT_HEADER_BYTES (256 * sizeof(int))

static inline int ckpt_write_atomic(const char *path, const int *header, const float *a, size_t na,
                                    const float *b, size_t nb, char *err, size_t errlen) {
    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) { snprintf(err, errlen, "%s: cannot open for writing (%s)", tmp, strerror(errno)); return -1; }
    int ok = fwrite(header, sizeof(int), 256, f) == 256 && fwrite(a, sizeof(float), na, f) == na &&
             (!b || fwrite(b, sizeof(float), nb, f) == nb);
    ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
    ok = (fclose(f) == 0) && ok;
    if (!ok) { snprintf(err, errlen, "%s: write failed (%s)", tmp, strerror(errno)); remove(tmp); return -1; }
    if (rename(tmp, path)) { snprintf(err, errlen, "%s: cannot rename from %s (%s)", path, tmp, strerror(errno)); remove(tmp); return -1; }
    return 0;
}

static inline int ckpt_read_header(const char *path, int *header, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) { snprintf(err, errlen, "%s: cannot open (%s)", path, strerror(errno)); return -1; }
    size_t n = fread(header, sizeof(int), 256, f);
    fclose(f);
    if (n != 256) { snprintf(err, errlen, "%s: file too short for a checkpoint header (%zu of 1024 bytes)", path, n * sizeof(int)); return -1; }
    return 0;
}

// Reads n floats at byte offset `offset`; with exact, the file must end right after them.
static inline int ckpt_read_floats(const char *path, size_t offset, float *out, size_t n, int exact, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) { snprintf(err, errlen, "%s: cannot open (%s)", path, strerror(errno)); return -1; }
    long long want = (long long)(offset + n * sizeof(float));
    fseek(f, 0, SEEK_END);
    long long size = ftell(f);
    if (size < want || (exact && size != want)) {
        fclose(f);
        snprintf(err, errlen, "%s: %lld bytes, expected %lld for its header's config (truncated or wrong file?)", path, size, want);
        return -1;
    }
    fseek(f, (long)offset, SEEK_SET);
    size_t got = fread(out, sizeof(float), n, f);
    fclose(f);
    if (got != n) { snprintf(err, errlen, "%s: read failed after %zu of %zu values", path, got, n); return -1; }
    return 0;
}

// ----------------------------------------------------------------------------------------------
// the model file's header: magic, version, the config, the parameter count

#define CKPT_MODEL_MAGIC 20261122
#define CKPT_STATE_MAGIC 20261123
#define CKPT_VERSION 1
#define CKPT_STATE_VERSION 2 // 2: + the Gumbel noise stream (§7.2); 1 is still read

// header layout: 256 int32
//  [0] magic [1] version [2] D [3] L [4] H [5] dk [6] dv [7] Ha [8] F [9] V [10] Vp [11] rope
//  [12] chunk size [13] parameter count (low 31 bits) [14] parameter count (high bits)
//  [32..] pattern, one char per int
static inline void config_to_header(const Config *c, size_t nparams, int *h) {
    memset(h, 0, 256 * sizeof(int));
    h[0] = CKPT_MODEL_MAGIC; h[1] = CKPT_VERSION;
    h[2] = c->D; h[3] = c->L; h[4] = c->H; h[5] = c->dk; h[6] = c->dv; h[7] = c->Ha; h[8] = c->F;
    h[9] = c->V; h[10] = c->Vp; h[11] = c->rope; h[12] = NATSL_CHUNK;
    h[13] = (int)(nparams & 0x7fffffff); h[14] = (int)(nparams >> 31);
    for (int l = 0; l < c->L; l++) h[32 + l] = c->pattern[l];
}

static inline int config_from_header(Config *c, const int *h, const char *path, char *err, size_t errlen) {
    if (h[0] != CKPT_MODEL_MAGIC) { snprintf(err, errlen, "%s: not a natsl model checkpoint (bad magic %d)", path, h[0]); return -1; }
    if (h[1] != CKPT_VERSION) { snprintf(err, errlen, "%s: checkpoint version %d, this program reads %d", path, h[1], CKPT_VERSION); return -1; }
    if (h[12] != NATSL_CHUNK) { snprintf(err, errlen, "%s: chunk size %d, this program uses %d", path, h[12], NATSL_CHUNK); return -1; }
    memset(c, 0, sizeof(*c));
    c->D = h[2]; c->L = h[3]; c->H = h[4]; c->dk = h[5]; c->dv = h[6]; c->Ha = h[7]; c->F = h[8];
    c->V = h[9]; c->Vp = h[10]; c->rope = h[11];
    if (c->L <= 0 || c->L > NATSL_MAX_LAYERS) { snprintf(err, errlen, "%s: bad layer count %d", path, c->L); return -1; }
    for (int l = 0; l < c->L; l++) c->pattern[l] = (char)h[32 + l];
    char why[256];
    if (config_check(c, why, sizeof(why))) { snprintf(err, errlen, "%s: %s", path, why); return -1; }
    size_t total, want = (size_t)h[13] | ((size_t)h[14] << 31);
    ParamTensor t[NATSL_MAX_TENSORS];
    param_tensors(c, t, &total);
    if (total != want) { snprintf(err, errlen, "%s: header says %zu parameters, its config has %zu", path, want, total); return -1; }
    return 0;
}

// ---- the two files, from and into host float32 arrays -----------------------------------------------

typedef struct { int step; uint64_t rng; int shard; size_t pos; uint64_t noise_rng; } TrainState; // what a resume restores

static inline int ckpt_write_model(const char *path, const Config *c, const float *params, size_t n, char *err, size_t errlen) {
    int h[256];
    config_to_header(c, n, h);
    return ckpt_write_atomic(path, h, params, n, NULL, 0, err, errlen);
}

// The config of a model file (checked against the file's parameter count and size).
static inline int ckpt_read_model_config(const char *path, Config *c, char *err, size_t errlen) {
    int h[256];
    if (ckpt_read_header(path, h, err, errlen)) return -1;
    return config_from_header(c, h, path, err, errlen);
}
static inline int ckpt_read_model_params(const char *path, float *params, size_t n, char *err, size_t errlen) {
    return ckpt_read_floats(path, CKPT_HEADER_BYTES, params, n, 1, err, errlen);
}

static inline int ckpt_write_state(const char *path, const TrainState *s, const float *m, const float *v, size_t n,
                                   char *err, size_t errlen) {
    int h[256] = {0};
    h[0] = CKPT_STATE_MAGIC; h[1] = CKPT_STATE_VERSION; h[2] = s->step; h[3] = s->shard;
    h[4] = (int)(s->pos & 0x7fffffff); h[5] = (int)(s->pos >> 31);
    h[6] = (int)(s->rng & 0xffffffff); h[7] = (int)(s->rng >> 32);
    h[8] = (int)(n & 0x7fffffff); h[9] = (int)(n >> 31);
    h[10] = (int)(s->noise_rng & 0xffffffff); h[11] = (int)(s->noise_rng >> 32);
    return ckpt_write_atomic(path, h, m, n, v, n, err, errlen);
}

// Reads a state file for a model of n parameters: the train state, and the moments into mv [2n] (m, then v).
static inline int ckpt_read_state(const char *path, TrainState *s, float *mv, size_t n, char *err, size_t errlen) {
    int h[256];
    if (ckpt_read_header(path, h, err, errlen)) return -1;
    if (h[0] != CKPT_STATE_MAGIC || h[1] < 1 || h[1] > CKPT_STATE_VERSION) {
        snprintf(err, errlen, "%s: not a natsl optimizer state file (magic %d, version %d)", path, h[0], h[1]);
        return -1;
    }
    size_t held = (size_t)(uint32_t)h[8] | ((size_t)(uint32_t)h[9] << 31);
    if (held != n) {
        snprintf(err, errlen, "%s: state holds %zu parameters, the model has %zu", path, held, n);
        return -1;
    }
    s->step = h[2]; s->shard = h[3];
    s->pos = (size_t)(uint32_t)h[4] | ((size_t)(uint32_t)h[5] << 31);
    s->rng = (uint64_t)(uint32_t)h[6] | ((uint64_t)(uint32_t)h[7] << 32);
    s->noise_rng = h[1] >= 2 ? (uint64_t)(uint32_t)h[10] | ((uint64_t)(uint32_t)h[11] << 32) : 0;
    return ckpt_read_floats(path, CKPT_HEADER_BYTES, mv, 2 * n, 1, err, errlen);
}

#endif
