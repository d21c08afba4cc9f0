/*
 * sharp-hello's out-of-band collectives: nothing to exchange for one
 * process; with --peers, a star through rank 0 over TCP (every collective
 * of libsharp_coll is rooted at 0, and every rank calls them in the same
 * order).  Rank 0 listens on HOST:PORT and accepts the others, each of
 * which says its rank first.
 */
#include "cli/hello/hello.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

/* Out-of-band collectives: nothing to exchange for one process; with
 * --peers, a star through rank 0 (every collective of libsharp_coll is
 * rooted at 0, and every rank calls them in the same order). */
int shp_hello_rank = 0, shp_hello_size = 1;
/* rank 0: one connection per other rank; else fds[0]: to rank 0 */
static int *peer_fds;

static int xfer(int fd, void *buf, size_t len, int out)
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

int shp_hello_oob_gather(void *ctx, int root, void *sbuf, void *rbuf, int len)
{
    (void)ctx;
    if (root != 0)
        return -1;
    if (shp_hello_rank != 0)
        return xfer(peer_fds[0], sbuf, (size_t)len, 1);
    memmove(rbuf, sbuf, (size_t)len);
    for (int r = 1; r < shp_hello_size; r++)
        if (xfer(peer_fds[r], (char *)rbuf + (size_t)r * (size_t)len,
                 (size_t)len, 0))
            return -1;
    return 0;
}

int shp_hello_oob_bcast(void *ctx, void *buf, int len, int root)
{
    (void)ctx;
    if (root != 0)
        return -1;
    if (shp_hello_rank != 0)
        return xfer(peer_fds[0], buf, (size_t)len, 0);
    for (int r = 1; r < shp_hello_size; r++)
        if (xfer(peer_fds[r], buf, (size_t)len, 1))
            return -1;
    return 0;
}

int shp_hello_oob_barrier(void *ctx)
{
    char b = 0, one[1];
    if (shp_hello_size == 1)
        return 0;
    char *rb = shp_hello_rank == 0 ? malloc((size_t)shp_hello_size) : one;
    int rc = rb ? shp_hello_oob_gather(ctx, 0, &b, rb, 1) : -1;
    if (shp_hello_rank == 0)
        free(rb);
    return rc ? rc : shp_hello_oob_bcast(ctx, &b, 1, 0);
}

/* Whether a TCP connection reached itself: before rank 0 listens, a
 * connect to a port of the ephemeral range on this host can be given that
 * very port as its own and "succeed" (simultaneous open). */
static int self_connected(int fd)
{
    struct sockaddr_in a, b;
    socklen_t la = sizeof(a), lb = sizeof(b);
    return getsockname(fd, (struct sockaddr *)&a, &la) == 0 &&
           getpeername(fd, (struct sockaddr *)&b, &lb) == 0 &&
           a.sin_port == b.sin_port && a.sin_addr.s_addr == b.sin_addr.s_addr;
}

const char *shp_hello_peers_connect(const char *where, int wait_s)
{
    static char why[300];
    char host[256];
    const char *colon = strrchr(where, ':');
    struct sockaddr_in sa = {.sin_family = AF_INET};
    int one = 1;

    if (!colon || (size_t)(colon - where) >= sizeof(host))
        return "--peers wants HOST:PORT (an IPv4 address)";
    memcpy(host, where, (size_t)(colon - where));
    host[colon - where] = '\0';
    sa.sin_port = htons((uint16_t)atoi(colon + 1));
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1 || sa.sin_port == 0)
        return "--peers wants HOST:PORT (an IPv4 address)";
    peer_fds = calloc((size_t)shp_hello_size, sizeof(int));
    if (!peer_fds)
        return "no memory";
    if (shp_hello_rank == 0) {
        int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (l >= 0)
            setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (l < 0 || bind(l, (struct sockaddr *)&sa, sizeof(sa)) ||
            listen(l, shp_hello_size)) {
            snprintf(why, sizeof(why), "rank 0 cannot listen on %s: %s", where,
                     strerror(errno));
            return why;
        }
        struct timeval tv = {.tv_sec = wait_s};
        setsockopt(l, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        for (int n = 1; n < shp_hello_size; n++) {
            int fd = accept4(l, NULL, NULL, SOCK_CLOEXEC);
            int32_t r = -1;
            if (fd < 0 || xfer(fd, &r, sizeof(r), 0) || r < 1 ||
                r >= shp_hello_size || peer_fds[r]) {
                snprintf(why, sizeof(why),
                         "rank 0: %d of the %d peers came within %d s to %s",
                         n - 1, shp_hello_size - 1, wait_s, where);
                close(l);
                return why;
            }
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
            peer_fds[r] = fd;
        }
        close(l);
        return NULL;
    }
    for (int t = 0; t < wait_s * 10; t++) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int32_t r = shp_hello_rank;
        if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
            !self_connected(fd) && xfer(fd, &r, sizeof(r), 1) == 0) {
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
            peer_fds[0] = fd;
            return NULL;
        }
        if (fd >= 0)
            close(fd);
        usleep(100000);
    }
    snprintf(why, sizeof(why), "rank %d cannot reach rank 0 at %s within %d s",
             shp_hello_rank, where, wait_s);
    return why;
}

/* a launcher's rank and size, if it set them */
void shp_hello_launcher_rank(int *rank, int *size)
{
    static const char *const vars[][2] = {
        {"SLURM_PROCID", "SLURM_NPROCS"},
        {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
        {"PMI_RANK", "PMI_SIZE"}};
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
        const char *r = getenv(vars[i][0]), *n = getenv(vars[i][1]);
        if (r && n) {
            *rank = atoi(r);
            *size = atoi(n);
            return;
        }
    }
}
