/*
 * The aggregation manager's types, which all its files share: the
 * configuration, the manager's state (shp_am_t) and what it holds (peers,
 * ANs, trees, jobs, groups, an administrator's drains and freezes), and
 * their bounds.  Its functions are declared by the files that define them:
 * am/am.h (start, stop, topology reload), am/am_services.h (the core's
 * services to the admin interface), am/am_int.h (what the core's files
 * share).  See docs/am.md.
 */
#ifndef SHP_AM_AM_TYPES_H
#define SHP_AM_AM_TYPES_H

#include <ev.h>
#include <jansson.h>
#include <stdint.h>
#include <sys/types.h>
#include <uthash.h>

#include "am/am_store.h"
#include "topology/topo.h"
#include "topology/trees.h"
#include "protocol/auth.h"
#include "core/conn.h"

#define SHP_AM_MAX_TREE_ID 64 /* tree ids 0..63: the AN's tree table */
/* group ids: 1 .. SHP_AM_GROUP_ID_END - 1 (24 bits), handed out in turn;
 * where a restart resumes is committed a block ahead (am_persist.c) */
#define SHP_AM_GROUP_ID_END (1u << 24)
#define SHP_AM_GROUP_ID_BLOCK 1024u
/* the largest max_jobs (am/main.c's range): reservations loaded back */
#define SHP_AM_MAX_JOBS_EVER 1000000u

typedef struct shp_am_config {
    char *listen;
    char *admin_socket;
    char *admin_group;
    char *topology;
    char *an_hosts;
    char *secret_file;
    int log_level;
    unsigned max_trees;
    unsigned radix;
    unsigned flat_max; /* groups of at most this many members: one AN */
    unsigned max_jobs;
    unsigned max_list;       /* hosts or members in one request, at most */
    unsigned uid_max_jobs;   /* jobs of one user at once (root: no limit) */
    unsigned uid_max_groups; /* groups of one user's jobs (root: no limit) */
    unsigned max_peers;      /* authenticated ANs and sharpds at once */
    /* TCP peers not registered yet, at once: everyone's (past it the
     * oldest is closed), one source address's (past it a new one is
     * refused) */
    unsigned max_unauth, source_max_unauth;
    unsigned job_max_groups;
    unsigned group_osts;
    size_t group_payload;
    int dist; /* shp_dist_t, AUTO by default */
    char *mcast_prefix;
    unsigned mcast_port;
    int64_t keepalive_ms;
    int64_t auth_timeout_ms; /* a TCP peer's time to prove the secret */
    int64_t group_timeout_ms;
    int64_t tree_settle_ms;
    /* a restarted manager takes the running fabric back (am_adopt.c):
     * jobs and groups reported within this time of its start are adopted,
     * and new groups wait for every AN at most this long */
    int64_t adopt_timeout_ms;
    /* a sharpd lost (keepalives lapsed, its connection closed): its
     * host's share of the jobs is held this long for it to register
     * again and report them (am_sharpds.c); 0: revoked at once */
    int64_t sharpd_grace_ms;
    int64_t stats_interval_ms;
    char *metrics_listen; /* "" off */
    char *state_dir;      /* the state database's directory; "": none */
    int reset_state;      /* --reset-state: the old database moved aside */
    /* a standby manager (am_ha.c, docs/am.md "A standby manager") */
    char *address; /* how nodes and peers name this manager; "": listen */
    char *peers;   /* the other managers' addresses, comma separated */
    int standby;   /* start as standby: wait takeover_after for an active */
    int64_t takeover_after_ms; /* a standby takes over after this silence */
} shp_am_config_t;

typedef struct shp_am shp_am_t;
typedef struct shp_am_peer shp_am_peer_t;
typedef struct shp_am_group shp_am_group_t;
typedef struct shp_am_job shp_am_job_t;
typedef struct shp_am_adopt shp_am_adopt_t;
typedef struct shp_am_deferred shp_am_deferred_t;

/* Answers one request of the admin socket (sharpctl); the core sends the
 * reply and releases it.  The core knows no admin request: the admin module
 * installs its handler (shp_am_admin_install) before shp_am_start. */
typedef json_t *shp_am_admin_fn(shp_am_t *am, shp_am_peer_t *peer,
                                const json_t *req);

