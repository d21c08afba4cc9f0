/*
 * Adoption, the sharpds' reports: the jobs a sharpd has processes of
 * (taken back at the first report; a later one with another uid or key is
 * answered job_killed for its host), their hosts, the groups created
 * through it with their members (for the ANs' reports to be checked
 * against), and its host's reservations.  The groups themselves are
 * taken back in am_adopt.c.
 */
#include "am/am_adopt_int.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/ctl.h"
#include "core/log.h"

/* The sharpds' reports ------------------------------------------------------ */

static void adopt_kill_at(shp_am_peer_t *p, uint64_t jid, shp_status_t st,
                          const char *reason)
{
    shp_am_send(p, json_pack("{s:s, s:o, s:i, s:s}", "type", "job_killed",
                             "job_id", shp_json_u64(jid), "status", (int)st,
                             "reason", reason));
}

/* node is a host of the job (added if not) and the entry's index; -1 no
 * memory. */
static int adopt_job_host(shp_am_job_t *j, int node)
{
    for (int h = 0; h < j->nhosts; h++)
        if (j->hosts[h] == node)
            return h;
    int *hs = realloc(j->hosts, sizeof(int) * (size_t)(j->nhosts + 1));
    if (hs)
        j->hosts = hs;
    uint8_t *at = realloc(j->attached, (size_t)j->nhosts + 1);
    if (at)
        j->attached = at;
    uint8_t *hd = realloc(j->held, (size_t)j->nhosts + 1);
    if (hd)
        j->held = hd;
    if (!hs || !at || !hd)
        return -1;
    j->hosts[j->nhosts] = node;
    j->attached[j->nhosts] = 0;
    j->held[j->nhosts] = 0;
    return j->nhosts++;
}

/* The hosts a report names that the topology has (others are left out:
 * a group over them cannot be taken back). */
static void adopt_job_hosts(shp_am_t *am, shp_am_job_t *j, const json_t *hosts)
{
    size_t i;
    json_t *v;
    if (json_array_size(hosts) > am->cfg.max_list)
        return;
    json_array_foreach(hosts, i, v)
    {
        int node = json_is_string(v)
                       ? shp_topo_find(am->topo, json_string_value(v))
                       : -1;
        if (node >= 0 && shp_topo_node(am->topo, node)->type == SHP_NODE_CA)
            (void)adopt_job_host(j, node);
    }
}

/* A job a sharpd reports and this manager does not know, made from the
 * report (quotas cut to this manager's). */
static shp_am_job_t *adopt_job_new(shp_am_t *am, shp_am_peer_t *p,
                                   const json_t *v, uint64_t jid, int64_t uid)
{
    uint8_t key[32];
    int have_key = json_object_get(v, "key") != NULL;
    if (have_key &&
        shp_json_get_hex(v, "key", key, sizeof(key), NULL) != SHP_OK) {
        adopt_kill_at(p, jid, SHP_ERR_PROTO, "malformed job report");
        return NULL;
    }
    if (HASH_COUNT(am->jobs) >= am->cfg.max_jobs) {
        adopt_kill_at(p, jid, SHP_ERR_JOB_REFUSED,
                      "the restarted aggregation manager runs its max_jobs");
        return NULL;
    }
    shp_am_job_t *j = shp_am_job_add(am, jid, (uid_t)uid, v);
    if (!j)
        return NULL;
    am->stats.jobs_begun--; /* not begun here */
    am->stats.jobs_adopted++;
    j->adopted = 1;
    if (have_key)
        memcpy(j->key, key, sizeof(key));
    shp_info("job %" PRIu64 " of uid %u taken back from the sharpd of %s", jid,
             (unsigned)uid, p->host);
    return j;
}

/* The groups a sharpd reports for job j: their members, for the ANs'
 * reports to be checked against. */
static void adopt_job_groups(shp_am_t *am, shp_am_job_t *j, const json_t *gs)
{
    size_t i;
    json_t *v;
    json_array_foreach(gs, i, v)
    {
        int64_t gid;
        json_t *members = json_object_get(v, "members");
        if (i >= am->cfg.job_max_groups)
            break;
        if (shp_json_get_int(v, "group_id", 1, (1 << 24) - 1, &gid, NULL) ||
            !json_is_array(members) || json_array_size(members) == 0 ||
            json_array_size(members) > am->cfg.max_list ||
            shp_am_group_find(am, (uint32_t)gid))
            continue;
        adopt_group_t *g = shp_am_adopt_group_get(am, (uint32_t)gid);
        if (!g || g->gone)
            continue;
        if (g->nreps == 0 && g->tree < 0)
            g->job = j->id;
        if (!g->members)
            g->members = json_incref(members);
        else if (!json_equal(g->members, members) && !g->why[0])
            snprintf(g->why, sizeof(g->why),
                     "the sharpds report other members");
    }
}

/* A known job's groups that a sharpd reports and this manager no longer
 * has (revoked while the sharpd was away, which did not hear it): its
 * processes hear it now. */
