/*
 * The shm transport: reliable, ordered connections between processes of one
 * host through rings in shared memory (the RC analogue, without a network
 * stack).
 *
 * Addresses are the same "ip:port" strings as tcp's, so the manager hands
 * them out unchanged: a listener reserves the port with a bound (not
 * listening) TCP socket and accepts on the Unix socket "@sharp-shm/ip:port"
 * (abstract namespace: per network namespace, nothing left in the file
 * system).  Anyone in the namespace can bind such a name, so a connector
 * takes a listener only if the kernel says (SO_PEERCRED) it runs as root,
 * as the connector's own user or as the owner's trusted uid
 * (tp->shm.trust_uid): another user's process squatting the name gets no
 * hello, no ring and no join; and a listener that finds its name taken
 * says by whom.  The connecting side creates the segment (a sealed memfd: it can
 * neither shrink nor grow, so the peer never faults on it) holding one ring
 * per direction and passes it in its first message.
 *
 * A ring is single-producer, single-consumer: records of an 8-byte header
 * (length, or a wrap marker) and the message (wire header and payload),
 * padded to 8 bytes, never split across the end.  The Unix socket stays
 * open beside it: it is the doorbell and it tells a dead peer (EOF).
 *
 * Wake-ups: a consumer about to sleep in its event loop sets `sleeping` in
 * each of its rings (an ev_prepare watcher), then looks at them once more;
 * a producer that published a record and finds `sleeping` set clears it and
 * writes one byte to the socket.  A producer whose ring is full queues the
 * message, sets `waiting`, and the consumer rings it after freeing space.
 * So a busy peer is never woken, a sleeping one always is, and no message
 * waits for a timer.  Before it sleeps, a consumer whose owner set
 * tp->shm.spin_ns keeps looking at its rings that long, yielding the core
 * between looks (shm_spin): most answers come within it, and neither side
 * then pays for a sleep, a wake-up or the doorbell.
 *
 * A listener (an AN) that waits for the contributions of several children
 * need not wake for each: it passes every connector its board (a second
 * sealed memfd, in the answer to the hello) and, before it sleeps, stores
 * there how many contributions (AGG_REQ) it waits for (tp->shm.wake_need, the
 * owner's count: the fewest any operation misses).  A connector that
 * publishes one counts the board down and rings only if it was the last;
 * any other message, and a full ring, rings as before.  So an operation
 * costs the AN one wake-up, not one per child, and it does not spin while
 * it waits for several (spinning there took one core's worth of turns
 * from the members).  The board is writable by every connector: a sleep
 * on a count greater than one lasts 1 ms at most while messages come, so
 * a wrong count (or a peer that wrote one) delays messages, never loses
 * them; a cap that ended a sleep nothing came in doubles (to 64 ms), so an
 * idle group's AN is not woken a thousand times a second.
 *
 * What arrives is untrusted like a tcp stream: a record's length and the
 * ring positions are checked before use, every message goes through
 * shp_tp_deliver() (shp_wire_validate), and anything wrong closes the
 * connection and counts in stats.malformed.
 *
 * The provider's files (transport/shm/shm_int.h): shm_ep.c, an endpoint,
 * its segment and its rings, sending and closing; shm_rx.c, receiving and
 * the loop's wait (the spin, the sleep and its wake-ups); this one, the
 * endpoints made (accepted, connected), the board, the provider's ops.
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

static void shm_hello_timeout_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    shm_ep_t *ep = w->data;

    (void)loop;
    (void)revents;
    shp_warn_sparse(1000, "shm %s: no hello within 5 s: closing",
                    ep->base.peer);
    shp_tp_shm_ep_close(ep, SHP_ERR_TIMED_OUT);
}

static shm_ep_t *shm_ep_new(shp_tp_t *tp, int fd)
{
    shm_priv_t *priv = tp->priv;
    shm_ep_t *ep = calloc(1, sizeof(*ep));

    if (ep == NULL) {
        return NULL;
    }
    ep->base.tp = tp;
    ep->fd = fd;
    ep->backlog_tail = &ep->backlog;
    ev_io_init(&ep->io, shp_tp_shm_io_cb, fd, EV_READ);
    ep->io.data = ep;
    ev_timer_init(&ep->hello_timer, shm_hello_timeout_cb, 5., 0.);
    ep->hello_timer.data = ep;
    ev_io_start(tp->loop, &ep->io);
    ep->next = priv->eps;
    if (priv->eps != NULL) {
        priv->eps->prev = ep;
    }
    priv->eps = ep;
    return ep;
}

static void shm_resume_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    shm_priv_t *priv = w->data;

    (void)revents;
    ev_io_start(loop, &priv->lio);
}

static void shm_accept_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    shp_tp_t *tp = w->data;
    shm_priv_t *priv = tp->priv;

    (void)revents;
    for (int i = 0; i < 64; i++) {
        int fd = accept4(priv->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
                errno == ENOMEM) {
                /* out of descriptors: pause instead of spinning on a
                 * readable listener */
                shp_warn_sparse(5000, "accept: %m; pausing for 100 ms");
                ev_io_stop(loop, &priv->lio);
                ev_timer_set(&priv->pause, 0.1, 0.);
                ev_timer_start(loop, &priv->pause);
            }
            return;
        }
        shm_ep_t *ep = shm_ep_new(tp, fd);
        if (ep == NULL) {
            shp_warn_sparse(1000, "cannot accept a connection: out of memory");
            close(fd);
            continue;
        }
        struct ucred cr;
        socklen_t cl = sizeof(cr);
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) == 0) {
            snprintf(ep->base.peer, sizeof(ep->base.peer), "shm:pid %d",
                     (int)cr.pid);
        } else {
            snprintf(ep->base.peer, sizeof(ep->base.peer), "shm");
        }
        ep->accepted = 1; /* offered to the owner once the hello is in */
        ep->inbound = 1;
        ev_timer_start(loop, &ep->hello_timer);
    }
}

