/*
 * Internal to sharpd/: what the daemon's files share (sharpd/sharpd.h is
 * the room's face: the daemon as an object and what main.c, the tests and
 * the fuzzer call).  The files are layered, bottom first; each calls only
 * the ones above it in this list (scripts/check-layers.sh: no circle of
 * calls):
 *
 *   sharpd_jobs.c     the jobs, groups and reservations it holds for a
 *                     restarted manager, which client takes part in which
 *                     job; a message sent, an answer made
 *   sharpd_am.c       the manager link: connect, authenticate, register
 *                     (the jobs reported), the epoch, the AM's answers and
 *                     notifications, loss and the grace of a silent one,
 *                     held requests relayed once registered
 *   sharpd_clients.c  the local clients: accept (limits), hello, requests
 *                     relayed or held (am_wait), a close that detaches
 *                     jobs, the sweep of stalled frames, counts to the AM
 *   sharpd.c          the lifecycle: init, start, stop
 */
#ifndef SHP_SHARPD_SHARPD_INT_H
#define SHP_SHARPD_SHARPD_INT_H

#include "sharpd/sharpd.h"

#include <sys/types.h>
#include <uthash.h>

typedef shp_sharpd_t sd_t;
typedef shp_sharpd_client_t client_t;
typedef shp_sharpd_pending_t pending_t;
typedef shp_sharpd_job_t job_t;

struct shp_sharpd_client {
    shp_conn_t conn;
    sd_t *sd;
    uid_t uid;
    pid_t pid;
    /* the jobs it began or attached to, every one (at most client_max_jobs
     * with those asked for and not answered yet): its close detaches them */
    uint64_t *jobs;
    unsigned njobs, capjobs, asked;
    /* a frame begun and not completed: since when, and the frames received
     * then (frame_timeout) */
    uint64_t partial_ns, partial_frames;
    client_t *next;
};

/* a request relayed to the AM, or waiting for it (sd->held, am_wait) */
struct shp_sharpd_pending {
    int64_t am_id;
    client_t *client;
    int64_t client_id;
    char type[32];
    uint64_t job_id;
    json_t *req;          /* the request as relayed (uid stamped) */
    uint64_t deadline_ns; /* held: when it fails */
    shp_sharpd_pending_t *hnext;
    UT_hash_handle hh;
};

/* groups of a job remembered for a restarted AM, at most */
#define SD_JOB_MAX_GROUPS 256
/* requests waiting for the AM, at most: in all, and of one connection */
#define SD_MAX_HELD 1024
#define SD_CLIENT_MAX_HELD 8
/* reservations of this host remembered, at most */
#define SD_MAX_RESERVED 4096

/* a job with local processes, and what a restarted AM needs to take it
 * back (sd_am_register): its key, quotas and hosts as the AM answered,
 * the groups created through this host with their members */
struct shp_sharpd_job {
    uint64_t id;
    uid_t uid;
    int nclients;
    int have_key;
    uint8_t key[32];
    int64_t max_groups, osts, payload; /* 0: not known here */
    json_t *hosts;                     /* job_begin's, or NULL */
    json_t *groups;                    /* [{group_id, members?}] */
    UT_hash_handle hh;
};

/* sharpd_jobs.c */
void shp_sharpd_job_free(job_t *j);
void shp_sharpd_pending_free(pending_t *p);
/* m sent on c if it is open (taken; NULL: nothing) */
void shp_sharpd_send(shp_conn_t *c, json_t *m);
/* "<req_type>_ack" {id, status, error?} */
json_t *shp_sharpd_ack(const char *req_type, int64_t id, shp_status_t st,
                       const char *error);
job_t *shp_sharpd_job_get(sd_t *sd, uint64_t id);
int shp_sharpd_pending_joins(const pending_t *p);
int shp_sharpd_client_has_job(const client_t *c, uint64_t id);
shp_status_t shp_sharpd_client_add_job(client_t *c, uint64_t id, uid_t uid);
void shp_sharpd_job_drop(sd_t *sd, job_t *j);
void shp_sharpd_notify_job(sd_t *sd, uint64_t id, const json_t *msg);
void shp_sharpd_track_group(sd_t *sd, const json_t *req, const json_t *reply);
void shp_sharpd_untrack_group(sd_t *sd, uint64_t jid, int64_t gid);
void shp_sharpd_job_learn(sd_t *sd, const pending_t *p, const json_t *reply);
void shp_sharpd_track_reservation(sd_t *sd, const pending_t *p);

/* sharpd_am.c */
const char *shp_sharpd_am_addr(const sd_t *sd);
void shp_sharpd_am_connect(sd_t *sd);
void shp_sharpd_am_timer_cb(struct ev_loop *loop, ev_timer *w, int revents);
void shp_sharpd_am_grace_cb(struct ev_loop *loop, ev_timer *w, int revents);

/* sharpd_clients.c */
void shp_sharpd_held_expire(sd_t *sd, int all);
void shp_sharpd_sweep_cb(struct ev_loop *loop, ev_timer *w, int revents);
void shp_sharpd_on_accept(shp_listener_t *l, int fd,
                          const shp_sockaddr_t *peer);

#endif
