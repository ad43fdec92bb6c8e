/*
 * dataloader.h — reads llm.c-format token shards into (inputs, targets) batches.
 * Header-only, C99, libc + POSIX glob.h and sys/stat.h.
 *
 * Shard format (written by the scripts in dev/data/):
 *   header: 256 little-endian int32 = [20240520 magic, 1 version, number of tokens N, 0, ...]
 *   then N tokens, uint16 little-endian, each below the vocabulary size V given to dataloader_init (GPT-2's
 *   50257 for llm.c's shards; a data set with its own vocabulary keeps its decoding table, tokenizer.bin,
 *   beside its shards: dataloader_tokenizer_path finds it).
 *
 * A DataLoader walks the shards matched by a glob pattern in sorted order. Each batch takes the
 * next B*T+1 tokens at `pos` of the current shard: inputs = the first B*T, targets = the same
 * shifted by one (row b of the batch is tokens pos+b*T .. pos+b*T+T-1, its targets the tokens one
 * further). Then pos advances by B*T, so consecutive batches share one token at their seam.
 * When fewer than B*T+1 tokens remain, the next call moves on to the next shard at pos 0
 * (wrapping to shard 0 after the last one); leftover tokens at the end of a shard are skipped.
 * The pair (shard, pos) is the whole position: save it in a checkpoint and hand it back to
 * dataloader_seek to resume with exactly the same batches.
 *
 * Answer files (the recall tasks of dev/data/recall.py, doc/recall.md): a shard X.bin may have beside it X.ans (the
 * name with .bin replaced by .ans; other names get .ans appended) saying which of its tokens are answers:
 *   header: 256 little-endian int32 = [20261128 magic, 1 version, number of tokens N (the shard's), row length R,
 *           number of answers, 0, ...]
 *   then N bytes, one per token of the shard: 1 where the token is an answer, else 0.
 * The shard is rows of R tokens one after the other (plus a trailing token), so T must be R: each batch row is then
 * one data row. Either every shard has its answer file or none has. With them, each batch also fills
 * answers[i] = 1 where targets[i] is an answer; with mask_targets set (answer-only training), the targets that are
 * not answers become ANSWER_IGNORE (-1), which the cross-entropy skips.
 *
 * Checks: a match that is not a regular file (a FIFO, a directory) is refused at once (fopen_regular); init reads only the headers of all shards (magic, version, size consistent with the
 * token count, at least B*T+1 tokens); a shard's token ids are checked when the shard is
 * loaded. Every function returns 0, or -1 with a one-line "FILE: problem" message in err;
 * nothing here exits or aborts. Assumes a little-endian host (checked at init).
 */
#ifndef NATSL_DATALOADER_H
#define NATSL_DATALOADER_H

#include <errno.h>
#include <glob.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "fileio.h"

#define DATALOADER_MAGIC 20240520
#define DATALOADER_VERSION 1
#define DATALOADER_HEADER_BYTES 1024 /* 256 int32 */
#define ANSWERS_MAGIC 20261128
#define ANSWERS_VERSION 1
#define ANSWER_IGNORE (-1) /* a target the loss skips (doc/model.md §13.1) */

typedef struct {
    int B, T, vocab;                 /* every token id must be below vocab */
    char **files; int nfiles;        /* sorted glob matches */
    int shard; size_t pos;           /* current shard index and token position in it (the checkpointable state) */
    uint16_t *tokens; size_t ntok; int loaded_shard; /* the current shard, fully read into memory and validated */
    int *inputs, *targets;           /* B*T each */
    int has_answers;                 /* every shard has its answer file (X.ans): answers is filled with each batch */
    int mask_targets;                /* set by the caller (answer-only training): non-answer targets become ANSWER_IGNORE */
    unsigned char *ans_tokens;       /* the current shard's answer bytes, ntok of them */
    unsigned char *answers;          /* B*T: 1 where targets[i] is an answer (with has_answers) */
    size_t nbatches;                 /* the distinct batches of one pass over the shards (then it wraps around) */
} DataLoader;