static void shm_cap_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)w;
    (void)revents; /* the loop turned: enough (the check marks cap_fired) */
}

/* The listener's board (see shm.h), sealed like a segment. */
static shp_status_t shm_board_new(shm_priv_t *priv)
{
    int fd = memfd_create("sharp-shm-board", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    void *m = MAP_FAILED;

    if (fd < 0 || ftruncate(fd, SHM_BOARD_LEN) != 0 ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) !=
            0 ||
        (m = mmap(NULL, SHM_BOARD_LEN, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                  0)) == MAP_FAILED) {
        if (fd >= 0) {
            close(fd);
        }
        return SHP_ERR_NO_MEMORY;
    }
    priv->board = m;
    priv->board->magic = SHM_MAGIC;
    priv->board->version = SHM_VERSION;
    atomic_store(&priv->board->need, 1);
    priv->board_fd = fd;
    return SHP_OK;
}

static void shm_board_free(shm_priv_t *priv)
{
    if (priv->board != NULL) {
        munmap(priv->board, SHM_BOARD_LEN);
        priv->board = NULL;
    }
    if (priv->board_fd >= 0) {
        close(priv->board_fd);
        priv->board_fd = -1;
    }
}

static shp_status_t shm_init(shp_tp_t *tp)
{
    shm_priv_t *priv = calloc(1, sizeof(*priv));

    if (priv == NULL) {
        return SHP_ERR_NO_MEMORY;
    }
    priv->tp = tp;
    priv->lfd = priv->rsv = priv->board_fd = -1;
    ev_prepare_init(&priv->prep, shp_tp_shm_prepare_cb);
    ev_check_init(&priv->check, shp_tp_shm_check_cb);
    ev_idle_init(&priv->idle, shp_tp_shm_idle_cb);
    ev_timer_init(&priv->pause, shm_resume_cb, 0., 0.);
    ev_timer_init(&priv->cap, shm_cap_cb, 0., 0.);
    priv->cap_s = SHM_CAP_MIN;
    priv->prep.data = priv->check.data = priv->idle.data = priv;
    priv->pause.data = priv;
    ev_prepare_start(tp->loop, &priv->prep);
    ev_check_start(tp->loop, &priv->check);
    /* these watchers never keep a loop alive on their own */
    ev_unref(tp->loop);
    ev_unref(tp->loop);
    tp->priv = priv;
    return SHP_OK;
}

static void shm_cleanup(shp_tp_t *tp)
{
    shm_priv_t *priv = tp->priv;

    if (priv == NULL) {
        return;
    }
    while (priv->eps != NULL) {
        shm_ep_t *ep = priv->eps;
        priv->eps = ep->next;
        if (!ep->closed) {
            ev_io_stop(tp->loop, &ep->io);
            ev_timer_stop(tp->loop, &ep->hello_timer);
            close(ep->fd);
        }
        shp_tp_shm_ep_free(ep);
    }
    shp_tp_shm_free_dead(priv);
    if (priv->lfd >= 0) {
        ev_io_stop(tp->loop, &priv->lio);
        ev_timer_stop(tp->loop, &priv->pause);
        close(priv->lfd);
    }
    if (priv->rsv >= 0) {
        close(priv->rsv);
    }
    shm_board_free(priv);
    ev_timer_stop(tp->loop, &priv->cap);
    ev_ref(tp->loop);
    ev_ref(tp->loop);
    ev_prepare_stop(tp->loop, &priv->prep);
    ev_check_stop(tp->loop, &priv->check);
    ev_idle_stop(tp->loop, &priv->idle);
    free(priv);
    tp->priv = NULL;
}

