/*
 * Out-of-band collectives for tests of libsharp_coll without MPI: the test
 * driver forks the members, each with a socketpair to the driver, and the
 * driver plays the hub: it collects one request from every member of a set
 * (a tag and a size), then answers all of them (gather: the root gets every
 * member's bytes in rank order; bcast: everyone gets the root's; barrier).
 * A member that dies fails the collectives still waiting in every set it
 * took part in (status -1), as a broken MPI would.  Header-only.
 */
#ifndef SHP_TEST_OOB_HUB_H
#define SHP_TEST_OOB_HUB_H

#include "core/net.h"

#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

enum { HUB_GATHER = 1, HUB_BCAST = 2, HUB_BARRIER = 3 };

typedef struct hub_req {
    int32_t op, tag, rank, size, root, len;
} hub_req_t;

/* a member's oob context: which set, its rank there */
typedef struct hub_oob {
    int tag, rank, size;
} hub_oob_t;

static int hub_fd = -1; /* in a member: its end of the socketpair */

/* member side: one collective; rbuf gets `rlen` bytes of answer */
static int hub_call(hub_oob_t *o, int op, int root, const void *sbuf, int slen,
                    int len, void *rbuf, int rlen)
{
    hub_req_t r = {op, o->tag, o->rank, o->size, root, len};
    int32_t st[2];
    if (shp_fd_io_full(hub_fd, &r, sizeof(r), 1) ||
        (slen > 0 && shp_fd_io_full(hub_fd, (void *)sbuf, (size_t)slen, 1)) ||
        shp_fd_io_full(hub_fd, st, sizeof(st), 0) || st[0] != 0 ||
        st[1] != rlen ||
        (rlen > 0 && shp_fd_io_full(hub_fd, rbuf, (size_t)rlen, 0))) {
        return -1;
    }
    return 0;
}

static int hub_bcast(void *ctx, void *buf, int len, int root)
{
    hub_oob_t *o = ctx;
    return hub_call(o, HUB_BCAST, root, buf, o->rank == root ? len : 0, len,
                    buf, len);
}

static int hub_barrier(void *ctx)
{
    return hub_call(ctx, HUB_BARRIER, 0, NULL, 0, 0, NULL, 0);
}

static int hub_gather(void *ctx, int root, void *sbuf, void *rbuf, int len)
{
    hub_oob_t *o = ctx;
    return hub_call(o, HUB_GATHER, root, sbuf, len, len, rbuf,
                    o->rank == root ? len * o->size : 0);
}

/* driver side ------------------------------------------------------------ */

typedef struct hub_member {
    int fd;
    pid_t pid;
    int status; /* exit status once reaped, -1 before */
    int waiting;
    hub_req_t req;
    uint8_t *data;
    int tags[32], ntags; /* the sets it took part in */
} hub_member_t;

typedef struct hub {
    int n;
    hub_member_t m[64];
} hub_t;

static void hub_answer(hub_member_t *m, int st, const void *buf, int len)
{
    int32_t h[2] = {st, st == 0 ? len : 0};
    if (m->fd >= 0) {
        (void)(shp_fd_io_full(m->fd, h, sizeof(h), 1) ||
               (st == 0 && len > 0 &&
                shp_fd_io_full(m->fd, (void *)buf, (size_t)len, 1)));
    }
    m->waiting = 0;
    free(m->data);
    m->data = NULL;
}

/* answer every set whose members all asked */
static void hub_complete(hub_t *h)
{
    for (int i = 0; i < h->n; i++) {
        hub_member_t *a = &h->m[i];
        if (!a->waiting) {
            continue;
        }
        int count = 0, size = a->req.size;
        hub_member_t *by_rank[64] = {0};
        for (int k = 0; k < h->n; k++) {
            hub_member_t *b = &h->m[k];
            if (b->waiting && b->req.tag == a->req.tag && b->req.rank >= 0 &&
                b->req.rank < size && size <= 64) {
                by_rank[b->req.rank] = b;
                count++;
            }
        }
        if (count != size) {
            continue;
        }
        int len = a->req.len, root = a->req.root;
        if (a->req.op == HUB_GATHER) {
            uint8_t *all = calloc((size_t)size, (size_t)len + 1);
            for (int r = 0; r < size; r++) {
                memcpy(all + (size_t)r * len, by_rank[r]->data, (size_t)len);
            }
            for (int r = 0; r < size; r++) {
                hub_answer(by_rank[r], 0, all, r == root ? len * size : 0);
            }
            free(all);
        } else if (a->req.op == HUB_BCAST) {
            uint8_t *d = by_rank[root]->data;
            by_rank[root]->data = NULL;
            for (int r = 0; r < size; r++) {
                hub_answer(by_rank[r], 0, d, len);
            }
            free(d);
        } else {
            for (int r = 0; r < size; r++) {
                hub_answer(by_rank[r], 0, NULL, 0);
            }
        }
    }
}

