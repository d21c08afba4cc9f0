/*
 * libsharp_coll internals, the upper layer: communicators (a group on a
 * tree, the data connection to the leaf AN, the window of operations in
 * flight) and the requests of collective calls, built on the context
 * (coll_int.h).  A communicator is a member of its context's list
 * (coll_member_t, embedded): the context reaches it only through that
 * member's callbacks.
 */
#ifndef SHP_LIBSHARP_COLL_COMM_H
#define SHP_LIBSHARP_COLL_COMM_H

#include "libsharp/coll_int.h"
#include "protocol/wire.h"
#include "reduce/reduce.h"

#include <stddef.h>

typedef struct coll_req coll_req_t;
typedef struct sharp_coll_comm coll_comm_t;

/* an operation fragment in flight */
typedef struct coll_frag {
    coll_req_t *req;
    size_t off; /* bytes into the request's stream */
    uint32_t count;
    int busy, done;
    uint64_t sent_ns, asked_ns;
    unsigned asks; /* retransmit requests sent for it */
} coll_frag_t;

/* a free bcast's result that came before this member reached it */
typedef struct coll_early {
    uint32_t seq;
    int have;
    shp_wire_hdr_t hdr;
    uint8_t data[SHP_WIRE_FREE_MAX];
} coll_early_t;

struct sharp_coll_comm {
    coll_ctx_t *ctx;
    coll_member_t member; /* in ctx's list */
    int rank, size;
    uint32_t group_id;
    uint16_t tree_id;
    unsigned osts, depth;
    uint32_t payload;
    int mcast;
    /* results taken by multicast, and retransmitted over RC on request */
    uint64_t mcast_got, retrans_got;
    const shp_tp_ops_t *rc_ops; /* the leaf AN's transport: tcp, verbs, shm */
    char leaf[64], mcast_addr[64];
    unsigned child;
    shp_tp_ep_t *ep, *mep;
    int join_status; /* SHP_INPROGRESS until the ack */
    int join_sent;   /* on the leaf AN's nonce */
    int leaving;     /* group_leave sent: no more retransmit requests */
    int left;        /* the AN confirmed our group_leave */
    shp_status_t failed;
    int destroying;
    coll_frag_t *win; /* osts entries, seq % osts */
    uint32_t next_seq, done_seq;
    uint64_t done_seq64; /* done_seq with its wraps: multicast tags' nonce */
    uint8_t mac_key[SHP_WIRE_MAC_KEY_LEN]; /* multicast results' tags */
    coll_req_t *queue, *queue_tail;        /* with fragments not yet sent */
    uint8_t *stage;
    uint8_t *sparse; /* a sparse fragment's payload (coll_sparse.c) */
    /* Free bcasts (docs/libsharp.md): a bcast of one fragment of at most
     * free_max bytes (0: none) whose seq is not a multiple of
     * SHP_WIRE_FREE_SYNC is sent by its root alone; its result may come
     * before this member reaches it: kept in early[seq % SYNC] (made on the
     * first). */
    uint32_t free_max;
    coll_early_t *early;
    /* Striping (SHARP_COLL_STRIPES, docs/libsharp.md): a communicator of
     * several stripes holds them in stripes[0, nstripes), stripes[0]
     * itself, each a group over the same members on another tree; an
     * operation of stripe_min bytes or more goes out in a part per
     * stripe.  A stripe's parent is the communicator it belongs to. */
    coll_comm_t *stripes[COLL_MAX_STRIPES];
    unsigned nstripes; /* 0 or 1: not striped */
    coll_comm_t *parent;
};

/* the communicator a member of the context's list is */
static inline coll_comm_t *coll_comm_of(coll_member_t *m)
{
    return (coll_comm_t *)((char *)m - offsetof(coll_comm_t, member));
}

