/*
 * Jobs.  A job is admitted for the hosts it names when one of them asks, within
 * max_jobs and uid_max_jobs, and some up tree spans its hosts; it gets a
 * random key and its quotas (a job may ask for less, never more).  A
 * scheduler reserves a job host by host and releases it (am_reserve.c).  A
 * job ends when asked, killed, released, or when no host has processes of
 * it and none holds a reservation; its groups go with it and its sharpds
 * are told.
 */
#include "am/am_int.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/ctl.h"
#include "core/log.h"
#include "core/plant.h"

/* Where `host` is a host of the job, its sharpd now has processes of it;
 * returns how many of the job's host entries are that host (0: none). */
int shp_am_job_attach_host(shp_am_t *am, shp_am_job_t *j, const char *host)
{
    int n = 0;
    for (int k = 0; k < j->nhosts; k++)
        if (!strcmp(shp_topo_node(am->topo, j->hosts[k])->host, host)) {
            j->attached[k] = 1;
            n++;
        }
    return n;
}

void shp_am_job_free(shp_am_t *am, shp_am_job_t *j)
{
    HASH_DEL(am->jobs, j);
    free(j->held);
    free(j->attached);
    free(j->hosts);
    free(j);
}

void shp_am_job_end(shp_am_t *am, shp_am_job_t *j, shp_status_t why,
                    const char *reason)
{
    while (j->groups) {
        shp_am_group_t *g = j->groups;
        if (why == SHP_OK) {
            /* orderly end: the ANs forget, nobody needs telling */
            shp_am_group_remove_from_ans(am, g);
            if (g->state == AM_GROUP_CONFIGURING)
                shp_am_send(g->req_peer,
                            shp_ctl_reply("group_create_ack", g->req_id,
                                          SHP_ERR_JOB_UNKNOWN, "job ended"));
            shp_am_group_free(am, g);
        } else {
            shp_am_group_revoke(am, g, why, reason);
        }
    }
    /* an orderly end of a reserved job is told too: every host's sharpd
     * forgets the reservation, which it would otherwise report to a
     * restarted manager (adoption) and bring the job back.  Written out
     * now, before the answer that ended it (job_release): a manager killed
     * just after that answer leaves it in the sharpds' sockets, not in its
     * own queue (seen under SAN: test_am test_state_restart) */
    if (why != SHP_OK || j->reserved) {
        json_t *m = json_pack("{s:s, s:o, s:i, s:s}", "type", "job_killed",
                              "job_id", shp_json_u64(j->id), "status", (int)why,
                              "reason", reason);
        shp_am_job_notify_flush(am, j, m, j->reserved);
    }
    shp_info("job %" PRIu64 " ended%s%s", j->id, why ? ": " : "",
             why ? reason : "");
    shp_am_persist_job_forget(am, j);
    shp_am_job_free(am, j);
}

/* A job may ask for less than its quota, never more. */
static void am_job_quotas(shp_am_t *am, shp_am_job_t *j, const json_t *msg)
{
    json_t *req;
    const char *w;
    j->max_groups = am->cfg.job_max_groups;
    j->osts = am->cfg.group_osts;
    j->payload = (uint32_t)am->cfg.group_payload;
    if (shp_json_get_object(msg, "req", &req, &w) == SHP_OK) {
        int64_t v;
        if (!shp_json_get_int(req, "max_groups", 1, INT32_MAX, &v, &w) &&
            (unsigned)v < j->max_groups)
            j->max_groups = (unsigned)v;
        if (!shp_json_get_int(req, "osts", 1, INT32_MAX, &v, &w) &&
            (unsigned)v < j->osts)
            j->osts = (unsigned)v;
        if (!shp_json_get_int(req, "payload", 1, INT32_MAX, &v, &w) &&
            (uint32_t)v < j->payload)
            j->payload = (uint32_t)v;
    }
}

