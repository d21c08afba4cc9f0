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
 * on a count greater than one lasts 1 ms at most, so a wrong count (or a
 * peer that wrote one) delays messages, never loses them.
 *
 * What arrives is untrusted like a tcp stream: a record's length and the
 * ring positions are checked before use, every message goes through
 * shp_tp_deliver() (shp_wire_validate), and anything wrong closes the
 * connection and counts in stats.malformed.
 */
#include "core/log.h"
#include "core/net.h"
#include "core/time.h"
#include "transport/shm/shm.h"
#include "transport/transport.h"

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

/* What may wait behind a full ring for a peer that does not read, as a
 * connection's send queue (64 MiB on tcp): a peer that asks and never
 * reads the answers gets its connection closed, not the AN's memory. */
#define SHM_MAX_BACKLOG (16u << 20)

typedef struct shm_backlog {
    struct shm_backlog *next;
    uint32_t len;
    int counted; /* a contribution (see shm_after_put) */
    uint8_t msg[];
} shm_backlog_t;

typedef struct shm_ep {
    shp_tp_ep_t base;
    struct shm_ep *next, *prev; /* the provider's list of live endpoints */
    struct shm_ep *dead_next;   /* closed, freed before the loop sleeps */
    int fd;                     /* the Unix socket: doorbell, liveness */
    ev_io io;
    ev_timer hello_timer; /* inbound: the hello must come within 5 s */
    shm_seg_t *seg;
    size_t seg_len;
    uint32_t cap;
    shm_ring_t *tx, *rx;
    uint8_t *tx_data, *rx_data;
    shm_backlog_t *backlog, **backlog_tail;
    size_t backlog_bytes; /* at most SHM_MAX_BACKLOG */
    shm_board_t *board;   /* outbound: the listener's, once it sent it */
    int up;               /* the segment is mapped: messages may flow */
    int inbound;          /* accepted here (the peer created the segment) */
    int announced;        /* on_connect was called */
    int accepted;    /* inbound: the owner has not seen it before the hello */
    int dispatching; /* inside on_msg */
    int closed;
    int dead; /* on_close called: off the live list, memory kept a while */
    shp_status_t close_reason;
} shm_ep_t;

typedef struct {
    shp_tp_t *tp;
    int lfd; /* the Unix listener */
    int rsv; /* the TCP socket reserving ip:port */
    ev_io lio;
    ev_timer pause; /* out of descriptors: accept again in 100 ms */
    shp_tp_accept_cb_t on_accept;
    char listen_addr[64];
    shm_ep_t *eps;
    shm_ep_t *dead;     /* kept until prepare: a walk of eps may stand on one */
    shm_board_t *board; /* a listener's, shared with its connectors */
    int board_fd;
    ev_timer cap; /* a sleep waiting for several contributions: 1 ms at most */
    uint64_t polled_ns; /* the last turn that polled (check ran) */
    ev_prepare prep;
    ev_check check;
    ev_idle idle;
} shm_priv_t;

static uint32_t shm_ring_cap(const shp_tp_t *tp)
{
    /* two of the largest messages (the minimum the acceptor takes), at
     * least 256 KiB: a group's quota (16 x 16 KiB by default) in flight */
    uint64_t want = 2ull * (SHM_REC_HDR + SHP_WIRE_HDR_LEN + tp->max_payload);
    uint32_t cap = 256u * 1024;
    while (cap < want && cap < SHM_MAX_CAP) {
        cap <<= 1;
    }
    return cap;
}

/* The largest ring an acceptor maps for a peer: what its own largest
 * message needs, or what a client's (256 KiB payloads: 1 MiB) does, not
 * what the peer asks for (a never-joining peer made an AN map and populate
 * 128 MiB). */
static uint32_t shm_accept_cap(const shp_tp_t *tp)
{
    uint32_t own = shm_ring_cap(tp);
    return own > (1u << 20) ? own : 1u << 20;
}

static size_t shm_seg_len(uint32_t cap)
{
    return sizeof(shm_seg_t) + 2 * (size_t)cap;
}