static inline void dataloader_error_(char *err, size_t errlen, const char *fmt, ...) {
    if (!err || errlen == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

static inline int32_t dataloader_le32_(const unsigned char *p) {
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

/* Open a shard and check its header against the file size. On success returns the FILE
 * positioned at the first token and stores the token count in *ntok; else NULL and err. */
static inline FILE *dataloader_open_shard_(const char *path, size_t *ntok, char *err, size_t errlen) {
    FILE *f = fopen_regular(path, "rb", "a token shard", err, errlen);
    if (!f) return NULL;
    /* (declared up front: C++ compilers such as nvcc forbid a goto that skips an initialization) */
    unsigned char h[DATALOADER_HEADER_BYTES];
    int32_t magic, version, n;
    long size = -1, body;
    if (fseek(f, 0, SEEK_END) == 0) size = ftell(f);
    if (size < 0 || fseek(f, 0, SEEK_SET) != 0) {
        dataloader_error_(err, errlen, "%s: cannot determine the file size", path);
        goto fail;
    }
    if (size < DATALOADER_HEADER_BYTES || fread(h, 1, sizeof h, f) != sizeof h) {
        dataloader_error_(err, errlen, "%s: file is %ld bytes, shorter than the %d-byte header (truncated?)",
                          path, size, DATALOADER_HEADER_BYTES);
        goto fail;
    }
    magic = dataloader_le32_(h);
    version = dataloader_le32_(h + 4);
    n = dataloader_le32_(h + 8);
    if (magic != DATALOADER_MAGIC) {
        dataloader_error_(err, errlen, "%s: bad magic %ld in the header (expected %d): not an llm.c token shard",
                          path, (long)magic, DATALOADER_MAGIC);
        goto fail;
    }
    if (version != DATALOADER_VERSION) {
        dataloader_error_(err, errlen, "%s: unsupported version %ld in the header (expected %d: uint16 tokens)",
                          path, (long)version, DATALOADER_VERSION);
        goto fail;
    }
    body = size - DATALOADER_HEADER_BYTES; /* bytes after the header */
    if (n < 0 || body != 2L * n) {
        if (n >= 0 && body < 2L * n)
            dataloader_error_(err, errlen, "%s: header says %ld tokens but the file holds %ld (truncated?)",
                              path, (long)n, body / 2);
        else
            dataloader_error_(err, errlen, "%s: header says %ld tokens but the file has %ld bytes after the header",
                              path, (long)n, body);
        goto fail;
    }
    *ntok = (size_t)n;
    return f;
fail:
    fclose(f);
    return NULL;
}

/* Check that a shard can hold at least one batch. */
static inline int dataloader_check_size_(const DataLoader *d, const char *path, size_t ntok, char *err, size_t errlen) {
    size_t need = (size_t)d->B * (size_t)d->T + 1;
    if (ntok < need) {
        dataloader_error_(err, errlen, "%s: shard too small: %lu tokens, but B*T+1 = %lu are needed (B=%d, T=%d)",
                          path, (unsigned long)ntok, (unsigned long)need, d->B, d->T);
        return -1;
    }
    return 0;
}

/* The answer file of a shard: X.bin -> X.ans, any other name + ".ans". */
static inline void dataloader_answers_path(const char *shard, char *out, size_t outlen) {
    size_t n = strlen(shard);
    int bin = n >= 4 && !strcmp(shard + n - 4, ".bin");
    snprintf(out, outlen, "%.*s.ans", (int)(bin ? n - 4 : n), shard);
}

/* Open the answer file at path and check its header against the shard's token count ntok and the batch's row length
 * T. On success returns the FILE positioned at the first answer byte and the header's answer count in *nans. */
static inline FILE *dataloader_open_answers_(const char *path, size_t ntok, int T, long *nans, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        dataloader_error_(err, errlen, "%s: cannot open (%s)", path, strerror(errno));
        return NULL;
    }
    unsigned char h[DATALOADER_HEADER_BYTES];
    long size = -1;
    int32_t n, rowT;
    if (fseek(f, 0, SEEK_END) == 0) size = ftell(f);
    if (size < 0 || fseek(f, 0, SEEK_SET) != 0 || size < DATALOADER_HEADER_BYTES || fread(h, 1, sizeof h, f) != sizeof h) {
        dataloader_error_(err, errlen, "%s: shorter than the %d-byte header of an answer file (truncated?)", path,
                          DATALOADER_HEADER_BYTES);
        goto fail;
    }
    if (dataloader_le32_(h) != ANSWERS_MAGIC || dataloader_le32_(h + 4) != ANSWERS_VERSION) {
        dataloader_error_(err, errlen, "%s: not an answer file (magic %ld, version %ld; expected %d, %d)", path,
                          (long)dataloader_le32_(h), (long)dataloader_le32_(h + 4), ANSWERS_MAGIC, ANSWERS_VERSION);
        goto fail;
    }
    n = dataloader_le32_(h + 8);
    rowT = dataloader_le32_(h + 12);
    *nans = dataloader_le32_(h + 16);
    if (n < 0 || (size_t)n != ntok || size - DATALOADER_HEADER_BYTES != (long)n) {
        dataloader_error_(err, errlen, "%s: %ld answer bytes for a shard of %lu tokens (header says %ld)", path,
                          size - DATALOADER_HEADER_BYTES, (unsigned long)ntok, (long)n);
        goto fail;
    }
    if (rowT != T) {
        dataloader_error_(err, errlen, "%s: the data is rows of %ld tokens, but T = %d would cut them elsewhere (-t %ld)",
                          path, (long)rowT, T, (long)rowT);
        goto fail;
    }
    if (*nans < 0 || *nans > n) {
        dataloader_error_(err, errlen, "%s: header says %ld answers in %ld tokens", path, *nans, (long)n);
        goto fail;
    }
    return f;
fail:
    fclose(f);
    return NULL;
}

/* Read the answer bytes of the shard at `shard` (ntok tokens) into d->ans_tokens, checking every byte. */
static inline int dataloader_load_answers_(DataLoader *d, const char *shard, size_t ntok, char *err, size_t errlen) {
    char path[4096];
    long nans = 0, count = 0;
    dataloader_answers_path(shard, path, sizeof(path));
    FILE *f = dataloader_open_answers_(path, ntok, d->T, &nans, err, errlen);
    if (!f) return -1;
    unsigned char *buf = (unsigned char *)realloc(d->ans_tokens, ntok ? ntok : 1);
    if (!buf) {
        dataloader_error_(err, errlen, "%s: out of memory for %lu answer bytes", path, (unsigned long)ntok);
        fclose(f);
        return -1;
    }
    d->ans_tokens = buf;
    size_t got = fread(buf, 1, ntok, f);
    fclose(f);
    if (got != ntok) {
        dataloader_error_(err, errlen, "%s: read error at byte offset %lu", path, (unsigned long)(DATALOADER_HEADER_BYTES + got));
        return -1;
    }
    for (size_t i = 0; i < ntok; i++) {
        if (buf[i] > 1) {
            dataloader_error_(err, errlen, "%s: byte %u at offset %lu is not 0 or 1", path, (unsigned)buf[i],
                              (unsigned long)(DATALOADER_HEADER_BYTES + i));
            return -1;
        }
        count += buf[i];
    }
    if (count != nans) {
        dataloader_error_(err, errlen, "%s: header says %ld answers, the file marks %ld", path, nans, count);
        return -1;
    }
    return 0;
}

/* Read shard `s` fully into d->tokens and validate every token id (and its answer bytes, with has_answers). */
static inline int dataloader_load_shard_(DataLoader *d, int s, char *err, size_t errlen) {
    const char *path = d->files[s];
    size_t n = 0, got;
    uint16_t *buf;
    d->loaded_shard = -1; /* d->tokens is about to be overwritten */
    d->ntok = 0;
    FILE *f = dataloader_open_shard_(path, &n, err, errlen);
    if (!f) return -1;
    if (dataloader_check_size_(d, path, n, err, errlen) != 0) goto fail; /* the file may have changed since init */
    buf = (uint16_t *)realloc(d->tokens, n * sizeof(uint16_t));
    if (!buf) {
        dataloader_error_(err, errlen, "%s: out of memory for %lu tokens", path, (unsigned long)n);
        goto fail;
    }
    d->tokens = buf;
    got = fread(buf, sizeof(uint16_t), n, f);
    if (got != n) {
        dataloader_error_(err, errlen, "%s: read error at byte offset %lu", path,
                          (unsigned long)(DATALOADER_HEADER_BYTES + 2 * got));
        goto fail;
    }
    fclose(f);
    for (size_t i = 0; i < n; i++) {
        if (buf[i] >= d->vocab) {
            dataloader_error_(err, errlen, "%s: token %u at byte offset %lu is out of range (vocab %d)",
                              path, (unsigned)buf[i], (unsigned long)(DATALOADER_HEADER_BYTES + 2 * i), d->vocab);
            return -1;
        }
    }
    if (d->has_answers && dataloader_load_answers_(d, path, n, err, errlen)) return -1;
    d->ntok = n;
    d->loaded_shard = s;
    return 0;
fail:
    fclose(f);
    return -1;
}

/* Frees everything; safe on a zeroed or already freed DataLoader. */
static inline void dataloader_free(DataLoader *d) {
    for (int i = 0; i < d->nfiles; i++) free(d->files[i]);
    free(d->files);
    free(d->tokens);
    free(d->inputs);
    free(d->targets);
    free(d->ans_tokens);
    free(d->answers);
    memset(d, 0, sizeof *d);
    d->loaded_shard = -1;
}

/* glob returns the matching paths sorted by name (so *_000001.bin comes before *_000002.bin) */
static inline int dataloader_glob_(const char *pattern, glob_t *g, char *err, size_t errlen) {
    int rc = glob(pattern, 0, NULL, g);
    if (rc != 0) {
        dataloader_error_(err, errlen, rc == GLOB_NOMATCH ? "%s: no files match this pattern" : "%s: glob failed", pattern);
        if (rc != GLOB_NOMATCH) globfree(g);
        return -1;
    }
    return 0;
}

/* Whether the shards have answer files: all of them (has_answers = 1, each header checked against its shard and T),
 * none (0), or some (an error naming a shard without one). */
static inline int dataloader_find_answers_(DataLoader *d, char *err, size_t errlen) {
    char path[4096];
    int with = -1, without = -1;
    for (int i = 0; i < d->nfiles; i++) {
        struct stat sb;
        dataloader_answers_path(d->files[i], path, sizeof(path));
        if (stat(path, &sb) == 0) with = i;
        else without = i;
    }
    if (with < 0) return 0;
    if (without >= 0) {
        dataloader_answers_path(d->files[without], path, sizeof(path));
        dataloader_error_(err, errlen, "%s: missing (the answer file of %s), but %s has one: every shard needs its "
                          "answer file, or none", path, d->files[without], d->files[with]);
        return -1;
    }
    for (int i = 0; i < d->nfiles; i++) {
        size_t n = 0;
        long nans;
        FILE *f = dataloader_open_shard_(d->files[i], &n, err, errlen);
        if (!f) return -1;
        fclose(f);
        dataloader_answers_path(d->files[i], path, sizeof(path));
        if (!(f = dataloader_open_answers_(path, n, d->T, &nans, err, errlen))) return -1;
        fclose(f);
    }
    d->has_answers = 1;
    return 0;
}

static inline int dataloader_init(DataLoader *d, const char *pattern, int B, int T, int vocab, char *err, size_t errlen) {
    memset(d, 0, sizeof *d);
    d->loaded_shard = -1;
    const uint16_t one = 1;
    if (*(const unsigned char *)&one != 1) {
        dataloader_error_(err, errlen, "%s: this dataloader needs a little-endian host", pattern);
        return -1;
    }
    if (B <= 0 || T <= 0 || vocab <= 0) {
        dataloader_error_(err, errlen, "%s: B=%d, T=%d and the vocabulary %d must be positive", pattern, B, T, vocab);
        return -1;
    }
    d->B = B;
    d->T = T;
    d->vocab = vocab;

    glob_t g;
    if (dataloader_glob_(pattern, &g, err, errlen)) return -1;
    d->files = (char **)calloc(g.gl_pathc, sizeof(char *));
    if (!d->files) goto oom;
    for (size_t i = 0; i < g.gl_pathc; i++) {
        size_t len = strlen(g.gl_pathv[i]);
        d->files[i] = (char *)malloc(len + 1);
        if (!d->files[i]) goto oom;
        memcpy(d->files[i], g.gl_pathv[i], len + 1);
        d->nfiles++;
    }
    globfree(&g);

    /* headers of every shard, so a bad file is reported now and not hours into training */
    for (int i = 0; i < d->nfiles; i++) {
        size_t n = 0;
        FILE *f = dataloader_open_shard_(d->files[i], &n, err, errlen);
        if (!f) goto fail;
        fclose(f);
        if (dataloader_check_size_(d, d->files[i], n, err, errlen) != 0) goto fail;
        d->nbatches += (n - 1) / ((size_t)B * T);
    }
    if (dataloader_find_answers_(d, err, errlen)) goto fail;
    d->inputs = (int *)malloc((size_t)B * T * sizeof(int));
    d->targets = (int *)malloc((size_t)B * T * sizeof(int));
    d->answers = (unsigned char *)calloc((size_t)B * T, 1);
    if (!d->inputs || !d->targets || !d->answers) {
        dataloader_error_(err, errlen, "%s: out of memory for B*T = %lu", pattern, (unsigned long)((size_t)B * T));
        goto fail;
    }
    if (dataloader_load_shard_(d, 0, err, errlen) != 0) goto fail;
    return 0;
oom:
    globfree(&g);
    dataloader_error_(err, errlen, "%s: out of memory", pattern);
fail:
    dataloader_free(d);
    return -1;
}

/* The next batch into inputs/targets (copy = 1), or past it without reading its tokens (copy = 0: the batches of
 * the other ranks of a job of several processes, common/dist.h). */
static inline int dataloader_advance_(DataLoader *d, int copy, char *err, size_t errlen) {
    if (d->nfiles == 0) {
        dataloader_error_(err, errlen, "dataloader: not initialized");
        return -1;
    }
    size_t BT = (size_t)d->B * d->T;
    if (d->loaded_shard != d->shard && dataloader_load_shard_(d, d->shard, err, errlen) != 0) return -1;
    if (d->pos + BT + 1 > d->ntok) { /* not enough left for a batch: next shard, wrapping around */
        int next = (d->shard + 1) % d->nfiles;
        if (next != d->loaded_shard && dataloader_load_shard_(d, next, err, errlen) != 0) return -1;
        d->shard = next;
        d->pos = 0;
    }
    const uint16_t *p = d->tokens + d->pos;
    const unsigned char *ans = d->has_answers ? d->ans_tokens + d->pos + 1 : NULL; /* the targets' answer bytes */
    for (size_t i = 0; copy && i < BT; i++) {
        d->inputs[i] = p[i];
        d->targets[i] = p[i + 1];
        if (ans) d->answers[i] = ans[i];
        if (ans && d->mask_targets && !ans[i]) d->targets[i] = ANSWER_IGNORE;
    }
    d->pos += BT;
    return 0;
}
static inline int dataloader_next_batch(DataLoader *d, char *err, size_t errlen) { return dataloader_advance_(d, 1, err, errlen); }
static inline int dataloader_skip_batch(DataLoader *d, char *err, size_t errlen) { return dataloader_advance_(d, 0, err, errlen); }

/* Continue from a saved (shard, pos); pos may be anything from 0 to the shard's token count. */
static inline int dataloader_seek(DataLoader *d, int shard, size_t pos, char *err, size_t errlen) {
    if (d->nfiles == 0) {
        dataloader_error_(err, errlen, "dataloader: not initialized");
        return -1;
    }
    if (shard < 0 || shard >= d->nfiles) {
        dataloader_error_(err, errlen, "%s: cannot seek to shard %d: the pattern matched %d shard(s)",
                          d->files[0], shard, d->nfiles);
        return -1;
    }
    if (d->loaded_shard != shard && dataloader_load_shard_(d, shard, err, errlen) != 0) return -1;
    if (pos > d->ntok) {
        dataloader_error_(err, errlen, "%s: cannot seek to token position %lu: the shard holds %lu tokens",
                          d->files[shard], (unsigned long)pos, (unsigned long)d->ntok);
        return -1;
    }
    d->shard = shard;
    d->pos = pos;
    return 0;
}

/* How many of n targets are scored (not ANSWER_IGNORE): the count the loss is a mean over (doc/model.md §13.1). */
static inline int targets_scored(const int *targets, int n) {
    int k = 0;
    for (int i = 0; i < n; i++) k += targets[i] != ANSWER_IGNORE;
    return k;
}

/* How many batches of B*T one pass over the shards gives (the next batch after them is shard 0's first again), or -1
 * with the error of a shard that cannot be read. */
static inline long dataloader_batches(const DataLoader *d, char *err, size_t errlen) {
    long n = 0;
    for (int i = 0; i < d->nfiles; i++) {
        size_t ntok = 0;
        FILE *f = dataloader_open_shard_(d->files[i], &ntok, err, errlen);
        if (!f) return -1;
        fclose(f);
        n += (long)((ntok - 1) / ((size_t)d->B * d->T));
    }
    return n;
}

/* Back to the first batch of shard 0 (loaded again on the next call if needed). */
static inline void dataloader_reset(DataLoader *d) {
    d->shard = 0;
    d->pos = 0;
}

/* Where the decoding table of the shards a pattern matches would be: DIR/tokenizer.bin, DIR the directory of
 * the first match. 1 when that file exists (a data set with its own vocabulary), 0 when not (llm.c's shards:
 * GPT-2 ids), -1 when nothing matches. */
static inline int dataloader_tokenizer_path(const char *pattern, char *out, size_t outlen, char *err, size_t errlen) {
    glob_t g;
    if (dataloader_glob_(pattern, &g, err, errlen)) return -1;
    const char *first = g.gl_pathv[0], *slash = strrchr(first, '/');
    snprintf(out, outlen, "%.*stokenizer.bin", slash ? (int)(slash - first + 1) : 0, first);
    globfree(&g);
    struct stat sb;
    return stat(out, &sb) == 0;
}

#endif /* NATSL_DATALOADER_H */
