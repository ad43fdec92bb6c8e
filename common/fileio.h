// Opening a file named on the command line (shards, tokenizer tables, checkpoints, the run's log, the -D dump)
// without ever blocking: open() of a FIFO with no writer (or, for writing, no reader) waits forever, and a device or
// a directory is no data file either. fopen_regular opens non-blocking, refuses anything but a regular file, and
// hands back an ordinary (blocking) FILE. Header-only, C99, libc + POSIX.
#ifndef NATSL_FILEIO_H
#define NATSL_FILEIO_H

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

// What a file that is not a regular file is, for messages.
static inline const char *file_kind(mode_t m) {
    return S_ISDIR(m) ? "a directory" : S_ISFIFO(m) ? "a FIFO" : S_ISCHR(m) ? "a character device" :
           S_ISBLK(m) ? "a block device" : S_ISSOCK(m) ? "a socket" : "not a regular file";
}

// fopen(path, mode) for mode "rb", "r", "wb", "w" or "a" that refuses anything but a regular file, at once, with
// "PATH: a FIFO, not WHAT" (what: "a token shard", "a checkpoint file", ...) in err; a file opened for writing is
// created if missing ("w": truncated, "a": appended to). NULL on any error, with "PATH: problem" in err.
static inline FILE *fopen_regular(const char *path, const char *mode, const char *what, char *err, size_t errlen) {
    int wr = mode[0] != 'r', flags = wr ? O_WRONLY | O_CREAT | (mode[0] == 'a' ? O_APPEND : 0) : O_RDONLY;
    struct stat sb;
    sb.st_mode = 0;
    int fd = open(path, flags | O_NONBLOCK | O_CLOEXEC, 0666);
    if (fd < 0) { // (a FIFO without a reader refuses O_WRONLY|O_NONBLOCK with ENXIO; a directory, writing, with EISDIR)
        int e = errno;
        if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode)) snprintf(err, errlen, "%s: %s, not %s", path, file_kind(sb.st_mode), what);
        else snprintf(err, errlen, "%s: cannot open%s (%s)", path, wr ? " for writing" : "", strerror(e));
        return NULL;
    }
    if (fstat(fd, &sb) || !S_ISREG(sb.st_mode)) {
        snprintf(err, errlen, "%s: %s, not %s", path, file_kind(sb.st_mode), what);
        close(fd);
        return NULL;
    }
    if ((mode[0] == 'w' && ftruncate(fd, 0)) || fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK)) {
        snprintf(err, errlen, "%s: cannot open%s (%s)", path, wr ? " for writing" : "", strerror(errno));
        close(fd);
        return NULL;
    }
    FILE *f = fdopen(fd, mode);
    if (!f) { snprintf(err, errlen, "%s: cannot open (%s)", path, strerror(errno)); close(fd); }
    return f;
}

#endif
