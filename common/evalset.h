/*
 * evalset.h — standard downstream evaluation (HellaSwag, PIQA, ARC, WinoGrande, OpenBookQA, LAMBADA): the eval file
 * format, its reader, the rows the model scores, and the scoring math over per-token losses. Header-only, C99 (and
 * C++ for nvcc), libc + POSIX fileno/fstat. The driver that runs the model over the rows is evalset_run in
 * common/train_main.h; doc/eval.md has the commands and what the numbers mean.
 *
 * Eval file (written by dev/data/olmo_eval.py), little-endian:
 *   header: 256 int32 = [20261128 magic, 1 version, kind (0 = multiple choice, 1 = greedy), number of examples N,
 *                        number of uint16 words W in the body, vocabulary size V of the ids (GPT-2: 50257),
 *                        task name in 32 bytes (int32 6..13, NUL-padded), 0, ...]
 *   body: W uint16 words, the N examples one after the other, each:
 *     C (choices, 1..16), K (contexts: 1 = one shared by every choice, or C = one per choice), label (0..C-1)
 *     K contexts:  length L (>= 1), then L token ids (< V)
 *     C choices:   length L (>= 1), the length in characters of the choice's text (>= 1), then L token ids (< V)
 *   A greedy file (LAMBADA: the target word after the passage) has C = 1 and label 0 in every example.
 *
 * Rows: choice c of an example is the token sequence x = context(c) ++ completion(c), n = |x| tokens; the model
 * reads x[0..n-2] and position t predicts x[t+1], so the completion's token j is predicted at position
 * ctx_len - 1 + j. A row holds n - 1 positions: an example is scored when every choice has n - 1 <= T, and
 * skipped (counted in EvalResult.skipped) otherwise.
 *
 * Scores (per example, over the choices' summed completion losses ℓ_c = Σ_j −log p(completion token j)):
 *   acc       argmin_c ℓ_c                     llm.c's acc (dev/data/hellaswag.py), OLMo's acc_raw
 *   acc_norm  argmin_c ℓ_c / tokens_c          llm.c's acc_norm (mean loss per completion token), OLMo's acc_per_token
 *   acc_char  argmin_c ℓ_c / characters_c      OLMo's acc_per_char (its primary metric for HellaSwag, PIQA,
 *                                              ARC-Challenge, OpenBookQA), the "acc_norm" of lm-evaluation-harness
 *   a tie goes to the lowest index; each is the fraction of scored examples whose prediction is the label.
 * Greedy files: acc = fraction of examples where every target token is the argmax of the model's logits at its
 * position (LAMBADA's accuracy); ppl = exp(mean over examples of ℓ), lm-evaluation-harness's LAMBADA perplexity.
 *
 * Every function that can fail returns 0, or -1 with a one-line "FILE: problem" message in err; nothing here exits.
 */
#ifndef NATSL_EVALSET_H
#define NATSL_EVALSET_H

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define EVALSET_MAGIC 20261128
#define EVALSET_VERSION 1
#define EVALSET_HEADER_BYTES 1024 /* 256 int32 */
#define EVALSET_MAX_CHOICES 16
enum { EVALSET_MC = 0, EVALSET_GREEDY = 1 };

typedef struct {
    uint32_t ctx, comp;              /* offsets of the context's and the completion's first token in EvalSet.words */
    int ctx_len, comp_len, chars;    /* their lengths in tokens; the completion text's length in characters */
} EvalChoice;

typedef struct {
    char task[33];
    int kind, n, nchoices, vocab;    /* EVALSET_MC or EVALSET_GREEDY; examples; choices in all; ids are below vocab */
    uint16_t *words;                 /* the file's body */
    EvalChoice *choice;              /* nchoices, example by example */
    int *first, *label;              /* example i has the choices first[i] .. first[i+1]-1 (first: n+1) and its label */
} EvalSet;

typedef struct {
    int kind, scored, skipped;       /* examples scored; examples left out for a row longer than T */
    double acc, acc_norm, acc_char;  /* multiple choice; a greedy file has acc only */
    double ppl;                      /* greedy: exp(mean target loss per example) */
} EvalResult;

