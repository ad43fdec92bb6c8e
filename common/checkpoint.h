// Checkpoint files of natsl.c, shared by train_natsl.c and train_natsl.cu (either program loads the
// other's): a header of 256 int32 followed by float32 arrays.
//   model_%08d.bin  the config (header below) and the parameters in param_tensors order
//   state_%08d.bin  [magic, version, step, shard, position lo31, hi, RNG lo32, hi32, parameter count lo31, hi,
//                   model fingerprint lo32, hi32, Gumbel noise RNG lo32, hi32 (version 2), ranks, ZeRO stage (version
//                   3)], then AdamW's first and second moments (version 1 files hold no Gumbel noise stream and load
//                   with noise_rng = 0: the driver seeds it; a fingerprint of 0: the file holds none). A run of
//                   several GPUs with -z 1 writes no moments here: each rank writes its shard of them to
//   zero1_%08d_r%03d.bin  [magic, version, step, rank, ranks, count lo31, hi, model fingerprint lo32, hi32], then
//                   that rank's first and second moments (doc/model.md §9.4 says which parameters a rank keeps),
//                   and rank 0 writes the state file last, once every rank has written its shard: a state file
//                   marks a complete checkpoint.
// (the -D comparison dump has its own file, common/dump.h). Writes are atomic: the data goes to PATH.tmp, is flushed to disk, and only then
// renamed over PATH, so a killed run never leaves a half-written checkpoint under the real name.
// Every function returns 0, or -1 with a one-line message "PATH: problem" in err.
#ifndef NATSL_CHECKPOINT_H
#define NATSL_CHECKPOINT_H

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <stdint.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include "config.h"
#include "fileio.h"
#include "train_util.h" // is_finite

#define CKPT_HEADER_BYTES (256 * sizeof(int))

// After a rename the new name is only durable once the directory holding it is synced.
static inline int fsync_parent_dir(const char *path, char *err, size_t errlen) {
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash) strcpy(dir, ".");
    else if (slash == dir) dir[1] = 0;
    else *slash = 0;
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) { snprintf(err, errlen, "%s: cannot open the directory to sync it (%s)", dir, strerror(errno)); return -1; }
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    if (rc) { snprintf(err, errlen, "%s: directory fsync failed (%s)", dir, strerror(e)); return -1; }
    return 0;
}

static inline int ckpt_write_atomic(const char *path, const int *header, const float *a, size_t na,
                                    const float *b, size_t nb, char *err, size_t errlen) {
    char tmp[4096];
    static const float nothing[1] = {0}; // a header-only file: fwrite takes no NULL, even for 0 values
    if (!a) { a = nothing; na = 0; }
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopen_regular(tmp, "wb", "a checkpoint file", err, errlen);
    if (!f) return -1;
    int ok = fwrite(header, sizeof(int), 256, f) == 256 && fwrite(a, sizeof(float), na, f) == na &&
             (!b || fwrite(b, sizeof(float), nb, f) == nb);
    ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
    ok = (fclose(f) == 0) && ok;
    if (!ok) { snprintf(err, errlen, "%s: write failed (%s)", tmp, strerror(errno)); remove(tmp); return -1; }
    if (rename(tmp, path)) { snprintf(err, errlen, "%s: cannot rename from %s (%s)", path, tmp, strerror(errno)); remove(tmp); return -1; }
    return fsync_parent_dir(path, err, errlen);
}

static inline int ckpt_read_header(const char *path, int *header, char *err, size_t errlen) {
    FILE *f = fopen_regular(path, "rb", "a checkpoint file", err, errlen);
    if (!f) return -1;
    size_t n = fread(header, sizeof(int), 256, f);
    fclose(f);
    if (n != 256) { snprintf(err, errlen, "%s: file too short for a checkpoint header (%zu of 1024 bytes)", path, n * sizeof(int)); return -1; }
    return 0;
}