/* fork a member running fn(rank, arg); returns its index */
static int hub_spawn(hub_t *h, int (*fn)(int rank, void *arg), int rank,
                     void *arg)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        return -1;
    }
    pid_t pid = fork();
    if (pid == 0) {
        close(sv[0]);
        for (int i = 0; i < h->n; i++) {
            close(h->m[i].fd);
        }
        hub_fd = sv[1];
        /* a crash is the member's own exit status, not the test
         * framework's business (cmocka catches signals in the parent) */
        signal(SIGSEGV, SIG_DFL);
        signal(SIGBUS, SIG_DFL);
        signal(SIGILL, SIG_DFL);
        signal(SIGFPE, SIG_DFL);
        signal(SIGABRT, SIG_DFL);
        alarm(120); /* a hang is a failure, never a stuck test run */
        _exit(fn(rank, arg));
    }
    close(sv[1]);
    hub_member_t *m = &h->m[h->n];
    memset(m, 0, sizeof(*m));
    m->fd = sv[0];
    m->pid = pid;
    m->status = -1;
    return h->n++;
}

/* serve until every member exited or `secs` passed (the rest are killed);
 * returns the number of members that exited 0 */
static int hub_run(hub_t *h, double secs)
{
    uint64_t end = shp_time_ns() + (uint64_t)(secs * 1e9);
    int alive = h->n, ok = 0;

    while (alive > 0) {
        struct pollfd p[64];
        int np = 0, idx[64];
        for (int i = 0; i < h->n; i++) {
            if (h->m[i].fd >= 0) {
                p[np].fd = h->m[i].fd;
                p[np].events = POLLIN;
                idx[np++] = i;
            }
        }
        (void)poll(p, (nfds_t)np, 20);
        for (int k = 0; k < np; k++) {
            hub_member_t *m = &h->m[idx[k]];
            if (!(p[k].revents & (POLLIN | POLLHUP | POLLERR))) {
                continue;
            }
            if (m->waiting ||
                shp_fd_io_full(m->fd, &m->req, sizeof(m->req), 0) != 0) {
                /* gone (or talking out of turn): its sets' waiters fail */
                close(m->fd);
                m->fd = -1;
                for (int i = 0; i < h->n; i++) {
                    for (int t = 0; h->m[i].waiting && t < m->ntags; t++) {
                        if (h->m[i].req.tag == m->tags[t]) {
                            hub_answer(&h->m[i], -1, NULL, 0);
                        }
                    }
                }
                continue;
            }
            int known = 0;
            for (int t = 0; t < m->ntags; t++) {
                known |= m->tags[t] == m->req.tag;
            }
            if (!known && m->ntags < 32) {
                m->tags[m->ntags++] = m->req.tag;
            }
            int dlen = m->req.op == HUB_GATHER || (m->req.op == HUB_BCAST &&
                                                   m->req.rank == m->req.root)
                           ? m->req.len
                           : 0;
            m->data = calloc(1, (size_t)dlen + 1);
            if (dlen > 0 &&
                shp_fd_io_full(m->fd, m->data, (size_t)dlen, 0) != 0) {
                close(m->fd);
                m->fd = -1;
                continue;
            }
            m->waiting = 1;
        }
        hub_complete(h);
        for (int i = 0; i < h->n; i++) {
            int st;
            if (h->m[i].status < 0 && waitpid(h->m[i].pid, &st, WNOHANG) > 0) {
                h->m[i].status =
                    WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
                alive--;
                ok += h->m[i].status == 0;
                if (h->m[i].status != 0) {
                    fprintf(stderr, "member %d: exit %d\n", i, h->m[i].status);
                }
            }
        }
        if (shp_time_ns() > end) {
            for (int i = 0; i < h->n; i++) {
                if (h->m[i].status < 0) {
                    fprintf(stderr, "member %d: still running, killed\n", i);
                    kill(h->m[i].pid, SIGKILL);
                }
            }
            end = UINT64_MAX;
        }
    }
    for (int i = 0; i < h->n; i++) {
        if (h->m[i].fd >= 0) {
            close(h->m[i].fd);
        }
        free(h->m[i].data);
    }
    h->n = 0;
    return ok;
}

#endif