json_t *shp_am_job_quota_reply(const char *type, int64_t id,
                               const shp_am_job_t *j)
{
    json_t *m = shp_ctl_reply(type, id, SHP_OK, NULL);
    json_object_set_new(m, "job_id", shp_json_u64(j->id));
    json_object_set_new(m, "max_groups", json_integer(j->max_groups));
    json_object_set_new(m, "osts", json_integer(j->osts));
    json_object_set_new(m, "payload", json_integer(j->payload));
    return m;
}

/* jobs of uid running now */
static unsigned am_uid_jobs(shp_am_t *am, uid_t uid)
{
    unsigned n = 0;
    shp_am_job_t *j, *tmp;
    HASH_ITER(hh, am->jobs, j, tmp)
    {
        n += j->uid == uid;
    }
    return n;
}

/* A new job in the table (no hosts yet): its key, its quotas. */
shp_am_job_t *shp_am_job_add(shp_am_t *am, uint64_t job_id, uid_t uid,
                             const json_t *msg)
{
    shp_am_job_t *j = calloc(1, sizeof(*j));
    if (!j)
        return NULL;
    j->id = job_id;
    j->uid = uid;
    shp_auth_random(j->key, sizeof(j->key));
    if (shp_planted("same_key")) {
        memset(j->key, 0x5a, sizeof(j->key));
    }
    am_job_quotas(am, j, msg);
    HASH_ADD(hh, am->jobs, id, sizeof(j->id), j);
    am->stats.jobs_begun++;
    return j;
}

/* Whether job_begin may admit the job: a new id, within max_jobs and
 * uid_max_jobs, hosts of the topology among which the asking one, some
 * tree spanning them all.  *nodes: the hosts' nodes (only when it may). */
static shp_status_t am_job_admit(shp_am_t *am, shp_am_peer_t *p,
                                 uint64_t job_id, uint64_t uid,
                                 const json_t *hosts, int **nodes, int *n,
                                 char *why, size_t whylen)
{
    shp_status_t st;
    if (shp_am_job_find(am, job_id)) {
        snprintf(why, whylen, "job %" PRIu64 " exists", job_id);
        return SHP_ERR_EXISTS;
    }
    if (HASH_COUNT(am->jobs) >= am->cfg.max_jobs) {
        snprintf(why, whylen, "the fabric runs its maximum of %u jobs",
                 am->cfg.max_jobs);
        return SHP_ERR_QUOTA;
    }
    if (uid != 0 && am_uid_jobs(am, (uid_t)uid) >= am->cfg.uid_max_jobs) {
        snprintf(why, whylen,
                 "uid %" PRIu64 " runs its maximum of %u jobs (uid_max_jobs)",
                 uid, am->cfg.uid_max_jobs);
        return SHP_ERR_QUOTA;
    }
    if ((st = shp_am_hosts_resolve(am, hosts, nodes, n, why, whylen)) != SHP_OK)
        return st;
    /* a job is begun by one of its own hosts: one a process of it
     * runs on, which ends it (a job of other hosts only would never
     * be ended, and could squat their resources) */
    int node = shp_topo_find(am->topo, p->host), own = 0;
    for (int k = 0; k < *n && !own; k++)
        own = (*nodes)[k] == node;
    if (!own) {
        snprintf(why, whylen,
                 "the job's hosts do not include %s, the host that asks",
                 p->host);
        st = SHP_ERR_PERM;
    } else if (!shp_am_hosts_spanned(am, *nodes, *n)) {
        /* some tree must span every host */
        snprintf(why, whylen, "no aggregation tree spans the job's %d hosts",
                 *n);
        st = SHP_ERR_NO_TREE;
    }
    if (st != SHP_OK) {
        free(*nodes);
        *nodes = NULL;
    }
    return st;
}

/* job_begin {job_id, uid, hosts [names], req?} from a sharpd on one of
 * the hosts: admitted (with its key and quotas) or refused. */
