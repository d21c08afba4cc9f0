/*
 * A rank of a Slurm job that allreduces through libsharp_coll: rank and
 * size from srun (SLURM_PROCID, SLURM_NTASKS), the job from what the
 * sharp SPANK plugin put in the environment (SHARP_COLL_JOB_ID), its own
 * out-of-band exchange over TCP (rank 0 listens at $SHARP_TEST_OOB,
 * ip:port; every collective goes through it, in program order).
 *
 *   slurm_rank ROUNDS     ROUNDS allreduces of 1024 int64 sums, each
 *                         result checked; prints "rank R: N allreduces ok"
 *   slurm_rank loop FILE  allreduces until killed; rank 0 writes FILE once
 *                         the first result was right
 *
 * Exit 0 only if every result was right and finalize succeeded.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <sharp/api/sharp_coll.h>
#include "tests/support/coll_desc.h"

#define N 1024

static int rank, size;
static int *peer_fd; /* rank 0: [size] */
static int root_fd = -1;

static int io_full(int fd, void *buf, size_t len, int out)
{
    char *p = buf;
    while (len > 0) {
        ssize_t n = out ? send(fd, p, len, MSG_NOSIGNAL) : recv(fd, p, len, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static int oob_setup(const char *where)
{
    char host[64];
    struct sockaddr_in sa = {.sin_family = AF_INET};
    const char *colon = strrchr(where, ':');
    if (!colon || (size_t)(colon - where) >= sizeof(host))
        return -1;
    memcpy(host, where, (size_t)(colon - where));
    host[colon - where] = '\0';
    sa.sin_port = htons((uint16_t)atoi(colon + 1));
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
        return -1;
    int one = 1;
    if (rank == 0) {
        int l = socket(AF_INET, SOCK_STREAM, 0);
        setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(l, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
            listen(l, size) != 0) {
            perror("oob listen");
            return -1;
        }
        peer_fd = calloc((size_t)size, sizeof(int));
        for (int k = 1; k < size; k++) {
            int fd = accept(l, NULL, NULL);
            int32_t r;
            if (fd < 0 || io_full(fd, &r, sizeof(r), 0) != 0 || r <= 0 ||
                r >= size || peer_fd[r] != 0)
                return -1;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
            peer_fd[r] = fd;
        }
        close(l);
        return 0;
    }
    /* rank 0 may not listen yet: try for 30 s */
    for (int tries = 0; tries < 300; tries++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
            int32_t r = rank;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
            root_fd = fd;
            return io_full(fd, &r, sizeof(r), 1);
        }
        close(fd);
        usleep(100000);
    }
    return -1;
}

/* only root 0: every collective of libsharp_coll's world and of a world
 * communicator is rooted there */
static int oob_gather(void *ctx, int root, void *sbuf, void *rbuf, int len)
{
    (void)ctx;
    if (root != 0)
        return -1;
    if (rank != 0)
        return io_full(root_fd, sbuf, (size_t)len, 1);
    memcpy(rbuf, sbuf, (size_t)len);
    for (int k = 1; k < size; k++)
        if (io_full(peer_fd[k], (char *)rbuf + (size_t)k * (size_t)len,
                    (size_t)len, 0) != 0)
            return -1;
    return 0;
}

static int oob_bcast(void *ctx, void *buf, int len, int root)
{
    (void)ctx;
    if (root != 0)
        return -1;
    if (rank != 0)
        return io_full(root_fd, buf, (size_t)len, 0);
    for (int k = 1; k < size; k++)
        if (io_full(peer_fd[k], buf, (size_t)len, 1) != 0)
            return -1;
    return 0;
}

static int oob_barrier(void *ctx)
{
    char b = 0, all[1024];
    if (size > (int)sizeof(all))
        return -1;
    return oob_gather(ctx, 0, &b, all, 1) || oob_bcast(ctx, &b, 1, 0);
}

int main(int argc, char **argv)
{
    const char *ps = getenv("SLURM_PROCID"), *ns = getenv("SLURM_NTASKS");
    const char *oob = getenv("SHARP_TEST_OOB");
    int loop = argc == 3 && !strcmp(argv[1], "loop");
    long rounds = loop ? -1 : (argc == 2 ? atol(argv[1]) : 0);
    if (!ps || !ns || !oob || (!loop && rounds <= 0)) {
        fprintf(stderr, "usage: srun slurm_rank ROUNDS | loop FILE (with "
                        "SHARP_TEST_OOB=ip:port)\n");
        return 2;
    }
    rank = atoi(ps);
    size = atoi(ns);
    if (oob_setup(oob) != 0) {
        fprintf(stderr, "rank %d: out-of-band setup at %s failed\n", rank, oob);
        return 1;
    }
    struct sharp_coll_init_spec s = {0};
    struct sharp_coll_context *ctx;
    struct sharp_coll_comm *world;
    s.job_id = 1; /* unused: the job is the one Slurm reserved */
    s.world_rank = rank;
    s.world_size = size;
    s.config = sharp_coll_default_config;
    s.config.coll_timeout = 10000;
    s.oob_colls.bcast = oob_bcast;
    s.oob_colls.barrier = oob_barrier;
    s.oob_colls.gather = oob_gather;
    int rc = sharp_coll_init(&s, &ctx);
    if (rc != SHARP_COLL_SUCCESS) {
        fprintf(stderr, "rank %d: sharp_coll_init: %s\n", rank,
                sharp_coll_strerror(rc));
        return 1;
    }
    if (rank == 0) {
        const char *j = getenv("SHARP_COLL_JOB_ID");
        printf("rank 0: job %s\n", j ? j : "(none)");
    }
    struct sharp_coll_comm_init_spec cs = {.rank = rank, .size = size};
    rc = sharp_coll_comm_init(ctx, &cs, &world);
    if (rc != SHARP_COLL_SUCCESS) {
        fprintf(stderr, "rank %d: sharp_coll_comm_init: %s\n", rank,
                sharp_coll_strerror(rc));
        return 1;
    }
    static int64_t sb[N], rb[N];
    long done = 0;
    for (long k = 0; loop || k < rounds; k++) {
        for (int i = 0; i < N; i++)
            sb[i] = (int64_t)(rank + 1) * (i + 1) + k;
        memset(rb, 0, sizeof(rb));
        struct sharp_coll_reduce_spec sp;
        memset(&sp, 0, sizeof(sp));
        sp.sbuf_desc = test_host_desc(sb, sizeof(sb));
        sp.rbuf_desc = test_host_desc(rb, sizeof(rb));
        sp.dtype = SHARP_DTYPE_LONG;
        sp.op = SHARP_OP_SUM;
        sp.length = N;
        rc = sharp_coll_do_allreduce(world, &sp);
        if (rc != SHARP_COLL_SUCCESS) {
            fprintf(stderr, "rank %d: allreduce %ld: %s\n", rank, k,
                    sharp_coll_strerror(rc));
            return 1;
        }
        for (int i = 0; i < N; i++) {
            int64_t want =
                (int64_t)(i + 1) * size * (size + 1) / 2 + (int64_t)size * k;
            if (rb[i] != want) {
                fprintf(stderr,
                        "rank %d: allreduce %ld: element %d is %lld, "
                        "not %lld\n",
                        rank, k, i, (long long)rb[i], (long long)want);
                return 1;
            }
        }
        done++;
        if (loop && k == 0 && rank == 0) {
            FILE *f = fopen(argv[2], "w");
            if (f)
                fclose(f);
        }
        if (loop)
            usleep(20000);
    }
    if (sharp_coll_comm_destroy(world) != SHARP_COLL_SUCCESS ||
        sharp_coll_finalize(ctx) != SHARP_COLL_SUCCESS) {
        fprintf(stderr, "rank %d: teardown failed\n", rank);
        return 1;
    }
    printf("rank %d: %ld allreduces ok\n", rank, done);
    return 0;
}
