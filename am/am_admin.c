/*
 * The AM's admin interface (for sharpctl): a Unix socket; each request is
 * checked against the caller's SO_PEERCRED (root, or the configured admin
 * group).  Requests and replies are JSON control messages; a reply has the
 * type "<request>_reply", the request's id, a status and the data.
 *
 *   ans                 every AN: name, guid, data address, state, trees,
 *                       groups, ops/s and errors (from its polled counters)
 *   trees               every tree: id, root, ANs, depth, hosts, groups
 *   tree {tree_id}      one tree: its ANs with their parents and levels
 *   jobs                every job: id, uid, hosts, groups, quotas
 *   groups {job_id?}    groups (of one job): tree, state, ANs, members
 *   job_kill {job_id}   end a job now; its processes are told
 *   an_drain {name, reason?}, an_undrain {name}
 *                       the AN takes no new group (its groups run on)
 *   tree_freeze {tree_id, reason?}, tree_thaw {tree_id}
 *                       the tree takes no new group (its groups run on)
 *   stats               counters
 *   topology            what the AM's topology holds
 *   topology_load {file}  replace it (refused while jobs run)
 *
 * A consumer of the manager's core (am/am_types.h, am/am_services.h): it
 * reads the core's state and calls shp_am_job_end and shp_am_topology_load
 * (am/am.h); the core knows it only as the handler shp_am_admin_install
 * (am/am_admin.h) puts in am->admin_handler, by which the admin socket's
 * peers are answered (am_peers.c).
 */
#include "am/am_admin.h"
#include "am/am.h"
#include "am/am_services.h"
#include "am/am_types.h"
#include "core/time.h"

#include <grp.h>
#include <unistd.h>
#include <inttypes.h>
#include <string.h>

#include "protocol/ctl.h"
#include "core/log.h"

static json_t *am_guid_json(uint64_t g)
{
    char s[24];
    snprintf(s, sizeof(s), "0x%016" PRIx64, g);
    return json_string(s);
}

/* root, the manager's own user (an install without privileges runs it as
 * its owner) and the members of admin_group */
static int am_admin_allowed(shp_am_t *am, shp_am_peer_t *p)
{
    if (p->uid == 0 || p->uid == geteuid())
        return 1;
    if (!am->cfg.admin_group[0])
        return 0;
    struct group *gr = getgrnam(am->cfg.admin_group);
    if (!gr)
        return 0;
    if (p->gid == gr->gr_gid)
        return 1;
    return 0;
}

static json_t *am_admin_ans(shp_am_t *am)
{
    json_t *a = json_array();
    for (int i = 0; i < am->nans; i++) {
        shp_am_an_t *an = &am->ans[i];
        if (an->node < 0)
            continue; /* no longer in the topology */
        json_array_append_new(
            a, json_pack(
                   "{s:s, s:o, s:s, s:s, s:s, s:i, s:i, s:I, s:f, s:I, "
                   "s:I}",
                   "name", an->name, "guid",
                   am_guid_json(shp_topo_node(am->topo, an->node)->guid),
                   "addr", an->data_addr, "transport",
                   an->transport[0] ? an->transport : "-", "state",
                   an->up ? "up" : "down", "trees", an->ntrees, "groups",
                   an->ngroups, "registrations", (json_int_t)an->registrations,
                   "ops_per_s", an->up ? an->ops_rate : 0.0, "ops",
                   (json_int_t)an->ops, "errors", (json_int_t)an->errors));
        json_t *row = json_array_get(a, json_array_size(a) - 1);
        const shp_am_drain_t *d = shp_am_drained(am, an->name);
        json_object_set_new(row, "drained", json_boolean(d != NULL));
        json_object_set_new(row, "drain_reason",
                            d ? json_string(d->reason) : json_null());
        if (an->counters)
            json_object_set(row, "counters", an->counters);
        /* how old ops, ops/s and errors are (polled every stats_interval);
         * null: never polled */
        uint64_t now = shp_time_ns();
        json_object_set_new(row, "stats_age_s",
                            an->stats_ns && now >= an->stats_ns
                                ? json_real((double)(now - an->stats_ns) / 1e9)
                                : json_null());
    }
    return a;
}

