/*
 * The shm transport's receiving side (transport/shm/shm.c says how it
 * works): records taken off the ring, checked and delivered; the socket
 * read for the doorbell, the hello (the segment, and the listener's board)
 * and EOF; and the loop's wait: the spin before a sleep, the `sleeping`
 * flags and the board's count set before it, the rings looked at once
 * more.
 */
#include "transport/shm/shm_int.h"

#include "core/log.h"
#include "core/net.h"
#include "core/time.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

static int shm_rx_ready(const shm_ep_t *ep)
{
    return ep->up && !ep->closed &&
           atomic_load_explicit(&ep->rx->head, memory_order_acquire) !=
               atomic_load_explicit(&ep->rx->tail, memory_order_relaxed);
}

/* Deliver what the ring holds (at most `budget` messages).  Returns 0, or
 * -1 if the endpoint was closed. */
static int shm_drain(shm_ep_t *ep, int budget)
{
    int got = 0;

    while (!ep->closed && budget-- > 0) {
        uint64_t tail =
            atomic_load_explicit(&ep->rx->tail, memory_order_relaxed);
        uint64_t head =
            atomic_load_explicit(&ep->rx->head, memory_order_acquire);
        if (head == tail) {
            break;
        }
        uint64_t pos = tail % ep->cap, used = head - tail;
        uint32_t len;
        if (used > ep->cap || used < SHM_REC_HDR) {
            goto malformed; /* records are whole and at least 8 bytes */
        }
        memcpy(&len, ep->rx_data + pos, sizeof(len));
        if (len == SHM_WRAP) {
            if (ep->cap - pos > used) {
                goto malformed;
            }
            atomic_store_explicit(&ep->rx->tail, tail + (ep->cap - pos),
                                  memory_order_release);
            continue;
        }
        uint64_t need = SHM_REC_HDR + (((uint64_t)len + 7) & ~7ull);
        if (need > used || need > ep->cap - pos ||
            len > SHP_WIRE_HDR_LEN + (uint64_t)ep->base.tp->max_payload) {
            goto malformed;
        }
        ep->dispatching = 1;
        shp_status_t st =
            shp_tp_deliver(&ep->base, ep->rx_data + pos + SHM_REC_HDR, len);
        ep->dispatching = 0;
        atomic_store_explicit(&ep->rx->tail, tail + need, memory_order_release);
        got = 1;
        if (ep->closed) {
            shp_tp_shm_ep_finish(ep);
            return -1;
        }
        if (st != SHP_OK) {
            shp_tp_shm_ep_close(ep, st);
            return -1;
        }
    }
    if (got) { /* space freed: ring a producer that waits for it */
        atomic_thread_fence(memory_order_seq_cst);
        if (atomic_load_explicit(&ep->rx->waiting, memory_order_relaxed) &&
            atomic_exchange(&ep->rx->waiting, 0)) {
            shp_tp_shm_ring_bell(ep);
        }
    }
    return 0;

malformed:
    ep->base.tp->stats.malformed++;
    shp_warn_sparse(1000, "malformed shared-memory ring from %s: closing",
                    ep->base.peer);
    shp_tp_shm_ep_close(ep, SHP_ERR_PROTO);
    return -1;
}

/* A sealed memfd of the given length (anything else could shrink under
 * us, and a fault on it would kill the process): 1 if it is. */
static int shm_memfd_ok(int memfd, size_t len)
{
    struct stat stt;
    int seals = fcntl(memfd, F_GET_SEALS);

    return seals >= 0 &&
           (seals & (F_SEAL_SHRINK | F_SEAL_SEAL)) ==
               (F_SEAL_SHRINK | F_SEAL_SEAL) &&
           fstat(memfd, &stt) == 0 && (size_t)stt.st_size == len;
}

