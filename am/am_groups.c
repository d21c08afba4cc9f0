/*
 * Groups: a job's members reduced together over a sub-tree of one tree.
 *
 * group_create checks the request (dist, the job's max_groups, members that
 * are hosts of the job), places the group on the least-loaded up tree that
 * spans its members with room on every AN (max_groups), neither frozen nor
 * through a drained AN (am_settings.c), gives it an id (24
 * bits, never one in use), a multicast address and port derived from the
 * id, the job's quotas cut to what every AN takes, and wires it: one
 * group_add per AN of the trimmed sub-tree, all or nothing.  The requester
 * is answered once every AN has acknowledged (group_timeout), or told why
 * not; a group up that loses an AN, or that an AN reports failed, is
 * revoked and the job's sharpds are told.
 */
#include "am/am_int.h"
#include "am/am_adopt.h"
#include "am/am_ids.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/ctl.h"
#include "protocol/wire.h"

#include <sodium.h>
#include "core/log.h"

void shp_am_group_free(shp_am_t *am, shp_am_group_t *g)
{
    ev_timer_stop(am->loop, &g->timer);
    HASH_DEL(am->groups, g);
    shp_am_job_t *j = g->job;
    for (shp_am_group_t **pp = &j->groups; *pp; pp = &(*pp)->jnext)
        if (*pp == g) {
            *pp = g->jnext;
            break;
        }
    j->ngroups--;
    shp_am_tree_t *tr = &am->trees[g->tree];
    if (tr->used && --tr->ngroups == 0 && !tr->up)
        shp_am_trees_schedule(am); /* a down tree is replaced once empty */
    for (int i = 0; i < g->plan.nans; i++)
        if (g->an_of[i] >= 0)
            am->ans[g->an_of[i]].ngroups--;
    shp_group_plan_free(&g->plan);
    free(g->an_of);
    free(g->acked);
    free(g);
}

static void am_group_remove_at(shp_am_t *am, int a, uint32_t id)
{
    shp_am_an_t *an = &am->ans[a];
    if (an->up && an->peer)
        shp_am_send(an->peer,
                    json_pack("{s:s, s:I, s:I}", "type", "group_remove", "id",
                              (json_int_t)am->next_req++, "group_id",
                              (json_int_t)id));
}

void shp_am_group_remove_from_ans(shp_am_t *am, shp_am_group_t *g)
{
    for (int i = 0; i < g->plan.nans; i++)
        am_group_remove_at(am, g->an_of[i], g->id);
}

/* A group of job `job` that its ANs reported and the adoption has not
 * taken back yet (this manager came over after a partition, or started
 * again): its job may destroy it as any other.  Its ANs are told to remove
 * it and later reports of it are removed (gone).  1 if there was one. */
static int am_group_destroy_reported(shp_am_t *am, uint32_t id, uint64_t job)
{
    shp_am_adopt_t *ad = am->adopt;
    adopt_group_t *ag = NULL;
    if (ad == NULL || !ad->on)
        return 0;
    HASH_FIND(hh, ad->groups, &id, sizeof(id), ag);
    if (ag == NULL || ag->gone || ag->job != job)
        return 0;
    for (int i = 0; i < ag->nreps; i++)
        am_group_remove_at(am, ag->reps[i].an, id);
    ag->gone = 1;
    shp_info("group %" PRIu32 " of job %" PRIu64 " destroyed by its job "
             "before it was taken back",
             id, job);
    return 1;
}

/* every AN of g's up (an AN just lost is down before its groups are
 * revoked: a standby through it is no guard) */
static int am_group_ans_up(const shp_am_t *am, const shp_am_group_t *g)
{
    for (int i = 0; i < g->plan.nans; i++)
        if (g->an_of[i] < 0 || !am->ans[g->an_of[i]].up)
            return 0;
    return 1;
}

/* g, up, is revoked: what guarded it, counted for sharpctl stats (a
 * standby of it that can take over; g a standby whose group lives on; or
 * nothing) */