static inline void evalset_error_(char *err, size_t errlen, const char *fmt, ...) {
    if (!err || errlen == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

static inline int32_t evalset_le32_(const unsigned char *p) {
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

static inline void evalset_free(EvalSet *e) {
    free(e->words); free(e->choice); free(e->first); free(e->label);
    memset(e, 0, sizeof *e);
}

/* Walks the body once: every count in range, every id below the vocabulary, nothing after the last example.
 * With e->choice allocated (second pass) it also records the choices. The number of choices into *nchoices. */
static inline int evalset_parse_(EvalSet *e, const char *path, uint32_t nwords, int *nchoices, char *err, size_t errlen) {
    const uint16_t *w = e->words;
    uint32_t p = 0;
    int nc = 0;
    for (int i = 0; i < e->n; i++) {
        uint32_t start = p;
        if (p + 3 > nwords) { evalset_error_(err, errlen, "%s: example %d runs past the end of the file (truncated?)", path, i); return -1; }
        int C = w[p], K = w[p + 1], label = w[p + 2];
        p += 3;
        if (C < 1 || C > EVALSET_MAX_CHOICES || (K != 1 && K != C) || label >= C || (e->kind == EVALSET_GREEDY && (C != 1 || label))) {
            evalset_error_(err, errlen, "%s: example %d (word %u): %d choices, %d contexts, label %d (expected 1..%d choices, "
                           "1 or one context per choice, a label below the choices%s)", path, i, start, C, K, label,
                           EVALSET_MAX_CHOICES, e->kind == EVALSET_GREEDY ? "; greedy: 1 choice, label 0" : "");
            return -1;
        }
        uint32_t ctx[EVALSET_MAX_CHOICES];
        int ctx_len[EVALSET_MAX_CHOICES];
        for (int k = 0; k < K + C; k++) { /* the contexts, then the choices */
            int is_ctx = k < K, head = is_ctx ? 1 : 2;
            if (p + head > nwords) { evalset_error_(err, errlen, "%s: example %d runs past the end of the file (truncated?)", path, i); return -1; }
            int L = w[p], chars = is_ctx ? 1 : w[p + 1];
            if (L < 1 || chars < 1) {
                evalset_error_(err, errlen, "%s: example %d: an empty %s", path, i, is_ctx ? "context" : "choice");
                return -1;
            }
            p += head;
            if (p + (uint32_t)L > nwords) { evalset_error_(err, errlen, "%s: example %d runs past the end of the file (truncated?)", path, i); return -1; }
            for (int j = 0; j < L; j++)
                if (w[p + j] >= e->vocab) {
                    evalset_error_(err, errlen, "%s: example %d: token %d at byte offset %lu is out of range (vocab %d)", path, i,
                                   (int)w[p + j], (unsigned long)EVALSET_HEADER_BYTES + 2ul * (p + j), e->vocab);
                    return -1;
                }
            if (is_ctx) { ctx[k] = p; ctx_len[k] = L; }
            else if (e->choice) {
                int c = k - K;
                EvalChoice *ch = &e->choice[nc + c];
                ch->ctx = ctx[K == 1 ? 0 : c]; ch->ctx_len = ctx_len[K == 1 ? 0 : c];
                ch->comp = p; ch->comp_len = L; ch->chars = chars;
            }
            p += L;
        }
        if (e->first) { e->first[i] = nc; e->label[i] = label; }
        nc += C;
    }
    if (p != nwords) {
        evalset_error_(err, errlen, "%s: %u words after the last of the %d examples (the header's counts disagree with the body)",
                       path, nwords - p, e->n);
        return -1;
    }
    if (e->first) e->first[e->n] = nc;
    *nchoices = nc;
    return 0;
}

/* Reads and checks an eval file written for a vocabulary of `vocab` tokens (the model's V). */
static inline int evalset_load(EvalSet *e, const char *path, int vocab, char *err, size_t errlen) {
    memset(e, 0, sizeof *e);
    unsigned char h[EVALSET_HEADER_BYTES];
    long size = -1;
    int32_t magic, version, nwords, nc = 0;
    struct stat sb;
    FILE *f = fopen(path, "rb");
    if (!f) { evalset_error_(err, errlen, "%s: cannot open (%s)", path, strerror(errno)); return -1; }
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        evalset_error_(err, errlen, "%s: not a regular file", path);
        fclose(f);
        return -1;
    }
    if (fseek(f, 0, SEEK_END) == 0) size = ftell(f);
    if (size < 0 || fseek(f, 0, SEEK_SET) != 0) {
        evalset_error_(err, errlen, "%s: cannot determine the file size", path);
        fclose(f);
        return -1;
    }
    if (size < EVALSET_HEADER_BYTES || fread(h, 1, sizeof h, f) != sizeof h) {
        evalset_error_(err, errlen, "%s: file is %ld bytes, shorter than the %d-byte header (truncated?)", path, size, EVALSET_HEADER_BYTES);
        fclose(f);
        return -1;
    }
    magic = evalset_le32_(h); version = evalset_le32_(h + 4); e->kind = evalset_le32_(h + 8);
    e->n = evalset_le32_(h + 12); nwords = evalset_le32_(h + 16); e->vocab = evalset_le32_(h + 20);
    memcpy(e->task, h + 24, 32);
    e->task[32] = 0;
    const char *problem = NULL;
    char why[200];
    if (magic != EVALSET_MAGIC) {
        snprintf(why, sizeof why, "bad magic %ld in the header (expected %d): not an eval file (dev/data/olmo_eval.py writes them)",
                 (long)magic, EVALSET_MAGIC);
        problem = why;
    } else if (version != EVALSET_VERSION) {
        snprintf(why, sizeof why, "unsupported version %ld in the header (expected %d)", (long)version, EVALSET_VERSION);
        problem = why;
    } else if (e->kind != EVALSET_MC && e->kind != EVALSET_GREEDY) {
        snprintf(why, sizeof why, "unknown kind %d in the header (0 = multiple choice, 1 = greedy)", e->kind);
        problem = why;
    } else if (e->n < 1 || nwords < 0 || !e->task[0]) {
        snprintf(why, sizeof why, "header has %d examples, %ld words, task name '%s' (expected at least 1 example and a name)",
                 e->n, (long)nwords, e->task);
        problem = why;
    } else if (size - EVALSET_HEADER_BYTES != 2L * nwords) {
        snprintf(why, sizeof why, "header says %ld words but the file holds %ld bytes after the header%s", (long)nwords,
                 size - EVALSET_HEADER_BYTES, size - EVALSET_HEADER_BYTES < 2L * nwords ? " (truncated?)" : "");
        problem = why;
    } else if (e->vocab != vocab) {
        snprintf(why, sizeof why, "token ids of a %d-token vocabulary, but the model's is %d tokens", e->vocab, vocab);
        problem = why;
    }
    if (!problem) {
        e->words = (uint16_t *)malloc(nwords ? 2 * (size_t)nwords : 1);
        if (!e->words) problem = "out of memory";
        else if (fread(e->words, 2, (size_t)nwords, f) != (size_t)nwords) problem = "read error";
    }
    fclose(f);
    if (problem) { evalset_error_(err, errlen, "%s: %s", path, problem); evalset_free(e); return -1; }
    for (int32_t i = 0; i < nwords; i++) { /* little-endian on any host */
        const unsigned char *b = (const unsigned char *)&e->words[i];
        e->words[i] = (uint16_t)(b[0] | b[1] << 8);
    }
    if (evalset_parse_(e, path, (uint32_t)nwords, &nc, err, errlen)) { evalset_free(e); return -1; }
    e->nchoices = nc;
    e->choice = (EvalChoice *)calloc((size_t)nc, sizeof(EvalChoice));
    e->first = (int *)calloc((size_t)e->n + 1, sizeof(int));
    e->label = (int *)calloc((size_t)e->n, sizeof(int));
    if (!e->choice || !e->first || !e->label) { evalset_error_(err, errlen, "%s: out of memory", path); evalset_free(e); return -1; }
    evalset_parse_(e, path, (uint32_t)nwords, &nc, err, errlen); /* checked above: records the choices */
    return 0;
}

/* ---- rows ---------------------------------------------------------------------------------------------------- */

/* Positions choice c's row needs: the context and completion tokens but the last (inputs). */
static inline int evalset_row_positions(const EvalSet *e, int c) { return e->choice[c].ctx_len + e->choice[c].comp_len - 1; }

/* Whether every choice of example i fits a row of T positions. */
static inline int evalset_fits(const EvalSet *e, int i, int T) {
    for (int c = e->first[i]; c < e->first[i + 1]; c++)
        if (evalset_row_positions(e, c) > T) return 0;
    return 1;
}

/* Choice c as one row of T positions: inputs = x[0..n-2], targets = x[1..n-1], then pad (a valid id: the padded
 * positions come after the row's and the model is causal, so they change nothing before them). */
static inline int evalset_token_(const EvalSet *e, const EvalChoice *ch, int k) { /* token k of context ++ completion */
    return k < ch->ctx_len ? e->words[ch->ctx + k] : e->words[ch->comp + k - ch->ctx_len];
}
static inline void evalset_row(const EvalSet *e, int c, int *inputs, int *targets, int T, int pad) {
    const EvalChoice *ch = &e->choice[c];
    int positions = ch->ctx_len + ch->comp_len - 1;
    for (int t = 0; t < T; t++) {
        inputs[t] = t < positions ? evalset_token_(e, ch, t) : pad;
        targets[t] = t < positions ? evalset_token_(e, ch, t + 1) : pad;
    }
}

/* ℓ_c: the summed loss of choice c's completion tokens, from its row's per-position losses. */
static inline double evalset_choice_loss(const EvalSet *e, int c, const double *row_losses) {
    const EvalChoice *ch = &e->choice[c];
    double s = 0;
    for (int j = 0; j < ch->comp_len; j++) s += row_losses[ch->ctx_len - 1 + j];
    return s;
}

/* Greedy: 1 when every completion token of choice c is the argmax (over the first V of rows of Vp logits; a tie goes to
 * the lowest id) at the position that predicts it. logits: comp_len rows, from position ctx_len - 1. */
static inline int evalset_greedy_hit(const EvalSet *e, int c, const float *logits, int V, int Vp) {
    const EvalChoice *ch = &e->choice[c];
    for (int j = 0; j < ch->comp_len; j++) {
        const float *z = logits + (size_t)j * Vp;
        int best = 0;
        for (int v = 1; v < V; v++) if (z[v] > z[best]) best = v;
        if (best != e->words[ch->comp + j]) return 0;
    }
    return 1;
}

/* ---- scoring --------------------------------------------------------------------------------------------------- */

/* argmin over n choices of loss[c] / div[c] (div NULL: 1); a tie goes to the lowest index. */
static inline int evalset_argmin(const double *loss, const double *div, int n) {
    int best = 0;
    for (int c = 1; c < n; c++)
        if (loss[c] * (div ? div[best] : 1) < loss[best] * (div ? div[c] : 1)) best = c;
    return best;
}

/* The scores of the examples that fit rows of T positions, from each choice's summed loss ℓ_c (loss[nchoices]) and,
 * for a greedy file, its hit (hit[nchoices], 1 = every target token was the argmax). */
static inline void evalset_score(const EvalSet *e, int T, const double *loss, const double *hit, EvalResult *r) {
    memset(r, 0, sizeof *r);
    r->kind = e->kind;
    double correct[3] = {0, 0, 0}, gold = 0;
    for (int i = 0; i < e->n; i++) {
        if (!evalset_fits(e, i, T)) { r->skipped++; continue; }
        r->scored++;
        int c0 = e->first[i], C = e->first[i + 1] - c0;
        if (e->kind == EVALSET_GREEDY) { correct[0] += hit[c0] > 0.5; gold += loss[c0]; continue; }
        double ntok[EVALSET_MAX_CHOICES], chars[EVALSET_MAX_CHOICES];
        for (int c = 0; c < C; c++) { ntok[c] = e->choice[c0 + c].comp_len; chars[c] = e->choice[c0 + c].chars; }
        correct[0] += evalset_argmin(loss + c0, NULL, C) == e->label[i];
        correct[1] += evalset_argmin(loss + c0, ntok, C) == e->label[i];
        correct[2] += evalset_argmin(loss + c0, chars, C) == e->label[i];
    }
    if (!r->scored) return;
    r->acc = correct[0] / r->scored;
    if (e->kind == EVALSET_GREEDY) r->ppl = exp(gold / r->scored);
    else { r->acc_norm = correct[1] / r->scored; r->acc_char = correct[2] / r->scored; }
}

/* The result as one line of text (no newline): "hellaswag: acc 0.2859 acc_norm 0.2955 acc_char 0.2901 (10042 examples)". */
static inline void evalset_format(char *buf, size_t len, const EvalSet *e, const EvalResult *r, int T) {
    int n;
    if (r->kind == EVALSET_GREEDY) n = snprintf(buf, len, "%s: acc %.4f ppl %.2f", e->task, r->acc, r->ppl);
    else n = snprintf(buf, len, "%s: acc %.4f acc_norm %.4f acc_char %.4f", e->task, r->acc, r->acc_norm, r->acc_char);
    if (n < 0 || (size_t)n >= len) return;
    if (r->skipped) snprintf(buf + n, len - n, " (%d examples; %d longer than T=%d skipped)", r->scored, r->skipped, T);
    else snprintf(buf + n, len - n, " (%d examples)", r->scored);
}

/* main.log lines "s:STEP eval:TASK:METRIC:VALUE", one per metric (acc, acc_norm, acc_char; greedy: acc, ppl). */
static inline void evalset_log(FILE *f, int step, const EvalSet *e, const EvalResult *r) {
    fprintf(f, "s:%d eval:%s:acc:%.4f\n", step, e->task, r->acc);
    if (r->kind == EVALSET_GREEDY) fprintf(f, "s:%d eval:%s:ppl:%.4f\n", step, e->task, r->ppl);
    else {
        fprintf(f, "s:%d eval:%s:acc_norm:%.4f\n", step, e->task, r->acc_norm);
        fprintf(f, "s:%d eval:%s:acc_char:%.4f\n", step, e->task, r->acc_char);
    }
}

#endif
