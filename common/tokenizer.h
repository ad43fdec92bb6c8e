/*
 * tokenizer.h — token decoding for natsl.c (header-only, C99, libc + sys/stat.h).
 *
 * Loads a decoding table: GPT-2's, data/gpt2_tokenizer.bin (dev/data/make_tokenizer_table.py), or the
 * tokenizer.bin of a data set with its own vocabulary (dev/data/char_shards.py):
 *   header: 256 little-endian int32 = [20251122 magic, 1 version, vocab size, eot id, 0...]
 *   then, for each token id 0..vocab-1 in order: one uint8 length L (1..255), then L raw bytes.
 * The table's vocab size is the data's vocabulary V (§1); samples start from its eot id.
 *
 * Only decoding (id -> bytes) is needed in C: training reads pre-tokenized shards, and sampling
 * prints the generated ids. A piece is raw bytes: multi-byte UTF-8 characters are often split
 * over several tokens, so print pieces one after the other and let the terminal reassemble them.
 *
 * Every function reports problems through its return value and `err` (a one-line message
 * "PATH: problem"); nothing here exits or aborts.
 */
#ifndef NATSL_TOKENIZER_H
#define NATSL_TOKENIZER_H

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "fileio.h"

#define TOKENIZER_MAGIC 20251122
#define TOKENIZER_VERSION 1
#define TOKENIZER_HEADER_BYTES 1024  /* 256 int32 */

typedef struct {
    uint32_t vocab_size, eot;  /* 50257 and 50256 for GPT-2; 66 and 65 for data/tinyshakespeare_char */
    char **token_table;        /* vocab_size NUL-terminated pieces */
    int ok;                    /* 1 after a successful tokenizer_init */
} Tokenizer;

/* snprintf into err, tolerating err == NULL / errlen == 0 */
static inline void tokenizer_error_(char *err, size_t errlen, const char *fmt, ...) {
    if (!err || errlen == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* little-endian uint32 at p, independent of the host's byte order */
static inline uint32_t tokenizer_le32_(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline void tokenizer_free(Tokenizer *t) {
    if (t->token_table) {
        for (uint32_t i = 0; i < t->vocab_size; i++) free(t->token_table[i]);
        free(t->token_table);
    }
    memset(t, 0, sizeof *t);
}

/* Returns 0 on success; -1 with "PATH: problem" in err (t is then left empty). */
static inline int tokenizer_init(Tokenizer *t, const char *path, char *err, size_t errlen) {
    memset(t, 0, sizeof *t);
    FILE *f = fopen_regular(path, "rb", "a tokenizer file", err, errlen); /* no FIFO, device or directory */
    if (!f) return -1;
    /* (declared up front: C++ compilers such as nvcc forbid a goto that skips an initialization) */
    unsigned char h[TOKENIZER_HEADER_BYTES];
    uint32_t magic, version, vocab, eot;
    long offset = TOKENIZER_HEADER_BYTES; /* byte offset of the current entry, for messages */
    if (fread(h, 1, sizeof h, f) != sizeof h) {
        tokenizer_error_(err, errlen, "%s: truncated: shorter than the %d-byte header", path, TOKENIZER_HEADER_BYTES);
        goto fail;
    }
    magic = tokenizer_le32_(h);
    version = tokenizer_le32_(h + 4);
    vocab = tokenizer_le32_(h + 8);
    eot = tokenizer_le32_(h + 12);
    if (magic != TOKENIZER_MAGIC) {
        tokenizer_error_(err, errlen, "%s: bad magic %lu (expected %d): not a tokenizer table",
                         path, (unsigned long)magic, TOKENIZER_MAGIC);
        goto fail;
    }
    if (version != TOKENIZER_VERSION) {
        tokenizer_error_(err, errlen, "%s: unsupported version %lu (expected %d)",
                         path, (unsigned long)version, TOKENIZER_VERSION);
        goto fail;
    }
    if (vocab == 0 || vocab > (1u << 24) || eot >= vocab) {
        tokenizer_error_(err, errlen, "%s: implausible header: vocab size %lu, eot id %lu",
                         path, (unsigned long)vocab, (unsigned long)eot);
        goto fail;
    }
    t->token_table = (char **)calloc(vocab, sizeof(char *));
    if (!t->token_table) {
        tokenizer_error_(err, errlen, "%s: out of memory for %lu tokens", path, (unsigned long)vocab);
        goto fail;
    }
    t->vocab_size = vocab; /* set now so that tokenizer_free frees a partly filled table */
    t->eot = eot;
    for (uint32_t i = 0; i < vocab; i++) {
        int len = fgetc(f);
        if (len == EOF) {
            tokenizer_error_(err, errlen, "%s: truncated: file ends at byte offset %ld, before token %lu of %lu",
                             path, offset, (unsigned long)i, (unsigned long)vocab);
            goto fail;
        }
        if (len == 0) {
            tokenizer_error_(err, errlen, "%s: token %lu at byte offset %ld has length 0", path, (unsigned long)i, offset);
            goto fail;
        }
        char *piece = (char *)malloc((size_t)len + 1);
        if (!piece) {
            tokenizer_error_(err, errlen, "%s: out of memory", path);
            goto fail;
        }
        t->token_table[i] = piece;
        if (fread(piece, 1, (size_t)len, f) != (size_t)len) {
            tokenizer_error_(err, errlen, "%s: truncated: token %lu at byte offset %ld needs %d bytes",
                             path, (unsigned long)i, offset, len);
            goto fail;
        }
        piece[len] = '\0';
        offset += 1 + len;
    }
    if (fgetc(f) != EOF) {
        tokenizer_error_(err, errlen, "%s: unexpected extra bytes after the last token (byte offset %ld)", path, offset);
        goto fail;
    }
    fclose(f);
    t->ok = 1;
    return 0;
fail:
    fclose(f);
    tokenizer_free(t);
    return -1;
}

/* The bytes of token `id` (NUL-terminated), or NULL if id is out of range or t is not loaded.
 * (The piece of the single byte 0x00 is therefore the empty string.) */
static inline const char *tokenizer_decode(const Tokenizer *t, uint32_t id) {
    if (!t->ok || id >= t->vocab_size) return NULL;
    return t->token_table[id];
}

/* Print a piece to stdout. A single-byte piece that is an ASCII control character (below 0x80,
 * neither isprint nor isspace: 0x07 bell, 0x1b escape, ...) is skipped so it can't mess up the
 * terminal; whitespace such as \n and \t is printed. Single bytes >= 0x80 are printed too: they
 * are fragments of UTF-8 characters that the next tokens complete (llm.c's safe_printf drops
 * them, which garbles emoji and other non-ASCII text). */
static inline void tokenizer_print_safe(const char *piece) {
    if (piece == NULL || piece[0] == '\0') return;
    if (piece[1] == '\0') {
        unsigned char c = (unsigned char)piece[0];
        if (c < 0x80 && !isprint(c) && !isspace(c)) return;
    }
    fputs(piece, stdout);
}

#endif /* NATSL_TOKENIZER_H */
