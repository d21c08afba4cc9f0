/*
 * Adoption: a manager that (re)starts takes the running fabric back
 * instead of clearing it.  The data path never needed it: the ANs hold the
 * trees and groups, the sharpds the jobs, the processes their keys.
 *
 * Within adopt_timeout of its start the manager collects what its peers
 * report when they register:
 *
 * - an AN: every group it serves (id, tree, job, its place there: top,
 *   parent index, the kinds of its children; dist, multicast address,
 *   quotas, the fingerprint of the group's keys, never a key);
 * - a sharpd: the jobs it has processes of (id, uid, key, quotas,
 *   job_begin's hosts, the groups created through it with their members),
 *   and its host's reservations.
 *
 * Jobs are taken back from the sharpds at once (every sharpd of a job must
 * agree on its uid and key).  The trees wait for every AN of the topology
 * (trees_hold; at most adopt_timeout): built over the same ANs they come
 * out the same, with the same ids.  A group is then adopted when its
 * members are known and their hosts' sharpds all reported the job, and
 * its ANs' reports agree with each other, with the job's key and with the
 * plan of its tree over its members; one that cannot agree is revoked with
 * the reason (the log, sharpctl adoption).  New jobs and groups wait
 * (am_sharpds.c) until the trees are built.  At adopt_timeout what is not
 * complete is revoked, and jobs unknown then are killed as before.
 *
 * Every report is bounded: groups per AN by its max_groups, children per
 * group by the AN's 1024, jobs per sharpd by max_jobs, hosts and members
 * by max_list, groups per job by job_max_groups, reports in all by
 * ADOPT_MAX_GROUPS.
 *
 * This file keeps the groups reported and decides (the checks, the
 * trees' wait, the deadline); am_adopt_reports.c reads the ANs' and the
 * sharpds' reports into it (am/am_adopt.h).
 */
#include "am/am_adopt.h"
#include "am/am_ids.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/ctl.h"
#include "core/log.h"

static void adopt_group_free(shp_am_adopt_t *ad, adopt_group_t *g)
{
    HASH_DEL(ad->groups, g);
    ad->ngroups--;
    for (int i = 0; i < g->nreps; i++)
        free(g->reps[i].kinds);
    free(g->reps);
    json_decref(g->members);
    free(g);
}

adopt_group_t *shp_am_adopt_group_get(shp_am_t *am, uint32_t id)
{
    shp_am_adopt_t *ad = am->adopt;
    adopt_group_t *g;
    shp_am_ids_seen(am, id); /* not handed out again */
    HASH_FIND(hh, ad->groups, &id, sizeof(id), g);
    if (g || ad->ngroups >= ADOPT_MAX_GROUPS)
        return g;
    g = calloc(1, sizeof(*g));
    if (!g)
        return NULL;
    g->id = id;
    g->tree = -1;
    HASH_ADD(hh, ad->groups, id, sizeof(g->id), g);
    ad->ngroups++;
    return g;
}

static void adopt_log(shp_am_adopt_t *ad, uint32_t gid, uint64_t jid,
                      const char *reason)
{
    if (json_array_size(ad->log) >= ADOPT_LOG_MAX)
        json_array_remove(ad->log, 0);
    json_array_append_new(
        ad->log, json_pack("{s:I, s:o, s:s}", "group_id", (json_int_t)gid,
                           "job_id", shp_json_u64(jid), "reason", reason));
}

/* Settled (taken back or revoked): kept, gone, until the adoption is
 * over; an AN that reports it later is told to remove it (unless the
 * manager has a group of that id). */
static void adopt_group_settle(adopt_group_t *g)
{
    for (int i = 0; i < g->nreps; i++)
        free(g->reps[i].kinds);
    free(g->reps);
    g->reps = NULL;
    g->nreps = 0;
    json_decref(g->members);
    g->members = NULL;
    g->gone = 1;
}

/* A group not taken back: its ANs forget it, its job's sharpds hear why. */
static void adopt_revoke(shp_am_t *am, adopt_group_t *g, const char *reason)
{
    shp_am_adopt_t *ad = am->adopt;
    for (int i = 0; i < g->nreps; i++) {
        shp_am_an_t *an = &am->ans[g->reps[i].an];
        if (an->up && an->peer)
            shp_am_send(an->peer,
                        json_pack("{s:s, s:I, s:I}", "type", "group_remove",
                                  "id", (json_int_t)am->next_req++, "group_id",
                                  (json_int_t)g->id));
    }
    shp_am_job_t *j = shp_am_job_find(am, g->job);
    if (j)
        shp_am_job_notify(
            am, j,
            json_pack("{s:s, s:o, s:I, s:i, s:s}", "type", "group_revoked",
                      "job_id", shp_json_u64(g->job), "group_id",
                      (json_int_t)g->id, "status", (int)SHP_ERR_GROUP_REVOKED,
                      "reason", reason));
    am->stats.groups_not_adopted++;
    shp_warn_id("AM0303",
                "group %" PRIu32 " of job %" PRIu64 " not taken back: %s",
                g->id, g->job, reason);
    adopt_log(ad, g->id, g->job, reason);
    adopt_group_settle(g);
}