static void shm_abstract_name(const char *addr, struct sockaddr_un *sun,
                              socklen_t *len)
{
    memset(sun, 0, sizeof(*sun));
    sun->sun_family = AF_UNIX;
    int n = snprintf(sun->sun_path + 1, sizeof(sun->sun_path) - 1,
                     "sharp-shm/%s", addr);
    *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

/* Whether the listener at the other end of fd (a connected socket) runs
 * as a user this side trusts to be an aggregation node: root, our own
 * user, or tp->shm.trust_uid.  *uid: the listener's. */
static int shm_listener_trusted(const shp_tp_t *tp, int fd, uid_t *uid)
{
    struct ucred cr;
    socklen_t cl = sizeof(cr);

    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) != 0) {
        *uid = (uid_t)-1;
        return 0;
    }
    *uid = cr.uid;
    return cr.uid == 0 || cr.uid == geteuid() ||
           (tp->shm.trust_uid != (uid_t)-1 && cr.uid == tp->shm.trust_uid);
}

/* After our bind of `sun` failed with EADDRINUSE: if another user holds
 * the name (a connection, closed at once, asks the kernel), say who; our
 * own user's holder is a second listener, refused as before. */
static void shm_name_taken(const struct sockaddr_un *sun, socklen_t slen)
{
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    struct ucred cr;
    socklen_t cl = sizeof(cr);

    if (fd >= 0 && connect(fd, (const struct sockaddr *)sun, slen) == 0 &&
        getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) == 0 &&
        cr.uid != geteuid()) {
        shp_error("shm: @%s is taken by pid %d of uid %u, another user "
                  "(a squatter?): cannot listen there",
                  sun->sun_path + 1, (int)cr.pid, (unsigned)cr.uid);
    }
    if (fd >= 0) {
        close(fd);
    }
}

static void shm_ep_map(shm_ep_t *ep, int connector)
{
    uint8_t *data = (uint8_t *)(ep->seg + 1);
    ep->tx = &ep->seg->ring[connector ? 0 : 1];
    ep->rx = &ep->seg->ring[connector ? 1 : 0];
    ep->tx_data = data + (connector ? 0 : ep->cap);
    ep->rx_data = data + (connector ? ep->cap : 0);
    ep->up = 1;
}

