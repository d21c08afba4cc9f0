/*
 * The manager's state, looked up and addressed: the tables of am/am.h
 * (ANs by topology node, jobs and groups by id, sharpds by host), the
 * messages to a peer, the node marks that check one host list against
 * another in linear time, host names resolved and checked against the
 * trees.  The bottom of the core: every other file builds on these, and
 * they call none of them.
 */
#include "am/am_int.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/ctl.h"
#include "core/log.h"
#include "core/plant.h"

/* A new set of membership marks over the topology's nodes (am->mark[i] ==
 * am->mark_gen: marked), so that a list is checked against another in time
 * linear in both. */
shp_status_t shp_am_mark_begin(shp_am_t *am)
{
    size_t n = shp_topo_count(am->topo);
    if (am->nmark != n) {
        unsigned *m = calloc(n ? n : 1, sizeof(*m));
        if (!m)
            return SHP_ERR_NO_MEMORY;
        free(am->mark);
        am->mark = m;
        am->nmark = n;
        am->mark_gen = 0;
    }
    if (++am->mark_gen == 0) { /* wrapped: old marks could match */
        memset(am->mark, 0, n * sizeof(*am->mark));
        am->mark_gen = 1;
    }
    return SHP_OK;
}

/* A registration taken carries the manager's epoch and its proof: the
 * node keeps the highest (protocol/am_list.h, am_ha.c). */
static void am_stamp_epoch(const shp_am_peer_t *p, json_t *msg)
{
    const char *type = shp_ctl_type(msg);
    size_t n = strlen(type), k = strlen("_register_ack");
    if (n > k && !strcmp(type + n - k, "_register_ack") &&
        json_integer_value(json_object_get(msg, "status")) == 0) {
        json_object_set_new(msg, "epoch",
                            json_integer((json_int_t)p->am->epoch));
        json_object_set_new(msg, "epoch_proof",
                            json_string(p->am->epoch_proof));
    }
}

void shp_am_send(shp_am_peer_t *p, json_t *msg)
{
    if (!msg)
        return;
    if (p)
        am_stamp_epoch(p, msg);
    if (p && shp_conn_is_open(&p->conn) &&
        shp_ctl_send(&p->conn, msg) != SHP_OK)
        shp_warn("cannot send %s to %s", shp_ctl_type(msg), p->conn.peer);
    json_decref(msg);
}

const char *shp_am_an_name(const shp_am_t *am, int node)
{
    for (int i = 0; i < am->nans; i++)
        if (am->ans[i].node == node)
            return am->ans[i].name;
    return shp_topo_node(am->topo, node)->desc;
}

int shp_am_an_of_node(const shp_am_t *am, int node)
{
    for (int i = 0; i < am->nans; i++)
        if (am->ans[i].node == node)
            return i;
    return -1;
}

shp_am_group_t *shp_am_group_find(shp_am_t *am, uint32_t id)
{
    shp_am_group_t *g;
    HASH_FIND(hh, am->groups, &id, sizeof(id), g);
    return g;
}

shp_am_peer_t *shp_am_sharpd_of_host(shp_am_t *am, const char *host)
{
    for (shp_am_peer_t *p = am->peers; p; p = p->next)
        if (p->role == AM_PEER_SHARPD && !strcmp(p->host, host))
            return p;
    return NULL;
}

shp_am_job_t *shp_am_job_find(shp_am_t *am, uint64_t id)
{
    shp_am_job_t *j;
    HASH_FIND(hh, am->jobs, &id, sizeof(id), j);
    return j;
}

/* The job a sharpd's request names, if the requester may act on it. */
shp_am_job_t *shp_am_job_for(shp_am_t *am, shp_am_peer_t *p, const json_t *msg,
                             const char *ack, int64_t id)
{
    uint64_t job_id, uid;
    const char *w;
    if (shp_json_get_u64(msg, "job_id", &job_id, &w) ||
        shp_json_get_u64(msg, "uid", &uid, &w)) {
        shp_am_send(p, shp_ctl_reply(ack, id, SHP_ERR_PROTO,
                                     "job_id and uid required"));
        return NULL;
    }
    shp_am_job_t *j = shp_am_job_find(am, job_id);
    if (!j) {
        shp_am_send(p,
                    shp_ctl_reply(ack, id, SHP_ERR_JOB_UNKNOWN, "no such job"));
        return NULL;
    }
    if (uid != 0 && uid != j->uid) {
        char why[128];
        snprintf(why, sizeof(why), "job %" PRIu64 " belongs to uid %u", j->id,
                 (unsigned)j->uid);
        shp_warn_id("AM0402", "uid %" PRIu64 " on %s: %s", uid, p->host, why);
        shp_am_send(p, shp_ctl_reply(ack, id, SHP_ERR_PERM, why));
        return NULL;
    }
    return j;
}

