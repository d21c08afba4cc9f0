/*
 * The shm transport's endpoints (transport/shm/shm.c says how it works):
 * the segment's size and mapping, the listener's name and whom a connector
 * trusts, a message put on the ring (or queued behind a full one, at most
 * SHM_MAX_BACKLOG) and the doorbell rung for a sleeping consumer or for
 * the last contribution the board counts down; and an endpoint's close,
 * its memory kept until the loop sleeps.
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

uint32_t shp_tp_shm_ring_cap(const shp_tp_t *tp)
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
uint32_t shp_tp_shm_accept_cap(const shp_tp_t *tp)
{
    uint32_t own = shp_tp_shm_ring_cap(tp);
    return own > (1u << 20) ? own : 1u << 20;
}

size_t shp_tp_shm_seg_len(uint32_t cap)
{
    return sizeof(shm_seg_t) + 2 * (size_t)cap;
}

void shp_tp_shm_abstract_name(const char *addr, struct sockaddr_un *sun,
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
int shp_tp_shm_listener_trusted(const shp_tp_t *tp, int fd, uid_t *uid)
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
void shp_tp_shm_name_taken(const struct sockaddr_un *sun, socklen_t slen)
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

void shp_tp_shm_ep_map(shm_ep_t *ep, int connector)
{
    uint8_t *data = (uint8_t *)(ep->seg + 1);
    ep->tx = &ep->seg->ring[connector ? 0 : 1];
    ep->rx = &ep->seg->ring[connector ? 1 : 0];
    ep->tx_data = data + (connector ? 0 : ep->cap);
    ep->rx_data = data + (connector ? ep->cap : 0);
    ep->up = 1;
}

void shp_tp_shm_ring_bell(shm_ep_t *ep)
{
    char b = 0;
    ep->base.tp->stats.bells++;
    /* EAGAIN: bells are already waiting there, one is enough */
    (void)!send(ep->fd, &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
}

void shp_tp_shm_ep_free(shm_ep_t *ep)
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

void shp_tp_shm_free_dead(shm_priv_t *priv)
{
    while (priv->dead != NULL) {
        shm_ep_t *ep = priv->dead;
        priv->dead = ep->dead_next;
        shp_tp_shm_ep_free(ep);
    }
}

/* on_close, then off the live list; the memory goes at the next prepare
 * (its `next` stays valid for a walk that stands on it) */
void shp_tp_shm_ep_finish(shm_ep_t *ep)
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

void shp_tp_shm_ep_close(shm_ep_t *ep, shp_status_t reason)
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
        shp_tp_shm_ep_finish(ep);
    }
}

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
        shp_tp_shm_ring_bell(ep);
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
void shp_tp_shm_flush_backlog(shm_ep_t *ep)
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

shp_status_t shp_tp_shm_send(shp_tp_ep_t *base, const shp_wire_hdr_t *hdr,
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
    /* a contribution counts down the board; a free bcast's (its root's,
     * the only one of it) rings like any other message */
    int counted =
        hdr->opcode == SHP_WIRE_OP_AGG_REQ && !(hdr->flags & SHP_WIRE_F_FREE);
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
            shp_tp_shm_flush_backlog(ep);
        }
    }
    base->tp->stats.msgs_out++;
    base->tp->stats.bytes_out += SHP_WIRE_HDR_LEN + hdr->payload_len;
    return SHP_OK;
}
