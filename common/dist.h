// Several processes, one per GPU (train_natsl_cu's data parallelism, doc/model.md §9.4; train_natsl runs as one
// process): who this process is, from the variables that launchers set, and the hand-over of the NCCL id from rank 0
// to the others through a shared directory or a TCP socket. Plain C and POSIX, no CUDA: test_natsl.c checks it.
//
//   launcher            rank / world size / GPU on the node
//   torchrun, dev/launch.sh  RANK / WORLD_SIZE / LOCAL_RANK
//   mpirun (Open MPI)   OMPI_COMM_WORLD_RANK / OMPI_COMM_WORLD_SIZE / OMPI_COMM_WORLD_LOCAL_RANK
//   MPICH, Intel MPI    PMI_RANK / PMI_SIZE / MPI_LOCALRANKID
//   srun (Slurm)        SLURM_PROCID / SLURM_STEP_NUM_TASKS / SLURM_LOCALID
// The first of these sets that is there wins; none: one process. (A Slurm batch script outside srun has SLURM_PROCID
// but no SLURM_STEP_NUM_TASKS: a program it starts directly is one process, whatever --ntasks says.)
//
// The id's hand-over (-pi): "tcp" (rank 0 listens on -ps HOST, port NATSL_PORT, else MASTER_PORT + 1, else
// 29511; every other rank connects), "fs" (rank 0 writes DIR/natsl_nccl_id.JOB, JOB from NATSL_JOB_ID,
// SLURM_JOB_ID or TORCHELASTIC_RUN_ID, and removes it once every rank has joined; DIR is -pf, shared by every node),
// or "mpi" (an MPI_Bcast, in builds with USE_MPI=1). Waits end after NATSL_TIMEOUT seconds (default 300) with an
// error that says what was waited for.
#ifndef NATSL_DIST_H
#define NATSL_DIST_H

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include "train_util.h"

static int g_rank = 0, g_world = 1, g_local_rank = 0; // this process and the job (0, 1, 0: one process)
static int g_zero = 0;                                // ZeRO-1: each rank keeps the moments of its slices (-z 1)

typedef struct {
    int rank, world, local_rank;
    const char *launcher; // whose variables said so ("" for one process)
    int mpi;              // an MPI launcher (Open MPI, PMI): -pi's default is then mpi in a USE_MPI=1 build
} DistEnv;
static DistEnv g_job = {0, 1, 0, "", 0}; // this job, as dist_env read it (common/train_main.inc sets it)

// The integer in environment variable `name` in [lo, hi] into *out: 1; unset or empty: 0; -1 and err if it is
// not such a number.
static inline int dist_env_int(const char *name, int lo, int hi, int *out, char *err, size_t errlen) {
    const char *v = getenv(name);
    if (!v || !*v) return 0;
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || *end || x < lo || x > hi) {
        snprintf(err, errlen, "environment variable %s=%.100s: not an integer in [%d, %d]", name, v, lo, hi);
        return -1;
    }
    *out = (int)x;
    return 1;
}

