/*
 * libsharp_coll internals, the lower layer: the context (the link to the
 * local sharpd, the job, configuration, statistics, the event loop).
 * Communicators (coll_comm.h) are built on it; the context knows them
 * only as members of its list (coll_member_t), each with the callbacks it
 * calls on the loop's events (a retransmit tick, a failure reported by
 * sharpd, finalize).  Nothing here includes coll_comm.h: the layers
 * depend one way.
 *
 * One libev loop per context drives everything; blocking calls run it until
 * what they wait for is done, sleeping on the sockets (or polling, with
 * SHARP_COLL_POLLING).  Nothing runs in the background: progress happens
 * inside library calls (and sharp_coll_progress()).
 *
 * The lower layer's files: coll_ctx.c (the context, its configuration,
 * progress and the link to sharpd), coll_job.c (the job over the
 * out-of-band exchange, init and finalize), coll_info.c (capabilities,
 * registration, printing, statistics).
 */
#ifndef SHP_LIBSHARP_COLL_INT_H
#define SHP_LIBSHARP_COLL_INT_H

#include <sharp/api/sharp_coll.h>

#include "core/config.h"
#include "core/conn.h"
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
    unsigned stripes;        /* groups a communicator's large operations use */
    size_t stripe_min;       /* bytes from which an operation is striped */
    int tree_bcast;          /* bcast: the root's data alone up the tree */
    size_t free_bcast_max;   /* a bcast this small: the root sends alone */
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
    size_t sparse_min;         /* fragments this large may go sparse; 0: none */
    size_t sparse_block;       /* bytes a bit of a sparse bitmap stands for */
    unsigned sparse_density;   /* percent of a fragment's bytes, at most */
    char *job_id; /* "": the init spec's; else a job reserved for us */
} coll_cfg_t;

typedef struct coll_stats {
    uint64_t ops, bytes, frags, retrans, errors, mcast_results, rc_results;
    uint64_t mcast_rejected; /* datagrams without a right tag (forged) */
    uint64_t striped;        /* operations cut over a communicator's stripes */
    uint64_t free_bcasts;    /* of them free bcasts (only the root sends) */
    uint64_t early_results;  /* free bcasts' results before their turn */
    uint64_t sparse_frags;   /* fragments sent sparse */
    uint64_t sparse_blocks_skipped; /* their blocks left out (all zero) */
    uint64_t sparse_results;        /* results that came sparse */
    /* passes over payload bytes (docs/performance.md, "Passes over each
     * byte"): read by the zero-block scan (at most: a block is left at its
     * first non-zero 64 bytes), under a multicast tag checked, written into
     * the caller's kept bytes (results, sparse ones expanded, and staged
     * sends) */
    uint64_t pass_scan, pass_tag, pass_write;
} coll_stats_t;

typedef struct sharp_coll_context coll_ctx_t;

#define COLL_NTP 4 /* transport providers: tcp, udp, verbs, shm */
#define COLL_MAX_STRIPES 4

/*
 * A communicator as the context sees it: a member of its list, put there
 * by coll_member_add (and taken out by coll_member_remove) with the
 * callbacks the context calls.  None of them is on an operation's path:
 * they run on the retransmit tick (every retrans_timeout / 2 while some
 * member is busy), on a failure reported by sharpd or a cancel, and at
 * finalize.
 */
typedef struct coll_member coll_member_t;
typedef struct coll_member_ops {
    /* the retransmit tick (now: shp_time_ns()): ask again for missing
     * results, time operations out; 1 while operations are in flight */
    int (*tick)(coll_member_t *m, uint64_t now);
    /* the group failed (revoked, job killed, sharpd lost, canceled):
     * pending and later operations fail */
    void (*fail)(coll_member_t *m, shp_status_t st, const char *why);
    /* finalize: a communicator the program did not destroy is; it
     * leaves the list */
    void (*destroy)(coll_member_t *m);
} coll_member_ops_t;

struct coll_member {
    const coll_member_ops_t *ops;
    coll_member_t *next;
    uint32_t group_id; /* the manager's name for it (group_revoked) */
    atomic_int cancel; /* coll_member_cancel: fail it in the loop */
};

struct sharp_coll_context {
    coll_cfg_t cfg;
    struct sharp_coll_init_spec spec;
    struct ev_loop *loop;
    shp_conn_t sd; /* the local sharpd */
    int sd_up;
    int sd_connected;
    uid_t sd_uid; /* sharpd's user ((uid_t)-1: not known) */
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
    coll_member_t *members; /* the communicators */
    ev_timer tick;
    ev_async cancel_w; /* a comm was canceled from another thread */
    pthread_mutex_t lock;
    atomic_uint lock_waiters; /* threads blocked in coll_lock */
    int mt;
    coll_stats_t stats;
};

/* context (coll_ctx.c) */
/* the SHARP_COLL_* settings: defaults, then the environment */
int coll_cfg_load(coll_cfg_t *cfg);
/* a context that nothing has been asked of yet (NULL: no memory) */
coll_ctx_t *coll_ctx_new(const struct sharp_coll_init_spec *spec);
/* this rank's own part: configuration, the loop, sharpd and the host */
int coll_ctx_setup(coll_ctx_t *ctx);
/* whatever coll_ctx_new and coll_ctx_setup made, undone */
void coll_ctx_free(coll_ctx_t *ctx);
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

/* the context's communicators (m->ops and m->group_id set by the caller) */
void coll_member_add(coll_ctx_t *ctx, coll_member_t *m);
void coll_member_remove(coll_ctx_t *ctx, coll_member_t *m);
/* any thread, without the lock: m fails at the loop's next turn */
void coll_member_cancel(coll_ctx_t *ctx, coll_member_t *m);

/* The SHARP_COLL_* settings' table (not exported from the shared
 * library: man/man_coll.c, linked with the static one, prints the
 * ENVIRONMENT section of sharp_coll(3) from it). */
const shp_config_table_t *shp_coll_config_table(void);

#endif
