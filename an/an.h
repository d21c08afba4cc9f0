/*
 * sharp_an: the aggregation node.
 *
 * Data path: children (clients or lower ANs) connect, join groups proving
 * the job key (over a nonce the AN sends each link first), and send one payload per operation; the AN folds them strictly in
 * child order, sends the result to its parent, or at the top of the group
 * distributes it down (RC) and/or by multicast.  Control path: a connection
 * to the aggregation manager that registers this AN and configures trees and
 * groups (an/an_ctl.c).  See docs/an.md.
 */
#ifndef SHP_AN_H
#define SHP_AN_H

#include "protocol/am_list.h"
#include "protocol/auth.h"
#include "core/conn.h"
#include "reduce/reduce.h"
#include "reduce/sparse.h"
#include "transport/transport.h"
#include "protocol/wire.h"

#include <ev.h>
#include <jansson.h>
#include <stdint.h>
#include <uthash.h>

#define SHP_AN_MAX_TREES 64
#define SHP_AN_MAX_GROUPS 1000
#define SHP_AN_MAX_OSTS 256
#define SHP_AN_MAX_CHILDREN 1024

typedef struct shp_an_config {
    char *name;
    char *listen;
    char *am;
    int transport; /* index into shp_an_transports */
    int log_level;
    unsigned max_trees;
    unsigned max_groups;
    unsigned max_osts;
    size_t max_payload;
    int64_t am_keepalive_ms;
    int64_t join_timeout_ms;
    /* a child's link that joined no group this long after it came is
     * closed (0: never) */
    int64_t join_deadline_ms;
    /* children's links that joined nothing yet, at most: everyone's
     * (past it the oldest is closed), one source address's (past it a new
     * one is refused) */
    unsigned max_unjoined;
    unsigned source_max_unjoined;
    char *secret_file;
    char *advertise;
    int sched;        /* 0: batch, 1: other (main.c) */
    unsigned spin_us; /* shm: look at the rings this long before sleeping */
    int spin_many;    /* shm: spin also while waiting for several children */
    unsigned sock_spin_us; /* tcp: poll this long after a message, then sleep */
    int quiet_links;       /* tcp: one child owing an operation wakes us */
} shp_an_config_t;

/* the transports the AN speaks, by name (cfg.transport indexes it) */
extern const char *const shp_an_transports[];

typedef struct shp_an shp_an_t;
typedef struct shp_an_group shp_an_group_t;

/* A data connection: to a child (accepted) or to a parent (connected). */
typedef struct shp_an_link {
    shp_an_t *an;
    shp_tp_ep_t *ep;
    int is_parent;
    int connected;
    int in_connect; /* its joins go out: a close there leaves the free to it */
    /* the nonce joins on this link prove the job key over: made by us on a
     * child's link (sent first), the parent's on a parent link */
    uint8_t nonce[SHP_WIRE_NONCE_LEN];
    int have_nonce; /* a parent link: the parent's nonce came */
    /* a child's link: closed if it has joined no group by then
     * (cfg.join_deadline_ms after it came; stopped at its first join) */
    ev_timer join_deadline;
    /* a child's link that joined no group yet: it takes only messages a
     * join needs (ep->rx_limit) and counts in an->nunjoined */
    int unjoined;
    uint16_t tree_id;
    int quiet; /* its messages wait until pulled (shp_an_run) */
    char addr[64];
    uint32_t *groups; /* ids of the groups this link is part of */
    unsigned ngroups, cap_groups;
    struct shp_an_link *next; /* in an->links */
    UT_hash_handle hh;        /* parents, by addr */
} shp_an_link_t;

typedef struct shp_an_child {
    shp_an_link_t *link;
    uint32_t next_seq; /* the next operation this child must send */
    int is_an;
    int left;    /* the member left the group cleanly (group_leave) */
    int rc_only; /* multicast does not reach it: results over RC */
} shp_an_child_t;

enum {
    SHP_AN_SLOT_FREE = 0,
    SHP_AN_SLOT_FOLD,  /* children's payloads arriving */
    SHP_AN_SLOT_READY, /* complete here, waiting for the ones before it */
    SHP_AN_SLOT_UP,    /* sent to the parent, waiting for the result */
    SHP_AN_SLOT_DONE,  /* result held (for retransmits) until reuse */
    /* a free bcast's result asked for (retransmit) before anything of it
     * came: the askers are marked, nothing else known yet */
    SHP_AN_SLOT_WAIT,
};

