/*
 * Shared by the harnesses of daemons with control connections (fuzz_am,
 * fuzz_sharpd): the far ends of the daemon's sockets.  The daemon's side of
 * a socketpair is handed to its own accept callback; the harness writes
 * frames into the other end, runs the daemon's event loop until nothing
 * moves, and reads everything the daemon sent: every frame must decode, and
 * requests of the types in fz_pend_types are kept to be answered.
 */
#ifndef SHP_TESTS_FUZZ_PEER_H
#define SHP_TESTS_FUZZ_PEER_H

#include "tests/fuzz/fuzz.h"

#include "protocol/ctl.h"

#include <errno.h>
#include <ev.h>
#include <sys/socket.h>
#include <unistd.h>

#define FZ_NPEERS 16

typedef struct fz_peer {
    int fd; /* our end; -1: none */
    int admin;
    uint8_t *rbuf;
    size_t rlen;
    struct {
        int64_t id;
        char type[32];
    } pend[16];
    int npend;
} fz_peer_t;

static struct ev_loop *loop;
static fz_peer_t peers[FZ_NPEERS];
/* the harness's: requests from the daemon worth answering (NULL-ended) */
static const char *const fz_pend_types[];

static inline void peer_drop(fz_peer_t *p)
{
    if (p->fd >= 0) {
        close(p->fd);
    }
    free(p->rbuf);
    memset(p, 0, sizeof(*p));
    p->fd = -1;
}

/* What the AM sent: every frame must decode; requests are kept for
 * FZ_AM_ACK. */
static inline void peer_parse(fz_peer_t *p)
{
    size_t off = 0, len;

    if (p->rbuf == NULL) {
        return;
    }
    while (shp_ctl_frame_len(NULL, p->rbuf + off, p->rlen - off, &len) ==
           SHP_OK) {
        json_t *msg = NULL;
        const char *why = NULL;
        uint8_t type;
        int64_t id;

        if (len > p->rlen - off) {
            break;
        }
        if (shp_ctl_decode(p->rbuf + off, len, &type, &msg, &why) != SHP_OK) {
            fprintf(stderr, "the daemon sent a bad frame: %s\n", why);
            abort();
        }
        if (msg != NULL &&
            shp_json_get_int(msg, "id", 0, INT64_MAX, &id, NULL) == SHP_OK &&
            p->npend < 16) {
            const char *t = shp_ctl_type(msg);
            int k = 0;
            while (fz_pend_types[k] != NULL && strcmp(fz_pend_types[k], t)) {
                k++;
            }
            if (fz_pend_types[k] != NULL) {
                p->pend[p->npend].id = id;
                snprintf(p->pend[p->npend].type, sizeof(p->pend[0].type), "%s",
                         t);
                p->npend++;
            }
        }
        json_decref(msg);
        off += len;
    }
    FZ_CHECK(p->rlen - off < SHP_CTL_HDR_LEN ||
             shp_ctl_frame_len(NULL, p->rbuf + off, p->rlen - off, &len) ==
                 SHP_OK);
    memmove(p->rbuf, p->rbuf + off, p->rlen - off);
    p->rlen -= off;
}

/* Run the loop until nothing moves: the AM reads what we wrote, answers,
 * flushes; we read it all. */
static inline void pump(void)
{
    for (int round = 0; round < 8; round++) {
        int moved = 0;
        ev_run(loop, EVRUN_NOWAIT);
        for (int i = 0; i < FZ_NPEERS; i++) {
            fz_peer_t *p = &peers[i];
            uint8_t buf[65536];
            ssize_t n = -1;
            while (p->fd >= 0 &&
                   (n = recv(p->fd, buf, sizeof(buf), MSG_DONTWAIT)) != 0) {
                if (n < 0) {
                    FZ_CHECK(errno == EAGAIN || errno == EINTR);
                    break;
                }
                p->rbuf = realloc(p->rbuf, p->rlen + (size_t)n);
                FZ_CHECK(p->rbuf != NULL);
                memcpy(p->rbuf + p->rlen, buf, (size_t)n);
                p->rlen += (size_t)n;
                moved = 1;
            }
            if (p->fd >= 0 && n == 0) {
                peer_parse(p);
                peer_drop(p); /* the AM closed it */
                moved = 1;
                continue;
            }
            if (p->fd >= 0) {
                peer_parse(p);
            }
        }
        if (!moved && round > 0) {
            break;
        }
    }
}

static inline fz_peer_t *free_peer(void)
{
    for (int i = 0; i < FZ_NPEERS; i++) {
        if (peers[i].fd < 0) {
            return &peers[i];
        }
    }
    return NULL;
}

static inline void peer_send(fz_peer_t *p, const void *buf, size_t len)
{
    const uint8_t *b = buf;

    while (len > 0 && p->fd >= 0) {
        ssize_t n = send(p->fd, b, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && errno == EAGAIN) {
            pump(); /* the AM reads, we read its answers */
            continue;
        }
        if (n <= 0) {
            return; /* the AM has closed it */
        }
        b += n;
        len -= (size_t)n;
    }
}

/* Send what the input gives (u16 length, bytes) to peer p: one control
 * frame with it as the body, or (raw) the bytes as they are. */
static inline void op_send_to(fz_peer_t *p, fz_in_t *in, int raw)
{
    size_t len = fz_u16(in) % 4096;
    uint8_t *buf = malloc(SHP_CTL_HDR_LEN + len);

    FZ_CHECK(buf != NULL);
    len = fz_bytes(in, buf + SHP_CTL_HDR_LEN, len);
    shp_ctl_hdr_pack(SHP_CTL_FRAME_MSG, (uint32_t)len, buf);
    if (raw) {
        peer_send(p, buf + SHP_CTL_HDR_LEN, len);
    } else {
        peer_send(p, buf, SHP_CTL_HDR_LEN + len);
    }
    free(buf);
    pump();
}

/* u8 peer, then as op_send_to */
static inline void op_send(fz_in_t *in, int raw)
{
    fz_peer_t *p = &peers[fz_u8(in) % FZ_NPEERS];

    op_send_to(p, in, raw);
}

#endif
