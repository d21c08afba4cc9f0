/*
 * libsharp_coll internals: the context (the link to the local sharpd, the
 * job, configuration, statistics) and communicators (a group on a tree, the
 * data connection to the leaf AN, the window of operations in flight).
 *
 * One libev loop per context drives everything; blocking calls run it until
 * what they wait for is done, sleeping on the sockets (or polling, with
 * SHARP_COLL_POLLING).  Nothing runs in the background: progress happens
 * inside library calls (and sharp_coll_progress()).
 */
#ifndef SHP_LIBSHARP_COLL_INT_H
#define SHP_LIBSHARP_COLL_INT_H

#include <sharp/api/sharp_coll.h>

#include "core/config.h"
#include "core/conn.h"
#include "reduce/reduce.h"
#include "transport/transport.h"

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>

#define SHP_API __attribute__((visibility("default")))
#define SHP_HOST_MAX 64

typedef struct coll_cfg {
    int log_level;
    char *sharpd_socket;
    char *local_ip;
    unsigned quota_osts;     /* 0: what the AM grants */
    size_t quota_payload;    /* 0: what the AM grants */
    unsigned quota_groups;   /* 0: what the AM grants */
    unsigned pipeline_depth; /* 0: the group's OST quota */
    int enable_mcast_target; /* take results by multicast when offered */
    int group_is_target;     /* ask for multicast-only results */
    int enable_sat;          /* accepted; streaming is not separate here */
    int lock_on_comm_init;   /* accepted */
    int polling;             /* spin instead of sleeping in waits */
    unsigned spin_us;        /* shm: look this long before sleeping */
    unsigned sock_spin_us;   /* tcp/udp/verbs: poll this long before sleeping */
    unsigned poll_batch;     /* loop iterations per progress call */
    int64_t retrans_ms;      /* ask again for a result after this */
    int64_t coll_timeout_ms; /* -1: wait forever */
    int64_t ctl_timeout_ms;  /* requests to sharpd */
    int64_t connect_timeout_ms;
    size_t exact_one_pass_max; /* exact sums: one pass up to these bytes */
    char *job_id; /* "": the init spec's; else a job reserved for us */
} coll_cfg_t;

typedef struct coll_stats {
    uint64_t ops, bytes, frags, retrans, errors, mcast_results, rc_results;
    uint64_t mcast_rejected; /* datagrams without a right tag (forged) */
} coll_stats_t;

typedef struct coll_req coll_req_t;
typedef struct sharp_coll_comm coll_comm_t;
typedef struct sharp_coll_context coll_ctx_t;

#define COLL_NTP 4 /* transport providers: tcp, udp, verbs, shm */

struct sharp_coll_context {
    coll_cfg_t cfg;
    struct sharp_coll_init_spec spec;
    struct ev_loop *loop;
    shp_conn_t sd; /* the local sharpd */
    int sd_up;
    int sd_connected;
    char host[SHP_HOST_MAX];
    uint64_t job_id;
    int reserved; /* job_id is a job the scheduler reserved: attach only */
    uint8_t job_key[32];
    int job_ok;
    shp_status_t job_failed; /* job_killed, sharpd lost */
    unsigned osts, max_groups;
    size_t payload;
    int64_t next_id;
    int64_t want_id; /* the request a blocking call waits for */
    json_t *reply;
    /* one transport per provider (tcp, udp, verbs, shm), up on first use */
    shp_tp_t tps[COLL_NTP];
    int tps_up[COLL_NTP];
    /* the socket spin (coll_progress_once): messages in and out counted
     * at the last turn, and when that count last moved */
    uint64_t spin_msgs, spin_from_ns;
    coll_comm_t *comms;
    ev_timer tick;
    ev_async cancel_w; /* a comm was canceled from another thread */
    pthread_mutex_t lock;
    atomic_uint lock_waiters; /* threads blocked in coll_lock */
    int mt;
    coll_stats_t stats;
};

/* an operation fragment in flight */
typedef struct coll_frag {
    coll_req_t *req;
    size_t off; /* bytes into the request's stream */
    uint32_t count;
    int busy, done;
    uint64_t sent_ns, asked_ns;
    unsigned asks; /* retransmit requests sent for it */
} coll_frag_t;

struct sharp_coll_comm {
    coll_ctx_t *ctx;
    coll_comm_t *next;
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
    int leaving;     /* group_leave sent: no more retransmit requests */
    int left;        /* the AN confirmed our group_leave */
    shp_status_t failed;
    int destroying;
    atomic_int cancel; /* sharp_coll_comm_cancel: fail it in the loop */
    coll_frag_t *win;  /* osts entries, seq % osts */
    uint32_t next_seq, done_seq;
    uint64_t done_seq64; /* done_seq with its wraps: multicast tags' nonce */
    uint8_t mac_key[SHP_WIRE_MAC_KEY_LEN]; /* multicast results' tags */
    coll_req_t *queue, *queue_tail;        /* with fragments not yet sent */
    uint8_t *stage;
};

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
    uint8_t lanes; /* exact mode: int64 lanes per element (es = 8 x lanes) */
    const uint8_t *src; /* bytes [s_lo, s_hi) of the stream come from src */
    size_t s_lo, s_hi;
    uint8_t *dst; /* bytes [r_lo, r_hi) of the result land in dst */
    size_t r_lo, r_hi;
    int complete;
    int status; /* SHARP_COLL_* */
    coll_iov_t src_iov, dst_iov;
};

/* context (coll_ctx.c) */
void coll_lock(coll_ctx_t *ctx);
void coll_unlock(coll_ctx_t *ctx);
/* run the loop once: sleep on the sockets (or poll), call progress_func */
void coll_progress_once(coll_ctx_t *ctx, int may_block);
/* a request to sharpd and its answer (NULL: none; *st says why) */
json_t *coll_sd_call(coll_ctx_t *ctx, json_t *msg, shp_status_t *st);
/* a request about this job whose answer does not matter (job_end,
 * group_destroy): the type, the job id and `extra`'s members (consumed) */
void coll_sd_job_request(coll_ctx_t *ctx, const char *type, json_t *extra);
int coll_oob_gather(coll_ctx_t *ctx, void *oob, int root, void *sbuf,
                    void *rbuf, int len);
int coll_oob_bcast(coll_ctx_t *ctx, void *oob, void *buf, int len, int root);
/* every member's status -> the worst, known to all (EOOB on oob failure) */
int coll_agree(coll_ctx_t *ctx, void *oob, int rank, int size, int status);
int coll_status_to_sharp(shp_status_t st, int dflt);
void coll_arm_tick(coll_ctx_t *ctx);

/* communicators (coll_comm.c) */
void coll_comm_fail(coll_comm_t *comm, shp_status_t st, const char *why);
void coll_comm_tick(coll_comm_t *comm, uint64_t now);
int coll_comm_busy(const coll_comm_t *comm);

/* The SHARP_COLL_* settings' table (not exported from the shared
 * library: tools/man_coll.c, linked with the static one, prints the
 * ENVIRONMENT section of sharp_coll(3) from it). */
const shp_config_table_t *shp_coll_config_table(void);

#endif