static void am_group_lost_count(shp_am_t *am, const shp_am_group_t *g)
{
    const shp_am_group_t *o;
    for (o = g->job->groups; o; o = o->jnext)
        if (o != g && o->standby_of == g->id && o->state == AM_GROUP_UP &&
            am_group_ans_up(am, o)) {
            am->stats.standby_takeovers++;
            shp_info("group %" PRIu32 " of job %" PRIu64
                     ": its standby group %" PRIu32 " can take over",
                     g->id, g->job->id, o->id);
            return;
        }
    o = g->standby_of ? shp_am_group_find(am, g->standby_of) : NULL;
    if (o && o->state == AM_GROUP_UP && am_group_ans_up(am, o))
        am->stats.standbys_lost++;
    else
        am->stats.groups_unguarded_lost++;
}

/* Revoke a group: the ANs forget it, the job's sharpds (or the pending
 * requester) are told. */
void shp_am_group_revoke(shp_am_t *am, shp_am_group_t *g, shp_status_t st,
                         const char *reason)
{
    shp_am_group_remove_from_ans(am, g);
    if (g->state == AM_GROUP_CONFIGURING) {
        am->stats.groups_failed++;
        shp_warn_id("AM0301",
                    "group %" PRIu32 " of job %" PRIu64 " not created: %s",
                    g->id, g->job->id, reason);
        shp_am_send(g->req_peer,
                    shp_ctl_reply("group_create_ack", g->req_id, st, reason));
    } else {
        am->stats.groups_revoked++;
        am_group_lost_count(am, g);
        shp_warn_id("AM0302",
                    "group %" PRIu32 " of job %" PRIu64 " revoked: %s", g->id,
                    g->job->id, reason);
        json_t *m =
            json_pack("{s:s, s:o, s:I, s:i, s:s}", "type", "group_revoked",
                      "job_id", shp_json_u64(g->job->id), "group_id",
                      (json_int_t)g->id, "status", (int)st, "reason", reason);
        shp_am_job_notify(am, g->job, m);
    }
    shp_am_group_free(am, g);
}

json_t *shp_am_group_standby_json(const shp_am_group_t *g, json_t *d)
{
    uint32_t of = g->standby_of ? g->standby_of : g->stripe_of;
    if (d != NULL && of) /* its ANs the other's too, if any */
        json_object_update_new(
            d,
            json_pack("{s:I, s:i}", g->standby_of ? "standby_of" : "stripe_of",
                      (json_int_t)of, "shared_ans", g->shared));
    return d;
}

static json_t *am_group_descriptor(shp_am_t *am, shp_am_group_t *g)
{
    json_t *members = json_array();
    for (int r = 0; r < g->plan.nmembers; r++) {
        int a = g->plan.member_an[r];
        json_array_append_new(
            members,
            json_pack("{s:s, s:s, s:s, s:i}", "an", am->ans[g->an_of[a]].name,
                      "addr", am->ans[g->an_of[a]].data_addr, "transport",
                      am->ans[g->an_of[a]].transport, "child_index",
                      g->plan.member_index[r]));
    }
    json_t *ans = json_array();
    for (int i = 0; i < g->plan.nans; i++)
        json_array_append_new(ans, json_string(am->ans[g->an_of[i]].name));
    json_t *d =
        json_pack("{s:I, s:i, s:o, s:o, s:s, s:s, s:i, s:I, s:o, s:o}",
                  "group_id", (json_int_t)g->id, "tree_id", g->tree, "job_id",
                  shp_json_u64(g->job->id), "job_key",
                  shp_json_hex(g->job->key, sizeof(g->job->key)), "dist",
                  shp_dist_names[g->dist], "mcast_addr", g->mcast_addr, "osts",
                  (int)g->osts, "payload", (json_int_t)g->payload, "members",
                  members, "ans", ans);
    return shp_am_group_standby_json(g, d);
}