/* a multi-entry IOV gathered into (or scattered from) a buffer of ours */
typedef struct coll_iov {
    uint8_t *buf;
    unsigned n;
    struct sharp_data_iov v[SHARP_COLL_DATA_MAX_IOV];
} coll_iov_t;

/* one collective call */
struct coll_req {
    coll_comm_t *comm;
    coll_req_t *next;
    shp_reduce_desc_t desc;
    size_t es, total;  /* element size, bytes of the whole stream */
    uint32_t per_frag; /* elements per fragment */
    size_t nfrags, sent, done;
    int barrier;
    /* a bcast (coll_buf.c), sent as a tree bcast where tree_bcast is on
     * (coll_post): only the member with bytes of the stream (the root)
     * sends them; the others send a header alone (docs/libsharp.md) */
    int bcast;
    uint8_t lanes; /* exact mode: int64 lanes per element (es = 8 x lanes) */
    const uint8_t *src; /* bytes [s_lo, s_hi) of the stream come from src */
    size_t s_lo, s_hi;
    uint8_t *dst; /* bytes [r_lo, r_hi) of the result land in dst */
    size_t r_lo, r_hi;
    int complete;
    int status; /* SHARP_COLL_* */
    coll_iov_t src_iov, dst_iov;
    /* a striped request: its parts, one per stripe (each a request on its
     * stripe, parent pointing here), the parts not done yet and the first
     * failure among them */
    coll_req_t *parts, *parent;
    unsigned parts_left;
    int parts_status;
};

/* what a reduce spec asks for */
enum { K_ALLREDUCE, K_REDUCE, K_REDUCE_SCATTER };

/* Requests from the callers' buffers (coll_buf.c): each returns
 * SHARP_COLL_SUCCESS with *out set, or an error and nothing allocated. */
void coll_req_release(coll_req_t *r); /* r and the buffers it owns */
void coll_iov_scatter(const coll_iov_t *iov);
/* a buffer descriptor as one contiguous range (a multi-entry IOV gathered
 * into own->buf) */
int coll_desc_ptr(const struct sharp_coll_data_desc *d, void **ptr, size_t *len,
                  coll_iov_t *own);
coll_req_t *coll_barrier_req(void); /* NULL: no memory */
int coll_reduce_req(coll_comm_t *comm, struct sharp_coll_reduce_spec *spec,
                    int kind, coll_req_t **out);
int coll_bcast_req(const coll_comm_t *comm,
                   const struct sharp_coll_bcast_spec *spec, coll_req_t **out);
int coll_allgather_req(const coll_comm_t *comm,
                       const struct sharp_coll_gather_spec *spec,
                       coll_req_t **out);

/* The data path (coll_comm.c), with the context's lock held. */
extern const shp_tp_ep_cbs_t coll_ep_cbs; /* the leaf and multicast links */
void coll_comm_fail(coll_comm_t *comm, shp_status_t st, const char *why);
/* the retransmit tick; 1 while operations are in flight */
int coll_comm_tick(coll_comm_t *comm, uint64_t now);
/* r queued and sent as the window allows; *handle = r (on failure r is
 * freed) */
int coll_post(coll_comm_t *comm, coll_req_t *r, void **handle);
/* rc (a request builder's) passed on, else r posted: handle NULL, waited
 * for and freed (its status returned); else *handle = r */
int coll_run(coll_comm_t *comm, coll_req_t *r, int rc, void **handle);
void coll_wait_complete(coll_ctx_t *ctx, coll_req_t *r);
int coll_wait_req(coll_req_t *r); /* its status; r freed */
/* the lock let go for a moment if another thread waits for it */
void coll_let_others_in(coll_ctx_t *ctx);

/* An exact sum (coll_exact.c): kind K_ALLREDUCE or K_REDUCE, ncontrib
 * contributions per member; handle non-NULL: a completed request. */
int coll_exact(coll_comm_t *comm, struct sharp_coll_reduce_spec *spec, int kind,
               int ncontrib, void **handle);

#endif