/* The hello: map the peer's segment (acceptor side). */
static shp_status_t shm_take_hello(shm_ep_t *ep, const shm_hello_t *h,
                                   int memfd)
{
    shp_tp_t *tp = ep->base.tp;

    if (h->magic != SHM_MAGIC || h->version != SHM_VERSION ||
        h->cap < SHM_MIN_CAP || h->cap > shp_tp_shm_accept_cap(tp) ||
        (h->cap & (h->cap - 1)) != 0 ||
        h->cap < 2 * (SHM_REC_HDR + SHP_WIRE_HDR_LEN + tp->max_payload) ||
        !shm_memfd_ok(memfd, shp_tp_shm_seg_len(h->cap))) {
        return SHP_ERR_PROTO;
    }
    /* populated: a ring cycling through pages touched for the first time
     * faults on every one, and a fault costs more than a message */
    void *m = mmap(NULL, shp_tp_shm_seg_len(h->cap), PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_POPULATE, memfd, 0);
    if (m == MAP_FAILED) {
        return SHP_ERR_NO_MEMORY;
    }
    ep->seg = m;
    ep->seg_len = shp_tp_shm_seg_len(h->cap);
    ep->cap = h->cap;
    if (ep->seg->magic != SHM_MAGIC || ep->seg->cap != h->cap) {
        return SHP_ERR_PROTO;
    }
    shp_tp_shm_ep_map(ep, 0);
    return SHP_OK;
}

/* The listener's answer to our hello: its board (outbound side). */
static shp_status_t shm_take_board(shm_ep_t *ep, const shm_hello_t *h,
                                   int memfd)
{
    if (h->magic != SHM_MAGIC || h->version != SHM_VERSION || h->cap != 0 ||
        !shm_memfd_ok(memfd, SHM_BOARD_LEN)) {
        return SHP_ERR_PROTO;
    }
    void *m =
        mmap(NULL, SHM_BOARD_LEN, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
    if (m == MAP_FAILED) {
        return SHP_ERR_NO_MEMORY;
    }
    shm_board_t *b = m;
    if (b->magic != SHM_MAGIC || b->version != SHM_VERSION) {
        munmap(m, SHM_BOARD_LEN);
        return SHP_ERR_PROTO;
    }
    ep->board = b;
    return SHP_OK;
}

/* Send a descriptor with a hello: the segment (connector) or the board
 * (listener).  Returns 0 or -1. */
int shp_tp_shm_send_fd(int fd, const shm_hello_t *hello, int memfd)
{
    char cbuf[CMSG_SPACE(sizeof(int))];
    memset(cbuf, 0, sizeof(cbuf));
    struct iovec iov = {(void *)hello, sizeof(*hello)};
    struct msghdr mh = {0};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = cbuf;
    mh.msg_controllen = sizeof(cbuf);
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &memfd, sizeof(int));
    return sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT) ==
                   (ssize_t)sizeof(*hello)
               ? 0
               : -1;
}