/* A group's record made from its plan and reports: up, counted on its
 * job, tree and ANs; its id (and so its multicast address) in use. */
static shp_status_t adopt_group_make(shp_am_t *am, adopt_group_t *ag,
                                     shp_am_job_t *j, shp_group_plan_t *plan)
{
    shp_am_group_t *g = calloc(1, sizeof(*g));
    if (!g || !(g->an_of = malloc(sizeof(int) * (size_t)plan->nans)) ||
        !(g->acked = malloc((size_t)plan->nans))) {
        if (g)
            free(g->an_of);
        free(g);
        return SHP_ERR_NO_MEMORY;
    }
    g->id = ag->id;
    g->am = am;
    g->job = j;
    g->tree = ag->tree;
    g->state = AM_GROUP_UP;
    g->plan = *plan;
    memset(plan, 0, sizeof(*plan));
    g->dist = ag->dist;
    snprintf(g->mcast_addr, sizeof(g->mcast_addr), "%s", ag->mcast);
    g->osts = ag->osts;
    g->payload = ag->payload;
    g->nacked = g->plan.nans;
    memset(g->acked, 1, (size_t)g->plan.nans);
    for (int i = 0; i < g->plan.nans; i++) {
        g->an_of[i] = shp_am_an_of_node(am, g->plan.ans[i].node);
        am->ans[g->an_of[i]].ngroups++;
    }
    HASH_ADD(hh, am->groups, id, sizeof(g->id), g);
    g->jnext = j->groups;
    j->groups = g;
    j->ngroups++;
    am->trees[g->tree].ngroups++;
    am->stats.groups_adopted++;
    shp_info("group %" PRIu32 " of job %" PRIu64 " taken back on tree %d "
             "(%d members, %d ANs)",
             g->id, j->id, g->tree, g->plan.nmembers, g->plan.nans);
    return SHP_OK;
}

/* The report of AN index a for g, or NULL */
adopt_rep_t *shp_am_adopt_rep_of(adopt_group_t *g, int a)
{
    for (int i = 0; i < g->nreps; i++)
        if (g->reps[i].an == a)
            return &g->reps[i];
    return NULL;
}

/* Whether the ANs' reports are the plan's sub-tree: the same ANs, each at
 * its place (top, parent index, children of the same kinds in the same
 * order).  *wait: an AN of the plan has not come back yet. */
static int adopt_plan_matches(shp_am_t *am, adopt_group_t *g,
                              const shp_group_plan_t *plan, int *wait,
                              char *why, size_t len)
{
    *wait = 0;
    for (int i = 0; i < plan->nans; i++) {
        const shp_group_an_t *pa = &plan->ans[i];
        int a = shp_am_an_of_node(am, pa->node);
        adopt_rep_t *r = a >= 0 ? shp_am_adopt_rep_of(g, a) : NULL;
        const char *name = shp_am_an_name(am, pa->node);
        if (!r) {
            if (a < 0 || !am->ans[a].up) {
                *wait = 1;
                snprintf(why, len, "AN %s of its sub-tree did not come back",
                         name);
            } else {
                snprintf(why, len,
                         "AN %s of its sub-tree came back without it "
                         "(restarted?)",
                         name);
            }
            return 0;
        }
        int ok = r->top == (i == 0) &&
                 (i == 0 || r->pidx == pa->parent_index) &&
                 strlen(r->kinds) == (size_t)pa->nchildren;
        for (int c = 0; ok && c < pa->nchildren; c++)
            ok = r->kinds[c] == (pa->children[c].is_an ? 'a' : 'm');
        if (!ok) {
            snprintf(why, len,
                     "AN %s serves it at another place than tree %d "
                     "gives it",
                     name, g->tree);
            return 0;
        }
    }
    if (g->nreps != plan->nans) {
        for (int i = 0; i < g->nreps; i++) {
            int found = 0;
            for (int k = 0; k < plan->nans && !found; k++)
                found =
                    shp_am_an_of_node(am, plan->ans[k].node) == g->reps[i].an;
            if (!found) {
                snprintf(why, len, "AN %s serves it outside its sub-tree",
                         am->ans[g->reps[i].an].name);
                return 0;
            }
        }
    }
    return 1;
}

/* Members known, hosts of the job with processes on them (their sharpds
 * reported the job): *nodes.  0: not (yet): why says why. */