static void shm_ring_bell(shm_ep_t *ep)
{
    char b = 0;
    ep->base.tp->stats.bells++;
    /* EAGAIN: bells are already waiting there, one is enough */
    (void)!send(ep->fd, &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
}

/* Close ---------------------------------------------------------------------
 */

static void shm_ep_free(shm_ep_t *ep)
{
    shm_backlog_t *b;

    while ((b = ep->backlog) != NULL) {
        ep->backlog = b->next;
        free(b);
    }
    if (ep->seg != NULL) {
        munmap(ep->seg, ep->seg_len);
    }
    if (ep->board != NULL) {
        munmap(ep->board, SHM_BOARD_LEN);
    }
    free(ep);
}

static void shm_free_dead(shm_priv_t *priv)
{
    while (priv->dead != NULL) {
        shm_ep_t *ep = priv->dead;
        priv->dead = ep->dead_next;
        shm_ep_free(ep);
    }
}

/* on_close, then off the live list; the memory goes at the next prepare
 * (its `next` stays valid for a walk that stands on it) */
static void shm_ep_finish(shm_ep_t *ep)
{
    shm_priv_t *priv = ep->base.tp->priv;

    if (ep->base.cbs != NULL && ep->base.cbs->on_close != NULL) {
        ep->base.cbs->on_close(&ep->base, ep->close_reason);
    }
    ep->dead = 1;
    if (ep->prev != NULL) {
        ep->prev->next = ep->next;
    } else {
        priv->eps = ep->next;
    }
    if (ep->next != NULL) {
        ep->next->prev = ep->prev;
    }
    ep->dead_next = priv->dead;
    priv->dead = ep;
}

static void shm_ep_close(shm_ep_t *ep, shp_status_t reason)
{
    if (ep->closed) {
        return;
    }
    ep->closed = 1;
    ep->close_reason = reason;
    ev_io_stop(ep->base.tp->loop, &ep->io);
    ev_timer_stop(ep->base.tp->loop, &ep->hello_timer);
    close(ep->fd);
    ep->fd = -1;
    if (!ep->dispatching) {
        shm_ep_finish(ep);
    }
}

/* Sending -----------------------------------------------------------------
 */

/* Put one message in the ring if it fits now: 1 put, 0 full. */
static int shm_ring_put(shm_ep_t *ep, const uint8_t *hdr, const void *payload,
                        uint32_t plen)
{
    uint32_t len = SHP_WIRE_HDR_LEN + plen;
    uint64_t need = SHM_REC_HDR + (((uint64_t)len + 7) & ~7ull);
    uint64_t head = atomic_load_explicit(&ep->tx->head, memory_order_relaxed);
    uint64_t tail = atomic_load_explicit(&ep->tx->tail, memory_order_acquire);
    uint64_t pos = head % ep->cap, room = ep->cap - pos;
    uint64_t total = need <= room ? need : room + need;

    if (head - tail > ep->cap || total > ep->cap - (head - tail)) {
        return 0;
    }
    if (need > room) { /* the record would straddle the end: wrap */
        uint32_t mark = SHM_WRAP;
        memcpy(ep->tx_data + pos, &mark, sizeof(mark));
        pos = 0;
    }
    uint8_t *rec = ep->tx_data + pos;
    memcpy(rec, &len, sizeof(len));
    memcpy(rec + SHM_REC_HDR, hdr, SHP_WIRE_HDR_LEN);
    if (plen > 0) {
        memcpy(rec + SHM_REC_HDR + SHP_WIRE_HDR_LEN, payload, plen);
    }
    atomic_store_explicit(&ep->tx->head, head + total, memory_order_release);
    return 1;
}

/* Ring the consumer if it marked itself asleep (once: the mark is taken). */
static void shm_ring_sleeper(shm_ep_t *ep)
{
    if (atomic_load_explicit(&ep->tx->sleeping, memory_order_relaxed) &&
        atomic_exchange(&ep->tx->sleeping, 0)) {
        shm_ring_bell(ep);
    }
}

/* After publishing: wake the consumer if it may be asleep.  A contribution
 * (`counted`) to a listener that waits for several rings only if it is the
 * last of them (the board's `need`). */
static void shm_after_put(shm_ep_t *ep, int counted)
{
    atomic_thread_fence(memory_order_seq_cst);
    if (!atomic_load_explicit(&ep->tx->sleeping, memory_order_relaxed)) {
        return;
    }
    if (counted && ep->board != NULL &&
        atomic_fetch_sub(&ep->board->need, 1) > 1) {
        return;
    }
    shm_ring_sleeper(ep);
}

/* Move queued messages into the ring while they fit. */
static void shm_flush_backlog(shm_ep_t *ep)
{
    int moved = 0, counted = 0;
    shm_backlog_t *b;

    while ((b = ep->backlog) != NULL) {
        if (!shm_ring_put(ep, b->msg, b->msg + SHP_WIRE_HDR_LEN,
                          b->len - SHP_WIRE_HDR_LEN)) {
            /* ask the consumer to ring us when it frees space, then look
             * again (it may have freed it in between) */
            atomic_store(&ep->tx->waiting, 1);
            atomic_thread_fence(memory_order_seq_cst);
            if (!shm_ring_put(ep, b->msg, b->msg + SHP_WIRE_HDR_LEN,
                              b->len - SHP_WIRE_HDR_LEN)) {
                /* a full ring wakes its consumer whatever it waits for */
                shm_ring_sleeper(ep);
                break;
            }
        }
        counted |= b->counted;
        ep->backlog = b->next;
        if (ep->backlog == NULL) {
            ep->backlog_tail = &ep->backlog;
        }
        ep->backlog_bytes -= b->len;
        free(b);
        moved = 1;
    }
    if (moved) {
        shm_after_put(ep, counted);
    }
}

static shp_status_t shm_send(shp_tp_ep_t *base, const shp_wire_hdr_t *hdr,
                             const void *payload)
{
    shm_ep_t *ep = (shm_ep_t *)base;
    uint8_t raw[SHP_WIRE_HDR_LEN];

    if (ep->closed) {
        return SHP_ERR_CLOSED;
    }
    if (hdr->payload_len > base->tp->max_payload) {
        return SHP_ERR_TOO_LARGE;
    }
    shp_wire_hdr_pack(hdr, raw);
    int counted = hdr->opcode == SHP_WIRE_OP_AGG_REQ;
    if (ep->up && ep->backlog == NULL &&
        shm_ring_put(ep, raw, payload, hdr->payload_len)) {
        shm_after_put(ep, counted);
    } else {
        if (ep->backlog_bytes + SHP_WIRE_HDR_LEN + hdr->payload_len >
            SHM_MAX_BACKLOG) {
            shp_warn_sparse(1000,
                            "%s does not read: %zu bytes wait for it, no more",
                            ep->base.peer, ep->backlog_bytes);
            return SHP_ERR_NO_RESOURCE;
        }
        shm_backlog_t *b =
            malloc(sizeof(*b) + SHP_WIRE_HDR_LEN + hdr->payload_len);
        if (b == NULL) {
            return SHP_ERR_NO_MEMORY;
        }
        b->next = NULL;
        b->len = SHP_WIRE_HDR_LEN + hdr->payload_len;
        b->counted = counted;
        memcpy(b->msg, raw, SHP_WIRE_HDR_LEN);
        if (hdr->payload_len > 0) {
            memcpy(b->msg + SHP_WIRE_HDR_LEN, payload, hdr->payload_len);
        }
        *ep->backlog_tail = b;
        ep->backlog_tail = &b->next;
        ep->backlog_bytes += b->len;
        if (ep->up) {
            shm_flush_backlog(ep);
        }
    }
    base->tp->stats.msgs_out++;
    base->tp->stats.bytes_out += SHP_WIRE_HDR_LEN + hdr->payload_len;
    return SHP_OK;
}

/* Receiving ---------------------------------------------------------------
 */

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
            shm_ep_finish(ep);
            return -1;
        }
        if (st != SHP_OK) {
            shm_ep_close(ep, st);
            return -1;
        }
    }
    if (got) { /* space freed: ring a producer that waits for it */
        atomic_thread_fence(memory_order_seq_cst);
        if (atomic_load_explicit(&ep->rx->waiting, memory_order_relaxed) &&
            atomic_exchange(&ep->rx->waiting, 0)) {
            shm_ring_bell(ep);
        }
    }
    return 0;