typedef enum {
    AM_PEER_NEW,
    AM_PEER_AN,
    AM_PEER_SHARPD,
    AM_PEER_ADMIN,
    AM_PEER_MANAGER /* another manager (am_ha.c) */
} am_role_t;

struct shp_am_peer {
    shp_conn_t conn;
    shp_am_t *am;
    am_role_t role;
    shp_auth_server_t auth;
    int an;         /* AN index for role AN, else -1 */
    char host[128]; /* sharpd: its host */
    /* sharpd: its last sharpd_stats (clients_refused, frames_timed_out,
     * jobs_refused: its local clients' limits reached) */
    uint64_t sd_limits[5];
    uid_t uid; /* admin: SO_PEERCRED */
    gid_t gid;
    ev_timer auth_timer; /* a TCP peer's deadline to prove the secret */
    shp_am_peer_t *next;
};

/* TCP peers that have not registered yet (role AM_PEER_NEW) */
#define SHP_AM_PEER_UNREGISTERED(p) ((p)->role == AM_PEER_NEW)

typedef struct shp_am_an {
    char name[128];
    int node; /* topology node */
    char data_addr[64];
    char transport[16]; /* of its data path: tcp, verbs or shm */
    int mcast;          /* it can send results by multicast */
    int up;
    shp_am_peer_t *peer;
    unsigned max_trees, max_groups, max_osts;
    uint64_t max_payload;
    int ntrees, ngroups;
    uint64_t registrations;
    /* from the AN's stats, polled every stats_interval */
    uint64_t ops, errors, stats_ns;
    double ops_rate;
    json_t *counters; /* the AN's last stats message */
} shp_am_an_t;

/* An administrator's settings (am_settings.c): a drained AN, a frozen
 * tree take no new groups.  A reason is at most SHP_AM_REASON_MAX bytes;
 * a manager holds at most SHP_AM_MAX_DRAINS drains (and a freeze per tree
 * id). */
#define SHP_AM_REASON_MAX 200
#define SHP_AM_MAX_DRAINS 4096u

typedef struct shp_am_drain {
    char name[128]; /* the AN's topology node */
    char reason[SHP_AM_REASON_MAX + 1];
} shp_am_drain_t;

typedef struct shp_am_freeze {
    int set;
    char root[128]; /* the tree's root AN when it was frozen */
    char reason[SHP_AM_REASON_MAX + 1];
} shp_am_freeze_t;

typedef struct shp_am_tree {
    int used;
    int up;
    shp_tree_t t;
    int ngroups;
} shp_am_tree_t;

enum { AM_GROUP_CONFIGURING, AM_GROUP_UP };

struct shp_am_group {
    uint32_t id;
    shp_am_t *am;
    shp_am_job_t *job;
    int tree;
    int state;
    shp_group_plan_t plan;
    int *an_of;  /* [plan.nans] AN index */
    char *acked; /* [plan.nans] */
    int nacked;
    int dist; /* shp_dist_t, never AUTO */
    char mcast_addr[64];
    unsigned osts;
    uint32_t payload;
    /* a standby group (group_create's standby_of): the group it stands
     * by (0: none) and the ANs the two share (0 where the topology gave
     * disjoint trees) */
    uint32_t standby_of;
    int shared;
    uint32_t stripe_of; /* a stripe (stripe_of): the group it stripes */
    /* the pending group_create */
    shp_am_peer_t *req_peer;
    int64_t req_id;
    ev_timer timer;
    UT_hash_handle hh;     /* am->groups by id */
    shp_am_group_t *jnext; /* job's list */
};

struct shp_am_job {
    uint64_t id;
    uid_t uid;
    uint8_t key[32];
    int nhosts;
    int *hosts;        /* topology nodes */
    uint8_t *attached; /* [nhosts] the host's sharpd has processes of
                            the job */
    uint8_t *held;     /* [nhosts] reserved by the host's scheduler
                          (job_reserve), until job_release */
    int reserved;      /* begun by job_reserve: outlives its processes */
    unsigned reported; /* the last sharpd report that named it (report_gen) */
    int adopted;       /* taken back from the sharpds' reports (am_adopt.c) */
    unsigned max_groups, osts;
    uint32_t payload;
    int ngroups;
    shp_am_group_t *groups;
    UT_hash_handle hh;
};