// Reads n floats at byte offset `offset`; with exact, the file must end right after them.
static inline int ckpt_read_floats(const char *path, size_t offset, float *out, size_t n, int exact, char *err, size_t errlen) {
    FILE *f = fopen_regular(path, "rb", "a checkpoint file", err, errlen);
    if (!f) return -1;
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

// The file must be exactly the header and n floats (checked before anything is allocated for it).
static inline int ckpt_check_size(const char *path, size_t n, char *err, size_t errlen) {
    struct stat sb;
    if (stat(path, &sb)) { snprintf(err, errlen, "%s: cannot stat (%s)", path, strerror(errno)); return -1; }
    unsigned long long want = CKPT_HEADER_BYTES + (unsigned long long)n * sizeof(float);
    if ((unsigned long long)sb.st_size != want) {
        snprintf(err, errlen, "%s: %lld bytes, expected %llu for its header's config (truncated or wrong file?)", path,
                 (long long)sb.st_size, want);
        return -1;
    }
    return 0;
}

// Index of the first NaN or Inf among n floats, or n.
static inline size_t ckpt_first_nonfinite(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) if (!is_finite(x[i])) return i;
    return n;
}

// ----------------------------------------------------------------------------------------------
// the model file's header: magic, version, the config, the parameter count

#define CKPT_MODEL_MAGIC 20261122
#define CKPT_STATE_MAGIC 20261123
#define CKPT_VERSION 1
#define CKPT_STATE_VERSION 3 // 2: + the Gumbel noise stream (§7.2); 3: + ranks and ZeRO stage; 1 and 2 are still read
#define CKPT_ZERO_MAGIC 20261125

// header layout: 256 int32
//  [0] magic [1] version [2] D [3] L [4] H [5] dk [6] dv [7] Ha [8] F [9] V [10] Vp [11] rope
//  [12] chunk size [13] parameter count (low 31 bits) [14] parameter count (high bits) [15] the gated norm's gate
//  activation (0 silu, 1 sigmoid; config.h GATE_*): a reserved 0 in the files written before it, which so load as silu
//  (the paper's), and a silu model's header (and fingerprint) is the same as before
//  [16] the H layers' slots per head m (§15; 0 without H layers)
//  [32..] pattern, one char per int  [96..] the H layers' windows, one per layer (0 for the other layers): a model
//  without H layers has the header it had before them
static inline void config_to_header(const Config *c, size_t nparams, int *h) {
    memset(h, 0, 256 * sizeof(int));
    h[0] = CKPT_MODEL_MAGIC; h[1] = CKPT_VERSION;
    h[2] = c->D; h[3] = c->L; h[4] = c->H; h[5] = c->dk; h[6] = c->dv; h[7] = c->Ha; h[8] = c->F;
    h[9] = c->V; h[10] = c->Vp; h[11] = c->rope; h[12] = NATSL_CHUNK;
    h[13] = (int)(nparams & 0x7fffffff); h[14] = (int)(nparams >> 31); h[15] = c->gate_act;
    h[16] = c->nha_m;
    for (int l = 0; l < c->L; l++) { h[32 + l] = c->pattern[l]; h[96 + l] = c->nha_w[l]; }
}

