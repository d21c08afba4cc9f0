/*
 * What the files of the aggregation manager's core share (their types:
 * am/am_types.h; am.c's start and stop: am/am.h).  The files are layered,
 * bottom first; each calls only the ones below it (scripts/check-layers.sh:
 * no circle of calls):
 *
 *   am_state.c    the tables looked up (ANs, jobs, groups, sharpds), a
 *                 message sent to a peer, node marks, host lists resolved
 *   am_persist.c  the state database (am_store.c): epoch, group ids,
 *                 topology in use, reservations written
 *   am_settings.c an administrator's settings: ANs drained, trees frozen
 *   am_trees.c    the tree table: (re)builds over the live ANs, tree_config
 *   am_groups.c   groups: checks, placement on a tree, ids, multicast
 *                 address, wiring (group_add), acks, revocation
 *   am_ans.c      the AN registry: registration, messages, loss, counters
 *   am_jobs.c     jobs: admission, quotas, attach/detach, the end of a job
 *   am_reserve.c  a scheduler's reservations: job_reserve, job_release
 *   am_sharpds.c  the sharpds: registration, their requests, their loss
 *   am_adopt.c    a restart: the groups reported kept and checked, the
 *                 trees' wait, the deadline (am/am_adopt.h)
 *   am_adopt_reports.c  the ANs' and sharpds' reports read into it
 *   am_ha.c       active or standby: the peer managers, the epoch, taking
 *                 over and stepping down
 *   am_peers.c    listeners and peers: connections, authentication,
 *                 dispatch by role
 *   am.c          start and stop, topology (re)load
 *
 * The admin interface (am_admin.c) and the metrics (metrics.c) consume the
 * core through am/am_types.h and am/am_services.h (the admin interface
 * also am/am.h's topology reload); the core calls neither (the admin
 * handler is installed in am->admin_handler).
 */
#ifndef SHP_AM_AM_INT_H
#define SHP_AM_AM_INT_H

#include "am/am_services.h"
#include "am/am_types.h"
#include "core/status.h"

/* request ids towards ANs: group_add carries (group id << 20 | AN position);
 * everything else counts up from 2^60 */
#define SHP_AM_REQ_MISC_BASE (INT64_C(1) << 60)

/* am_state.c */
void shp_am_send(shp_am_peer_t *p, json_t *msg); /* takes msg; NULL: none */
shp_status_t shp_am_mark_begin(shp_am_t *am);
int shp_am_an_of_node(const shp_am_t *am, int node); /* -1: none */
shp_am_group_t *shp_am_group_find(shp_am_t *am, uint32_t id);
/* The fingerprint of the keys group gid of tree `tree` of job j gives its
 * ANs (shp_auth_group_fp): what they report to a restarted manager. */
void shp_am_group_keys_fp(const shp_am_job_t *j, uint16_t tree, uint32_t gid,
                          char fp[SHP_AUTH_FP_HEX]);
shp_am_job_t *shp_am_job_find(shp_am_t *am, uint64_t id);
shp_am_peer_t *shp_am_sharpd_of_host(shp_am_t *am, const char *host);
shp_am_job_t *shp_am_job_for(shp_am_t *am, shp_am_peer_t *p, const json_t *msg,
                             const char *ack, int64_t id);
void shp_am_job_notify(shp_am_t *am, shp_am_job_t *j, json_t *msg);
/* the same, written to the sockets now when flush (what must be out
 * before the answer that caused it) */
void shp_am_job_notify_flush(shp_am_t *am, shp_am_job_t *j, json_t *msg,
                             int flush);
shp_status_t shp_am_hosts_resolve(shp_am_t *am, const json_t *arr, int **out,
                                  int *n, char *why, size_t whylen);
int shp_am_hosts_spanned(shp_am_t *am, const int *nodes, int n);

/* am_persist.c: no-ops without a database (state_dir empty) */
shp_status_t shp_am_persist_open(shp_am_t *am, char *err, size_t errlen);
void shp_am_persist_close(shp_am_t *am);
/* the topology now in use (path, hash), before it is */
shp_status_t shp_am_persist_topology(shp_am_t *am, const char *path, char *err,
                                     size_t errlen);
/* a reserved job's row (uid, key, quotas, hosts and holds) */
shp_status_t shp_am_persist_job(shp_am_t *am, const shp_am_job_t *j);
void shp_am_persist_job_forget(shp_am_t *am, const shp_am_job_t *j);

/* am_settings.c: loaded at start (after the topology); a tree built
 * again under another root loses its freeze */
shp_status_t shp_am_settings_load(shp_am_t *am, char *err, size_t errlen);
void shp_am_settings_free(shp_am_t *am);
void shp_am_settings_tree_built(shp_am_t *am, int t);
/* The settings as rows {name: value} for a standby, and a standby's copy
 * replaced by the active one's (in memory and in its database) */
json_t *shp_am_settings_rows(const shp_am_t *am);
void shp_am_settings_replace(shp_am_t *am, const json_t *rows,
                             const char *from);

/* am_trees.c */
void shp_am_trees_init(shp_am_t *am);
void shp_am_trees_schedule(shp_am_t *am);
void shp_am_trees_rebuild(shp_am_t *am);
void shp_am_tree_drop(shp_am_t *am, int t);