static int adopt_members(shp_am_t *am, adopt_group_t *g, shp_am_job_t *j,
                         int **nodes, int *n, char *why, size_t len)
{
    if (!g->members) {
        snprintf(why, len, "no sharpd reported its members");
        return 0;
    }
    if (shp_am_hosts_resolve(am, g->members, nodes, n, why, len) != SHP_OK)
        return 0;
    for (int k = 0; k < *n; k++) {
        int attached = 0;
        for (int h = 0; h < j->nhosts && !attached; h++)
            attached = j->hosts[h] == (*nodes)[k] && j->attached[h];
        if (!attached) {
            snprintf(why, len,
                     "the job's processes on member host %s are gone (its "
                     "sharpd did not report the job)",
                     shp_topo_node(am->topo, (*nodes)[k])->host);
            free(*nodes);
            *nodes = NULL;
            return 0;
        }
    }
    return 1;
}

/* One group: taken back, revoked, or (not final) left for later reports.
 * 1 if it is settled. */
static int adopt_try(shp_am_t *am, adopt_group_t *g, int final)
{
    char why[300] = "";
    int *nodes = NULL, n = 0, wait = 0;
    shp_group_plan_t plan = {0};
    shp_am_job_t *j = shp_am_job_find(am, g->job);
    char fp[SHP_AUTH_FP_HEX];

    if (g->gone)
        return 1;
    if (!j) { /* the first reason: its members' failures follow from it */
        if (!final)
            return 0;
        snprintf(why, sizeof(why),
                 "no sharpd reported job %" PRIu64 " (its processes are gone)",
                 g->job);
        adopt_revoke(am, g, why);
        return 1;
    }
    if (g->why[0]) {
        adopt_revoke(am, g, g->why);
        return 1;
    }
    if (g->nreps == 0) {
        if (!final)
            return 0;
        adopt_revoke(am, g, "no AN reported it");
        return 1;
    }
    /* what its ANs hold if the manager gave them this group's keys */
    shp_am_group_keys_fp(j, (uint16_t)g->tree, g->id, fp);
    if (strcmp(fp, g->fp) != 0) {
        adopt_revoke(am, g, "its ANs hold another key than the job's");
        return 1;
    }
    if (shp_am_group_find(am, g->id)) {
        adopt_revoke(am, g, "its id is in use by another group");
        return 1;
    }
    if (!adopt_members(am, g, j, &nodes, &n, why, sizeof(why))) {
        if (!final)
            return 0;
        adopt_revoke(am, g, why);
        return 1;
    }
    if (!am->adopt->trees_ready) {
        free(nodes);
        return 0;
    }
    shp_am_tree_t *tr = &am->trees[g->tree];
    if (!tr->used || !tr->up) {
        snprintf(why, sizeof(why), "tree %d is not built over the ANs now",
                 g->tree);
    } else if (shp_group_plan(&tr->t, am->leaf, nodes, n, (int)am->cfg.flat_max,
                              &plan) != SHP_OK) {
        snprintf(why, sizeof(why), "tree %d does not span its members now",
                 g->tree);
    } else if (!adopt_plan_matches(am, g, &plan, &wait, why, sizeof(why))) {
        if (wait && !final) {
            shp_group_plan_free(&plan);
            free(nodes);
            return 0;
        }
    } else if ((unsigned)j->ngroups >= j->max_groups) {
        snprintf(why, sizeof(why), "job %" PRIu64 " has its %u groups", j->id,
                 j->max_groups);
    } else if (adopt_group_make(am, g, j, &plan) != SHP_OK) {
        snprintf(why, sizeof(why), "out of memory");
    } else {
        adopt_group_settle(g); /* freed with the others at the end */
        free(nodes);
        return 1;
    }
    shp_group_plan_free(&plan);
    free(nodes);
    adopt_revoke(am, g, why);
    return 1;
}

void shp_am_adopt_resolve(shp_am_t *am, int final)
{
    adopt_group_t *g, *tmp;
    HASH_ITER(hh, am->adopt->groups, g, tmp)
    {
        adopt_try(am, g, final);
        if (final && g->gone)
            adopt_group_free(am->adopt, g);
    }
}

/* Trees built: they are those of the fabric once every AN is back (or
 * nothing was reported to take back); new jobs and groups go on. */