static shp_status_t shm_listen(shp_tp_t *tp, const char *addr,
                               shp_tp_accept_cb_t on_accept)
{
    shm_priv_t *priv = tp->priv;
    shp_sockaddr_t sa, bound;
    struct sockaddr_un sun;
    socklen_t slen;
    shp_status_t st;

    if (priv->lfd >= 0) {
        return SHP_ERR_EXISTS;
    }
    st = shp_sockaddr_parse(addr, 0, &sa);
    if (st != SHP_OK) {
        return st;
    }
    /* reserve ip:port (port 0: the kernel picks one).  SO_REUSEADDR: an
     * AN that used the port over tcp a moment ago leaves its connections
     * in TIME_WAIT there, which would refuse a plain bind for a minute;
     * a second shm listener is still refused, by the Unix socket below. */
    priv->rsv = socket(sa.ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    socklen_t blen = sizeof(bound.ss);
    int one = 1;
    if (priv->rsv < 0 ||
        setsockopt(priv->rsv, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) !=
            0 ||
        bind(priv->rsv, (struct sockaddr *)&sa.ss, sa.len) != 0 ||
        getsockname(priv->rsv, (struct sockaddr *)&bound.ss, &blen) != 0) {
        st = errno == EADDRINUSE ? SHP_ERR_EXISTS : SHP_ERR_IO;
        goto fail;
    }
    bound.len = blen;
    shp_sockaddr_str(&bound, priv->listen_addr, sizeof(priv->listen_addr));
    shp_tp_shm_abstract_name(priv->listen_addr, &sun, &slen);
    priv->lfd =
        socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (priv->lfd < 0 || bind(priv->lfd, (struct sockaddr *)&sun, slen) != 0 ||
        listen(priv->lfd, 1024) != 0) {
        st = errno == EADDRINUSE ? SHP_ERR_EXISTS : SHP_ERR_IO;
        if (st == SHP_ERR_EXISTS) {
            shp_tp_shm_name_taken(&sun, slen);
        }
        goto fail;
    }
    st = shm_board_new(priv);
    if (st != SHP_OK) {
        goto fail;
    }
    priv->on_accept = on_accept;
    ev_io_init(&priv->lio, shm_accept_cb, priv->lfd, EV_READ);
    priv->lio.data = tp;
    ev_io_start(tp->loop, &priv->lio);
    return SHP_OK;

fail:
    if (priv->lfd >= 0) {
        close(priv->lfd);
    }
    if (priv->rsv >= 0) {
        close(priv->rsv);
    }
    priv->lfd = priv->rsv = -1;
    shm_board_free(priv);
    return st;
}

static const char *shm_listen_addr(shp_tp_t *tp)
{
    shm_priv_t *priv = tp->priv;

    return priv->lfd >= 0 ? priv->listen_addr : NULL;
}

/* the listener's Unix socket for addr, connected, if the kernel says it
 * runs as a user we trust (*fd; closed on failure) */
static shp_status_t shm_dial(shp_tp_t *tp, const char *addr, int *fd_out)
{
    struct sockaddr_un sun;
    socklen_t slen;
    shp_status_t st;
    uid_t uid;
    int fd;

    shp_tp_shm_abstract_name(addr, &sun, &slen);
    fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        return SHP_ERR_IO;
    }
    if (connect(fd, (struct sockaddr *)&sun, slen) != 0) {
        st = errno == ECONNREFUSED || errno == ENOENT ? SHP_ERR_CONN_REFUSED
                                                      : SHP_ERR_IO;
        close(fd);
        return st;
    }
    if (!shp_tp_shm_listener_trusted(tp, fd, &uid)) {
        /* not an AN of ours: it gets nothing, not even the hello */
        shp_error("shm: @%s is held by uid %u, neither root nor ours: "
                  "refused (a squatter?)",
                  sun.sun_path + 1, (unsigned)uid);
        close(fd);
        return SHP_ERR_PERM;
    }
    *fd_out = fd;
    return SHP_OK;
}

/* a sealed segment of len bytes with rings of cap, mapped (*memfd, *m;
 * both released on failure) */