static inline int config_from_header(Config *c, const int *h, const char *path, char *err, size_t errlen) {
    if (h[0] != CKPT_MODEL_MAGIC) { snprintf(err, errlen, "%s: not a natsl model checkpoint (bad magic %d)", path, h[0]); return -1; }
    if (h[1] != CKPT_VERSION) { snprintf(err, errlen, "%s: checkpoint version %d, this program reads %d", path, h[1], CKPT_VERSION); return -1; }
    if (h[12] != NATSL_CHUNK) { snprintf(err, errlen, "%s: chunk size %d, this program uses %d", path, h[12], NATSL_CHUNK); return -1; }
    memset(c, 0, sizeof(*c));
    c->D = h[2]; c->L = h[3]; c->H = h[4]; c->dk = h[5]; c->dv = h[6]; c->Ha = h[7]; c->F = h[8];
    c->V = h[9]; c->Vp = h[10]; c->rope = h[11]; c->gate_act = h[15]; c->nha_m = h[16];
    if (c->L <= 0 || c->L > NATSL_MAX_LAYERS) { snprintf(err, errlen, "%s: bad layer count %d", path, c->L); return -1; }
    for (int l = 0; l < c->L; l++) {
        if (h[32 + l] < 0 || h[32 + l] > 127 || !is_layer_kind((char)h[32 + l])) {
            snprintf(err, errlen, "%s: layer %d has kind code %d in the header; layers are G, A, N, S or H", path, l, h[32 + l]);
            return -1;
        }
        c->pattern[l] = (char)h[32 + l];
        c->nha_w[l] = h[96 + l];
    }
    for (int i = 17; i < 256; i++)
        if ((i < 32 || i >= 32 + c->L) && (i < 96 || i >= 96 + c->L) && h[i] != 0) {
            snprintf(err, errlen, "%s: header field %d is %d, must be 0 (corrupt or from another program)", path, i, h[i]);
            return -1;
        }
    char why[256];
    if (config_check(c, why, sizeof(why))) { snprintf(err, errlen, "%s: %s", path, why); return -1; }
    if (h[13] < 0 || h[14] < 0) { snprintf(err, errlen, "%s: negative parameter count in the header", path); return -1; }
    size_t total, want = (size_t)h[13] | ((size_t)h[14] << 31);
    ParamTensor t[NATSL_MAX_TENSORS];
    param_tensors(c, t, &total);
    if (total != want) { snprintf(err, errlen, "%s: header says %zu parameters, its config has %zu", path, want, total); return -1; }
    return 0;
}

// ---- the two files, from and into host float32 arrays -----------------------------------------------

// What a resume restores. model_fp: the fingerprint of the model's config (config_fingerprint), set before a
// save; after a load, what the file holds (0: the file holds none, and none is checked). noise_rng: the
// §7.2 Gumbel noise stream.
typedef struct {
    int step; uint64_t rng; int shard; size_t pos; uint64_t model_fp; uint64_t noise_rng;
    int world, zero; // the ranks that wrote it and their ZeRO stage (1: the moments are in the ranks' zero1_ files)
} TrainState;

static inline int ckpt_write_model(const char *path, const Config *c, const float *params, size_t n, char *err, size_t errlen) {
    int h[256];
    config_to_header(c, n, h);
    return ckpt_write_atomic(path, h, params, n, NULL, 0, err, errlen);
}

// The config of a model file (checked against the file's parameter count and size).
static inline int ckpt_read_model_config(const char *path, Config *c, char *err, size_t errlen) {
    int h[256];
    if (ckpt_read_header(path, h, err, errlen)) return -1;
    if (config_from_header(c, h, path, err, errlen)) return -1;
    size_t n = (size_t)h[13] | ((size_t)h[14] << 31);
    return ckpt_check_size(path, n, err, errlen);
}
// The parameters; a NaN or Inf among them is refused (a model trained into NaN must not load silently).
static inline int ckpt_read_model_params(const char *path, float *params, size_t n, char *err, size_t errlen) {
    if (ckpt_read_floats(path, CKPT_HEADER_BYTES, params, n, 1, err, errlen)) return -1;
    size_t i = ckpt_first_nonfinite(params, n);
    if (i < n) {
        uint32_t bits;
        memcpy(&bits, &params[i], 4); // (no x != x: -ffast-math folds it to false)
        snprintf(err, errlen, "%s: parameter %zu of %zu is %s", path, i, n, bits & 0x7fffff ? "NaN" : "infinite");
        return -1;
    }
    return 0;
}