static void am_group_timeout_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    shp_am_group_t *g = w->data;
    shp_am_t *am = g->am;
    char why[256] = "the ANs did not confirm the group in time";
    for (int i = 0; i < g->plan.nans; i++)
        if (!g->acked[i]) {
            snprintf(why, sizeof(why),
                     "AN %s did not confirm the group in time",
                     am->ans[g->an_of[i]].name);
            break;
        }
    shp_am_group_revoke(am, g, SHP_ERR_TIMED_OUT, why);
}

void shp_am_group_ack(shp_am_t *am, int64_t id, shp_status_t st,
                      const char *error, int from_an)
{
    int pos = (int)(id & 0xfffff);
    shp_am_group_t *g = shp_am_group_find(am, (uint32_t)(id >> 20));
    if (!g || g->state != AM_GROUP_CONFIGURING || pos >= g->plan.nans ||
        g->an_of[pos] != from_an || g->acked[pos])
        return; /* late answer for a group already settled */
    if (st != SHP_OK) {
        char why[300];
        snprintf(why, sizeof(why), "AN %s refused the group: %s",
                 am->ans[from_an].name, error ? error : shp_status_str(st));
        shp_am_group_revoke(am, g, st, why);
        return;
    }
    g->acked[pos] = 1;
    if (++g->nacked < g->plan.nans)
        return;
    ev_timer_stop(am->loop, &g->timer);
    g->state = AM_GROUP_UP;
    am->stats.groups_created++;
    shp_info("group %" PRIu32 " of job %" PRIu64 " up on tree %d (%d members, "
             "%d ANs)",
             g->id, g->job->id, g->tree, g->plan.nmembers, g->plan.nans);
    const shp_am_group_t *of =
        g->standby_of ? shp_am_group_find(am, g->standby_of) : NULL;
    if (of && of->standby_of && !shp_am_group_find(am, of->standby_of))
        am->stats.standbys_remade++; /* for a standby that took over */
    if (g->standby_of && g->shared > 0)
        shp_info("group %" PRIu32 " stands by group %" PRIu32 " but shares "
                 "%d of its ANs with it: no tree of the topology avoids "
                 "them all",
                 g->id, g->standby_of, g->shared);
    json_t *m = shp_ctl_reply("group_create_ack", g->req_id, SHP_OK, NULL);
    json_object_set_new(m, "group", am_group_descriptor(am, g));
    shp_am_send(g->req_peer, m);
    g->req_peer = NULL;
}

/* dist auto: results by multicast where every AN of the group speaks tcp
 * and can multicast (udp beside it): one send at the top, replicated by the
 * network (on one host by the kernel, which shares the datagram among the
 * receivers), where RC sends it to each member.  Over shm the members'
 * rings beat the kernel's multicast; over verbs RC stays until UD
 * multicast is measured on a real fabric. */
static int am_dist_auto(const shp_am_t *am, const shp_group_plan_t *bp)
{
    for (int i = 0; i < bp->nans; i++) {
        int a = shp_am_an_of_node(am, bp->ans[i].node);
        if (a < 0 || strcmp(am->ans[a].transport, "tcp") != 0 ||
            !am->ans[a].mcast) {
            return SHP_DIST_RC;
        }
    }
    return SHP_DIST_MCAST;
}

/* A group_create on its way: what it asks, checked, then placed. */
typedef struct {
    shp_am_job_t *job;
    int dist;      /* shp_dist_t (AUTO: chosen when placed) */
    int *nodes, n; /* the members' topology nodes */
    int tree;      /* where it goes; plan: its sub-tree there */
    shp_group_plan_t plan;
    /* a standby: the group of the job it stands by (its ANs avoided:
     * the tree that shares the fewest with it, then the least loaded),
     * and how many the chosen plan shares */
    const shp_am_group_t *avoid;
    int shared;
    int stripe; /* avoid is the group it stripes, not one it stands by */
    shp_status_t st;
    char why[300];
} am_group_req_t;

static shp_status_t am_group_fail(am_group_req_t *r, shp_status_t st,
                                  const char *why)
{
    snprintf(r->why, sizeof(r->why), "%s", why);
    return r->st = st;
}