static shp_status_t shm_segment_new(size_t len, uint32_t cap, int *memfd_out,
                                    void **m_out)
{
    int memfd = memfd_create("sharp-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    void *m = MAP_FAILED;

    if (memfd < 0 || ftruncate(memfd, (off_t)len) != 0 ||
        fcntl(memfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) !=
            0) {
        goto fail;
    }
    m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
             memfd, 0);
    if (m == MAP_FAILED) {
        goto fail;
    }
    shm_seg_t *seg = m;
    seg->magic = SHM_MAGIC;
    seg->version = SHM_VERSION;
    seg->cap = cap;
    *memfd_out = memfd;
    *m_out = m;
    return SHP_OK;

fail:
    if (memfd >= 0) {
        close(memfd);
    }
    return SHP_ERR_NO_MEMORY;
}

/* Steps: the listener dialled and trusted (shm_dial), the segment made
 * (shm_segment_new) and passed in the hello, the endpoint; on_connect
 * comes from the loop. */
static shp_status_t shm_connect(shp_tp_t *tp, const char *addr,
                                const shp_tp_ep_cbs_t *cbs, void *arg,
                                shp_tp_ep_t **ep_out)
{
    shp_sockaddr_t sa;
    shp_status_t st = shp_sockaddr_parse(addr, 0, &sa);
    uint32_t cap = shp_tp_shm_ring_cap(tp);
    size_t len = shp_tp_shm_seg_len(cap);
    int fd = -1, memfd = -1;
    void *m = MAP_FAILED;

    if (st != SHP_OK || (st = shm_dial(tp, addr, &fd)) != SHP_OK) {
        return st;
    }
    st = shm_segment_new(len, cap, &memfd, &m);
    if (st != SHP_OK) {
        goto fail;
    }
    shm_hello_t hello = {SHM_MAGIC, SHM_VERSION, cap, tp->max_payload};
    if (shp_tp_shm_send_fd(fd, &hello, memfd) != 0) {
        st = SHP_ERR_CONN_RESET;
        goto fail;
    }
    close(memfd);
    shm_ep_t *ep = shm_ep_new(tp, fd);
    if (ep == NULL) {
        munmap(m, len);
        close(fd);
        return SHP_ERR_NO_MEMORY;
    }
    ep->base.cbs = cbs;
    ep->base.arg = arg;
    snprintf(ep->base.peer, sizeof(ep->base.peer), "%s", addr);
    ep->seg = m;
    ep->seg_len = len;
    ep->cap = cap;
    shp_tp_shm_ep_map(ep, 1);
    /* on_connect from the loop, after the caller has its endpoint */
    ev_feed_event(tp->loop, &ep->io, EV_CUSTOM);
    *ep_out = &ep->base;
    return SHP_OK;

fail:
    if (m != MAP_FAILED) {
        munmap(m, len);
    }
    if (memfd >= 0) {
        close(memfd);
    }
    close(fd);
    return st;
}

static void shm_close(shp_tp_ep_t *base)
{
    shm_ep_t *ep = (shm_ep_t *)base;

    if (ep->up && !ep->closed) {
        shp_tp_shm_flush_backlog(ep); /* what fits goes out first */
    }
    shp_tp_shm_ep_close(ep, SHP_ERR_CANCELED);
}

static void shm_dump(shp_tp_t *tp)
{
    shm_priv_t *priv = tp->priv;

    for (shm_ep_t *ep = priv->eps; ep != NULL; ep = ep->next) {
        unsigned queued = 0;
        for (shm_backlog_t *b = ep->backlog; b != NULL; b = b->next) {
            queued++;
        }
        if (!ep->up) {
            shp_info("shm %s: waiting for its hello", ep->base.peer);
            continue;
        }
        shp_info("shm %s: tx %" PRIu64 "/%" PRIu64 " bytes used, rx %" PRIu64
                 "/%u, %u queued, peer %s",
                 ep->base.peer,
                 atomic_load(&ep->tx->head) - atomic_load(&ep->tx->tail),
                 (uint64_t)ep->cap,
                 atomic_load(&ep->rx->head) - atomic_load(&ep->rx->tail),
                 ep->cap, queued,
                 atomic_load(&ep->tx->sleeping) ? "asleep" : "awake");
    }
}

const shp_tp_ops_t shp_tp_shm_ops = {
    .name = "shm",
    .init = shm_init,
    .cleanup = shm_cleanup,
    .listen = shm_listen,
    .listen_addr = shm_listen_addr,
    .connect = shm_connect,
    .send = shp_tp_shm_send,
    .close = shm_close,
    .mcast_join = shp_tp_stub_ep,
    .mcast_sender = shp_tp_stub_ep,
    .dump = shm_dump,
    .quiet = shp_tp_stub_quiet,
    .pull = shp_tp_stub_pull,
};