typedef struct shp_an_slot {
    shp_an_group_t *group;
    uint32_t seq;
    int state;
    uint16_t flags; /* BARRIER, EXACT, BCAST, FREE */
    uint8_t lanes;  /* EXACT: int64 lanes per element */
    shp_reduce_desc_t desc;
    uint32_t count, len;
    unsigned arrived;
    uint8_t *acc;
    shp_fold_t fold;
    const void **pending;
    uint8_t **copies; /* [nchildren]: copies of early payloads */
    uint8_t *want;    /* [nchildren]: asked for the result before it came */
    /* a sparse operation (an_sparse.c): opened by a SPARSE payload, its
     * children folded in order by sp (seen: a count per block; ones: the
     * bitmap a dense child stands for), early ones kept as copies of
     * clen[ci] bytes (its top bit: kept as sent, sparse); the result packed
     * into sbuf, swapped with acc when it goes sparse */
    int sparse;
    uint32_t dense_len;
    shp_sparse_fold_t sp;
    uint32_t *seen;
    uint8_t *ones, *sbuf;
    size_t nblocks_cap;
    uint32_t *clen;
} shp_an_slot_t;

struct shp_an_group {
    UT_hash_handle hh;
    uint32_t id;
    uint16_t tree_id;
    uint64_t job_id;
    /* the group's keys from the manager (never the job key): joins prove
     * the join key, multicast results are tagged with the mac key */
    uint8_t join_key[SHP_WIRE_JOIN_KEY_LEN];
    uint8_t mac_key[SHP_WIRE_MAC_KEY_LEN];
    uint64_t mcast_seq64; /* the last operation multicast, with seq wraps */
    unsigned nchildren;
    unsigned nleft; /* children that left (group_leave) */
    shp_an_child_t *children;
    int is_top;
    uint32_t parent_index;
    shp_an_link_t *parent;
    int parent_joined;
    int join_tries;
    uint64_t join_start_ns; /* first join sent to the parent */
    ev_timer join_timer;
    int64_t add_req_id; /* AM request answered once the parent join is done */
    int dist;           /* shp_dist_t (protocol/ctl.h), never AUTO */
    char mcast_addr[64];
    shp_tp_ep_t *mcast_tx;
    unsigned osts;
    uint32_t payload;
    /* the next operation to complete here, in order: every one before it
     * went up (or down, at the top), or came down from the parent, or was
     * a free bcast whose root is elsewhere (every child passed it) */
    uint32_t folded;
    uint32_t max_next; /* the most a child's next_seq reached */
    int free_seen;     /* it carried a free bcast: one message may do */
    unsigned scan;     /* children seen past `folded` so far (an_fold.c) */
    unsigned sentinel; /* the child whose link wakes us (quiet links) */
    int quiet;         /* its other children's links are quiet now */
    /* a child's message came since the last sleep: its quiet links are
     * read after the sleep (shp_an_run) */
    int news;
    unsigned nslots;
    shp_an_slot_t *slots;
    uint8_t **free_bufs; /* recycled payload copies */
    unsigned nfree, cap_free;
    int failed;
    int mcast_unfit_logged; /* said once: results too large to multicast */
    shp_status_t fail_status;
    uint64_t ops, bytes;
    uint64_t exact_ops; /* of them in exact mode (SHP_WIRE_F_EXACT) */
    shp_an_t *an;
};

typedef struct shp_an_tree {
    int configured;
    char parent[64]; /* "" = root */
} shp_an_tree_t;

/* What the AN core tells whoever drives it (the control link, an/an_ctl.c),
 * through the table given to shp_an_set_events: the core never calls its
 * driver by name.  No table (or a NULL member): nobody is told. */
typedef struct shp_an_events {
    /* g failed (status g->fail_status, `reason` in words) */
    void (*group_failed)(void *arg, const shp_an_group_t *g,
                         const char *reason);
    /* the group_add request req_id, answered SHP_INPROGRESS, is done: the
     * parent join succeeded or failed, or the group was removed first
     * (`error` is NULL on SHP_OK) */
    void (*group_add_done)(void *arg, int64_t req_id, shp_status_t status,
                           const char *error);
} shp_an_events_t;