/* groups of uid's jobs now */
static unsigned am_uid_groups(shp_am_t *am, uid_t uid)
{
    unsigned n = 0;
    shp_am_job_t *j, *tmp;
    HASH_ITER(hh, am->jobs, j, tmp)
    {
        if (j->uid == uid)
            n += (unsigned)j->ngroups;
    }
    return n;
}

/* The request's members and dist, the job's max_groups and its owner's
 * uid_max_groups (over every job of the user: root's are not counted). */
static shp_status_t am_group_check(shp_am_t *am, const json_t *msg,
                                   am_group_req_t *r, const char *dflt,
                                   json_t **members)
{
    const char *w;
    const char *dist = shp_json_opt_str(msg, "dist", dflt);
    if (shp_json_get_array(msg, "members", members, &w))
        return am_group_fail(r, SHP_ERR_PROTO, "members required");
    r->dist = shp_dist_parse(dist);
    if (r->dist < 0)
        return am_group_fail(r, SHP_ERR_INVALID_PARAM,
                             "dist must be rc, mcast, both or auto");
    if ((unsigned)r->job->ngroups >= r->job->max_groups) {
        snprintf(r->why, sizeof(r->why),
                 "job %" PRIu64 " has its maximum of %u "
                 "groups",
                 r->job->id, r->job->max_groups);
        return r->st = SHP_ERR_QUOTA;
    }
    uid_t uid = r->job->uid;
    if (uid != 0 && am_uid_groups(am, uid) >= am->cfg.uid_max_groups) {
        am->stats.uid_groups_refused++;
        snprintf(r->why, sizeof(r->why),
                 "uid %u has its maximum of %u groups over all its jobs "
                 "(uid_max_groups)",
                 (unsigned)uid, am->cfg.uid_max_groups);
        shp_warn_sparse(1000, "group of job %" PRIu64 " refused: %s",
                        r->job->id, r->why);
        return r->st = SHP_ERR_QUOTA;
    }
    return SHP_OK;
}

/* A standby (standby_of) or a stripe (stripe_of: a group of the same job
 * over the same members that carries a part of each large operation):
 * placed away from that group's ANs (am_group_place).  A stripe is extra:
 * it is refused once the job holds half its max_groups, so that stripes
 * never take the groups its later communicators need. */
static shp_status_t am_group_standby(shp_am_t *am, const json_t *msg,
                                     am_group_req_t *r)
{
    int64_t of;
    const json_t *standby = json_object_get(msg, "standby_of");
    r->stripe = json_object_get(msg, "stripe_of") != NULL;
    if (!standby && !r->stripe)
        return SHP_OK;
    if (standby && r->stripe)
        return am_group_fail(r, SHP_ERR_INVALID_PARAM,
                             "a group is a standby or a stripe, not both");
    const char *key = r->stripe ? "stripe_of" : "standby_of";
    const shp_am_group_t *g =
        shp_json_get_int(msg, key, 1, UINT32_MAX, &of, NULL) == SHP_OK
            ? shp_am_group_find(am, (uint32_t)of)
            : NULL;
    if (!g || g->job != r->job) {
        snprintf(r->why, sizeof(r->why), "%s names no group of this job", key);
        return r->st = SHP_ERR_INVALID_PARAM;
    }
    r->avoid = g;
    if (r->stripe && 2 * (unsigned)r->job->ngroups >= r->job->max_groups) {
        snprintf(r->why, sizeof(r->why),
                 "job %" PRIu64 " holds half its maximum of %u groups: "
                 "no stripes beyond that",
                 r->job->id, r->job->max_groups);
        return r->st = SHP_ERR_QUOTA;
    }
    return SHP_OK;
}

/* A stripe on the very ANs of its group would only split the same work
 * among the same processes: refused. */