malformed:
    ep->base.tp->stats.malformed++;
    shp_warn_sparse(1000, "malformed shared-memory ring from %s: closing",
                    ep->base.peer);
    shm_ep_close(ep, SHP_ERR_PROTO);
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
        h->cap < SHM_MIN_CAP || h->cap > shm_accept_cap(tp) ||
        (h->cap & (h->cap - 1)) != 0 ||
        h->cap < 2 * (SHM_REC_HDR + SHP_WIRE_HDR_LEN + tp->max_payload) ||
        !shm_memfd_ok(memfd, shm_seg_len(h->cap))) {
        return SHP_ERR_PROTO;
    }
    /* populated: a ring cycling through pages touched for the first time
     * faults on every one, and a fault costs more than a message */
    void *m = mmap(NULL, shm_seg_len(h->cap), PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_POPULATE, memfd, 0);
    if (m == MAP_FAILED) {
        return SHP_ERR_NO_MEMORY;
    }
    ep->seg = m;
    ep->seg_len = shm_seg_len(h->cap);
    ep->cap = h->cap;
    if (ep->seg->magic != SHM_MAGIC || ep->seg->cap != h->cap) {
        return SHP_ERR_PROTO;
    }
    shm_ep_map(ep, 0);
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
static int shm_send_fd(int fd, const shm_hello_t *hello, int memfd)
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

static void shm_io_cb(struct ev_loop *loop, ev_io *w, int revents)
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
            (void)shm_send_fd(ep->fd, &bh, priv->board_fd);
        }
        ep->accepted = 0;
        ep->announced = 1;
        ep->dispatching = 1;
        priv->on_accept(ep->base.tp, &ep->base);
        ep->dispatching = 0;
        if (ep->closed) {
            shm_ep_finish(ep);
            return;
        }
        if (ep->base.cbs == NULL) { /* refused by the owner */
            shm_ep_close(ep, SHP_ERR_CANCELED);
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
            shm_ep_finish(ep);
            return;
        }
    }
    if (ep->up && shm_drain(ep, 1 << 30) < 0) {
        return;
    }
    if (ep->up) {
        shm_flush_backlog(ep);
    }
    if (st != SHP_OK) {
        shm_ep_close(ep, st);
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
                shm_flush_backlog(ep);
            }
        }
    }
}

