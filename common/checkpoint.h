// Checkpoint file I/O shared by train_natsl.c and train_natsl.cu: a header of 256 int32 followed by
// float32 arrays. Writes are atomic: the data goes to PATH.tmp, is flushed to disk, and only then
// renamed over PATH, so a killed run never leaves a half-written checkpoint under the real name.
// Every function returns 0, or -1 with a one-line message "PATH: problem" in err.
#ifndef NATSL_CHECKPOINT_H
#define NATSL_CHECKPOINT_H

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

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

#endif