static json_t *am_admin_trees(shp_am_t *am)
{
    json_t *a = json_array();
    for (int t = 0; t < SHP_AM_MAX_TREE_ID; t++) {
        shp_am_tree_t *tr = &am->trees[t];
        if (!tr->used)
            continue;
        json_array_append_new(
            a, json_pack("{s:i, s:s, s:i, s:i, s:i, s:i, s:s}", "id", t, "root",
                         shp_am_an_name(am, tr->t.root), "ans", tr->t.n,
                         "depth", tr->t.depth, "hosts", tr->t.nhosts, "groups",
                         tr->ngroups, "state", tr->up ? "up" : "down"));
        const shp_am_freeze_t *f = shp_am_frozen(am, t);
        json_t *row = json_array_get(a, json_array_size(a) - 1);
        json_object_set_new(row, "frozen", json_boolean(f != NULL));
        json_object_set_new(row, "freeze_reason",
                            f ? json_string(f->reason) : json_null());
    }
    return a;
}

static json_t *am_admin_tree(shp_am_t *am, const json_t *req, shp_status_t *st)
{
    int64_t t;
    if (shp_json_get_int(req, "tree_id", 0, SHP_AM_MAX_TREE_ID - 1, &t, NULL) ||
        !am->trees[t].used) {
        *st = SHP_ERR_NOT_FOUND;
        return NULL;
    }
    shp_tree_t *tr = &am->trees[t].t;
    int *level = calloc((size_t)tr->n, sizeof(int));
    json_t *nodes = json_array();
    for (int i = 0; i < tr->n; i++) {
        if (level && tr->parent[i] >= 0)
            level[i] = level[tr->parent[i]] + 1;
        json_array_append_new(
            nodes,
            json_pack(
                "{s:s, s:o, s:i, s:i}", "name", shp_am_an_name(am, tr->node[i]),
                "parent",
                tr->parent[i] < 0
                    ? json_null()
                    : json_string(shp_am_an_name(am, tr->node[tr->parent[i]])),
                "level", level ? level[i] : 0, "children", tr->nchild[i]));
    }
    free(level);
    return json_pack("{s:i, s:s, s:i, s:i, s:o}", "id", (int)t, "root",
                     shp_am_an_name(am, tr->root), "depth", tr->depth, "hosts",
                     tr->nhosts, "nodes", nodes);
}

static json_t *am_admin_jobs(shp_am_t *am)
{
    json_t *a = json_array();
    shp_am_job_t *j, *tmp;
    HASH_ITER(hh, am->jobs, j, tmp)
    {
        json_t *hosts = json_array(), *att = json_array();
        for (int h = 0; h < j->nhosts; h++) {
            json_array_append_new(
                hosts, json_string(shp_topo_node(am->topo, j->hosts[h])->host));
            if (j->attached[h])
                json_array_append_new(
                    att,
                    json_string(shp_topo_node(am->topo, j->hosts[h])->host));
        }
        json_array_append_new(
            a,
            json_pack("{s:o, s:i, s:o, s:o, s:i, s:i, s:i, s:I, s:b}", "job_id",
                      shp_json_u64(j->id), "uid", (int)j->uid, "hosts", hosts,
                      "attached", att, "groups", j->ngroups, "max_groups",
                      (int)j->max_groups, "osts", (int)j->osts, "payload",
                      (json_int_t)j->payload, "reserved", j->reserved));
    }
    return a;
}