static shp_status_t am_group_stripe_apart(am_group_req_t *r)
{
    if (!r->stripe || r->shared < r->plan.nans)
        return SHP_OK;
    snprintf(r->why, sizeof(r->why),
             "no tree apart from group %" PRIu32 " for a stripe", r->avoid->id);
    return r->st = SHP_ERR_NO_TREE;
}

/* The members: hosts of the topology, every one a host of the job. */
static shp_status_t am_group_members(shp_am_t *am, const json_t *members,
                                     am_group_req_t *r)
{
    shp_am_job_t *j = r->job;
    r->st = shp_am_hosts_resolve(am, members, &r->nodes, &r->n, r->why,
                                 sizeof(r->why));
    if (r->st != SHP_OK)
        return r->st;
    if (shp_am_mark_begin(am) != SHP_OK)
        return am_group_fail(r, SHP_ERR_NO_MEMORY, "out of memory");
    for (int h = 0; h < j->nhosts; h++)
        am->mark[j->hosts[h]] = am->mark_gen;
    for (int k = 0; k < r->n; k++) {
        if (am->mark[r->nodes[k]] != am->mark_gen) {
            snprintf(r->why, sizeof(r->why),
                     "member %s is not a host of job %" PRIu64,
                     shp_topo_node(am->topo, r->nodes[k])->host, j->id);
            return r->st = SHP_ERR_INVALID_PARAM;
        }
    }
    return SHP_OK;
}

/* The AN of the plan that serves its maximum of groups; -1: none. */
static int am_plan_full(const shp_am_t *am, const shp_group_plan_t *plan)
{
    for (int i = 0; i < plan->nans; i++) {
        int a = shp_am_an_of_node(am, plan->ans[i].node);
        if ((unsigned)am->ans[a].ngroups >= am->ans[a].max_groups)
            return a;
    }
    return -1;
}

/* The AN of the plan an administrator drained; -1: none. */
static int am_plan_drained(const shp_am_t *am, const shp_group_plan_t *plan)
{
    for (int i = 0; am->ndrains > 0 && i < plan->nans; i++) {
        int a = shp_am_an_of_node(am, plan->ans[i].node);
        if (shp_am_drained(am, am->ans[a].name))
            return a;
    }
    return -1;
}

/* The ANs of plan that group g uses too (g NULL: 0) */
static int am_plan_shared(const shp_group_plan_t *plan, const shp_am_group_t *g)
{
    int n = 0;
    for (int i = 0; g != NULL && i < plan->nans; i++)
        for (int k = 0; k < g->plan.nans; k++)
            if (plan->ans[i].node == g->plan.ans[k].node) {
                n++;
                break;
            }
    return n;
}

/* The most ANs of plan that the group avoided, or any stripe of it, uses
 * too: a standby avoids its group's stripes as well (a stripe's failure
 * fails its group), and a stripe the stripes already made. */
static int am_plan_shared_req(const shp_group_plan_t *plan,
                              const am_group_req_t *r)
{
    int n = am_plan_shared(plan, r->avoid);
    for (const shp_am_group_t *o = r->avoid ? r->job->groups : NULL; o;
         o = o->jnext)
        if (o->stripe_of == r->avoid->id) {
            int k = am_plan_shared(plan, o);
            n = k > n ? k : n;
        }
    return n;
}

/* tree t, its plan sharing `shared` ANs with the group avoided, is a
 * better place than the one chosen so far: fewer shared, then fewer
 * groups on the tree */
static int am_tree_better(const shp_am_t *am, const am_group_req_t *r, int t,
                          int shared)
{
    return r->tree < 0 || shared < r->shared ||
           (shared == r->shared &&
            am->trees[t].ngroups < am->trees[r->tree].ngroups);
}

/* The least-loaded tree that spans the members, with room on its ANs,
 * neither frozen nor using a drained AN in the group's trimmed sub-tree
 * (a drained AN of the tree that the group does not pass through is no
 * obstacle).  When no tree is left, a full AN says why first (the
 * group may fit later), then a freeze or drain. */