void shp_am_job_begin(shp_am_t *am, shp_am_peer_t *p, const json_t *msg,
                      int64_t id)
{
    uint64_t job_id, uid;
    json_t *hosts;
    char why[300] = "malformed job_begin";
    const char *w;
    if (shp_json_get_u64(msg, "job_id", &job_id, &w) ||
        shp_json_get_u64(msg, "uid", &uid, &w) ||
        shp_json_get_array(msg, "hosts", &hosts, &w)) {
        shp_am_send(p, shp_ctl_reply("job_begin_ack", id, SHP_ERR_PROTO, why));
        return;
    }
    int *nodes = NULL, n = 0;
    if (am_job_admit(am, p, job_id, uid, hosts, &nodes, &n, why, sizeof(why)) !=
        SHP_OK) {
        am->stats.jobs_refused++;
        shp_warn_id("AM0401", "job %" PRIu64 " refused: %s", job_id, why);
        shp_am_send(
            p, shp_ctl_reply("job_begin_ack", id, SHP_ERR_JOB_REFUSED, why));
        return;
    }
    uint8_t *att = calloc((size_t)n, 1), *held = calloc((size_t)n, 1);
    shp_am_job_t *j =
        att && held ? shp_am_job_add(am, job_id, (uid_t)uid, msg) : NULL;
    if (!j) {
        free(att);
        free(held);
        free(nodes);
        shp_am_send(p, shp_ctl_reply("job_begin_ack", id, SHP_ERR_NO_MEMORY,
                                     "no memory"));
        return;
    }
    j->hosts = nodes;
    j->nhosts = n;
    j->attached = att;
    j->held = held;
    shp_am_job_attach_host(am, j, p->host);
    shp_info("job %" PRIu64 " (uid %u, %d hosts) admitted: %u groups, %u "
             "osts, %u bytes",
             j->id, (unsigned)j->uid, n, j->max_groups, j->osts, j->payload);
    json_t *m = shp_am_job_quota_reply("job_begin_ack", id, j);
    json_object_set_new(m, "job_key", shp_json_hex(j->key, sizeof(j->key)));
    shp_am_send(p, m);
}

void shp_am_job_attach(shp_am_t *am, shp_am_peer_t *p, const json_t *msg,
                       int64_t id)
{
    shp_am_job_t *j = shp_am_job_for(am, p, msg, "job_attach_ack", id);
    if (!j)
        return;
    if (!shp_am_job_attach_host(am, j, p->host)) {
        shp_am_send(p,
                    shp_ctl_reply("job_attach_ack", id, SHP_ERR_PERM,
                                  "this host is not one of the job's hosts"));
        return;
    }
    /* the quotas too: a reserved job's processes all attach */
    json_t *m = shp_am_job_quota_reply("job_attach_ack", id, j);
    json_object_set_new(m, "job_key", shp_json_hex(j->key, sizeof(j->key)));
    json_object_set_new(m, "reserved", json_boolean(j->reserved));
    shp_am_send(p, m);
}

/* The sharpd of a host has no more processes of the job there (and, when
 * `lost`, that sharpd is gone: its scheduler's hold goes too).  The job's
 * groups are revoked; the job ends when no host has processes of it and
 * none holds a reservation. */
void shp_am_job_detach_host(shp_am_t *am, shp_am_job_t *j, const char *host,
                            const char *reason, int lost)
{
    int any = 0, was = 0, held = 0, unheld = 0;
    for (int k = 0; k < j->nhosts; k++) {
        int here = !strcmp(shp_topo_node(am->topo, j->hosts[k])->host, host);
        if (here && j->attached[k]) {
            j->attached[k] = 0;
            was = 1;
        }
        if (here && lost && j->held[k]) {
            j->held[k] = 0;
            was = unheld = 1;
        }
        any |= j->attached[k];
        held |= j->held[k];
    }
    if (!was)
        return;
    while (j->groups)
        shp_am_group_revoke(am, j->groups, SHP_ERR_GROUP_REVOKED, reason);
    if (!any && !held)
        shp_am_job_end(am, j, SHP_ERR_JOB_KILLED, reason);
    else if (unheld) /* its hold is gone on disk too */
        (void)shp_am_persist_job(am, j);
}