static json_t *am_admin_groups(shp_am_t *am, const json_t *req)
{
    uint64_t only = 0;
    int filter = shp_json_get_u64(req, "job_id", &only, NULL) == SHP_OK;
    json_t *a = json_array();
    shp_am_group_t *g, *tmp;
    HASH_ITER(hh, am->groups, g, tmp)
    {
        if (filter && g->job->id != only)
            continue;
        json_t *ans = json_array();
        for (int i = 0; i < g->plan.nans; i++) {
            shp_group_an_t *ga = &g->plan.ans[i];
            json_array_append_new(
                ans,
                json_pack("{s:s, s:o, s:i, s:b}", "name",
                          am->ans[g->an_of[i]].name, "parent",
                          ga->parent < 0
                              ? json_null()
                              : json_string(am->ans[g->an_of[ga->parent]].name),
                          "children", ga->nchildren, "top", i == 0));
        }
        /* exact-mode operations: counted by the group's top AN, as of
         * its last stats answer */
        json_int_t exact = 0;
        if (g->plan.nans > 0) {
            char key[16];
            snprintf(key, sizeof(key), "%u", (unsigned)g->id);
            exact = json_integer_value(json_object_get(
                json_object_get(am->ans[g->an_of[0]].counters, "exact_ops"),
                key));
        }
        json_t *o =
            json_pack("{s:I, s:I, s:o, s:i, s:s, s:i, s:o, s:s, s:s, s:i, s:I}",
                      "exact_ops", exact, "group_id", (json_int_t)g->id,
                      "job_id", shp_json_u64(g->job->id), "tree_id", g->tree,
                      "state", g->state == AM_GROUP_UP ? "up" : "configuring",
                      "members", g->plan.nmembers, "ans", ans, "dist",
                      shp_dist_names[g->dist], "mcast_addr", g->mcast_addr,
                      "osts", (int)g->osts, "payload", (json_int_t)g->payload);
        json_array_append_new(a, shp_am_group_standby_json(g, o));
    }
    return a;
}

/* job_kill {job_id}: the job ends now; its processes are told. */
static shp_status_t am_admin_job_kill(shp_am_t *am, shp_am_peer_t *p,
                                      const json_t *req, const char **error)
{
    uint64_t jid;
    shp_am_job_t *j = NULL;
    if (shp_json_get_u64(req, "job_id", &jid, NULL) == SHP_OK)
        HASH_FIND(hh, am->jobs, &jid, sizeof(jid), j);
    if (!j) {
        *error = "no such job";
        return SHP_ERR_JOB_UNKNOWN;
    }
    shp_info("job %" PRIu64 " killed by uid %u", jid, (unsigned)p->uid);
    shp_am_job_end(am, j, SHP_ERR_JOB_KILLED, "killed by the administrator");
    return SHP_OK;
}

/* an_drain {name, reason?}, an_undrain {name}; tree_freeze {tree_id,
 * reason?}, tree_thaw {tree_id}: committed to the state database before
 * the reply (am_settings.c); *error (static) says why not. */
static shp_status_t am_admin_setting(shp_am_t *am, shp_am_peer_t *p,
                                     const char *type, const json_t *req,
                                     const char **error)
{
    static char why[512];
    int on = !strcmp(type, "an_drain") || !strcmp(type, "tree_freeze");
    if (!am->active) { /* a standby's settings are the active one's copy */
        *error = "this manager is a standby: set it on the active one "
                 "(sharpctl status names it), which sends it here";
        return SHP_ERR_STANDBY;
    }
    const char *reason = on ? shp_json_opt_str(req, "reason", "") : NULL;
    shp_status_t st;
    if (!strncmp(type, "an_", 3)) {
        const char *name;
        if (shp_json_get_str(req, "name", &name, NULL) != SHP_OK) {
            *error = "name required";
            return SHP_ERR_PROTO;
        }
        if ((st = shp_am_an_drain(am, name, reason, why, sizeof(why))) !=
            SHP_OK) {
            *error = why;
            return st;
        }
        shp_info("AN %s %s by uid %u%s%s", name, on ? "drained" : "undrained",
                 (unsigned)p->uid, reason && *reason ? ": " : "",
                 reason ? reason : "");
        return SHP_OK;
    }
    int64_t t;
    if (shp_json_get_int(req, "tree_id", 0, SHP_AM_MAX_TREE_ID - 1, &t, NULL) !=
        SHP_OK) {
        *error = "no such tree (tree_id 0 .. 63)";
        return SHP_ERR_NOT_FOUND;
    }
    if ((st = shp_am_tree_freeze(am, (int)t, reason, why, sizeof(why))) !=
        SHP_OK) {
        *error = why;
        return st;
    }
    shp_info("tree %d %s by uid %u%s%s", (int)t, on ? "frozen" : "thawed",
             (unsigned)p->uid, reason && *reason ? ": " : "",
             reason ? reason : "");
    return SHP_OK;
}

