/*
 * sharpd: the per-host daemon, the privileged control path of local
 * processes (see sharpd/sharpd.c for the protocol).  One shp_sharpd_t is
 * the whole daemon: its configuration, its AM connection, its local
 * clients, their jobs and the requests in flight to the AM.  sharpd/main.c
 * loads the configuration, starts it and runs the loop; the tests and the
 * fuzz harness start it on their own loop and hand it socketpairs.
 */
#ifndef SHP_SHARPD_SHARPD_H
#define SHP_SHARPD_SHARPD_H

#include <ev.h>
#include <stddef.h>
#include <stdint.h>

#include "core/conn.h"
#include "core/status.h"
#include "protocol/am_list.h"
#include "protocol/auth.h"

typedef struct shp_sharpd_config {
    char *socket;
    char *am;
    char *host;
    char *secret_file;
    int log_level;
    int64_t keepalive_ms;
    unsigned uid_max_clients; /* connections of one user at once (root: any) */
    unsigned max_clients;     /* local connections at once, everyone's */
    unsigned client_max_jobs; /* jobs one connection takes part in */
    int64_t frame_timeout_ms; /* to complete a frame begun (0: no limit) */
    /* answers waiting for a client that does not read, at most (bytes,
     * beside the one being sent): past it the client is closed */
    size_t client_max_queued;
    /* a request that finds the AM unreachable waits this long for it to
     * come back before it fails (0: fails at once) */
    int64_t am_wait_ms;
} shp_sharpd_config_t;

/* the AM connection (am_state) */
#define SHP_SHARPD_AM_DOWN 0
#define SHP_SHARPD_AM_AUTH 1 /* connecting or authenticating */
#define SHP_SHARPD_AM_REGISTERED 2

typedef struct shp_sharpd_client shp_sharpd_client_t;
typedef struct shp_sharpd_pending shp_sharpd_pending_t;
typedef struct shp_sharpd_job shp_sharpd_job_t;

typedef struct shp_sharpd {
    shp_sharpd_config_t cfg;
    struct ev_loop *loop;
    shp_auth_key_t key;
    shp_auth_client_t auth;
    shp_conn_t am;
    int am_state;   /* SHP_SHARPD_AM_* */
    int am_proved;  /* this connection's AM proved the cluster secret */
    int am_reached; /* this connection got through to the AM */
    /* why the AM is not registered (what hello tells sharp-hello), set
     * once per connection attempt; empty once registered */
    char am_error[400];
    int am_error_set;
    double backoff; /* unused: the list (ams) keeps the backoff */
    ev_timer am_timer;
    ev_timer am_grace; /* a silent AM with others listed: their turn */
    shp_am_list_t ams; /* the managers (cfg.am) and the epoch seen */
    int am_had;        /* the connection that ended had registered us */
    shp_listener_t listener;
    shp_sharpd_client_t *clients;
    unsigned nclients;
    ev_timer sweep;                /* clients that began a frame and stalled */
    shp_sharpd_pending_t *pending; /* relayed to the AM, by the AM's id */
    shp_sharpd_job_t *jobs;        /* jobs with local processes */
    /* requests waiting for the AM to come back (am_wait), oldest first */
    shp_sharpd_pending_t *held;
    unsigned nheld;
    json_t *reserved; /* this host's reservations, by job id: {owner, req} */
    int64_t next_id;
    int stopping;
    /* refusals at a limit (hello answers them) */
    struct {
        uint64_t clients_refused;  /* max_clients or uid_max_clients */
        uint64_t frames_timed_out; /* frame_timeout */
        uint64_t jobs_refused;     /* client_max_jobs */
        uint64_t queue_overflows;  /* client_max_queued */
        uint64_t frames_refused;   /* too large (before hello: 4 KiB) */
    } stats, stats_told;           /* stats_told: the AM has these */
} shp_sharpd_t;

/* The state before anything runs, on `loop` (sd->cfg as loaded: kept). */
void shp_sharpd_init(shp_sharpd_t *sd, struct ev_loop *loop);

/* shp_sharpd_init, then the host name defaulted, the cluster secret
 * loaded, the local socket listening and the AM connection begun.  On
 * failure the reason in msg, and nothing to stop. */
shp_status_t shp_sharpd_start(shp_sharpd_t *sd, struct ev_loop *loop, char *msg,
                              size_t len);

/* Closes the clients and the AM connection, forgets the jobs. */
void shp_sharpd_stop(shp_sharpd_t *sd);

/* A local process on fd (connected; its credentials by SO_PEERCRED), as
 * if accepted on the socket.  fd is closed on failure. */
shp_status_t shp_sharpd_accept(shp_sharpd_t *sd, int fd);

/* The AM connection on fd (connected), as if connected to sd->cfg.am:
 * the reconnect timer stopped, the hello sent. */
shp_status_t shp_sharpd_am_attach(shp_sharpd_t *sd, int fd);

#endif