/* Read the socket: the hello (inbound, once), bells, or EOF. */
static shp_status_t shm_read_socket(shm_ep_t *ep)
{
    for (;;) {
        union {
            shm_hello_t hello;
            char bells[64];
        } buf;
        char cbuf[CMSG_SPACE(sizeof(int))];
        struct iovec iov = {&buf, sizeof(buf)};
        struct msghdr mh = {0};
        mh.msg_iov = &iov;
        mh.msg_iovlen = 1;
        mh.msg_control = cbuf;
        mh.msg_controllen = sizeof(cbuf);
        ssize_t n = recvmsg(ep->fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (n < 0) {
            return errno == EAGAIN || errno == EINTR ? SHP_OK
                                                     : SHP_ERR_CONN_RESET;
        }
        if (n == 0) {
            return SHP_ERR_CLOSED; /* the peer is gone */
        }
        int memfd = -1;
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        if (c != NULL && c->cmsg_level == SOL_SOCKET &&
            c->cmsg_type == SCM_RIGHTS &&
            c->cmsg_len == CMSG_LEN(sizeof(int))) {
            memcpy(&memfd, CMSG_DATA(c), sizeof(int));
        }
        if (!ep->up || memfd >= 0) {
            /* a descriptor comes with a hello only: the peer's segment
             * (inbound, first) or the listener's board (outbound, once) */
            int board = ep->up;
            shp_status_t st = SHP_ERR_PROTO;
            if (memfd >= 0 && n == (ssize_t)sizeof(shm_hello_t)) {
                st = !board ? shm_take_hello(ep, &buf.hello, memfd)
                     : !ep->inbound && ep->board == NULL
                         ? shm_take_board(ep, &buf.hello, memfd)
                         : SHP_ERR_PROTO;
            }
            if (memfd >= 0) {
                close(memfd);
            }
            if (st != SHP_OK) {
                ep->base.tp->stats.malformed++;
                shp_warn_sparse(1000, "bad shared-memory %s from %s",
                                board ? "board" : "hello", ep->base.peer);
                return st;
            }
            continue;
        }
        /* a bell: one rings per sleep, so there is seldom a second; if
         * there is, the socket stays readable and costs a turn, where
         * reading on to EAGAIN cost a system call every wake-up */
        return SHP_OK;
    }
}

void shp_tp_shm_io_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    shm_ep_t *ep = w->data;
    int was_up = ep->up;

    (void)revents;
    shp_status_t st = shm_read_socket(ep);
    if (!was_up && ep->up && ep->accepted) {
        /* inbound and mapped: the owner takes it now */
        shm_priv_t *priv = ep->base.tp->priv;
        ev_timer_stop(loop, &ep->hello_timer);
        if (priv->board != NULL) {
            /* without it the peer rings for every message: slower, not
             * wrong */
            shm_hello_t bh = {SHM_MAGIC, SHM_VERSION, 0, 0};
            (void)shp_tp_shm_send_fd(ep->fd, &bh, priv->board_fd);
        }
        ep->accepted = 0;
        ep->announced = 1;
        ep->dispatching = 1;
        priv->on_accept(ep->base.tp, &ep->base);
        ep->dispatching = 0;
        if (ep->closed) {
            shp_tp_shm_ep_finish(ep);
            return;
        }
        if (ep->base.cbs == NULL) { /* refused by the owner */
            shp_tp_shm_ep_close(ep, SHP_ERR_CANCELED);
            return;
        }
    }
    if (!ep->announced && ep->up) { /* outbound: connected */
        ep->announced = 1;
        ep->dispatching = 1;
        if (ep->base.cbs->on_connect != NULL) {
            ep->base.cbs->on_connect(&ep->base);
        }
        ep->dispatching = 0;
        if (ep->closed) {
            shp_tp_shm_ep_finish(ep);
            return;
        }
    }
    if (ep->up && shm_drain(ep, 1 << 30) < 0) {
        return;
    }
    if (ep->up) {
        shp_tp_shm_flush_backlog(ep);
    }
    if (st != SHP_OK) {
        shp_tp_shm_ep_close(ep, st);
    }
}

static int shm_any_ready(const shm_priv_t *priv)
{
    for (const shm_ep_t *ep = priv->eps; ep != NULL; ep = ep->next) {
        if (shm_rx_ready(ep)) {
            return 1;
        }
    }
    return 0;
}

/* Spin, then sleep: a peer on this host usually answers within
 * microseconds, and a look at a ring costs nothing, where sleeping and
 * being woken costs two context switches and the doorbell's system calls.
 * Each look yields the core first, so a process spinning on a shared core
 * hands it to whoever has work (the peer it waits for, most often) instead
 * of starving it. */
static int shm_spin(shm_priv_t *priv)
{
    if (priv->tp->shm.spin_ns == 0 || priv->eps == NULL) {
        return 0;
    }
    uint64_t end = shp_time_ns() + priv->tp->shm.spin_ns;
    do {
        sched_yield();
        if (shm_any_ready(priv)) {
            return 1;
        }
    } while (shp_time_ns() < end);
    return 0;
}

