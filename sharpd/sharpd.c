/*
 * sharpd: the per-host daemon, the privileged control path of local
 * processes.
 *
 * Local processes connect to a Unix socket; sharpd learns who they are
 * with SO_PEERCRED (never from what they say), stamps their uid on every
 * request and relays it to the AM over an authenticated TCP connection:
 *
 *   client -> sharpd  hello {id} -> hello_ack {host, am_up, stats}
 *                     job_begin {id, job_id, hosts, req?}   job_attach {id,
 *                     job_id}   job_end {id, job_id}   group_create {id,
 *                     job_id, members, dist?}   group_destroy {id, job_id,
 *                     group_id, failed?}   job_reserve {id, job_id, owner,
 *                     req?}
 *                     job_release {id, job_id} (root: a scheduler)
 *   sharpd -> client  <request>_ack {id, status, error?, ...the AM's answer}
 *                     group_revoked / job_killed {job_id, ...} for the jobs
 *                     the client takes part in (group_revoked with "all":
 *                     true when sharpd lost the AM: every group of the job)
 *
 * When the last local process of a job exits without job_end, sharpd tells
 * the AM (job_detach), which revokes the job's groups (and ends the job
 * when no host has processes of it and none holds a reservation): every
 * job a connection began or attached to is tracked, at most
 * client_max_jobs.  Connections are bounded (uid_max_clients per user,
 * max_clients in all: one more is told why and closed), and one that
 * began a frame and has not completed it in frame_timeout is closed; one
 * idle between requests is not (MPI processes keep theirs for the job).
 * The counts of these refusals go to the AM when they change
 * (sharpd_stats), for sharpctl stats and the metrics.  It reconnects to a
 * lost AM with backoff and reports its jobs (key, quotas, hosts, the
 * groups created here with their members) and its host's reservations,
 * which a restarted AM takes back (am/am_adopt.c): when the AM closed the
 * connection the processes are told nothing, their groups run on; when it
 * went silent (keepalives: this host may be cut off) they hear their
 * groups are gone.  Meanwhile requests that begin or attach to a job
 * wait for the AM (am_wait); group requests and a job's end fail at once.
 * With several managers (am = a list) it tries them in turn and stays with
 * the active one, refusing one whose epoch is older than one it was
 * registered with (protocol/am_list.h).
 *
 * The daemon's files: sharpd/sharpd_int.h.  This one is its lifecycle:
 * init, start (the secret, the socket, the first connection to the
 * manager) and stop.
 */
#include "sharpd/sharpd_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/log.h"
#include "core/net.h"
#include "core/time.h"
#include "protocol/ctl.h"

void shp_sharpd_init(sd_t *sd, struct ev_loop *loop)
{
    sd->loop = loop;
    sd->next_id = 1;
    sd->backoff = 0.1;
    if (!sd->reserved)
        sd->reserved = json_object();
    char err[200];
    if (shp_am_list_parse(&sd->ams, sd->cfg.am, err, sizeof(err)) != SHP_OK)
        shp_error("%s", err);
    ev_timer_init(&sd->am_timer, shp_sharpd_am_timer_cb, 0., 0.);
    sd->am_timer.data = sd;
    ev_timer_init(&sd->am_grace, shp_sharpd_am_grace_cb, 0., 0.);
    sd->am_grace.data = sd;
    /* a quarter of frame_timeout, at most a second, between sweeps */
    double tick = (double)sd->cfg.frame_timeout_ms / 4000.0;
    tick = tick > 1.0 || tick <= 0 ? 1.0 : tick < 0.05 ? 0.05 : tick;
    ev_timer_init(&sd->sweep, shp_sharpd_sweep_cb, tick, tick);
    sd->sweep.data = sd;
}

/* the short host name, when none is configured */
static shp_status_t sd_default_host(sd_t *sd)
{
    char h[256];
    if (sd->cfg.host[0])
        return SHP_OK;
    if (gethostname(h, sizeof(h)) != 0)
        snprintf(h, sizeof(h), "localhost");
    h[sizeof(h) - 1] = '\0';
    h[strcspn(h, ".")] = '\0';
    free(sd->cfg.host);
    sd->cfg.host = strdup(h);
    return sd->cfg.host ? SHP_OK : SHP_ERR_NO_MEMORY;
}

shp_status_t shp_sharpd_start(sd_t *sd, struct ev_loop *loop, char *msg,
                              size_t len)
{
    shp_sockaddr_t addr;
    shp_status_t st = sd_default_host(sd);

    if (st != SHP_OK) {
        snprintf(msg, len, "no memory");
        goto out;
    }
    snprintf(msg, len, "cannot initialise libsodium");
    st = shp_auth_init();
    if (st == SHP_OK)
        st = shp_auth_key_load(sd->cfg.secret_file, &sd->key, msg, len);
    if (st != SHP_OK)
        goto out;
    shp_sharpd_init(sd, loop);
    st = shp_am_list_parse(&sd->ams, sd->cfg.am, msg, len);
    if (st != SHP_OK)
        goto out;
    st = shp_sockaddr_parse(sd->cfg.socket, 0, &addr);
    if (st == SHP_OK)
        st = shp_listener_start(&sd->listener, sd->loop, &addr,
                                shp_sharpd_on_accept, sd);
    if (st != SHP_OK) {
        snprintf(msg, len, "cannot listen on %s: %s", sd->cfg.socket,
                 strerror(errno));
        goto out;
    }
    /* any local user may ask; who asks is the kernel's answer */
    chmod(sd->cfg.socket, 0666);
    ev_timer_start(sd->loop, &sd->sweep);
    shp_sharpd_am_connect(sd);
out:
    return st;
}

void shp_sharpd_stop(sd_t *sd)
{
    sd->stopping = 1;
    ev_timer_stop(sd->loop, &sd->am_timer);
    ev_timer_stop(sd->loop, &sd->am_grace);
    ev_timer_stop(sd->loop, &sd->sweep);
    shp_listener_stop(&sd->listener);
    while (sd->clients)
        shp_conn_close(&sd->clients->conn, SHP_ERR_CANCELED);
    if (shp_conn_is_open(&sd->am)) {
        shp_conn_push(&sd->am);
        shp_conn_close(&sd->am, SHP_ERR_CANCELED);
    }
    shp_sharpd_held_expire(sd, 1);
    job_t *j, *jt;
    HASH_ITER(hh, sd->jobs, j, jt)
    {
        HASH_DEL(sd->jobs, j);
        shp_sharpd_job_free(j);
    }
    json_decref(sd->reserved);
    sd->reserved = NULL;
}