static void adopt_job_gone_groups(shp_am_t *am, shp_am_peer_t *p,
                                  const shp_am_job_t *j, const json_t *gs)
{
    size_t i;
    json_t *v;
    json_array_foreach(gs, i, v)
    {
        int64_t gid;
        if (i >= am->cfg.job_max_groups)
            break;
        if (shp_json_get_int(v, "group_id", 1, (1 << 24) - 1, &gid, NULL))
            continue;
        shp_am_group_t *g = shp_am_group_find(am, (uint32_t)gid);
        if (g && g->job == j)
            continue;
        shp_am_send(p, json_pack("{s:s, s:o, s:I, s:i, s:s}", "type",
                                 "group_revoked", "job_id", shp_json_u64(j->id),
                                 "group_id", (json_int_t)gid, "status",
                                 (int)SHP_ERR_GROUP_REVOKED, "reason",
                                 "revoked while this host's sharpd was away "
                                 "from the aggregation manager"));
    }
}

/* One job of a sharpd's report. */
static void adopt_sharpd_job(shp_am_t *am, shp_am_peer_t *p, const json_t *v,
                             int node)
{
    shp_am_adopt_t *ad = am->adopt;
    uint64_t jid;
    int64_t uid;
    const char *w;
    if (shp_json_get_u64(v, "job_id", &jid, &w) ||
        shp_json_get_int(v, "uid", 0, INT32_MAX, &uid, &w))
        return;
    shp_am_job_t *j = shp_am_job_find(am, jid);
    if (!j && (!ad || !ad->on)) {
        adopt_kill_at(p, jid, SHP_ERR_JOB_UNKNOWN,
                      "the aggregation manager restarted and does not know "
                      "the job");
        return;
    }
    if (j && (uid_t)uid != j->uid) {
        adopt_kill_at(p, jid, SHP_ERR_JOB_KILLED,
                      "its processes here run as another uid than the job's");
        return;
    }
    if (j && j->adopted && json_object_get(v, "key")) {
        uint8_t key[32];
        if (shp_json_get_hex(v, "key", key, sizeof(key), NULL) != SHP_OK ||
            memcmp(key, j->key, sizeof(key)) != 0) {
            adopt_kill_at(p, jid, SHP_ERR_JOB_KILLED,
                          "its processes here hold another key than the "
                          "other hosts'");
            return;
        }
    }
    if (!j) {
        shp_am_adopt_evidence(am);
        if (!(j = adopt_job_new(am, p, v, jid, uid)))
            return;
    }
    if (j->adopted && ad && ad->on) {
        adopt_job_hosts(am, j, json_object_get(v, "hosts"));
        (void)adopt_job_host(j, node);
    }
    if (!shp_am_job_attach_host(am, j, p->host)) {
        adopt_kill_at(p, jid, SHP_ERR_JOB_UNKNOWN,
                      "this host is not a host of the job");
        return;
    }
    j->reported = am->report_gen;
    if (j->adopted && ad && ad->on)
        adopt_job_groups(am, j, json_object_get(v, "groups"));
    else
        adopt_job_gone_groups(am, p, j, json_object_get(v, "groups"));
}

/* A reservation of the sharpd's host: held again (the job made if it is
 * not known). */
static void adopt_sharpd_reservation(shp_am_t *am, const json_t *v, int node)
{
    uint64_t jid, owner;
    const char *w;
    if (shp_json_get_u64(v, "job_id", &jid, &w) ||
        shp_json_get_u64(v, "owner", &owner, &w) || owner > INT32_MAX)
        return;
    shp_am_job_t *j = shp_am_job_find(am, jid);
    if (!j) {
        if (HASH_COUNT(am->jobs) >= am->cfg.max_jobs ||
            !(j = shp_am_job_add(am, jid, (uid_t)owner, v)))
            return;
        am->stats.jobs_begun--;
        am->stats.jobs_adopted++;
        j->adopted = 1;
        j->reserved = 1;
        shp_am_adopt_evidence(am);
        shp_info("reservation of job %" PRIu64 " taken back", jid);
    }
    if (j->adopted && j->uid == (uid_t)owner)
        j->reserved = 1; /* its processes' sharpd reported it first */
    if (!j->reserved || j->uid != (uid_t)owner)
        return;
    int h = adopt_job_host(j, node);
    if (h >= 0)
        j->held[h] = 1;
}

void shp_am_adopt_sharpd(shp_am_t *am, shp_am_peer_t *p, const json_t *msg)
{
    shp_am_adopt_t *ad = am->adopt;
    json_t *jobs = json_object_get(msg, "jobs"), *v;
    json_t *res = json_object_get(msg, "reservations");
    int node = shp_topo_find(am->topo, p->host);
    size_t i;
    am->report_gen++;
    json_array_foreach(jobs, i, v)
    {
        if (i >= am->cfg.max_jobs)
            break;
        adopt_sharpd_job(am, p, v, node);
    }
    shp_am_sharpd_sweep(am, p->host);
    if (ad && ad->on) {
        json_array_foreach(res, i, v)
        {
            if (i >= am->cfg.max_jobs)
                break;
            adopt_sharpd_reservation(am, v, node);
        }
        shp_am_adopt_resolve(am, 0);
    }
}