/* the sharpds' counts of their limits reached, summed over those
 * connected (sharpd_stats) */
static void am_admin_sharpd_limits(shp_am_t *am, json_t *stats)
{
    static const char *const names[5] = {
        "sharpd_clients_refused", "sharpd_frames_timed_out",
        "sharpd_jobs_refused", "sharpd_queue_overflows",
        "sharpd_frames_refused"};
    uint64_t sum[5] = {0, 0, 0, 0, 0};
    for (const shp_am_peer_t *p = am->peers; p; p = p->next)
        for (int k = 0; p->role == AM_PEER_SHARPD && k < 5; k++)
            sum[k] += p->sd_limits[k];
    for (int k = 0; k < 5; k++)
        json_object_set_new(stats, names[k], json_integer((json_int_t)sum[k]));
}

static json_t *am_admin_stats(shp_am_t *am)
{
    json_t *s =
        json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, "
                  "s:I, s:I}",
                  "jobs", (json_int_t)HASH_COUNT(am->jobs), "groups",
                  (json_int_t)HASH_COUNT(am->groups), "jobs_begun",
                  (json_int_t)am->stats.jobs_begun, "jobs_refused",
                  (json_int_t)am->stats.jobs_refused, "groups_created",
                  (json_int_t)am->stats.groups_created, "groups_failed",
                  (json_int_t)am->stats.groups_failed, "groups_revoked",
                  (json_int_t)am->stats.groups_revoked, "auth_failures",
                  (json_int_t)am->stats.auth_failures, "tree_builds",
                  (json_int_t)am->stats.tree_builds, "uid_groups_refused",
                  (json_int_t)am->stats.uid_groups_refused, "peers_refused",
                  (json_int_t)am->stats.peers_refused, "squats_ended",
                  (json_int_t)am->stats.squats_ended);
    if (s) {
        am_admin_sharpd_limits(am, s);
        /* this incarnation's epoch (grows at each start, am_persist.c) */
        json_object_set_new(s, "epoch", json_integer((json_int_t)am->epoch));
        /* sharpds lost and held for sharpd_grace, and back within it */
        json_object_set_new(s, "sharpds_held",
                            json_integer((json_int_t)am->stats.sharpds_held));
        json_object_set_new(s, "sharpds_back",
                            json_integer((json_int_t)am->stats.sharpds_back));
        /* connections that proved nothing, and peers that do not read */
        json_object_set_new(s, "unauth_refused",
                            json_integer((json_int_t)am->stats.unauth_refused));
        /* groups revoked while up, by what guarded them; standbys remade */
        json_object_update_new(
            s, json_pack(
                   "{s:I, s:I, s:I, s:I}", "standby_takeovers",
                   (json_int_t)am->stats.standby_takeovers, "standbys_lost",
                   (json_int_t)am->stats.standbys_lost, "groups_unguarded_lost",
                   (json_int_t)am->stats.groups_unguarded_lost,
                   "standbys_remade", (json_int_t)am->stats.standbys_remade));
        json_object_set_new(s, "unauth_evicted",
                            json_integer((json_int_t)am->stats.unauth_evicted));
        json_object_set_new(
            s, "queue_overflows",
            json_integer((json_int_t)am->stats.queue_overflows));
    }
    return s;
}