// A fingerprint of a model's config (its header), kept in the state file so that a state is only ever
// loaded with the model it was written with.
static inline uint64_t config_fingerprint(const Config *c, size_t nparams) {
    int h[256];
    config_to_header(c, nparams, h);
    uint64_t x = 0xcbf29ce484222325ull; // FNV-1a over the header's bytes
    const unsigned char *b = (const unsigned char *)h;
    for (size_t i = 0; i < sizeof(h); i++) { x ^= b[i]; x *= 0x100000001b3ull; }
    return x ? x : 1;
}

// The n first and n second moments after the header into mv [2n]: the file must hold exactly them, every one finite and
// the second not negative (state files and ZeRO-1 shards).
static inline int ckpt_read_moments(const char *path, float *mv, size_t n, char *err, size_t errlen) {
    if (ckpt_check_size(path, 2 * n, err, errlen)) return -1;
    if (ckpt_read_floats(path, CKPT_HEADER_BYTES, mv, 2 * n, 1, err, errlen)) return -1;
    for (size_t i = 0; i < 2 * n; i++)
        if (!is_finite(mv[i]) || (i >= n && mv[i] < 0)) {
            snprintf(err, errlen, "%s: %s moment %zu of %zu is %g (must be finite%s)", path, i < n ? "first" : "second",
                     i % n, n, (double)mv[i], i < n ? "" : " and not negative");
            return -1;
        }
    return 0;
}

static inline int ckpt_write_state(const char *path, const TrainState *s, const float *m, const float *v, size_t n,
                                   char *err, size_t errlen) {
    int h[256] = {0};
    h[10] = (int)(s->model_fp & 0xffffffff); h[11] = (int)(s->model_fp >> 32);
    h[12] = (int)(s->noise_rng & 0xffffffff); h[13] = (int)(s->noise_rng >> 32);
    h[0] = CKPT_STATE_MAGIC; h[1] = CKPT_STATE_VERSION; h[2] = s->step; h[3] = s->shard;
    h[4] = (int)(s->pos & 0x7fffffff); h[5] = (int)(s->pos >> 31);
    h[6] = (int)(s->rng & 0xffffffff); h[7] = (int)(s->rng >> 32);
    h[8] = (int)(n & 0x7fffffff); h[9] = (int)(n >> 31);
    h[14] = s->world > 0 ? s->world : 1; h[15] = s->zero;
    if (s->zero) return ckpt_write_atomic(path, h, NULL, 0, NULL, 0, err, errlen); // the moments are in the shards
    return ckpt_write_atomic(path, h, m, n, v, n, err, errlen);
}

// One rank's shard of the moments (-z 1): the n moments it keeps, m then v.
static inline int ckpt_write_zero_shard(const char *path, int step, int rank, int world, uint64_t model_fp,
                                        const float *m, const float *v, size_t n, char *err, size_t errlen) {
    int h[256] = {0};
    h[0] = CKPT_ZERO_MAGIC; h[1] = 1; h[2] = step; h[3] = rank; h[4] = world;
    h[5] = (int)(n & 0x7fffffff); h[6] = (int)(n >> 31);
    h[7] = (int)(model_fp & 0xffffffff); h[8] = (int)(model_fp >> 32);
    return ckpt_write_atomic(path, h, m, n, v, n, err, errlen);
}

// Reads rank `rank`'s shard of `world` at `step` (n moments, into mv [2n]); every header field is checked against
// what the run expects, the moments must be finite and the second not negative.
static inline int ckpt_read_zero_shard(const char *path, int step, int rank, int world, uint64_t model_fp, float *mv,
                                       size_t n, char *err, size_t errlen) {
    int h[256];
    if (ckpt_read_header(path, h, err, errlen)) return -1;
    if (h[0] != CKPT_ZERO_MAGIC || h[1] != 1) {
        snprintf(err, errlen, "%s: not a natsl ZeRO-1 moment shard (magic %d, version %d)", path, h[0], h[1]);
        return -1;
    }
    size_t held = (size_t)(uint32_t)h[5] | ((size_t)(uint32_t)h[6] << 31);
    uint64_t fp = (uint64_t)(uint32_t)h[7] | ((uint64_t)(uint32_t)h[8] << 32);
    if (h[2] != step || h[3] != rank || h[4] != world || held != n || fp != model_fp) {
        snprintf(err, errlen, "%s: holds step %d, rank %d of %d, %zu moments, model %016llx; this run needs step %d, "
                 "rank %d of %d, %zu moments, model %016llx", path, h[2], h[3], h[4], held, (unsigned long long)fp, step,
                 rank, world, n, (unsigned long long)model_fp);
        return -1;
    }
    for (int i = 9; i < 256; i++)
        if (h[i]) { snprintf(err, errlen, "%s: header field %d is %d, must be 0 (corrupt file)", path, i, h[i]); return -1; }
    return ckpt_read_moments(path, mv, n, err, errlen);
}