static void adopt_trees_built(shp_am_t *am)
{
    shp_am_adopt_t *ad = am->adopt;
    int all = 1;
    if (ad->trees_ready)
        return;
    for (int a = 0; a < am->nans && all; a++)
        all = am->ans[a].up;
    for (size_t n = 0; all && n < shp_topo_count(am->topo); n++) {
        if (!am->an_expected[n])
            continue; /* (no AN there: nothing to look at, none at all
                         before the first registers) */
        int a = shp_am_an_of_node(am, (int)n);
        all = a >= 0 && am->ans[a].up;
    }
    if (!all && ad->evidence && ad->on)
        return;
    ad->trees_ready = 1;
    ad->built_all = all;
    am->trees_hold = 0;
    if (ad->evidence)
        shp_info("adoption: trees built over every AN; groups taken back "
                 "as their reports complete");
    shp_am_adopt_resolve(am, 0);
    am->requests_held = 0;
    shp_am_sharpd_replay(am);
}

static void adopt_deadline_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    shp_am_t *am = w->data;
    shp_am_adopt_t *ad = am->adopt;
    (void)loop;
    (void)revents;
    ad->on = 0;
    if (!ad->trees_ready) {
        am->trees_hold = 0;
        shp_warn("adoption: not every AN came back within adopt_timeout: "
                 "trees built over those that did");
        shp_am_trees_rebuild(am); /* calls adopt_trees_built */
    }
    shp_am_adopt_resolve(am, 1);
    /* adopted jobs of which no host has processes (or a hold) end */
    shp_am_job_t *j, *jt;
    HASH_ITER(hh, am->jobs, j, jt)
    {
        int live = 0;
        for (int h = 0; h < j->nhosts && !live; h++)
            live = j->attached[h] || j->held[h];
        if (j->adopted && !live)
            shp_am_job_end(am, j, SHP_ERR_JOB_KILLED,
                           "no host has processes of the job after the "
                           "aggregation manager restarted");
    }
    if (ad->evidence)
        shp_info("adoption over: %" PRIu64 " jobs and %" PRIu64
                 " groups taken back, %" PRIu64 " groups revoked",
                 am->stats.jobs_adopted, am->stats.groups_adopted,
                 am->stats.groups_not_adopted);
}

/* Something to take back was reported: the trees wait for every AN.  If
 * they were built before over fewer (nothing was reported yet: a fresh
 * fabric as far as the manager knew), new requests wait again until the
 * rebuild that the other ANs' registrations bring. */
void shp_am_adopt_evidence(shp_am_t *am)
{
    shp_am_adopt_t *ad = am->adopt;
    ad->evidence = 1;
    if (!ad->on)
        return;
    if (ad->trees_ready && !ad->built_all) {
        ad->trees_ready = 0;
        am->requests_held = 1;
        shp_am_trees_schedule(am);
    }
    if (!ad->trees_ready)
        am->trees_hold = 1;
}

/* Start and stop, the admin's view ------------------------------------------ */

shp_status_t shp_am_adopt_start(shp_am_t *am)
{
    shp_am_adopt_t *ad = calloc(1, sizeof(*ad));
    if (!ad || !(ad->log = json_array())) {
        free(ad);
        return SHP_ERR_NO_MEMORY;
    }
    am->adopt = ad;
    am->trees_built = adopt_trees_built;
    if (am->cfg.adopt_timeout_ms <= 0) { /* off: nothing is taken back */
        ad->trees_ready = 1;
        return SHP_OK;
    }
    ad->on = 1;
    am->requests_held = 1;
    ev_timer_init(&ad->deadline, adopt_deadline_cb,
                  (double)am->cfg.adopt_timeout_ms / 1000.0, 0.);
    ad->deadline.data = am;
    ev_timer_start(am->loop, &ad->deadline);
    return SHP_OK;
}

void shp_am_adopt_stop(shp_am_t *am)
{
    shp_am_adopt_t *ad = am->adopt;
    if (!ad)
        return;
    ev_timer_stop(am->loop, &ad->deadline);
    while (ad->groups)
        adopt_group_free(ad, ad->groups);
    json_decref(ad->log);
    free(ad);
    am->adopt = NULL;
    am->trees_built = NULL;
}

json_t *shp_am_adopt_json(const shp_am_t *am)
{
    const shp_am_adopt_t *ad = am->adopt;
    const adopt_group_t *g, *tmp;
    json_int_t pending = 0;
    if (ad)
        HASH_ITER(hh, ad->groups, g, tmp)
        {
            pending += !g->gone;
        }
    return json_pack("{s:s, s:I, s:I, s:I, s:I, s:o}", "state",
                     !ad || !ad->on ? (ad && ad->trees_ready ? "over" : "off")
                     : ad->trees_ready ? "taking back reports"
                                       : "waiting for the ANs",
                     "jobs_adopted", (json_int_t)am->stats.jobs_adopted,
                     "groups_adopted", (json_int_t)am->stats.groups_adopted,
                     "groups_revoked", (json_int_t)am->stats.groups_not_adopted,
                     "groups_pending", pending, "revoked",
                     ad ? json_deep_copy(ad->log) : json_array());
}