/* topology_load {file}: *error (static) says why not. */
static shp_status_t am_admin_topology_load(shp_am_t *am, shp_am_peer_t *p,
                                           const json_t *req,
                                           const char **error)
{
    const char *file;
    static char why[512];
    shp_status_t st;
    if (shp_json_get_str(req, "file", &file, NULL) != SHP_OK) {
        *error = "file required";
        return SHP_ERR_PROTO;
    }
    if ((st = shp_am_topology_load(am, file, why, sizeof(why))) != SHP_OK) {
        *error = why;
        return st;
    }
    shp_info("topology %s loaded by uid %u", file, (unsigned)p->uid);
    return SHP_OK;
}

static json_t *am_admin_topology(shp_am_t *am)
{
    return json_pack(
        "{s:s, s:I, s:I, s:I}", "file", am->cfg.topology, "switches",
        (json_int_t)shp_topo_count_type(am->topo, SHP_NODE_SWITCH), "hosts",
        (json_int_t)shp_topo_count_type(am->topo, SHP_NODE_CA), "links",
        (json_int_t)shp_topo_links(am->topo));
}

/* One request: its reply {type: "<request>_reply", id, status, error?,
 * data}. */
static json_t *am_admin_request(shp_am_t *am, shp_am_peer_t *p,
                                const json_t *req)
{
    const char *type = shp_ctl_type(req);
    int64_t id = shp_json_opt_int(req, "id", 0, INT64_MAX, 0);
    char rtype[64];
    snprintf(rtype, sizeof(rtype), "%.50s_reply", type);
    json_t *r = json_pack("{s:s, s:I}", "type", rtype, "id", (json_int_t)id);
    shp_status_t st = SHP_OK;
    const char *error = NULL;

    if (!am_admin_allowed(am, p)) {
        st = SHP_ERR_PERM;
        error = "the admin interface is for root and the admin group";
        shp_warn_id("AM0105", "admin request %s from uid %u refused", type,
                    (unsigned)p->uid);
    } else if (!strcmp(type, "ans")) {
        json_object_set_new(r, "ans", am_admin_ans(am));
    } else if (!strcmp(type, "trees")) {
        json_object_set_new(r, "trees", am_admin_trees(am));
    } else if (!strcmp(type, "tree")) {
        json_t *t = am_admin_tree(am, req, &st);
        if (t)
            json_object_set_new(r, "tree", t);
        else
            error = "no such tree";
    } else if (!strcmp(type, "jobs")) {
        json_object_set_new(r, "jobs", am_admin_jobs(am));
    } else if (!strcmp(type, "groups")) {
        json_object_set_new(r, "groups", am_admin_groups(am, req));
    } else if (!strcmp(type, "job_kill")) {
        st = am_admin_job_kill(am, p, req, &error);
    } else if (!strcmp(type, "an_drain") || !strcmp(type, "an_undrain") ||
               !strcmp(type, "tree_freeze") || !strcmp(type, "tree_thaw")) {
        st = am_admin_setting(am, p, type, req, &error);
    } else if (!strcmp(type, "status")) { /* active or standby: am_ha.c */
        json_object_set_new(r, "manager", shp_am_ha_status(am));
    } else if (!strcmp(type, "stats")) {
        json_object_set_new(r, "stats", am_admin_stats(am));
    } else if (!strcmp(type, "topology_load")) {
        st = am_admin_topology_load(am, p, req, &error);
    } else if (!strcmp(type, "topology")) {
        json_object_set_new(r, "topology", am_admin_topology(am));
    } else if (!strcmp(type, "adoption")) {
        json_object_set_new(r, "adoption", shp_am_adopt_json(am));
    } else {
        st = SHP_ERR_UNSUPPORTED;
        error = "unknown request";
    }
    json_object_set_new(r, "status", json_integer(st));
    if (error)
        json_object_set_new(r, "error", json_string(error));
    return r;
}

void shp_am_admin_install(shp_am_t *am)
{
    am->admin_handler = am_admin_request;
}