// Reads a state file for a model of n parameters: the train state, and the moments into mv [2n] (m, then
// v). Every header field is checked: step >= 1, shard and position not negative, RNG state not 0 (a fixed
// point of xorshift), the parameter count, the rest 0 but the model fingerprint and the noise stream; the moments must be finite
// and the second moments not negative. What the run adds (the fingerprint against the model loaded, the
// step against -x and the file name, the shard and position against the data) is checked by
// resume_check_state and dataloader_seek.
static inline int ckpt_read_state(const char *path, TrainState *s, float *mv, size_t n, char *err, size_t errlen) {
    int h[256];
    if (ckpt_read_header(path, h, err, errlen)) return -1;
    if (h[0] != CKPT_STATE_MAGIC || h[1] < 1 || h[1] > CKPT_STATE_VERSION) {
        snprintf(err, errlen, "%s: not a natsl optimizer state file (magic %d, version %d)", path, h[0], h[1]);
        return -1;
    }
    if (h[8] < 0 || h[9] < 0) { snprintf(err, errlen, "%s: negative parameter count in the header", path); return -1; }
    size_t held = (size_t)(uint32_t)h[8] | ((size_t)(uint32_t)h[9] << 31);
    if (held != n) {
        snprintf(err, errlen, "%s: state holds %zu parameters, the model has %zu", path, held, n);
        return -1;
    }
    for (int i = h[1] >= 3 ? 16 : h[1] >= 2 ? 14 : 12; i < 256; i++) // 2: the noise stream in 12-13; 3: ranks, ZeRO
        if (h[i] != 0) {
            snprintf(err, errlen, "%s: header field %d is %d, must be 0 (corrupt or from another program)", path, i, h[i]);
            return -1;
        }
    if (h[2] < 1 || h[2] == 0x7fffffff) { snprintf(err, errlen, "%s: step %d out of range (1 to 2^31-2)", path, h[2]); return -1; }
    if (h[3] < 0) { snprintf(err, errlen, "%s: shard index %d is negative", path, h[3]); return -1; }
    if (h[4] < 0 || h[5] < 0) { snprintf(err, errlen, "%s: negative data position in the header", path); return -1; }
    s->step = h[2]; s->shard = h[3];
    s->pos = (size_t)(uint32_t)h[4] | ((size_t)(uint32_t)h[5] << 31);
    s->rng = (uint64_t)(uint32_t)h[6] | ((uint64_t)(uint32_t)h[7] << 32);
    s->model_fp = (uint64_t)(uint32_t)h[10] | ((uint64_t)(uint32_t)h[11] << 32);
    s->noise_rng = h[1] >= 2 ? (uint64_t)(uint32_t)h[12] | ((uint64_t)(uint32_t)h[13] << 32) : 0;
    if (s->rng == 0) { snprintf(err, errlen, "%s: RNG state 0 (xorshift would emit only zeros): corrupt file", path); return -1; }
    s->world = h[1] >= 3 ? h[14] : 1;
    s->zero = h[1] >= 3 ? h[15] : 0;
    if (s->world < 1 || s->zero < 0 || s->zero > 1 || (s->zero && s->world < 2)) {
        snprintf(err, errlen, "%s: %d ranks with ZeRO stage %d in the header: corrupt file", path, s->world, s->zero);
        return -1;
    }
    if (s->zero) return ckpt_check_size(path, 0, err, errlen); // the moments are in the ranks' shards
    return ckpt_read_moments(path, mv, n, err, errlen);
}