/* Deliver what every ring holds, a fair share of each. */
static void shm_drain_all(shm_priv_t *priv)
{
    shm_ep_t *ep, *next;

    for (ep = priv->eps; ep != NULL; ep = next) {
        next = ep->next; /* closed endpoints stay in memory until prepare */
        if (!ep->dead && shm_rx_ready(ep)) {
            /* a fair share each turn; the prepare watcher comes back */
            if (shm_drain(ep, 64) == 0) {
                shp_tp_shm_flush_backlog(ep);
            }
        }
    }
}

/* The loop's prepare / check / idle: see the header comment. */
void shp_tp_shm_prepare_cb(struct ev_loop *loop, ev_prepare *w, int revents)
{
    shm_priv_t *priv = w->data;
    shm_ep_t *ep;
    int ready;
    uint32_t need = 1;

    (void)revents;
    shp_tp_shm_free_dead(priv);
    for (int turn = 0;; turn++) {
        ready = shm_any_ready(priv);
        if (!ready) {
            /* a listener waiting for several contributions sleeps at
             * once unless told to spin for them too (spin_many): one of
             * them may arrive soon, not all of them */
            need = priv->board != NULL && priv->tp->shm.wake_need
                       ? priv->tp->shm.wake_need(priv->tp->shm.wake_arg)
                       : 1;
            if (need <= 1 || priv->tp->shm.spin_many) {
                ready = shm_spin(priv);
            }
        }
        if (!ready) {
            break;
        }
        priv->cap_s = SHM_CAP_MIN; /* something came */
        priv->cap_fired = 0;
        /* what is in the rings is delivered here, not after a poll that
         * would find nothing else (a system call); a whole turn, every
         * socket polled and the timers run, at least every millisecond */
        int early = priv->tp->shm.spin_break && priv->tp->shm.spin_ns > 0;
        if ((!early && !priv->tp->shm.runs_free) || turn >= 16 ||
            shp_time_ns() - priv->polled_ns >= SHP_NSEC_PER_MSEC) {
            ev_idle_start(loop, &priv->idle); /* poll, do not sleep */
            return;
        }
        shm_drain_all(priv);
        if (early) {
            ev_break(loop, EVBREAK_ONE); /* the waiter looks at once */
            return;
        }
    }
    if (priv->board != NULL) {
        atomic_store(&priv->board->need,
                     need > INT32_MAX ? INT32_MAX : (int32_t)need);
        if (need > 1) {
            /* the owner's count is a promise of its protocol, not of its
             * peers: never sleep on it for long */
            if (priv->cap_fired) { /* the last cap ended a sleep: longer */
                priv->cap_s = priv->cap_s * 2 < SHM_CAP_MAX ? priv->cap_s * 2
                                                            : SHM_CAP_MAX;
            }
            priv->cap_fired = 0;
            ev_timer_set(&priv->cap, priv->cap_s, 0.);
            ev_timer_start(loop, &priv->cap);
        }
    }
    for (ep = priv->eps; ep != NULL; ep = ep->next) {
        if (ep->up && !ep->closed) {
            atomic_store(&ep->rx->sleeping, 1);
        }
    }
    atomic_thread_fence(memory_order_seq_cst);
    if (shm_any_ready(priv)) {
        ev_idle_start(loop, &priv->idle); /* poll, do not sleep */
    }
}

void shp_tp_shm_check_cb(struct ev_loop *loop, ev_check *w, int revents)
{
    shm_priv_t *priv = w->data;

    (void)revents;
    /* the cap ended this sleep (the stop below clears its pending call) */
    priv->cap_fired |= ev_is_pending(&priv->cap);
    ev_timer_stop(loop, &priv->cap);
    priv->polled_ns = shp_time_ns();
    for (shm_ep_t *ep = priv->eps; ep != NULL; ep = ep->next) {
        if (ep->up && !ep->closed &&
            atomic_load_explicit(&ep->rx->sleeping, memory_order_relaxed)) {
            atomic_store_explicit(&ep->rx->sleeping, 0, memory_order_relaxed);
        }
    }
}

void shp_tp_shm_idle_cb(struct ev_loop *loop, ev_idle *w, int revents)
{
    (void)revents;
    ev_idle_stop(loop, w);
    shm_drain_all(w->data);
}
