/*
 * sharpd's jobs: what it holds of the jobs its local processes take part
 * in, so that a restarted manager can take them back (sharpd_am.c reports
 * them at registration): each job's key, quotas and hosts as the manager
 * answered, the groups created through this host with their members (at
 * most SD_JOB_MAX_GROUPS a job), and this host's reservations (at most
 * SD_MAX_RESERVED).  Each client lists the jobs it began or attached to;
 * a job is forgotten when it ends, is killed, or its last local process
 * goes.  Also the two small things every file sends: a message, an ack.
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

void shp_sharpd_job_free(job_t *j)
{
    json_decref(j->hosts);
    json_decref(j->groups);
    free(j);
}

void shp_sharpd_pending_free(pending_t *p)
{
    json_decref(p->req);
    free(p);
}

void shp_sharpd_send(shp_conn_t *c, json_t *m)
{
    if (!m)
        return;
    if (shp_conn_is_open(c) && shp_ctl_send(c, m) != SHP_OK)
        shp_warn("cannot send %s to %s", shp_ctl_type(m), c->peer);
    json_decref(m);
}

json_t *shp_sharpd_ack(const char *req_type, int64_t id, shp_status_t st,
                       const char *error)
{
    char type[48];
    snprintf(type, sizeof(type), "%.32s_ack", req_type);
    return shp_ctl_reply(type, id, st, error);
}

job_t *shp_sharpd_job_get(sd_t *sd, uint64_t id)
{
    job_t *j;
    HASH_FIND(hh, sd->jobs, &id, sizeof(id), j);
    return j;
}

/* 1 for a request that makes its client one of a job's (job_begin,
 * job_attach): counted in client->asked until answered */
int shp_sharpd_pending_joins(const pending_t *p)
{
    return !strcmp(p->type, "job_begin") || !strcmp(p->type, "job_attach");
}

int shp_sharpd_client_has_job(const client_t *c, uint64_t id)
{
    for (unsigned i = 0; i < c->njobs; i++)
        if (c->jobs[i] == id)
            return 1;
    return 0;
}

/* The client takes part in job id (the AM admitted or attached it): it is
 * tracked until the job ends or the client goes.  SHP_ERR_NO_MEMORY: not
 * tracked. */
shp_status_t shp_sharpd_client_add_job(client_t *c, uint64_t id, uid_t uid)
{
    sd_t *sd = c->sd;
    if (shp_sharpd_client_has_job(c, id))
        return SHP_OK;
    if (c->njobs == c->capjobs) {
        unsigned cap = c->capjobs ? 2 * c->capjobs : 4;
        uint64_t *a = realloc(c->jobs, sizeof(*a) * cap);
        if (!a)
            return SHP_ERR_NO_MEMORY;
        c->jobs = a;
        c->capjobs = cap;
    }
    job_t *j = shp_sharpd_job_get(sd, id);
    if (!j) {
        j = calloc(1, sizeof(*j));
        if (!j)
            return SHP_ERR_NO_MEMORY;
        j->id = id;
        j->uid = uid;
        j->groups = json_array();
        if (!j->groups) {
            free(j);
            return SHP_ERR_NO_MEMORY;
        }
        HASH_ADD(hh, sd->jobs, id, sizeof(j->id), j);
    }
    c->jobs[c->njobs++] = id;
    j->nclients++;
    return SHP_OK;
}

void shp_sharpd_job_drop(sd_t *sd, job_t *j)
{
    for (client_t *c = sd->clients; c; c = c->next)
        for (unsigned i = 0; i < c->njobs; i++)
            if (c->jobs[i] == j->id) {
                c->jobs[i] = c->jobs[--c->njobs];
                break;
            }
    HASH_DEL(sd->jobs, j);
    shp_sharpd_job_free(j);
}

/* forward an AM notification to the local processes of its job */
void shp_sharpd_notify_job(sd_t *sd, uint64_t id, const json_t *msg)
{
    for (client_t *c = sd->clients; c; c = c->next)
        if (shp_sharpd_client_has_job(c, id))
            shp_sharpd_send(&c->conn, json_incref((json_t *)msg));
}

/* remember groups created for local processes, with their members, to
 * report them to a restarted AM (sd_am_register) */
void shp_sharpd_track_group(sd_t *sd, const json_t *req, const json_t *reply)
{
    json_t *g = json_object_get(reply, "group");
    json_t *members = json_object_get(req, "members");
    uint64_t jid, gid;
    if (!g || shp_json_get_u64(g, "job_id", &jid, NULL) != SHP_OK ||
        shp_json_get_u64(g, "group_id", &gid, NULL) != SHP_OK)
        return;
    job_t *j = shp_sharpd_job_get(sd, jid);
    if (!j || json_array_size(j->groups) >= SD_JOB_MAX_GROUPS)
        return;
    json_t *e = json_pack("{s:I}", "group_id", (json_int_t)gid);
    if (e && json_is_array(members))
        json_object_set(e, "members", members);
    json_array_append_new(j->groups, e);
}

/* a group of job jid is gone (destroyed, or revoked: all of them when
 * gid is -1; another negative value, a message without a group_id,
 * changes nothing) */
void shp_sharpd_untrack_group(sd_t *sd, uint64_t jid, int64_t gid)
{
    job_t *j = shp_sharpd_job_get(sd, jid);
    size_t i;
    json_t *e;
    if (!j)
        return;
    if (gid == -1) {
        json_array_clear(j->groups);
        return;
    }
    if (gid < 0)
        return;
    json_array_foreach(j->groups, i, e)
    {
        if (json_integer_value(json_object_get(e, "group_id")) == gid) {
            json_array_remove(j->groups, i);
            return;
        }
    }
}

/* what the AM answered a job_begin or job_attach: the job's key and
 * quotas, and job_begin's hosts, for a restarted AM */
void shp_sharpd_job_learn(sd_t *sd, const pending_t *p, const json_t *reply)
{
    job_t *j = shp_sharpd_job_get(sd, p->job_id);
    json_t *hosts = json_object_get(p->req, "hosts");
    if (!j)
        return;
    if (shp_json_get_hex(reply, "job_key", j->key, sizeof(j->key), NULL) ==
        SHP_OK)
        j->have_key = 1;
    j->max_groups = shp_json_opt_int(reply, "max_groups", 1, 1 << 20, 0);
    j->osts = shp_json_opt_int(reply, "osts", 1, 1 << 20, 0);
    j->payload = shp_json_opt_int(reply, "payload", 1, 1 << 30, 0);
    if (!strcmp(p->type, "job_begin") && json_is_array(hosts)) {
        json_decref(j->hosts);
        j->hosts = json_incref(hosts);
    }
}

/* a reservation of this host made or released (job_reserve and
 * job_release answered), for a restarted AM */
void shp_sharpd_track_reservation(sd_t *sd, const pending_t *p)
{
    char k[24];
    snprintf(k, sizeof(k), "%" PRIu64, p->job_id);
    if (!strcmp(p->type, "job_release")) {
        json_object_del(sd->reserved, k);
    } else if (json_object_size(sd->reserved) < SD_MAX_RESERVED) {
        json_t *r =
            json_pack("{s:o, s:O?, s:O?}", "job_id", shp_json_u64(p->job_id),
                      "owner", json_object_get(p->req, "owner"), "req",
                      json_object_get(p->req, "req"));
        json_object_set_new(sd->reserved, k, r);
    }
}