/* The loop's prepare / check / idle: see the header comment. */
static void shm_prepare_cb(struct ev_loop *loop, ev_prepare *w, int revents)
{
    shm_priv_t *priv = w->data;
    shm_ep_t *ep;
    int ready;
    uint32_t need = 1;

    (void)revents;
    shm_free_dead(priv);
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
            ev_timer_set(&priv->cap, 0.001, 0.);
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

static void shm_check_cb(struct ev_loop *loop, ev_check *w, int revents)
{
    shm_priv_t *priv = w->data;

    (void)revents;
    ev_timer_stop(loop, &priv->cap);
    priv->polled_ns = shp_time_ns();
    for (shm_ep_t *ep = priv->eps; ep != NULL; ep = ep->next) {
        if (ep->up && !ep->closed &&
            atomic_load_explicit(&ep->rx->sleeping, memory_order_relaxed)) {
            atomic_store_explicit(&ep->rx->sleeping, 0, memory_order_relaxed);
        }
    }
}

static void shm_idle_cb(struct ev_loop *loop, ev_idle *w, int revents)
{
    (void)revents;
    ev_idle_stop(loop, w);
    shm_drain_all(w->data);
}

/* Endpoints ---------------------------------------------------------------
 */

static void shm_hello_timeout_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    shm_ep_t *ep = w->data;

    (void)loop;
    (void)revents;
    shp_warn_sparse(1000, "shm %s: no hello within 5 s: closing",
                    ep->base.peer);
    shm_ep_close(ep, SHP_ERR_TIMED_OUT);
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
    ev_io_init(&ep->io, shm_io_cb, fd, EV_READ);
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
    (void)revents; /* the loop turned: enough */
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
    ev_prepare_init(&priv->prep, shm_prepare_cb);
    ev_check_init(&priv->check, shm_check_cb);
    ev_idle_init(&priv->idle, shm_idle_cb);
    ev_timer_init(&priv->pause, shm_resume_cb, 0., 0.);
    ev_timer_init(&priv->cap, shm_cap_cb, 0., 0.);
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
        shm_ep_free(ep);
    }
    shm_free_dead(priv);
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
    shm_abstract_name(priv->listen_addr, &sun, &slen);
    priv->lfd =
        socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (priv->lfd < 0 || bind(priv->lfd, (struct sockaddr *)&sun, slen) != 0 ||
        listen(priv->lfd, 1024) != 0) {
        st = errno == EADDRINUSE ? SHP_ERR_EXISTS : SHP_ERR_IO;
        if (st == SHP_ERR_EXISTS) {
            shm_name_taken(&sun, slen);
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

static shp_status_t shm_connect(shp_tp_t *tp, const char *addr,
                                const shp_tp_ep_cbs_t *cbs, void *arg,
                                shp_tp_ep_t **ep_out)
{
    shp_sockaddr_t sa;
    struct sockaddr_un sun;
    socklen_t slen;
    shp_status_t st = shp_sockaddr_parse(addr, 0, &sa);
    uint32_t cap = shm_ring_cap(tp);
    size_t len = shm_seg_len(cap);
    int fd = -1, memfd = -1;
    void *m = MAP_FAILED;

    if (st != SHP_OK) {
        return st;
    }
    shm_abstract_name(addr, &sun, &slen);
    fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        return SHP_ERR_IO;
    }
    if (connect(fd, (struct sockaddr *)&sun, slen) != 0) {
        st = errno == ECONNREFUSED || errno == ENOENT ? SHP_ERR_CONN_REFUSED
                                                      : SHP_ERR_IO;
        goto fail;
    }
    uid_t uid;
    if (!shm_listener_trusted(tp, fd, &uid)) {
        /* not an AN of ours: it gets nothing, not even the hello */
        shp_error("shm: @%s is held by uid %u, neither root nor ours: "
                  "refused (a squatter?)",
                  sun.sun_path + 1, (unsigned)uid);
        st = SHP_ERR_PERM;
        goto fail;
    }
    memfd = memfd_create("sharp-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (memfd < 0 || ftruncate(memfd, (off_t)len) != 0 ||
        fcntl(memfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) !=
            0) {
        st = SHP_ERR_NO_MEMORY;
        goto fail;
    }
    m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
             memfd, 0);
    if (m == MAP_FAILED) {
        st = SHP_ERR_NO_MEMORY;
        goto fail;
    }
    shm_seg_t *seg = m;
    seg->magic = SHM_MAGIC;
    seg->version = SHM_VERSION;
    seg->cap = cap;
    shm_hello_t hello = {SHM_MAGIC, SHM_VERSION, cap, tp->max_payload};
    if (shm_send_fd(fd, &hello, memfd) != 0) {
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
    shm_ep_map(ep, 1);
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
        shm_flush_backlog(ep); /* what fits goes out first */
    }
    shm_ep_close(ep, SHP_ERR_CANCELED);
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
    .send = shm_send,
    .close = shm_close,
    .mcast_join = shp_tp_stub_ep,
    .mcast_sender = shp_tp_stub_ep,
    .dump = shm_dump,
    .quiet = shp_tp_stub_quiet,
    .pull = shp_tp_stub_pull,
};
