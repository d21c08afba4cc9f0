/*
 * Adoption (am/am_adopt.c says how a restarted manager takes the fabric
 * back): the reports read.  An AN's registration lists the groups it
 * serves, each checked and bounded (children by ADOPT_MAX_CHILDREN,
 * groups by the AN's max_groups) and kept as one report of its group; a
 * sharpd's lists its jobs (taken back at once: every sharpd of a job must
 * agree on its uid and key), the groups created through it with their
 * members, and its host's reservations.  What a report names that cannot
 * be taken back is removed where it runs (group_remove to the AN,
 * job_killed to the sharpd).
 */
#include "am/am_adopt.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/ctl.h"
#include "core/log.h"

/* The ANs' reports -------------------------------------------------------- */

/* Stale: removed at the AN (nothing to take back, or too late). */
static void adopt_remove_at(shp_am_t *am, shp_am_peer_t *p, json_int_t gid,
                            const char *why)
{
    shp_am_send(p, json_pack("{s:s, s:I, s:I}", "type", "group_remove", "id",
                             (json_int_t)am->next_req++, "group_id", gid));
    shp_info("AN %s: removing group %" JSON_INTEGER_FORMAT ": %s", p->auth.name,
             gid, why);
}

typedef struct {
    int64_t gid, tree, top, pidx, osts, payload, failed;
    uint64_t job;
    const char *fp, *kinds, *dist, *mcast;
} adopt_an_rep_t;

static int adopt_an_read(const json_t *v, adopt_an_rep_t *r)
{
    const char *w;
    int top = 0, failed = 0;
    r->mcast = shp_json_opt_str(v, "mcast_addr", "");
    if (shp_json_get_int(v, "group_id", 1, (1 << 24) - 1, &r->gid, &w) ||
        shp_json_get_int(v, "tree_id", 0, SHP_AM_MAX_TREE_ID - 1, &r->tree,
                         &w) ||
        shp_json_get_u64(v, "job_id", &r->job, &w) ||
        shp_json_get_str(v, "key_fp", &r->fp, &w) ||
        strlen(r->fp) != SHP_AUTH_FP_HEX - 1 ||
        shp_json_get_bool(v, "top", &top, &w) ||
        shp_json_get_int(v, "parent_index", 0, ADOPT_MAX_CHILDREN, &r->pidx,
                         &w) ||
        shp_json_get_str(v, "children", &r->kinds, &w) ||
        strlen(r->kinds) == 0 || strlen(r->kinds) > ADOPT_MAX_CHILDREN ||
        strspn(r->kinds, "am") != strlen(r->kinds) ||
        shp_json_get_str(v, "dist", &r->dist, &w) ||
        shp_dist_parse(r->dist) <= SHP_DIST_AUTO || strlen(r->mcast) >= 64 ||
        shp_json_get_int(v, "osts", 1, 1 << 20, &r->osts, &w) ||
        shp_json_get_int(v, "payload", 0, 1 << 30, &r->payload, &w))
        return 0;
    if (json_object_get(v, "failed") &&
        shp_json_get_bool(v, "failed", &failed, &w))
        return 0;
    r->top = top;
    r->failed = failed;
    return 1;
}

/* One AN's report of a group, added to what the others said. */
static void adopt_an_group(shp_am_t *am, shp_am_peer_t *p,
                           const adopt_an_rep_t *r)
{
    adopt_group_t *g = shp_am_adopt_group_get(am, (uint32_t)r->gid);
    const char *name = am->ans[p->an].name;
    if (!g) {
        adopt_remove_at(am, p, r->gid, "too many groups reported");
        return;
    }
    if (g->gone) {
        adopt_remove_at(am, p, r->gid, "revoked already");
        return;
    }
    if (g->tree < 0 && g->nreps == 0) { /* the first AN to report it */
        g->tree = (int)r->tree;
        g->job = r->job;
        snprintf(g->fp, sizeof(g->fp), "%s", r->fp);
        g->dist = shp_dist_parse(r->dist);
        g->osts = (unsigned)r->osts;
        g->payload = (uint32_t)r->payload;
    } else if (!g->why[0] &&
               (g->tree != r->tree || g->job != r->job ||
                strcmp(g->fp, r->fp) || g->dist != shp_dist_parse(r->dist) ||
                g->osts != (unsigned)r->osts ||
                g->payload != (uint32_t)r->payload)) {
        snprintf(g->why, sizeof(g->why),
                 "AN %s reports another tree, job, key, dist or quota than "
                 "the others",
                 name);
    }
    if (r->top)
        snprintf(g->mcast, sizeof(g->mcast), "%s", r->mcast);
    if (r->failed && !g->why[0])
        snprintf(g->why, sizeof(g->why),
                 "AN %s reports it failed (an AN or a member of it was lost)",
                 name);
    adopt_rep_t *rep = shp_am_adopt_rep_of(g, p->an);
    if (!rep) {
        adopt_rep_t *nr =
            realloc(g->reps, sizeof(*nr) * (size_t)(g->nreps + 1));
        if (!nr) {
            if (!g->why[0])
                snprintf(g->why, sizeof(g->why), "out of memory");
            return;
        }
        g->reps = nr;
        rep = &g->reps[g->nreps++];
        rep->kinds = NULL;
    }
    rep->an = p->an;
    rep->top = (int)r->top;
    rep->pidx = (int)r->pidx;
    free(rep->kinds);
    rep->kinds = strdup(r->kinds);
    if (!rep->kinds) {
        rep->kinds = NULL;
        g->nreps--;
        if (!g->why[0])
            snprintf(g->why, sizeof(g->why), "out of memory");
    }
}

void shp_am_adopt_an(shp_am_t *am, shp_am_peer_t *p, const json_t *msg)
{
    shp_am_adopt_t *ad = am->adopt;
    json_t *groups = json_object_get(msg, "groups"), *v;
    size_t i, max = am->ans[p->an].max_groups;
    json_array_foreach(groups, i, v)
    {
        adopt_an_rep_t r;
        json_int_t gid = json_integer_value(
            json_is_integer(v) ? v : json_object_get(v, "group_id"));
        if (!ad || !ad->on) {
            adopt_remove_at(am, p, gid, "this manager does not know it");
        } else if (i >= max) {
            adopt_remove_at(am, p, gid, "over the AN's max_groups");
        } else if (!json_is_object(v) || !adopt_an_read(v, &r)) {
            adopt_remove_at(am, p, gid, "its report is malformed");
        } else if (shp_am_group_find(am, (uint32_t)r.gid)) {
            continue; /* taken back already (the AN registers again) */
        } else {
            shp_am_adopt_evidence(am);
            adopt_an_group(am, p, &r);
        }
    }
    if (ad && ad->on)
        shp_am_adopt_resolve(am, 0);
}

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