/* am_groups.c */
void shp_am_group_create(shp_am_t *am, shp_am_peer_t *p, const json_t *msg,
                         int64_t id);
void shp_am_group_destroy(shp_am_t *am, shp_am_peer_t *p, const json_t *msg,
                          int64_t id);
void shp_am_group_ack(shp_am_t *am, int64_t id, shp_status_t st,
                      const char *error, int from_an);
void shp_am_group_revoke(shp_am_t *am, shp_am_group_t *g, shp_status_t st,
                         const char *reason);
void shp_am_group_remove_from_ans(shp_am_t *am, shp_am_group_t *g);
void shp_am_group_free(shp_am_t *am, shp_am_group_t *g);

/* am_ans.c */
void shp_am_an_register(shp_am_t *am, shp_am_peer_t *p, const json_t *msg);
void shp_am_an_message(shp_am_t *am, shp_am_peer_t *p, const json_t *msg);
void shp_am_an_lost(shp_am_t *am, int a, const char *why);
void shp_am_ans_poll_start(shp_am_t *am);

/* am_jobs.c */
void shp_am_job_begin(shp_am_t *am, shp_am_peer_t *p, const json_t *msg,
                      int64_t id);
void shp_am_job_attach(shp_am_t *am, shp_am_peer_t *p, const json_t *msg,
                       int64_t id);
int shp_am_job_attach_host(shp_am_t *am, shp_am_job_t *j, const char *host);
void shp_am_job_detach_host(shp_am_t *am, shp_am_job_t *j, const char *host,
                            const char *reason, int lost);
shp_am_job_t *shp_am_job_add(shp_am_t *am, uint64_t job_id, uid_t uid,
                             const json_t *msg);
json_t *shp_am_job_quota_reply(const char *type, int64_t id,
                               const shp_am_job_t *j);
void shp_am_job_free(shp_am_t *am, shp_am_job_t *j);

/* am_reserve.c */
void shp_am_job_reserve(shp_am_t *am, shp_am_peer_t *p, const json_t *msg,
                        int64_t id);
void shp_am_job_release(shp_am_t *am, shp_am_peer_t *p, const json_t *msg,
                        int64_t id);
shp_status_t shp_am_reserve_restore(shp_am_t *am, char *err, size_t errlen);

/* am_sharpds.c */
void shp_am_sharpd_register(shp_am_t *am, shp_am_peer_t *p, const json_t *msg);
void shp_am_sharpd_message(shp_am_t *am, shp_am_peer_t *p, const json_t *msg);
void shp_am_sharpd_lost(shp_am_t *am, const char *host, shp_status_t reason);
/* A sharpd lost: its host's share of the jobs held for sharpd_grace, then
 * lost (at once with no grace).  Unhold: it registered again (1: it was
 * held).  Sweep: after its report, the jobs it did not name lose its host.
 * Clear: every hold dropped, nothing revoked (shutdown, stepping down). */
void shp_am_sharpd_hold(shp_am_t *am, const char *host, shp_status_t reason);
int shp_am_sharpd_unhold(shp_am_t *am, const char *host);
void shp_am_sharpd_sweep(shp_am_t *am, const char *host);
void shp_am_sharpd_holds_clear(shp_am_t *am);

/* a sharpd's request that waits for the trees (am->requests_held) */
struct shp_am_deferred {
    shp_am_peer_t *peer;
    json_t *msg;
    shp_am_deferred_t *next;
};
void shp_am_sharpd_replay(shp_am_t *am);
void shp_am_sharpd_forget(shp_am_t *am, shp_am_peer_t *p);

/* am_adopt.c */
shp_status_t shp_am_adopt_start(shp_am_t *am);
void shp_am_adopt_stop(shp_am_t *am);
void shp_am_adopt_an(shp_am_t *am, shp_am_peer_t *p, const json_t *msg);
void shp_am_adopt_sharpd(shp_am_t *am, shp_am_peer_t *p, const json_t *msg);
/* am_ha.c */
typedef struct shp_am_ha shp_am_ha_t;
/* The epoch as persisted in the state database: loaded at start,
 * committed before any node hears it (am_ha.c) */
uint64_t am_epoch_load(shp_am_t *am);
int am_epoch_commit(shp_am_t *am, uint64_t epoch);
/* peers configured: standby until no peer is active; none: active now */
shp_status_t shp_am_ha_start(shp_am_t *am, char *err, size_t errlen);
void shp_am_ha_stop(shp_am_t *am);
void shp_am_ha_step_down(shp_am_t *am, const char *why);
/* a node's registration may go on (1), or it was answered and closed:
 * this manager is standby, or stale (and steps down) */
int shp_am_ha_admit(shp_am_t *am, shp_am_peer_t *p, const json_t *msg,
                    const char *ack_type);
void shp_am_ha_refused(shp_am_t *am, shp_am_peer_t *p, const json_t *msg);
void shp_am_ha_peer_register(shp_am_t *am, shp_am_peer_t *p, const json_t *msg);
void shp_am_ha_peer_message(shp_am_t *am, shp_am_peer_t *p, const json_t *msg);

/* am_peers.c */
shp_status_t shp_am_listen(shp_am_t *am, char *err, size_t errlen);
void shp_am_unlisten(shp_am_t *am);
void shp_am_peers_close(shp_am_t *am);

#endif