// Rank, world size and local rank from the first launcher's variables that are set (table above). 0, or -1 with
// a one-line message naming the variable.
static inline int dist_env(DistEnv *d, char *err, size_t errlen) {
    static const char *sets[][4] = { // rank, world size, local rank, launcher (the 2nd and 3rd are MPI's)
        {"RANK", "WORLD_SIZE", "LOCAL_RANK", "torchrun-style variables"},
        {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "Open MPI"},
        {"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "PMI (MPICH, Intel MPI)"},
        {"SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID", "srun"},
    };
    d->rank = 0; d->world = 1; d->local_rank = 0; d->launcher = ""; d->mpi = 0;
    for (size_t i = 0; i < sizeof(sets) / sizeof(sets[0]); i++) {
        int rank = -1, world = -1, local = -1, r, w;
        if ((r = dist_env_int(sets[i][0], 0, 1 << 20, &rank, err, errlen)) < 0) return -1;
        if (!r) continue;
        const char *wname = sets[i][1];
        if ((w = dist_env_int(wname, 1, 1 << 20, &world, err, errlen)) < 0) return -1;
        if (!w && !strncmp(wname, "SLURM", 5)) continue; // a batch script, not an srun step
        if (!w) { snprintf(err, errlen, "environment variable %s is set but %s is not", sets[i][0], sets[i][1]); return -1; }
        if (rank >= world) {
            snprintf(err, errlen, "environment: %s=%d is not below %s=%d", sets[i][0], rank, wname, world);
            return -1;
        }
        if (dist_env_int(sets[i][2], 0, 1 << 20, &local, err, errlen) < 0) return -1;
        d->rank = rank; d->world = world; d->local_rank = local >= 0 ? local : rank;
        d->launcher = sets[i][3]; d->mpi = i == 1 || i == 2;
        return 0;
    }
    return 0;
}

// How long a rank waits for the others (NATSL_TIMEOUT, seconds; default 300).
static inline double dist_timeout(void) {
    const char *v = getenv("NATSL_TIMEOUT");
    double t = v && *v ? atof(v) : 300;
    return t > 0 ? t : 300;
}

// ---- the id through a shared directory -----------------------------------------------------------------------
static inline void dist_fs_path(char *out, size_t n, const char *dir) {
    const char *job = getenv("NATSL_JOB_ID");
    if (!job || !*job) job = getenv("SLURM_JOB_ID");
    if (!job || !*job) job = getenv("TORCHELASTIC_RUN_ID");
    snprintf(out, n, "%s/natsl_nccl_id.%s", dir, job && *job ? job : "run");
}

static inline int dist_fs_exchange(const DistEnv *d, void *blob, size_t n, const char *dir, double timeout, char *err,
                                   size_t errlen) {
    char path[4200], tmp[4300];
    dist_fs_path(path, sizeof(path), dir);
    if (d->rank == 0) {
        snprintf(tmp, sizeof(tmp), "%s.tmp", path);
        FILE *f = fopen(tmp, "wb");
        int ok = f && fwrite(blob, 1, n, f) == n && fflush(f) == 0 && fsync(fileno(f)) == 0;
        if (f) ok = fclose(f) == 0 && ok;
        if (!ok || rename(tmp, path)) {
            snprintf(err, errlen, "-pf %s: cannot write %s (%s)", dir, path, strerror(errno));
            remove(tmp);
            return -1;
        }
        return 0;
    }
    double t0 = now_s();
    for (;;) {
        FILE *f = fopen(path, "rb");
        if (f) {
            size_t got = fread(blob, 1, n, f);
            fclose(f);
            if (got == n) return 0;
        }
        if (now_s() - t0 > timeout) {
            snprintf(err, errlen, "-pf %s: no NCCL id from rank 0 in %s after %.0f s (is rank 0 running, and is %s shared by "
                     "every node?)", dir, path, timeout, dir);
            return -1;
        }
        usleep(50000);
    }
}

// Rank 0 removes the id file once every rank has joined (the communicator exists), so no later job reads it.
static inline void dist_fs_done(const DistEnv *d, const char *dir) {
    char path[4200];
    if (d->rank != 0 || !dir) return;
    dist_fs_path(path, sizeof(path), dir);
    remove(path);
}

// ---- the id through TCP: rank 0 serves it to world−1 connections --------------------------------------------
static inline int dist_port(void) {
    int p = 0;
    char e[200];
    if (dist_env_int("NATSL_PORT", 1, 65535, &p, e, sizeof(e)) == 1) return p;
    if (dist_env_int("MASTER_PORT", 1, 65534, &p, e, sizeof(e)) == 1) return p + 1; // MASTER_PORT is torchrun's own store
    return 29511;
}

static inline int dist_io(int fd, void *buf, size_t n, int send_, double deadline) {
    char *p = (char *)buf;
    while (n > 0) {
        struct pollfd pf = {fd, (short)(send_ ? POLLOUT : POLLIN), 0};
        int left = (int)((deadline - now_s()) * 1000);
        if (left <= 0 || poll(&pf, 1, left) <= 0) return -1;
        ssize_t k = send_ ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
        if (k <= 0) return -1;
        p += k; n -= (size_t)k;
    }
    return 0;
}

static inline int dist_tcp_exchange(const DistEnv *d, void *blob, size_t n, const char *host, double timeout, char *err,
                                    size_t errlen) {
    int port = dist_port(), rc = -1;
    char ports[16];
    snprintf(ports, sizeof(ports), "%d", port);
    double deadline = now_s() + timeout;
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC; hints.ai_socktype = SOCK_STREAM;
    if (d->rank == 0) {
        hints.ai_flags = AI_PASSIVE;
        int gai = getaddrinfo(NULL, ports, &hints, &ai);
        if (gai) { snprintf(err, errlen, "tcp port %d: %s", port, gai_strerror(gai)); return -1; }
        int s = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol), one = 1;
        setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (s < 0 || bind(s, ai->ai_addr, ai->ai_addrlen) || listen(s, 64)) {
            snprintf(err, errlen, "tcp port %d: cannot listen (%s; set NATSL_PORT to a free port)", port, strerror(errno));
            if (s >= 0) close(s);
            freeaddrinfo(ai);
            return -1;
        }
        freeaddrinfo(ai);
        int served = 0;
        char *seen = (char *)calloc((size_t)d->world, 1);
        while (served < d->world - 1) {
            struct pollfd pf = {s, POLLIN, 0};
            int left = (int)((deadline - now_s()) * 1000);
            if (left <= 0 || poll(&pf, 1, left) <= 0) {
                snprintf(err, errlen, "tcp port %d: %d of %d ranks connected after %.0f s (are they all running, and can they "
                         "reach this host?)", port, served + 1, d->world, timeout);
                goto done0;
            }
            int c = accept(s, NULL, NULL);
            if (c < 0) continue;
            int32_t who = -1;
            if (dist_io(c, &who, sizeof(who), 0, deadline) == 0 && who > 0 && who < d->world && !seen[who] &&
                dist_io(c, blob, n, 1, deadline) == 0) {
                seen[who] = 1;
                served++;
            } else if (who > 0 && who < d->world && seen[who]) {
                snprintf(err, errlen, "tcp port %d: two processes claim rank %d (check RANK and WORLD_SIZE)", port, who);
                close(c);
                goto done0;
            }
            close(c);
        }
        rc = 0;
    done0:
        free(seen);
        close(s);
        return rc;
    }
    int gai = getaddrinfo(host, ports, &hints, &ai);
    if (gai) { snprintf(err, errlen, "-ps %s: %s", host, gai_strerror(gai)); return -1; }
    for (;;) {
        int s = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
        if (s >= 0 && connect(s, ai->ai_addr, ai->ai_addrlen) == 0) {
            int32_t me = d->rank;
            rc = dist_io(s, &me, sizeof(me), 1, deadline) || dist_io(s, blob, n, 0, deadline) ? -1 : 0;
            close(s);
            if (rc == 0) break;
        } else if (s >= 0) close(s);
        if (now_s() > deadline) {
            snprintf(err, errlen, "tcp %s:%d: no NCCL id from rank 0 after %.0f s (is rank 0 running there, and is the port "
                     "reachable?)", host, port, timeout);
            rc = -1;
            break;
        }
        usleep(100000);
    }
    freeaddrinfo(ai);
    return rc;
}

// Rank 0's blob of n bytes (the NCCL id) into every rank's blob, by `method` ("tcp" or "fs"). 0, or -1 and err.
static inline int dist_exchange(const DistEnv *d, void *blob, size_t n, const char *method, const char *fs_dir,
                                const char *host, double timeout, char *err, size_t errlen) {
    if (d->world == 1) return 0;
    if (!strcmp(method, "fs")) return dist_fs_exchange(d, blob, n, fs_dir, timeout, err, errlen);
    if (!strcmp(method, "tcp")) return dist_tcp_exchange(d, blob, n, host, timeout, err, errlen);
    snprintf(err, errlen, "-pi %s: the NCCL id goes by tcp, fs or mpi", method);
    return -1;
}

#endif