typedef struct shp_an_stats {
    uint64_t ops;     /* operations folded */
    uint64_t results; /* results distributed or forwarded */
    uint64_t mcast_sent;
    uint64_t retransmits;
    uint64_t joins, join_refused;
    uint64_t join_early; /* a child AN asked before the group was here (it
                            retries: part of setting a group up) */
    uint64_t err_bad_key, err_unknown_group, err_seq_window, err_mismatch,
        err_malformed, err_protocol, err_forged;
    uint64_t groups_failed;
    uint64_t links_lost;
    uint64_t join_deadline; /* children's links closed: no join in time */
    /* children's links that joined nothing: refused past
     * source_max_unjoined, the oldest closed past max_unjoined */
    uint64_t unjoined_refused, unjoined_evicted;
    uint64_t quiet_msgs;  /* messages read from quiet links (shp_an_run) */
    uint64_t quiet_reads; /* reads of quiet links (shp_an_run) */
    /* sparse payloads (an_sparse.c): children's that came sparse, results
     * that went on sparse (up or down), blocks they left out */
    uint64_t sparse_in, sparse_out, sparse_blocks_skipped;
    /* passes over payload bytes (against bytes_in): children's and
     * results' bytes folded, copied or expanded into slots, and tagged for
     * multicast (docs/performance.md, "Passes over each byte") */
    uint64_t pass_fold, pass_copy, pass_tag;
} shp_an_stats_t;

struct shp_an {
    struct ev_loop *loop;
    shp_an_config_t cfg;
    shp_tp_t tp;                     /* reliable transport */
    shp_tp_t mcast_tp;               /* multicast transport */
    const shp_tp_ep_cbs_t *link_cbs; /* the links' endpoints (shp_an_start) */
    int have_mcast;
    char data_addr[64];
    char local_ip[64];
    shp_an_group_t *groups; /* uthash by id */
    unsigned ngroups;
    shp_an_link_t *parents; /* uthash by addr */
    shp_an_link_t *links;   /* every link */
    shp_an_tree_t trees[SHP_AN_MAX_TREES];
    unsigned ntrees;
    shp_an_stats_t stats;
    const shp_an_events_t *events; /* shp_an_set_events */
    void *events_arg;
    /* control connection to the AM */
    shp_conn_t am;
    int am_up;
    int authenticated; /* the AM proved the cluster secret, we answered */
    int registered;
    shp_auth_key_t key;
    shp_auth_client_t auth;
    ev_timer am_timer;
    shp_am_list_t ams; /* the managers (cfg.am) and the epoch seen */
    int stopping;
    int stop; /* shp_an_run returns */
    /* the socket spin's look at the machine (shp_an_run): /proc/loadavg,
     * when it was read, whether a core was free then */
    const char *loadavg_path; /* NULL: /proc/loadavg (tests: a file) */
    int loadavg_fd;
    uint64_t load_at;
    int core_free;
    unsigned nquiet;    /* links quiet now */
    unsigned nunjoined; /* children's links that joined nothing yet */
    /* a sleep with quiet links ends by this at the latest */
    ev_timer quiet_wake;
    uint64_t quiet_all_at; /* every quiet link was last read then */
    int quiet_timed_out;   /* a sleep ended by quiet_wake */
};

/* The core (an.c, an_run.c, an_group.c; the rest of it is internal:
 * an/an_int.h) */
SHP_WUR shp_status_t shp_an_start(shp_an_t *an, struct ev_loop *loop);
void shp_an_stop(shp_an_t *an);
/* Run the loop until shp_an_quit. */
void shp_an_run(shp_an_t *an);
void shp_an_quit(shp_an_t *an);
shp_an_group_t *shp_an_group_find(shp_an_t *an, uint32_t id);
/* Create a group from an AM request; `why` explains a refusal.
 * SHP_INPROGRESS: below the top, done when the parent join is
 * (shp_an_events_t.group_add_done). */
SHP_WUR shp_status_t shp_an_group_add(shp_an_t *an, const json_t *req,
                                      int64_t req_id, const char **why);
SHP_WUR shp_status_t shp_an_group_remove(shp_an_t *an, uint32_t id);
SHP_WUR shp_status_t shp_an_tree_set(shp_an_t *an, const json_t *req,
                                     const char **why);
json_t *shp_an_stats_json(const shp_an_t *an);
/* Log the state of every group (SIGUSR1). */
void shp_an_dump(shp_an_t *an);
/* Who is told of the core's events (NULL: nobody). */
void shp_an_set_events(shp_an_t *an, const shp_an_events_t *events, void *arg);

/* an_ctl.c: the control connection.  It drives the core (the functions
 * above) and listens to its events (shp_an_set_events, from
 * shp_an_ctl_start on); the core does not know of it. */
void shp_an_ctl_start(shp_an_t *an);
void shp_an_ctl_stop(shp_an_t *an);

#endif