static shp_status_t am_group_place(shp_am_t *am, am_group_req_t *r)
{
    shp_group_plan_t plan = {0};
    char admin_why[180] = "";
    int nfrozen = 0, ndrained = 0, nfull = 0;
    am_group_fail(r, SHP_ERR_NO_TREE, "no aggregation tree spans the members");
    r->tree = -1;
    for (int t = 0; t < SHP_AM_MAX_TREE_ID; t++) {
        shp_am_tree_t *tr = &am->trees[t];
        if (!tr->used || !tr->up ||
            (!r->avoid && r->tree >= 0 &&
             tr->ngroups >= am->trees[r->tree].ngroups))
            continue;
        if (shp_group_plan(&tr->t, am->leaf, r->nodes, r->n,
                           (int)am->cfg.flat_max, &plan) != SHP_OK)
            continue;
        const shp_am_freeze_t *fz = shp_am_frozen(am, t);
        int drained = fz ? -1 : am_plan_drained(am, &plan);
        if (fz || drained >= 0) {
            /* the first one named: the others are alike */
            if (!nfrozen && !ndrained && fz)
                snprintf(admin_why, sizeof(admin_why),
                         "tree %d is frozen: %.120s", t, fz->reason);
            else if (!nfrozen && !ndrained)
                snprintf(admin_why, sizeof(admin_why),
                         "AN %.40s is drained: %.120s", am->ans[drained].name,
                         shp_am_drained(am, am->ans[drained].name)->reason);
            nfrozen += fz != NULL;
            ndrained += drained >= 0;
            shp_group_plan_free(&plan);
            continue;
        }
        int full = am_plan_full(am, &plan);
        if (full >= 0) {
            snprintf(r->why, sizeof(r->why),
                     "AN %s serves its maximum of %u groups",
                     am->ans[full].name, am->ans[full].max_groups);
            r->st = SHP_ERR_QUOTA;
            nfull++;
            shp_group_plan_free(&plan);
            continue;
        }
        int shared = am_plan_shared_req(&plan, r);
        if (!am_tree_better(am, r, t, shared)) {
            shp_group_plan_free(&plan);
            continue;
        }
        shp_group_plan_free(&r->plan);
        r->plan = plan;
        memset(&plan, 0, sizeof(plan));
        r->tree = t;
        r->shared = shared;
    }
    if (r->tree >= 0)
        return r->st = SHP_OK;
    if (!nfull && (nfrozen || ndrained)) {
        snprintf(r->why, sizeof(r->why),
                 "every tree that spans the members %s (%s)",
                 !ndrained  ? "is frozen"
                 : !nfrozen ? "uses a drained aggregation node"
                            : "is frozen or uses a drained aggregation node",
                 admin_why);
        r->st = SHP_ERR_NO_TREE;
    }
    return r->st;
}

/* A group id: 24 bits, not 0, none in use, none a restart hands out
 * again (its block is committed first); 0: the state database failed. */
static uint32_t am_group_id(shp_am_t *am)
{
    uint32_t id;
    do {
        if (!(id = shp_am_ids_next(am)))
            return 0;
    } while (shp_am_group_find(am, id));
    return id;
}

/* The group placed, configuring: it takes the request's plan, counts on its
 * job, tree and ANs, and waits group_timeout for their acks. */