// ---- a checkpoint against the run ------------------------------------------------------------------

// The model (from a preset, -e FILE or a resume) against what the run feeds it: token ids below V, the data's
// vocabulary (its decoding table `vocab_src`: a data set's tokenizer.bin, or GPT-2's), so the model's V must be V.
static inline int check_model_for_data(const Config *c, int V, const char *vocab_src, const char *what, char *err, size_t errlen) {
    if (c->V != V) {
        snprintf(err, errlen, "%s: vocabulary V=%d, but the data's is V=%d (%s)", what, c->V, V, vocab_src);
        return -1;
    }
    return 0;
}

// On resume the model comes from the checkpoint (the model file `path`); -e, -a and -C, when given, must describe the
// same model (a preset for the data's vocabulary V).
static inline int resume_check_flags(const Config *ckpt, const TrainArgs *a, int V, const char *path, char *err, size_t errlen) {
    if (!a->init_given && !a->arch && !a->gate_act && !a->nha_window && !a->nha_slots) return 0;
    Config c;
    if (config_from_preset(&c, a->init_from, V) == 0) {
        if (a->arch && config_set_pattern(&c, a->arch, err, errlen)) return -1;
        if (a->gate_act && config_set_gate_act(&c, a->gate_act, err, errlen)) return -1;
        if ((a->nha_window || a->nha_slots) && config_set_nha(&c, a->nha_window, a->nha_slots, err, errlen)) return -1;
    } else if (ckpt_read_model_config(a->init_from, &c, err, errlen)) return -1;
    else if (a->arch) { snprintf(err, errlen, "-a is ignored with -e FILE: drop it"); return -1; }
    else if (a->gate_act) { snprintf(err, errlen, "-C is ignored with -e FILE: drop it"); return -1; }
    else if (a->nha_window || a->nha_slots) { snprintf(err, errlen, "-W and -U are ignored with -e FILE: drop them"); return -1; }
    if (memcmp(&c, ckpt, sizeof(c))) {
        snprintf(err, errlen, "-y 1: the checkpoint's model %s (D=%d L=%d pattern %s rope %d gate %s) is not the one "
                 "-e/-a/-C describe (D=%d L=%d pattern %s rope %d gate %s): drop -e/-a/-C to resume it", path, ckpt->D,
                 ckpt->L, ckpt->pattern, ckpt->rope, gate_act_name(ckpt->gate_act), c.D, c.L, c.pattern, c.rope,
                 gate_act_name(c.gate_act));
        return -1;
    }
    return 0;
}

// A state loaded for a resume against the model loaded with it and the run: the fingerprint of the model's
// config, the step in the file name, and -x (a run that has nothing left to train is refused).
static inline int resume_check_state(const TrainState *s, const Config *c, size_t nparams, int file_step, int max_steps,
                                     const char *path, char *err, size_t errlen) {
    uint64_t fp = config_fingerprint(c, nparams);
    if (s->model_fp != 0 && s->model_fp != fp) {
        snprintf(err, errlen, "%s: written for a model with another config (fingerprint %016llx) than the model file "
                 "of that step (%016llx): not a pair", path, (unsigned long long)s->model_fp, (unsigned long long)fp);
        return -1;
    }
    if (s->step != file_step) {
        snprintf(err, errlen, "%s: holds step %d, its name says %d", path, s->step, file_step);
        return -1;
    }
    if (s->step >= max_steps) {
        snprintf(err, errlen, "%s: the run is at step %d and -x is %d: nothing left to train (give a larger -x)", path,
                 s->step, max_steps);
        return -1;
    }
    return 0;
}

#endif