/* Tell the sharpds of the job's hosts. */
void shp_am_job_notify(shp_am_t *am, shp_am_job_t *j, json_t *msg)
{
    shp_am_job_notify_flush(am, j, msg, 0);
}

void shp_am_job_notify_flush(shp_am_t *am, shp_am_job_t *j, json_t *msg,
                             int flush)
{
    /* a host listed twice is told once (without marks, twice); a host
     * that holds a reservation of the job is told too (its sharpd keeps
     * the reservation until the job ends) */
    int marks = shp_am_mark_begin(am) == SHP_OK;
    if (shp_planted("silent_revoke") &&
        !strcmp(shp_json_opt_str(msg, "type", ""), "group_revoked")) {
        json_decref(msg);
        return;
    }
    for (int h = 0; h < j->nhosts; h++) {
        if (!j->attached[h] && !(j->held && j->held[h]))
            continue;
        if (marks) {
            if (am->mark[j->hosts[h]] == am->mark_gen)
                continue;
            am->mark[j->hosts[h]] = am->mark_gen;
        }
        shp_am_peer_t *p = shp_am_sharpd_of_host(
            am, shp_topo_node(am->topo, j->hosts[h])->host);
        if (p)
            shp_am_send(p, json_incref(msg));
        if (p && flush)
            shp_conn_push(&p->conn); /* no close (on_close) in this walk */
    }
    json_decref(msg);
}

/* Host names -> topology CA nodes; refuses unknown hosts precisely. */
shp_status_t shp_am_hosts_resolve(shp_am_t *am, const json_t *arr, int **out,
                                  int *n, char *why, size_t whylen)
{
    size_t cnt = json_array_size(arr), i;
    json_t *v;
    if (cnt == 0) {
        snprintf(why, whylen, "empty host list");
        return SHP_ERR_INVALID_PARAM;
    }
    if (cnt > am->cfg.max_list) {
        snprintf(why, whylen,
                 "a list of %zu hosts is over this manager's limit of %u "
                 "(max_list)",
                 cnt, am->cfg.max_list);
        return SHP_ERR_TOO_LARGE;
    }
    int *nodes = malloc(sizeof(int) * cnt);
    if (!nodes)
        return SHP_ERR_NO_MEMORY;
    json_array_foreach(arr, i, v)
    {
        const char *h = json_string_value(v);
        int node = h ? shp_topo_find(am->topo, h) : -1;
        if (node < 0 || shp_topo_node(am->topo, node)->type != SHP_NODE_CA) {
            snprintf(why, whylen, "unknown host \"%s\"",
                     h ? h
                       : "(not a "
                         "string)");
            free(nodes);
            return SHP_ERR_NOT_FOUND;
        }
        if (am->leaf[node] < 0) {
            snprintf(why, whylen, "host %s reaches no live aggregation node",
                     h);
            free(nodes);
            return SHP_ERR_NO_TREE;
        }
        nodes[i] = node;
    }
    *out = nodes;
    *n = (int)cnt;
    return SHP_OK;
}

/* Whether some up tree spans the leaf ANs of every one of these hosts. */
int shp_am_hosts_spanned(shp_am_t *am, const int *nodes, int n)
{
    for (int t = 0; t < SHP_AM_MAX_TREE_ID; t++) {
        if (!am->trees[t].used || !am->trees[t].up)
            continue;
        int spans = 1;
        for (int k = 0; k < n && spans; k++)
            spans = shp_tree_pos(&am->trees[t].t, am->leaf[nodes[k]]) >= 0;
        if (spans)
            return 1;
    }
    return 0;
}