static shp_am_group_t *am_group_new(shp_am_t *am, am_group_req_t *r,
                                    shp_am_peer_t *p, int64_t id)
{
    uint32_t gid = am_group_id(am);
    if (!gid) {
        am_group_fail(r, SHP_ERR_IO,
                      "the manager cannot write its state "
                      "database");
        return NULL;
    }
    shp_am_group_t *g = calloc(1, sizeof(*g));
    if (!g || !(g->an_of = malloc(sizeof(int) * (size_t)r->plan.nans)) ||
        !(g->acked = calloc((size_t)r->plan.nans, 1))) {
        if (g)
            free(g->an_of);
        free(g);
        return NULL;
    }
    shp_am_job_t *j = r->job;
    g->id = gid;
    g->am = am;
    g->job = j;
    g->tree = r->tree;
    g->plan = r->plan;
    memset(&r->plan, 0, sizeof(r->plan));
    if (r->dist == SHP_DIST_AUTO)
        r->dist = am_dist_auto(am, &g->plan);
    g->dist = r->dist;
    g->osts = j->osts;
    g->payload = j->payload;
    g->req_peer = p;
    g->req_id = id;
    g->standby_of = r->avoid && !r->stripe ? r->avoid->id : 0;
    g->stripe_of = r->avoid && r->stripe ? r->avoid->id : 0;
    g->shared = r->shared;
    snprintf(g->mcast_addr, sizeof(g->mcast_addr), "%s.%u.%u:%u",
             am->cfg.mcast_prefix, (g->id >> 8) & 255, g->id & 255,
             am->cfg.mcast_port + g->id % 20000);
    for (int i = 0; i < g->plan.nans; i++) {
        g->an_of[i] = shp_am_an_of_node(am, g->plan.ans[i].node);
        shp_am_an_t *an = &am->ans[g->an_of[i]];
        an->ngroups++;
        if (an->max_osts < g->osts)
            g->osts = an->max_osts;
        if (an->max_payload < g->payload)
            g->payload = (uint32_t)an->max_payload;
    }
    HASH_ADD(hh, am->groups, id, sizeof(g->id), g);
    g->jnext = j->groups;
    j->groups = g;
    j->ngroups++;
    am->trees[g->tree].ngroups++;
    ev_timer_init(&g->timer, am_group_timeout_cb,
                  (double)am->cfg.group_timeout_ms / 1000.0, 0.);
    g->timer.data = g;
    ev_timer_start(am->loop, &g->timer);
    return g;
}

/* Every AN of the trimmed sub-tree is sent its group_add: all or nothing
 * (the request id says which AN answers: group id << 20 | position). */
/* A group's keys, from its job's: the join key and the multicast key
 * (protocol/wire.h).  An AN is given these, never the job key: an AN of
 * one group can neither tag results for, nor join, the job's others. */
static void am_group_keys(const shp_am_job_t *j, uint16_t tree, uint32_t gid,
                          uint8_t jk[SHP_WIRE_JOIN_KEY_LEN],
                          uint8_t mk[SHP_WIRE_MAC_KEY_LEN])
{
    shp_wire_join_key(j->key, tree, gid, jk);
    shp_wire_mac_key(j->key, tree, gid, mk);
}

void shp_am_group_keys_fp(const shp_am_job_t *j, uint16_t tree, uint32_t gid,
                          char fp[SHP_AUTH_FP_HEX])
{
    uint8_t jk[SHP_WIRE_JOIN_KEY_LEN], mk[SHP_WIRE_MAC_KEY_LEN];
    am_group_keys(j, tree, gid, jk, mk);
    shp_auth_group_fp(jk, mk, j->id, fp);
    sodium_memzero(jk, sizeof(jk));
    sodium_memzero(mk, sizeof(mk));
}

static void am_group_wire(shp_am_t *am, shp_am_group_t *g)
{
    /* the group's keys, never the job's (am_group_keys) */
    uint8_t jk[SHP_WIRE_JOIN_KEY_LEN], mk[SHP_WIRE_MAC_KEY_LEN];
    am_group_keys(g->job, (uint16_t)g->tree, g->id, jk, mk);
    for (int i = 0; i < g->plan.nans; i++) {
        shp_group_an_t *ga = &g->plan.ans[i];
        json_t *children = json_array();
        for (int c = 0; c < ga->nchildren; c++)
            json_array_append_new(
                children, json_pack("{s:s}", "kind",
                                    ga->children[c].is_an ? "an" : "member"));
        json_t *m = json_pack(
            "{s:s, s:I, s:I, s:i, s:o, s:o, s:o, s:o, s:b, s:i, s:s, s:s, "
            "s:i, s:I}",
            "type", "group_add", "id", (json_int_t)g->id << 20 | i, "group_id",
            (json_int_t)g->id, "tree_id", g->tree, "job_id",
            shp_json_u64(g->job->id), "join_key", shp_json_hex(jk, sizeof(jk)),
            "mcast_key", shp_json_hex(mk, sizeof(mk)), "children", children,
            "top", i == 0, "parent_index", ga->parent_index, "dist",
            shp_dist_names[g->dist], "mcast_addr", g->mcast_addr, "osts",
            (int)g->osts, "payload", (json_int_t)g->payload);
        shp_am_send(am->ans[g->an_of[i]].peer, m);
    }
    sodium_memzero(jk, sizeof(jk));
    sodium_memzero(mk, sizeof(mk));
}