struct shp_am {
    shp_am_config_t cfg;
    struct ev_loop *loop;
    shp_auth_key_t key;
    shp_topo_t *topo;
    uint8_t *an_expected; /* [topology nodes] may host an AN */
    int *leaf;            /* [topology nodes] leaf AN node of hosts */
    /* [topology nodes] membership marks: those of the last am_mark_begin()
     * equal mark_gen (linear checks of host lists) */
    unsigned *mark;
    size_t nmark;
    unsigned mark_gen;
    shp_am_an_t *ans;
    int nans, capans;
    shp_am_tree_t trees[SHP_AM_MAX_TREE_ID];
    /* an administrator's settings (am_settings.c): drained ANs by name,
     * frozen trees by id (and root) */
    shp_am_drain_t *drains;
    unsigned ndrains, capdrains;
    shp_am_freeze_t freezes[SHP_AM_MAX_TREE_ID];
    uint64_t settings_gen; /* grows at each change: standbys are sent them */
    shp_am_job_t *jobs;
    shp_am_group_t *groups;
    uint32_t next_group;
    /* the ids this manager hands out: id % id_stride == id_stripe
     * (am_ids.h) */
    uint32_t id_stride, id_stripe;
    uint32_t group_ids_left; /* ids before the next block is committed */
    /* the state database (am_persist.c); NULL: state_dir empty */
    shp_am_store_t *store;
    char *topology_config; /* the configuration's topology path */
    int64_t next_req;
    shp_listener_t listener, admin;
    shp_am_admin_fn *admin_handler; /* required when cfg.admin_socket is set */
    shp_am_peer_t *peers;
    ev_timer settle;
    ev_timer stats_timer;
    /* adoption of a running fabric (am_adopt.c): its state, the trees
     * held back until every AN is back (trees_hold), told when built */
    shp_am_adopt_t *adopt;
    int trees_hold;
    void (*trees_built)(shp_am_t *am);
    /* sharpd requests that wait for the trees of an adopted fabric */
    shp_am_deferred_t *deferred;
    unsigned ndeferred;
    int requests_held; /* they wait (the deferred list) */
    /* hosts whose sharpd was lost, held for sharpd_grace; each report's
     * number (a sharpd's report names its jobs: those it does not name
     * lose the host) */
    struct shp_am_sd_hold *sd_holds;
    unsigned report_gen;
    char listen_addr[64];
    /* the active/standby state (am_ha.c): the epoch this manager is or
     * was active in, and its proof for the nodes (protocol/auth.h) */
    uint64_t epoch;
    char epoch_proof[SHP_AUTH_EPOCH_PROOF_LEN + 1];
    int active;          /* serving nodes (always, without peers) */
    double active_since; /* wall-clock time it became active, or standby */
    struct shp_am_ha *ha;
    /* what a manager runs when it becomes active, at start or at a
     * takeover (am.c installs it; am_ha.c calls it) */
    void (*serve)(shp_am_t *am);
    struct {
        uint64_t jobs_begun, jobs_refused, groups_created, groups_failed,
            groups_revoked, auth_failures, tree_builds;
        /* groups revoked while up, by what guarded them (am_groups.c):
         * a standby alive to take over; a standby whose group lives on;
         * nothing (the job goes to its hosts' algorithms); and standbys
         * made for a standby that took over */
        uint64_t standby_takeovers, standbys_lost, groups_unguarded_lost,
            standbys_remade;
        /* refusals at a limit: a user's uid_max_groups, a peer past
         * max_peers; squatters' jobs ended by a reservation of their id */
        uint64_t uid_groups_refused, peers_refused, squats_ended;
        /* peers not registered yet: refused past source_max_unauth,
         * closed past max_unauth; peers closed for not reading what the
         * manager sends them (their queue past its bound) */
        uint64_t unauth_refused, unauth_evicted, queue_overflows;
        /* a restart: jobs and groups taken back, groups revoked then */
        uint64_t jobs_adopted, groups_adopted, groups_not_adopted;
        /* this manager became active; stepped down (am_ha.c) */
        uint64_t takeovers, step_downs;
        /* sharpds lost and held for sharpd_grace; back within it */
        uint64_t sharpds_held, sharpds_back;
    } stats;
};

#endif