/* group_create {job_id, uid, members [hosts], dist?}: checked, placed,
 * made and wired; the requester hears once the ANs have answered, or now
 * why not. */
void shp_am_group_create(shp_am_t *am, shp_am_peer_t *p, const json_t *msg,
                         int64_t id)
{
    static const char *ack = "group_create_ack";
    am_group_req_t r = {.tree = -1};
    json_t *members;
    shp_am_group_t *g;
    r.job = shp_am_job_for(am, p, msg, ack, id);
    if (!r.job)
        return;
    if (am_group_check(am, msg, &r, shp_dist_names[am->cfg.dist], &members) !=
            SHP_OK ||
        am_group_standby(am, msg, &r) != SHP_OK ||
        am_group_members(am, members, &r) != SHP_OK ||
        am_group_place(am, &r) != SHP_OK || am_group_stripe_apart(&r) != SHP_OK)
        goto fail;
    if (!(g = am_group_new(am, &r, p, id))) {
        if (r.st != SHP_ERR_IO)
            am_group_fail(&r, SHP_ERR_NO_MEMORY, "no memory");
        goto fail;
    }
    am_group_wire(am, g);
    free(r.nodes);
    return;
fail:
    shp_am_send(p, shp_ctl_reply(ack, id, r.st, r.why));
    free(r.nodes);
    shp_group_plan_free(&r.plan);
}

void shp_am_group_destroy(shp_am_t *am, shp_am_peer_t *p, const json_t *msg,
                          int64_t id)
{
    shp_am_job_t *j = shp_am_job_for(am, p, msg, "group_destroy_ack", id);
    int64_t gid;
    if (!j)
        return;
    if (shp_json_get_int(msg, "group_id", 0, UINT32_MAX, &gid, NULL)) {
        shp_am_send(p, shp_ctl_reply("group_destroy_ack", id, SHP_ERR_PROTO,
                                     "group_id required"));
        return;
    }
    shp_am_group_t *g = shp_am_group_find(am, (uint32_t)gid);
    if (!g && am_group_destroy_reported(am, (uint32_t)gid, j->id)) {
        shp_am_send(p, shp_ctl_reply("group_destroy_ack", id, SHP_OK, NULL));
        return;
    }
    if (!g || g->job != j) {
        shp_am_send(p, shp_ctl_reply("group_destroy_ack", id,
                                     SHP_ERR_GROUP_UNKNOWN,
                                     "no such group in this job"));
        return;
    }
    if (g->state == AM_GROUP_CONFIGURING)
        shp_am_send(g->req_peer, shp_ctl_reply("group_create_ack", g->req_id,
                                               SHP_ERR_CANCELED, "destroyed"));
    /* a group its members destroy because it failed (libsharp_coll's
     * word: the job's own counters, nothing else, follow it) is counted
     * as one revoked here is: they may have moved onto its standby before
     * this manager saw the AN's loss */
    if (g->state == AM_GROUP_UP && json_is_true(json_object_get(msg, "failed")))
        am_group_lost_count(am, g);
    shp_am_group_remove_from_ans(am, g);
    shp_am_group_free(am, g);
    shp_am_send(p, shp_ctl_reply("group_destroy_ack", id, SHP_OK, NULL));
}
