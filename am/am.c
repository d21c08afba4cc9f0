/*
 * The aggregation manager's core: control connections (ANs, sharpds),
 * AN registration, trees, jobs, groups and faults.
 *
 * Every TCP peer first proves the cluster secret (protocol/auth.h) and then
 * says what it is with its first message: an_register (an AN) or
 * sharpd_register (a host daemon).  Protocols: docs/am.md.
 */
#include "am/am.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "protocol/ctl.h"
#include "core/log.h"
#include "core/time.h"
#include "core/net.h"

const char *const shp_am_dists[] = {"rc", "mcast", "both", "auto", NULL};

/* request ids towards ANs: group_add carries (group id << 20 | AN position);
 * everything else counts up from 2^60 */
#define REQ_MISC_BASE (INT64_C(1) << 60)

static void am_send(shp_am_peer_t *p, json_t *msg)
{
    if (!msg)
        return;
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

static int an_of_node(const shp_am_t *am, int node)
{
    for (int i = 0; i < am->nans; i++)
        if (am->ans[i].node == node)
            return i;
    return -1;
}

static shp_am_peer_t *sharpd_of_host(shp_am_t *am, const char *host)
{
    for (shp_am_peer_t *p = am->peers; p; p = p->next)
        if (p->role == AM_PEER_SHARPD && !strcmp(p->host, host))
            return p;
    return NULL;
}

static void trees_schedule(shp_am_t *am);

/* Groups ------------------------------------------------------------------ */

static shp_am_group_t *group_find(shp_am_t *am, uint32_t id)
{
    shp_am_group_t *g;
    HASH_FIND(hh, am->groups, &id, sizeof(id), g);
    return g;
}

static void group_free(shp_am_t *am, shp_am_group_t *g)
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
        trees_schedule(am); /* a down tree is replaced once empty */
    for (int i = 0; i < g->plan.nans; i++)
        if (g->an_of[i] >= 0)
            am->ans[g->an_of[i]].ngroups--;
    shp_group_plan_free(&g->plan);
    free(g->an_of);
    free(g->acked);
    free(g);
}

/* Tell the sharpds of the job's hosts. */
/* A new set of membership marks over the topology's nodes (am->mark[i] ==
 * am->mark_gen: marked), so that a list is checked against another in time
 * linear in both. */
static shp_status_t am_mark_begin(shp_am_t *am)
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

static void job_notify(shp_am_t *am, shp_am_job_t *j, json_t *msg)
{
    /* a host listed twice is told once (without marks, twice) */
    int marks = am_mark_begin(am) == SHP_OK;
    for (int h = 0; h < j->nhosts; h++) {
        if (!j->attached[h])
            continue;
        if (marks) {
            if (am->mark[j->hosts[h]] == am->mark_gen)
                continue;
            am->mark[j->hosts[h]] = am->mark_gen;
        }
        shp_am_peer_t *p =
            sharpd_of_host(am, shp_topo_node(am->topo, j->hosts[h])->host);
        if (p)
            am_send(p, json_incref(msg));
    }
    json_decref(msg);
}

static void group_remove_from_ans(shp_am_t *am, shp_am_group_t *g)
{
    for (int i = 0; i < g->plan.nans; i++) {
        shp_am_an_t *an = &am->ans[g->an_of[i]];
        if (an->up)
            am_send(an->peer,
                    json_pack("{s:s, s:I, s:I}", "type", "group_remove", "id",
                              (json_int_t)am->next_req++, "group_id",
                              (json_int_t)g->id));
    }
}

/* Revoke a group: the ANs forget it, the job's sharpds (or the pending
 * requester) are told. */
static void group_revoke(shp_am_t *am, shp_am_group_t *g, shp_status_t st,
                         const char *reason)
{
    group_remove_from_ans(am, g);
    if (g->state == AM_GROUP_CONFIGURING) {
        am->stats.groups_failed++;
        shp_warn_id("AM0301",
                    "group %" PRIu32 " of job %" PRIu64 " not created: %s",
                    g->id, g->job->id, reason);
        am_send(g->req_peer,
                shp_ctl_reply("group_create_ack", g->req_id, st, reason));
    } else {
        am->stats.groups_revoked++;
        shp_warn_id("AM0302",
                    "group %" PRIu32 " of job %" PRIu64 " revoked: %s", g->id,
                    g->job->id, reason);
        json_t *m =
            json_pack("{s:s, s:o, s:I, s:i, s:s}", "type", "group_revoked",
                      "job_id", shp_json_u64(g->job->id), "group_id",
                      (json_int_t)g->id, "status", (int)st, "reason", reason);
        job_notify(am, g->job, m);
    }
    group_free(am, g);
}

static json_t *group_descriptor(shp_am_t *am, shp_am_group_t *g)
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
    return json_pack("{s:I, s:i, s:o, s:o, s:s, s:s, s:i, s:I, s:o, s:o}",
                     "group_id", (json_int_t)g->id, "tree_id", g->tree,
                     "job_id", shp_json_u64(g->job->id), "job_key",
                     shp_json_hex(g->job->key, sizeof(g->job->key)), "dist",
                     shp_am_dists[g->dist - 1], "mcast_addr", g->mcast_addr,
                     "osts", (int)g->osts, "payload", (json_int_t)g->payload,
                     "members", members, "ans", ans);
}

static void group_timeout_cb(struct ev_loop *loop, ev_timer *w, int revents)
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
    group_revoke(am, g, SHP_ERR_TIMED_OUT, why);
}

static void group_ack(shp_am_t *am, int64_t id, shp_status_t st,
                      const char *error, int from_an)
{
    int pos = (int)(id & 0xfffff);
    shp_am_group_t *g = group_find(am, (uint32_t)(id >> 20));
    if (!g || g->state != AM_GROUP_CONFIGURING || pos >= g->plan.nans ||
        g->an_of[pos] != from_an || g->acked[pos])
        return; /* late answer for a group already settled */
    if (st != SHP_OK) {
        char why[300];
        snprintf(why, sizeof(why), "AN %s refused the group: %s",
                 am->ans[from_an].name, error ? error : shp_status_str(st));
        group_revoke(am, g, st, why);
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
    json_t *m = shp_ctl_reply("group_create_ack", g->req_id, SHP_OK, NULL);
    json_object_set_new(m, "group", group_descriptor(am, g));
    am_send(g->req_peer, m);
    g->req_peer = NULL;
}

/* Trees ------------------------------------------------------------------- */

/* Forget a tree that carries no group. */
static void tree_drop(shp_am_t *am, int t)
{
    shp_am_tree_t *tr = &am->trees[t];
    for (int i = 0; i < tr->t.n; i++) {
        int a = an_of_node(am, tr->t.node[i]);
        if (a >= 0)
            am->ans[a].ntrees--;
    }
    shp_tree_free(&tr->t);
    memset(tr, 0, sizeof(*tr));
}

static void send_tree_config(shp_am_t *am, int t)
{
    shp_am_tree_t *tr = &am->trees[t];
    for (int i = 0; i < tr->t.n; i++) {
        shp_am_an_t *an = &am->ans[an_of_node(am, tr->t.node[i])];
        json_t *parent =
            tr->t.parent[i] < 0
                ? json_null()
                : json_string(
                      am->ans[an_of_node(am, tr->t.node[tr->t.parent[i]])]
                          .data_addr);
        am_send(an->peer,
                json_pack("{s:s, s:I, s:i, s:o}", "type", "tree_config", "id",
                          (json_int_t)am->next_req++, "tree_id", t, "parent",
                          parent));
    }
}

/* Rebuild: trees in use whose ANs are all up are kept as they are; the
 * others are replaced by trees over the live ANs. */
static void trees_rebuild(shp_am_t *am)
{
    size_t n = shp_topo_count(am->topo);
    uint8_t *is_an = calloc(n, 1);
    int *cap = calloc(n, sizeof(int));
    int skip[SHP_AM_MAX_TREE_ID], nskip = 0, kept = 0;
    if (!is_an || !cap) {
        free(is_an);
        free(cap);
        shp_error("out of memory rebuilding trees");
        return;
    }
    for (int i = 0; i < am->nans; i++)
        if (am->ans[i].up && am->ans[i].node >= 0) {
            is_an[am->ans[i].node] = 1;
            cap[am->ans[i].node] = (int)am->ans[i].max_trees;
        }
    for (int t = 0; t < SHP_AM_MAX_TREE_ID; t++) {
        shp_am_tree_t *tr = &am->trees[t];
        if (!tr->used)
            continue;
        if (tr->ngroups > 0) {
            skip[nskip++] = tr->t.root;
            for (int i = 0; i < tr->t.n; i++)
                cap[tr->t.node[i]]--;
            kept++;
        } else {
            tree_drop(am, t);
        }
    }
    shp_an_set_t set = {is_an, cap};
    if (shp_leaf_ans(am->topo, &set, am->leaf) != SHP_OK) {
        free(is_an);
        free(cap);
        return;
    }
    shp_tree_t *trees = NULL;
    int nt = 0;
    int want = (int)am->cfg.max_trees - kept;
    if (want > 0) {
        shp_tree_opts_t o = {.max_trees = want, .radix = (int)am->cfg.radix};
        if (shp_trees_build(am->topo, &set, &o, skip, nskip, &trees, &nt) !=
            SHP_OK) {
            shp_error("tree build failed");
            nt = 0;
        }
    }
    am->stats.tree_builds++;
    int t = 0;
    for (int k = 0; k < nt; k++) {
        while (t < SHP_AM_MAX_TREE_ID && am->trees[t].used)
            t++;
        if (t == SHP_AM_MAX_TREE_ID) {
            shp_tree_free(&trees[k]);
            continue;
        }
        am->trees[t] = (shp_am_tree_t){.used = 1, .up = 1, .t = trees[k]};
        am->trees[t].t.id = t;
        for (int i = 0; i < trees[k].n; i++)
            am->ans[an_of_node(am, trees[k].node[i])].ntrees++;
        send_tree_config(am, t);
        shp_info("tree %d: root %s, %d ANs, depth %d, %d hosts", t,
                 shp_am_an_name(am, trees[k].root), trees[k].n, trees[k].depth,
                 trees[k].nhosts);
    }
    free(trees);
    free(is_an);
    free(cap);
}

static void settle_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    trees_rebuild(w->data);
}

static void trees_schedule(shp_am_t *am)
{
    ev_timer_stop(am->loop, &am->settle);
    ev_timer_set(&am->settle, (double)am->cfg.tree_settle_ms / 1000.0, 0.);
    ev_timer_start(am->loop, &am->settle);
}

/* ANs --------------------------------------------------------------------- */

/* An AN is gone: the groups through it are revoked (and only those); the
 * trees through it take no new groups and are rebuilt once empty. */
static void an_lost(shp_am_t *am, int a, const char *why)
{
    shp_am_an_t *an = &am->ans[a];
    char reason[300];
    an->up = 0;
    an->peer = NULL;
    snprintf(reason, sizeof(reason), "AN %s lost: %s", an->name, why);
    shp_warn_id("AM0201", "%s", reason);
    shp_am_group_t *g, *tmp;
    HASH_ITER(hh, am->groups, g, tmp)
    {
        for (int i = 0; i < g->plan.nans; i++)
            if (g->an_of[i] == a) {
                group_revoke(am, g, SHP_ERR_TREE_DOWN, reason);
                break;
            }
    }
    for (int t = 0; t < SHP_AM_MAX_TREE_ID; t++)
        if (am->trees[t].used && shp_tree_pos(&am->trees[t].t, an->node) >= 0)
            am->trees[t].up = 0;
    trees_schedule(am);
}

/* the AN's data transport ("tcp" when it does not say) */
static int transport_known(const json_t *msg, const char **transport,
                           const char **why)
{
    *transport = shp_json_opt_str(msg, "transport", "tcp");
    if (strcmp(*transport, "tcp") != 0 && strcmp(*transport, "verbs") != 0 &&
        strcmp(*transport, "shm") != 0) {
        *why = "transport must be tcp, verbs or shm";
        return 0;
    }
    return 1;
}

/* dist auto: results by multicast where every AN of the group speaks tcp
 * and can multicast (udp beside it): one send at the top, replicated by the
 * network (on one host by the kernel, which shares the datagram among the
 * receivers), where RC sends it to each member.  Over shm the members'
 * rings beat the kernel's multicast; over verbs RC stays until UD
 * multicast is measured on a real fabric. */
static int dist_auto(const shp_am_t *am, const shp_group_plan_t *bp)
{
    for (int i = 0; i < bp->nans; i++) {
        int a = an_of_node(am, bp->ans[i].node);
        if (a < 0 || strcmp(am->ans[a].transport, "tcp") != 0 ||
            !am->ans[a].mcast) {
            return 0; /* rc */
        }
    }
    return 1; /* mcast */
}

static void an_register(shp_am_t *am, shp_am_peer_t *p, const json_t *msg)
{
    const char *name, *addr, *transport, *why = "malformed an_register";
    json_t *caps, *groups;
    int64_t mt, mg, mo, mp;
    if (shp_json_get_str(msg, "name", &name, &why) ||
        shp_json_get_str(msg, "data_addr", &addr, &why) ||
        shp_json_get_object(msg, "caps", &caps, &why) ||
        shp_json_get_int(caps, "max_trees", 1, 1 << 20, &mt, &why) ||
        shp_json_get_int(caps, "max_groups", 1, 1 << 30, &mg, &why) ||
        shp_json_get_int(caps, "max_osts", 1, 1 << 30, &mo, &why) ||
        shp_json_get_int(caps, "max_payload", 1, INT64_MAX, &mp, &why) ||
        shp_json_get_array(msg, "groups", &groups, &why) ||
        strlen(addr) >= sizeof(am->ans[0].data_addr) ||
        !transport_known(msg, &transport, &why)) {
        am_send(p, shp_ctl_reply("an_register_ack", 0, SHP_ERR_PROTO, why));
        shp_conn_close(&p->conn, SHP_ERR_PROTO);
        return;
    }
    if (strcmp(name, p->auth.name) != 0) {
        am_send(p,
                shp_ctl_reply("an_register_ack", 0, SHP_ERR_AUTH,
                              "registers under another name than it proved"));
        shp_conn_close(&p->conn, SHP_ERR_AUTH);
        return;
    }
    int node = shp_topo_find(am->topo, name);
    if (node < 0 || !am->an_expected[node]) {
        char e[300];
        snprintf(e, sizeof(e),
                 "%s is neither a switch nor a configured AN "
                 "host of the topology",
                 name);
        shp_error_id("AM0102", "refusing AN: %s", e);
        am_send(p, shp_ctl_reply("an_register_ack", 0, SHP_ERR_NOT_FOUND, e));
        shp_conn_flush(&p->conn);
        shp_conn_close(&p->conn, SHP_ERR_NOT_FOUND);
        return;
    }
    int a = an_of_node(am, node);
    if (a >= 0 && am->ans[a].up) {
        am_send(p, shp_ctl_reply("an_register_ack", 0, SHP_ERR_EXISTS,
                                 "an AN of that node is already registered"));
        shp_conn_close(&p->conn, SHP_ERR_EXISTS);
        return;
    }
    if (a < 0) {
        if (am->nans == am->capans) {
            int cap = am->capans ? am->capans * 2 : 64;
            shp_am_an_t *na = realloc(am->ans, sizeof(*na) * (size_t)cap);
            if (!na) {
                shp_conn_close(&p->conn, SHP_ERR_NO_MEMORY);
                return;
            }
            am->ans = na;
            am->capans = cap;
        }
        a = am->nans++;
        memset(&am->ans[a], 0, sizeof(am->ans[a]));
        am->ans[a].node = node;
    }
    shp_am_an_t *an = &am->ans[a];
    snprintf(an->name, sizeof(an->name), "%s", name);
    snprintf(an->data_addr, sizeof(an->data_addr), "%s", addr);
    snprintf(an->transport, sizeof(an->transport), "%s", transport);
    an->mcast = json_is_true(json_object_get(msg, "mcast"));
    an->max_trees = (unsigned)mt;
    an->max_groups = (unsigned)mg;
    an->max_osts = (unsigned)mo;
    an->max_payload = (uint64_t)mp;
    an->up = 1;
    an->peer = p;
    an->registrations++;
    p->role = AM_PEER_AN;
    p->an = a;
    am_send(p, json_pack("{s:s, s:i}", "type", "an_register_ack", "status", 0));
    shp_info("AN %s registered (data %s)", name, addr);
    /* groups it still serves that this AM does not know: stale */
    size_t i;
    json_t *v;
    json_array_foreach(groups, i, v)
    {
        if (!json_is_integer(v))
            continue;
        am_send(p, json_pack("{s:s, s:I, s:I}", "type", "group_remove", "id",
                             (json_int_t)am->next_req++, "group_id",
                             json_integer_value(v)));
        shp_info("AN %s: removing stale group %" JSON_INTEGER_FORMAT, name,
                 json_integer_value(v));
    }
    trees_schedule(am);
}

/* An AN's counters: operations per second since the last answer, and
 * every error it counts. */
static void an_stats(shp_am_an_t *an, const json_t *msg)
{
    static const char *const errs[] = {
        "err_bad_key",  "err_unknown_group", "err_seq_window",
        "err_mismatch", "err_malformed",     "err_protocol",
        "err_forged",   "groups_failed",     NULL};
    uint64_t now = shp_time_ns();
    uint64_t ops = (uint64_t)shp_json_opt_int(msg, "ops", 0, INT64_MAX, 0);
    uint64_t e = 0;
    for (int i = 0; errs[i]; i++)
        e += (uint64_t)shp_json_opt_int(msg, errs[i], 0, INT64_MAX, 0);
    if (an->stats_ns && now > an->stats_ns && ops >= an->ops)
        an->ops_rate =
            (double)(ops - an->ops) * 1e9 / (double)(now - an->stats_ns);
    an->ops = ops;
    an->errors = e;
    an->stats_ns = now;
    json_decref(an->counters);
    an->counters = json_deep_copy(msg);
    json_object_del(an->counters, "type");
    json_object_del(an->counters, "id");
    json_object_del(an->counters, "status");
}

static void stats_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    shp_am_t *am = w->data;
    (void)loop;
    (void)revents;
    for (int a = 0; a < am->nans; a++)
        if (am->ans[a].up && am->ans[a].peer)
            am_send(am->ans[a].peer,
                    json_pack("{s:s, s:I}", "type", "stats_req", "id",
                              (json_int_t)am->next_req++));
}

static void an_message(shp_am_t *am, shp_am_peer_t *p, const json_t *msg)
{
    const char *type = shp_ctl_type(msg);
    int64_t id, st = 0;
    if (!strcmp(type, "group_failed")) {
        int64_t gid;
        const char *reason = shp_json_opt_str(msg, "reason", "failed");
        if (shp_json_get_int(msg, "group_id", 0, UINT32_MAX, &gid, NULL))
            return;
        st = shp_json_opt_int(msg, "status", -32768, 32767, 0);
        shp_am_group_t *g = group_find(am, (uint32_t)gid);
        if (g) {
            char why[400];
            snprintf(why, sizeof(why), "AN %s: %s", am->ans[p->an].name,
                     reason);
            group_revoke(am, g,
                         st < 0 ? (shp_status_t)st : SHP_ERR_GROUP_FAILED, why);
        }
        return;
    }
    if (shp_json_get_int(msg, "id", 0, INT64_MAX, &id, NULL))
        return;
    st = shp_json_opt_int(msg, "status", -32768, 32767, 0);
    const char *error = shp_json_opt_str(msg, "error", NULL);
    if (!strcmp(type, "group_add_ack") && id < REQ_MISC_BASE) {
        group_ack(am, id, (shp_status_t)st, error, p->an);
    } else if (!strcmp(type, "stats") && st == 0) {
        an_stats(&am->ans[p->an], msg);
    } else if (st != 0) {
        shp_warn("AN %s answered %s with %s: %s", am->ans[p->an].name, type,
                 shp_status_str((shp_status_t)st), error ? error : "");
    }
}

/* Jobs -------------------------------------------------------------------- */

static shp_am_job_t *job_find(shp_am_t *am, uint64_t id)
{
    shp_am_job_t *j;
    HASH_FIND(hh, am->jobs, &id, sizeof(id), j);
    return j;
}

/* Where `host` is a host of the job, its sharpd now has processes of it;
 * returns how many of the job's host entries are that host (0: none). */
static int job_attach_host(shp_am_t *am, shp_am_job_t *j, const char *host)
{
    int n = 0;
    for (int k = 0; k < j->nhosts; k++)
        if (!strcmp(shp_topo_node(am->topo, j->hosts[k])->host, host)) {
            j->attached[k] = 1;
            n++;
        }
    return n;
}

static void job_free(shp_am_t *am, shp_am_job_t *j)
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
            group_remove_from_ans(am, g);
            if (g->state == AM_GROUP_CONFIGURING)
                am_send(g->req_peer,
                        shp_ctl_reply("group_create_ack", g->req_id,
                                      SHP_ERR_JOB_UNKNOWN, "job ended"));
            group_free(am, g);
        } else {
            group_revoke(am, g, why, reason);
        }
    }
    if (why != SHP_OK) {
        json_t *m = json_pack("{s:s, s:o, s:i, s:s}", "type", "job_killed",
                              "job_id", shp_json_u64(j->id), "status", (int)why,
                              "reason", reason);
        job_notify(am, j, m);
    }
    shp_info("job %" PRIu64 " ended%s%s", j->id, why ? ": " : "",
             why ? reason : "");
    job_free(am, j);
}

/* Host names -> topology CA nodes; refuses unknown hosts precisely. */
static shp_status_t hosts_resolve(shp_am_t *am, const json_t *arr, int **out,
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
static int hosts_spanned(shp_am_t *am, const int *nodes, int n)
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

/* A job may ask for less than its quota, never more. */
static void job_quotas(shp_am_t *am, shp_am_job_t *j, const json_t *msg)
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

static json_t *job_quota_reply(const char *type, int64_t id,
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
static unsigned uid_jobs(shp_am_t *am, uid_t uid)
{
    unsigned n = 0;
    shp_am_job_t *j, *tmp;
    HASH_ITER(hh, am->jobs, j, tmp)
    {
        n += j->uid == uid;
    }
    return n;
}

static void job_begin(shp_am_t *am, shp_am_peer_t *p, const json_t *msg,
                      int64_t id)
{
    uint64_t job_id, uid;
    json_t *hosts;
    char why[300] = "malformed job_begin";
    const char *w;
    if (shp_json_get_u64(msg, "job_id", &job_id, &w) ||
        shp_json_get_u64(msg, "uid", &uid, &w) ||
        shp_json_get_array(msg, "hosts", &hosts, &w)) {
        am_send(p, shp_ctl_reply("job_begin_ack", id, SHP_ERR_PROTO, why));
        return;
    }
    shp_status_t st;
    int *nodes = NULL, n = 0;
    if (job_find(am, job_id)) {
        snprintf(why, sizeof(why), "job %" PRIu64 " exists", job_id);
        st = SHP_ERR_EXISTS;
    } else if (HASH_COUNT(am->jobs) >= am->cfg.max_jobs) {
        snprintf(why, sizeof(why), "the fabric runs its maximum of %u jobs",
                 am->cfg.max_jobs);
        st = SHP_ERR_QUOTA;
    } else if (uid != 0 && uid_jobs(am, (uid_t)uid) >= am->cfg.uid_max_jobs) {
        snprintf(why, sizeof(why),
                 "uid %" PRIu64 " runs its maximum of %u jobs (uid_max_jobs)",
                 uid, am->cfg.uid_max_jobs);
        st = SHP_ERR_QUOTA;
    } else {
        st = hosts_resolve(am, hosts, &nodes, &n, why, sizeof(why));
    }
    if (st == SHP_OK) {
        /* a job is begun by one of its own hosts: one a process of it
         * runs on, which ends it (a job of other hosts only would never
         * be ended, and could squat their resources) */
        int node = shp_topo_find(am->topo, p->host), own = 0;
        for (int k = 0; k < n && !own; k++)
            own = nodes[k] == node;
        if (!own) {
            snprintf(why, sizeof(why),
                     "the job's hosts do not include %s, the host that asks",
                     p->host);
            st = SHP_ERR_PERM;
        }
    }
    if (st == SHP_OK) {
        /* some tree must span every host */
        if (!hosts_spanned(am, nodes, n)) {
            snprintf(why, sizeof(why),
                     "no aggregation tree spans the job's %d hosts", n);
            st = SHP_ERR_NO_TREE;
        }
    }
    if (st != SHP_OK) {
        free(nodes);
        am->stats.jobs_refused++;
        shp_warn_id("AM0401", "job %" PRIu64 " refused: %s", job_id, why);
        am_send(p,
                shp_ctl_reply("job_begin_ack", id, SHP_ERR_JOB_REFUSED, why));
        return;
    }
    shp_am_job_t *j = calloc(1, sizeof(*j));
    uint8_t *att = calloc((size_t)n, 1), *held = calloc((size_t)n, 1);
    if (!j || !att || !held) {
        free(j);
        free(att);
        free(held);
        free(nodes);
        am_send(p, shp_ctl_reply("job_begin_ack", id, SHP_ERR_NO_MEMORY,
                                 "no memory"));
        return;
    }
    j->id = job_id;
    j->uid = (uid_t)uid;
    j->hosts = nodes;
    j->nhosts = n;
    j->attached = att;
    j->held = held;
    shp_auth_random(j->key, sizeof(j->key));
    job_quotas(am, j, msg);
    job_attach_host(am, j, p->host);
    HASH_ADD(hh, am->jobs, id, sizeof(j->id), j);
    am->stats.jobs_begun++;
    shp_info("job %" PRIu64 " (uid %u, %d hosts) admitted: %u groups, %u "
             "osts, %u bytes",
             j->id, (unsigned)j->uid, n, j->max_groups, j->osts, j->payload);
    json_t *m = job_quota_reply("job_begin_ack", id, j);
    json_object_set_new(m, "job_key", shp_json_hex(j->key, sizeof(j->key)));
    am_send(p, m);
}

/* The job a sharpd's request names, if the requester may act on it. */
static shp_am_job_t *job_for(shp_am_t *am, shp_am_peer_t *p, const json_t *msg,
                             const char *ack, int64_t id)
{
    uint64_t job_id, uid;
    const char *w;
    if (shp_json_get_u64(msg, "job_id", &job_id, &w) ||
        shp_json_get_u64(msg, "uid", &uid, &w)) {
        am_send(p, shp_ctl_reply(ack, id, SHP_ERR_PROTO,
                                 "job_id and uid required"));
        return NULL;
    }
    shp_am_job_t *j = job_find(am, job_id);
    if (!j) {
        am_send(p, shp_ctl_reply(ack, id, SHP_ERR_JOB_UNKNOWN, "no such job"));
        return NULL;
    }
    if (uid != 0 && uid != j->uid) {
        char why[128];
        snprintf(why, sizeof(why), "job %" PRIu64 " belongs to uid %u", j->id,
                 (unsigned)j->uid);
        shp_warn_id("AM0402", "uid %" PRIu64 " on %s: %s", uid, p->host, why);
        am_send(p, shp_ctl_reply(ack, id, SHP_ERR_PERM, why));
        return NULL;
    }
    return j;
}

static void job_attach(shp_am_t *am, shp_am_peer_t *p, const json_t *msg,
                       int64_t id)
{
    shp_am_job_t *j = job_for(am, p, msg, "job_attach_ack", id);
    if (!j)
        return;
    if (!job_attach_host(am, j, p->host)) {
        am_send(p, shp_ctl_reply("job_attach_ack", id, SHP_ERR_PERM,
                                 "this host is not one of the job's hosts"));
        return;
    }
    /* the quotas too: a reserved job's processes all attach */
    json_t *m = job_quota_reply("job_attach_ack", id, j);
    json_object_set_new(m, "job_key", shp_json_hex(j->key, sizeof(j->key)));
    json_object_set_new(m, "reserved", json_boolean(j->reserved));
    am_send(p, m);
}

/* The sharpd of a host has no more processes of the job there (and, when
 * `lost`, that sharpd is gone: its scheduler's hold goes too).  The job's
 * groups are revoked; the job ends when no host has processes of it and
 * none holds a reservation. */
static void job_detach_host(shp_am_t *am, shp_am_job_t *j, const char *host,
                            const char *reason, int lost)
{
    int any = 0, was = 0, held = 0;
    for (int k = 0; k < j->nhosts; k++) {
        int here = !strcmp(shp_topo_node(am->topo, j->hosts[k])->host, host);
        if (here && j->attached[k]) {
            j->attached[k] = 0;
            was = 1;
        }
        if (here && lost && j->held[k]) {
            j->held[k] = 0;
            was = 1;
        }
        any |= j->attached[k];
        held |= j->held[k];
    }
    if (!was)
        return;
    while (j->groups)
        group_revoke(am, j->groups, SHP_ERR_GROUP_REVOKED, reason);
    if (!any && !held)
        shp_am_job_end(am, j, SHP_ERR_JOB_KILLED, reason);
}

/* job_reserve {job_id, owner, req?} from root on a host (a scheduler's
 * prolog through that host's sharpd): the job is admitted for uid `owner`
 * with the host as one of its hosts, or the host is added to the job a
 * prolog on another host reserved.  A reserved job outlives its processes
 * (steps come and go) until job_release. */
static void job_reserve(shp_am_t *am, shp_am_peer_t *p, const json_t *msg,
                        int64_t id)
{
    static const char *ack = "job_reserve_ack";
    uint64_t job_id, uid, owner;
    const char *w;
    char why[300];
    if (shp_json_get_u64(msg, "job_id", &job_id, &w) ||
        shp_json_get_u64(msg, "uid", &uid, &w) ||
        shp_json_get_u64(msg, "owner", &owner, &w) || owner > UINT32_MAX) {
        am_send(p, shp_ctl_reply(ack, id, SHP_ERR_PROTO,
                                 "job_id, uid and owner required"));
        return;
    }
    if (uid != 0) {
        snprintf(why, sizeof(why), "only root reserves jobs (uid %" PRIu64 ")",
                 uid);
        shp_warn_id("AM0403", "job %" PRIu64 " on %s: %s", job_id, p->host,
                    why);
        am_send(p, shp_ctl_reply(ack, id, SHP_ERR_PERM, why));
        return;
    }
    int node = shp_topo_find(am->topo, p->host);
    shp_am_job_t *j = job_find(am, job_id);
    shp_status_t st = SHP_OK;
    if (node < 0 || am->leaf[node] < 0) {
        snprintf(why, sizeof(why), "host %s reaches no live aggregation node",
                 p->host);
        st = SHP_ERR_NO_TREE;
    } else if (j && !j->reserved) {
        snprintf(why, sizeof(why), "job %" PRIu64 " exists (not reserved)",
                 job_id);
        st = SHP_ERR_EXISTS;
    } else if (j && j->uid != (uid_t)owner) {
        snprintf(why, sizeof(why), "job %" PRIu64 " is reserved for uid %u",
                 job_id, (unsigned)j->uid);
        st = SHP_ERR_PERM;
    } else if (!j && HASH_COUNT(am->jobs) >= am->cfg.max_jobs) {
        snprintf(why, sizeof(why), "the fabric runs its maximum of %u jobs",
                 am->cfg.max_jobs);
        st = SHP_ERR_QUOTA;
    }
    int k = -1;
    for (int h = 0; j && h < j->nhosts && k < 0; h++)
        if (j->hosts[h] == node)
            k = h;
    if (st == SHP_OK && k < 0) {
        /* a new host: some tree must span it with the others */
        int n = j ? j->nhosts : 0;
        int *nodes = malloc(sizeof(int) * (size_t)(n + 1));
        uint8_t *att = calloc((size_t)n + 1, 1),
                *held = calloc((size_t)n + 1, 1);
        if (!nodes || !att || !held) {
            free(nodes);
            free(att);
            free(held);
            am_send(p, shp_ctl_reply(ack, id, SHP_ERR_NO_MEMORY, "no memory"));
            return;
        }
        if (j) {
            memcpy(nodes, j->hosts, sizeof(int) * (size_t)n);
            memcpy(att, j->attached, (size_t)n);
            memcpy(held, j->held, (size_t)n);
        }
        nodes[n] = node;
        if (!hosts_spanned(am, nodes, n + 1)) {
            snprintf(why, sizeof(why),
                     "no aggregation tree spans host %s with the job's %d "
                     "other hosts",
                     p->host, n);
            st = SHP_ERR_NO_TREE;
            free(nodes);
            free(att);
            free(held);
        } else {
            if (!j) {
                j = calloc(1, sizeof(*j));
                if (!j) {
                    free(nodes);
                    free(att);
                    free(held);
                    am_send(p, shp_ctl_reply(ack, id, SHP_ERR_NO_MEMORY,
                                             "no memory"));
                    return;
                }
                j->id = job_id;
                j->uid = (uid_t)owner;
                j->reserved = 1;
                shp_auth_random(j->key, sizeof(j->key));
                job_quotas(am, j, msg);
                HASH_ADD(hh, am->jobs, id, sizeof(j->id), j);
                am->stats.jobs_begun++;
                shp_info("job %" PRIu64 " (uid %u) reserved from %s: %u "
                         "groups, %u osts, %u bytes",
                         j->id, (unsigned)j->uid, p->host, j->max_groups,
                         j->osts, j->payload);
            }
            free(j->hosts);
            free(j->attached);
            free(j->held);
            j->hosts = nodes;
            j->attached = att;
            j->held = held;
            k = j->nhosts++;
        }
    }
    if (st != SHP_OK) {
        am->stats.jobs_refused++;
        shp_warn_id("AM0401", "job %" PRIu64 " reservation refused: %s", job_id,
                    why);
        am_send(p, shp_ctl_reply(ack, id, SHP_ERR_JOB_REFUSED, why));
        return;
    }
    j->held[k] = 1;
    am_send(p, job_quota_reply(ack, id, j));
}

/* job_release {job_id} from root on one of the job's hosts (a scheduler's
 * epilog): the job ends with its groups, whatever its other hosts hold.
 * Releasing a job that is not there (ended already, by another host's
 * epilog) succeeds: the answer says so. */
static void job_release(shp_am_t *am, shp_am_peer_t *p, const json_t *msg,
                        int64_t id)
{
    static const char *ack = "job_release_ack";
    uint64_t job_id, uid;
    const char *w;
    if (shp_json_get_u64(msg, "job_id", &job_id, &w) ||
        shp_json_get_u64(msg, "uid", &uid, &w)) {
        am_send(p, shp_ctl_reply(ack, id, SHP_ERR_PROTO,
                                 "job_id and uid required"));
        return;
    }
    if (uid != 0) {
        am_send(
            p, shp_ctl_reply(ack, id, SHP_ERR_PERM, "only root releases jobs"));
        return;
    }
    shp_am_job_t *j = job_find(am, job_id);
    if (j && !j->reserved) {
        am_send(p, shp_ctl_reply(ack, id, SHP_ERR_INVALID_PARAM,
                                 "the job was not reserved"));
        return;
    }
    json_t *m = shp_ctl_reply(ack, id, SHP_OK, NULL);
    json_object_set_new(m, "released", json_boolean(j != NULL));
    if (j) {
        int busy = j->ngroups > 0;
        for (int h = 0; h < j->nhosts; h++)
            busy |= j->attached[h];
        char why[200];
        snprintf(why, sizeof(why), "released by the scheduler on %s", p->host);
        /* processes still there are told (their operations fail) */
        shp_am_job_end(am, j, busy ? SHP_ERR_JOB_KILLED : SHP_OK, why);
    }
    am_send(p, m);
}

static void group_create(shp_am_t *am, shp_am_peer_t *p, const json_t *msg,
                         int64_t id)
{
    static const char *ack = "group_create_ack";
    shp_am_job_t *j = job_for(am, p, msg, ack, id);
    if (!j)
        return;
    json_t *members;
    const char *w;
    const char *dist =
        shp_json_opt_str(msg, "dist", shp_am_dists[am->cfg.dist]);
    char why[300];
    if (shp_json_get_array(msg, "members", &members, &w)) {
        am_send(p, shp_ctl_reply(ack, id, SHP_ERR_PROTO, "members required"));
        return;
    }
    int d = 0;
    while (shp_am_dists[d] && strcmp(shp_am_dists[d], dist))
        d++;
    if (!shp_am_dists[d]) {
        am_send(p, shp_ctl_reply(ack, id, SHP_ERR_INVALID_PARAM,
                                 "dist must be rc, mcast, both or auto"));
        return;
    }
    if ((unsigned)j->ngroups >= j->max_groups) {
        snprintf(why, sizeof(why),
                 "job %" PRIu64 " has its maximum of %u "
                 "groups",
                 j->id, j->max_groups);
        am_send(p, shp_ctl_reply(ack, id, SHP_ERR_QUOTA, why));
        return;
    }
    int *nodes, n;
    shp_status_t st = hosts_resolve(am, members, &nodes, &n, why, sizeof(why));
    if (st == SHP_OK && (st = am_mark_begin(am)) != SHP_OK) {
        snprintf(why, sizeof(why), "out of memory");
        free(nodes);
    }
    for (int h = 0; st == SHP_OK && h < j->nhosts; h++)
        am->mark[j->hosts[h]] = am->mark_gen;
    for (int k = 0; st == SHP_OK && k < n; k++) {
        if (am->mark[nodes[k]] != am->mark_gen) {
            snprintf(why, sizeof(why),
                     "member %s is not a host of job %" PRIu64,
                     shp_topo_node(am->topo, nodes[k])->host, j->id);
            st = SHP_ERR_INVALID_PARAM;
            free(nodes);
        }
    }
    if (st != SHP_OK) {
        am_send(p, shp_ctl_reply(ack, id, st, why));
        return;
    }
    /* the least-loaded tree that spans the members, with room on its ANs */
    int best = -1;
    shp_group_plan_t plan = {0}, bp = {0};
    snprintf(why, sizeof(why), "no aggregation tree spans the members");
    st = SHP_ERR_NO_TREE;
    for (int t = 0; t < SHP_AM_MAX_TREE_ID; t++) {
        shp_am_tree_t *tr = &am->trees[t];
        if (!tr->used || !tr->up ||
            (best >= 0 && tr->ngroups >= am->trees[best].ngroups))
            continue;
        if (shp_group_plan(&tr->t, am->leaf, nodes, n, (int)am->cfg.flat_max,
                           &plan) != SHP_OK)
            continue;
        int full = -1;
        for (int i = 0; i < plan.nans && full < 0; i++) {
            shp_am_an_t *an = &am->ans[an_of_node(am, plan.ans[i].node)];
            if ((unsigned)an->ngroups >= an->max_groups)
                full = an_of_node(am, plan.ans[i].node);
        }
        if (full >= 0) {
            snprintf(why, sizeof(why), "AN %s serves its maximum of %u groups",
                     am->ans[full].name, am->ans[full].max_groups);
            st = SHP_ERR_QUOTA;
            shp_group_plan_free(&plan);
            continue;
        }
        shp_group_plan_free(&bp);
        bp = plan;
        memset(&plan, 0, sizeof(plan));
        best = t;
    }
    free(nodes);
    if (best < 0) {
        am_send(p, shp_ctl_reply(ack, id, st, why));
        return;
    }
    shp_am_group_t *g = calloc(1, sizeof(*g));
    if (g) {
        g->an_of = malloc(sizeof(int) * (size_t)bp.nans);
        g->acked = calloc((size_t)bp.nans, 1);
    }
    if (!g || !g->an_of || !g->acked) {
        if (g) {
            free(g->an_of);
            free(g->acked);
        }
        free(g);
        shp_group_plan_free(&bp);
        am_send(p, shp_ctl_reply(ack, id, SHP_ERR_NO_MEMORY, "no memory"));
        return;
    }
    do {
        g->id = am->next_group++;
        if (am->next_group >= (1u << 24))
            am->next_group = 1;
    } while (group_find(am, g->id));
    g->am = am;
    g->job = j;
    g->tree = best;
    g->plan = bp;
    if (d == SHP_AM_DIST_AUTO) {
        d = dist_auto(am, &bp);
    }
    g->dist = d + 1;
    g->osts = j->osts;
    g->payload = j->payload;
    g->req_peer = p;
    g->req_id = id;
    snprintf(g->mcast_addr, sizeof(g->mcast_addr), "%s.%u.%u:%u",
             am->cfg.mcast_prefix, (g->id >> 8) & 255, g->id & 255,
             am->cfg.mcast_port + g->id % 20000);
    for (int i = 0; i < bp.nans; i++) {
        g->an_of[i] = an_of_node(am, bp.ans[i].node);
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
    am->trees[best].ngroups++;
    ev_timer_init(&g->timer, group_timeout_cb,
                  (double)am->cfg.group_timeout_ms / 1000.0, 0.);
    g->timer.data = g;
    ev_timer_start(am->loop, &g->timer);

    /* every AN of the trimmed sub-tree, all or nothing */
    char key[65];
    for (int b = 0; b < 32; b++)
        snprintf(key + 2 * b, 3, "%02x", j->key[b]);
    for (int i = 0; i < bp.nans; i++) {
        shp_group_an_t *ga = &bp.ans[i];
        json_t *children = json_array();
        for (int c = 0; c < ga->nchildren; c++)
            json_array_append_new(
                children, json_pack("{s:s}", "kind",
                                    ga->children[c].is_an ? "an" : "member"));
        json_t *m = json_pack(
            "{s:s, s:I, s:I, s:i, s:o, s:s, s:o, s:b, s:i, s:s, s:s, s:i, "
            "s:I}",
            "type", "group_add", "id", (json_int_t)g->id << 20 | i, "group_id",
            (json_int_t)g->id, "tree_id", best, "job_id", shp_json_u64(j->id),
            "job_key", key, "children", children, "top", i == 0, "parent_index",
            ga->parent_index, "dist", shp_am_dists[d], "mcast_addr",
            g->mcast_addr, "osts", (int)g->osts, "payload",
            (json_int_t)g->payload);
        am_send(am->ans[g->an_of[i]].peer, m);
    }
}

static void group_destroy(shp_am_t *am, shp_am_peer_t *p, const json_t *msg,
                          int64_t id)
{
    shp_am_job_t *j = job_for(am, p, msg, "group_destroy_ack", id);
    int64_t gid;
    if (!j)
        return;
    if (shp_json_get_int(msg, "group_id", 0, UINT32_MAX, &gid, NULL)) {
        am_send(p, shp_ctl_reply("group_destroy_ack", id, SHP_ERR_PROTO,
                                 "group_id required"));
        return;
    }
    shp_am_group_t *g = group_find(am, (uint32_t)gid);
    if (!g || g->job != j) {
        am_send(p, shp_ctl_reply("group_destroy_ack", id, SHP_ERR_GROUP_UNKNOWN,
                                 "no such group in this job"));
        return;
    }
    if (g->state == AM_GROUP_CONFIGURING)
        am_send(g->req_peer, shp_ctl_reply("group_create_ack", g->req_id,
                                           SHP_ERR_CANCELED, "destroyed"));
    group_remove_from_ans(am, g);
    group_free(am, g);
    am_send(p, shp_ctl_reply("group_destroy_ack", id, SHP_OK, NULL));
}

/* A sharpd (re)registers: it announces the jobs it has processes of. */
static void sharpd_register(shp_am_t *am, shp_am_peer_t *p, const json_t *msg)
{
    const char *host, *w;
    json_t *jobs;
    if (shp_json_get_str(msg, "host", &host, &w) ||
        shp_json_get_array(msg, "jobs", &jobs, &w) ||
        strcmp(host, p->auth.name) != 0) {
        am_send(p, shp_ctl_reply("sharpd_register_ack", 0, SHP_ERR_PROTO,
                                 "malformed sharpd_register"));
        shp_conn_close(&p->conn, SHP_ERR_PROTO);
        return;
    }
    int node = shp_topo_find(am->topo, host);
    if (node < 0 || shp_topo_node(am->topo, node)->type != SHP_NODE_CA) {
        char e[300];
        snprintf(e, sizeof(e), "host %s is not in the topology", host);
        shp_error_id("AM0103", "refusing sharpd: %s", e);
        am_send(p,
                shp_ctl_reply("sharpd_register_ack", 0, SHP_ERR_NOT_FOUND, e));
        shp_conn_flush(&p->conn);
        shp_conn_close(&p->conn, SHP_ERR_NOT_FOUND);
        return;
    }
    shp_am_peer_t *old = sharpd_of_host(am, host);
    if (old)
        shp_conn_close(&old->conn, SHP_ERR_EXISTS); /* replaced */
    p->role = AM_PEER_SHARPD;
    snprintf(p->host, sizeof(p->host), "%s", host);
    am_send(
        p, json_pack("{s:s, s:i}", "type", "sharpd_register_ack", "status", 0));
    shp_info("sharpd of host %s registered", host);
    /* jobs this AM still knows are attached again; others were lost with an
     * earlier AM and the sharpd is told they are gone */
    size_t i;
    json_t *v;
    json_array_foreach(jobs, i, v)
    {
        uint64_t jid;
        if (shp_json_get_u64(v, "job_id", &jid, &w))
            continue;
        shp_am_job_t *j = job_find(am, jid);
        if (!j || !job_attach_host(am, j, host)) {
            am_send(p, json_pack("{s:s, s:o, s:i, s:s}", "type", "job_killed",
                                 "job_id", shp_json_u64(jid), "status",
                                 (int)SHP_ERR_JOB_UNKNOWN, "reason",
                                 "the aggregation manager restarted and "
                                 "does not know the job"));
        }
    }
}

static void sharpd_message(shp_am_t *am, shp_am_peer_t *p, const json_t *msg)
{
    const char *type = shp_ctl_type(msg);
    int64_t id = 0;
    if (!strcmp(type, "job_detach")) {
        uint64_t jid;
        const char *w;
        if (shp_json_get_u64(msg, "job_id", &jid, &w) == SHP_OK) {
            shp_am_job_t *j = job_find(am, jid);
            char why[200];
            snprintf(why, sizeof(why), "the job's processes on %s exited",
                     p->host);
            if (j)
                job_detach_host(am, j, p->host, why, 0);
        }
        return;
    }
    if (shp_json_get_int(msg, "id", 0, INT64_MAX, &id, NULL)) {
        am_send(p, shp_ctl_reply("error", 0, SHP_ERR_PROTO,
                                 "request without an id"));
        return;
    }
    if (!strcmp(type, "job_begin")) {
        job_begin(am, p, msg, id);
    } else if (!strcmp(type, "job_attach")) {
        job_attach(am, p, msg, id);
    } else if (!strcmp(type, "job_end")) {
        shp_am_job_t *j = job_for(am, p, msg, "job_end_ack", id);
        if (j) {
            shp_am_job_end(am, j, SHP_OK, "ended");
            am_send(p, shp_ctl_reply("job_end_ack", id, SHP_OK, NULL));
        }
    } else if (!strcmp(type, "job_reserve")) {
        job_reserve(am, p, msg, id);
    } else if (!strcmp(type, "job_release")) {
        job_release(am, p, msg, id);
    } else if (!strcmp(type, "group_create")) {
        group_create(am, p, msg, id);
    } else if (!strcmp(type, "group_destroy")) {
        group_destroy(am, p, msg, id);
    } else {
        am_send(p, shp_ctl_reply("error", id, SHP_ERR_UNSUPPORTED,
                                 "unknown request"));
    }
}

/* Connections --------------------------------------------------------------- */

static void peer_frame(shp_conn_t *conn, const void *frame, size_t len)
{
    shp_am_peer_t *p = conn->arg;
    shp_am_t *am = p->am;
    const char *why;
    json_t *msg = shp_ctl_recv(conn, frame, len, &why);
    if (why)
        shp_warn_id("AM0104", "bad message from %s: %s", conn->peer, why);
    if (!msg)
        return;
    if (p->role == AM_PEER_ADMIN) {
        am_send(p, am->admin_handler(am, p, msg));
    } else if (p->auth.state < 2) {
        json_t *chal = NULL;
        shp_status_t st =
            p->auth.state == 0
                ? shp_auth_server_hello(&p->auth, &am->key, msg, &chal, &why)
                : shp_auth_server_verify(&p->auth, &am->key, msg, &why);
        if (st != SHP_OK) {
            am->stats.auth_failures++;
            shp_error_id("AM0101", "refusing %s (%s %s): %s", conn->peer,
                         p->auth.role[0] ? p->auth.role : "peer", p->auth.name,
                         why);
            am_send(p, shp_ctl_reply("auth_failed", 0, st, why));
            shp_conn_flush(conn);
            shp_conn_close(conn, st);
        } else if (chal) {
            am_send(p, chal);
        }
        if (p->auth.state >= 2) { /* proved: full-sized frames from now */
            p->conn.max_frame = SHP_CTL_MAX_FRAME;
        }
    } else if (p->role == AM_PEER_NEW) {
        const char *type = shp_ctl_type(msg);
        if (!strcmp(type, "an_register") && !strcmp(p->auth.role, "an"))
            an_register(am, p, msg);
        else if (!strcmp(type, "sharpd_register") &&
                 !strcmp(p->auth.role, "sharpd"))
            sharpd_register(am, p, msg);
        else
            shp_conn_close(conn, SHP_ERR_PROTO);
    } else if (p->role == AM_PEER_AN) {
        an_message(am, p, msg);
    } else {
        sharpd_message(am, p, msg);
    }
    json_decref(msg);
}

static void peer_close(shp_conn_t *conn, shp_status_t reason)
{
    shp_am_peer_t *p = conn->arg;
    shp_am_t *am = p->am;
    for (shp_am_peer_t **pp = &am->peers; *pp; pp = &(*pp)->next)
        if (*pp == p) {
            *pp = p->next;
            break;
        }
    /* requests it was waiting for lose their requester */
    shp_am_group_t *g, *tmp;
    HASH_ITER(hh, am->groups, g, tmp)
    {
        if (g->req_peer == p)
            g->req_peer = NULL;
    }
    if (p->role == AM_PEER_AN && am->ans[p->an].peer == p) {
        an_lost(am, p->an, shp_status_str(reason));
    } else if (p->role == AM_PEER_SHARPD && reason != SHP_ERR_EXISTS) {
        char why[200];
        snprintf(why, sizeof(why), "the sharpd of %s is gone (%s)", p->host,
                 shp_status_str(reason));
        shp_warn_id("AM0202", "%s", why);
        shp_am_job_t *j, *jt;
        HASH_ITER(hh, am->jobs, j, jt)
        {
            job_detach_host(am, j, p->host, why, 1);
        }
    }
    free(p);
}

static const shp_conn_ops_t peer_ops = {
    .frame_len = shp_ctl_frame_len,
    .on_frame = peer_frame,
    .on_close = peer_close,
    .on_idle = shp_ctl_on_idle,
};

static shp_am_peer_t *peer_new(shp_am_t *am, int fd, am_role_t role)
{
    shp_am_peer_t *p = calloc(1, sizeof(*p));
    if (!p) {
        close(fd);
        return NULL;
    }
    p->am = am;
    p->role = role;
    p->an = -1;
    /* until a TCP peer proves the cluster secret, only small frames */
    shp_conn_init(&p->conn, am->loop, &peer_ops, p,
                  role == AM_PEER_ADMIN ? SHP_CTL_MAX_FRAME
                                        : SHP_CTL_PREAUTH_MAX_FRAME);
    if (shp_conn_open_fd(&p->conn, fd) != SHP_OK) {
        free(p);
        return NULL;
    }
    p->next = am->peers;
    am->peers = p;
    return p;
}

static void on_accept(shp_listener_t *l, int fd, const shp_sockaddr_t *peer)
{
    (void)peer;
    shp_am_t *am = l->arg;
    shp_am_peer_t *p = peer_new(am, fd, AM_PEER_NEW);
    if (p)
        shp_conn_set_keepalive(&p->conn, (double)am->cfg.keepalive_ms / 1000.0,
                               3);
}

static void on_admin_accept(shp_listener_t *l, int fd,
                            const shp_sockaddr_t *peer)
{
    (void)peer;
    shp_am_t *am = l->arg;
    struct ucred cred;
    socklen_t cl = sizeof(cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) != 0) {
        close(fd);
        return;
    }
    shp_am_peer_t *p = peer_new(am, fd, AM_PEER_ADMIN);
    if (p) {
        p->uid = cred.uid;
        p->gid = cred.gid;
    }
}

/* Start / stop -------------------------------------------------------------- */

static shp_status_t mark_an_hosts(shp_am_t *am, char *err, size_t errlen)
{
    size_t n = shp_topo_count(am->topo);
    am->an_expected = calloc(n, 1);
    am->leaf = malloc(sizeof(int) * n);
    if (!am->an_expected || !am->leaf)
        return SHP_ERR_NO_MEMORY;
    for (size_t i = 0; i < n; i++) {
        am->an_expected[i] =
            shp_topo_node(am->topo, (int)i)->type == SHP_NODE_SWITCH;
        am->leaf[i] = -1;
    }
    char *list = strdup(am->cfg.an_hosts), *save = NULL;
    if (!list)
        return SHP_ERR_NO_MEMORY;
    for (char *h = strtok_r(list, ", ", &save); h;
         h = strtok_r(NULL, ", ", &save)) {
        int node = shp_topo_find(am->topo, h);
        if (node < 0) {
            snprintf(err, errlen, "an_hosts: no node \"%s\" in %s", h,
                     am->cfg.topology);
            free(list);
            return SHP_ERR_NOT_FOUND;
        }
        am->an_expected[node] = 1;
    }
    free(list);
    return SHP_OK;
}

/* A new topology while the AM runs (sharpctl topology load).  Refused while
 * jobs run (their hosts and groups are tied to the old one); otherwise the
 * trees are dropped, ANs and sharpds that the new fabric no longer has are
 * disconnected (and refused when they come back), the others keep their
 * connections, and trees are built anew.  A file that does not parse
 * changes nothing. */
shp_status_t shp_am_topology_load(shp_am_t *am, const char *path, char *err,
                                  size_t errlen)
{
    unsigned njobs = HASH_COUNT(am->jobs);
    if (njobs > 0) {
        snprintf(err, errlen,
                 "%u job%s running: end them first (sharpctl jobs), the new "
                 "topology would move their hosts",
                 njobs, njobs == 1 ? " is" : "s are");
        return SHP_ERR_BUSY;
    }
    char *newpath = strdup(path);
    shp_topo_t *nt = NULL;
    shp_status_t st;
    if (!newpath)
        return SHP_ERR_NO_MEMORY;
    if ((st = shp_topo_load(path, &nt, err, errlen)) != SHP_OK) {
        free(newpath);
        return st;
    }
    /* the AN hosts must exist in the new fabric too */
    shp_topo_t *ot = am->topo;
    uint8_t *oe = am->an_expected;
    int *ol = am->leaf;
    am->topo = nt;
    am->an_expected = NULL;
    am->leaf = NULL;
    st = mark_an_hosts(am, err, errlen);
    uint8_t *ne = am->an_expected;
    int *nl = am->leaf;
    am->topo = ot;
    am->an_expected = oe;
    am->leaf = ol;
    if (st != SHP_OK) {
        free(ne);
        free(nl);
        shp_topo_free(nt);
        free(newpath);
        return st;
    }
    /* no jobs, so no groups: every tree goes */
    for (int t = 0; t < SHP_AM_MAX_TREE_ID; t++)
        if (am->trees[t].used)
            tree_drop(am, t);
    /* who is not in the new fabric goes now, under the old topology */
    for (int a = 0; a < am->nans; a++) {
        int node = shp_topo_find(nt, am->ans[a].name);
        if ((node < 0 || !ne[node]) && am->ans[a].peer)
            shp_conn_close(&am->ans[a].peer->conn, SHP_ERR_NOT_FOUND);
    }
    for (shp_am_peer_t *p = am->peers, *next; p; p = next) {
        next = p->next;
        if (p->role != AM_PEER_SHARPD)
            continue;
        int node = shp_topo_find(nt, p->host);
        if (node < 0 || shp_topo_node(nt, node)->type != SHP_NODE_CA)
            shp_conn_close(&p->conn, SHP_ERR_NOT_FOUND);
    }
    am->topo = nt;
    am->an_expected = ne;
    am->leaf = nl;
    for (int a = 0; a < am->nans; a++) {
        int node = shp_topo_find(nt, am->ans[a].name);
        am->ans[a].node = node >= 0 && ne[node] ? node : -1;
    }
    shp_topo_free(ot);
    free(oe);
    free(ol);
    free(am->cfg.topology);
    am->cfg.topology = newpath;
    shp_info("topology %s loaded: %zu switches, %zu hosts, %zu links", path,
             shp_topo_count_type(nt, SHP_NODE_SWITCH),
             shp_topo_count_type(nt, SHP_NODE_CA), shp_topo_links(nt));
    trees_rebuild(am);
    return SHP_OK;
}

shp_status_t shp_am_start(shp_am_t *am, struct ev_loop *loop, char *err,
                          size_t errlen)
{
    shp_status_t st;
    shp_sockaddr_t addr;
    am->loop = loop;
    am->next_group = 1;
    am->next_req = REQ_MISC_BASE;
    if (!am->cfg.topology[0]) {
        snprintf(err, errlen, "no topology file (--topology)");
        return SHP_ERR_INVALID_PARAM;
    }
    if (am->cfg.admin_socket[0] && !am->admin_handler) {
        snprintf(err, errlen, "an admin socket (%s) but no admin handler",
                 am->cfg.admin_socket);
        return SHP_ERR_INVALID_PARAM;
    }
    if ((st = shp_topo_load(am->cfg.topology, &am->topo, err, errlen)) ||
        (st = mark_an_hosts(am, err, errlen)))
        return st;
    if ((st = shp_auth_init()) ||
        (st = shp_auth_key_load(am->cfg.secret_file, &am->key, err, errlen)))
        return st;
    if ((st = shp_sockaddr_parse(am->cfg.listen, 0, &addr)) ||
        (st = shp_listener_start(&am->listener, loop, &addr, on_accept, am))) {
        snprintf(err, errlen, "cannot listen on %s: %s", am->cfg.listen,
                 shp_status_str(st));
        return st;
    }
    shp_sockaddr_str(&am->listener.addr, am->listen_addr,
                     sizeof(am->listen_addr));
    if (am->cfg.admin_socket[0]) {
        if ((st = shp_sockaddr_parse(am->cfg.admin_socket, 0, &addr)) ||
            (st = shp_listener_start(&am->admin, loop, &addr, on_admin_accept,
                                     am))) {
            snprintf(err, errlen, "cannot listen on %s: %s",
                     am->cfg.admin_socket, shp_status_str(st));
            shp_listener_stop(&am->listener);
            return st;
        }
        /* access is checked per request (SO_PEERCRED); the socket itself
         * is open to the admin group */
        chmod(am->cfg.admin_socket, 0660);
    }
    ev_timer_init(&am->settle, settle_cb, 0., 0.);
    am->settle.data = am;
    if (am->cfg.stats_interval_ms > 0) {
        double iv = (double)am->cfg.stats_interval_ms / 1000.0;
        ev_timer_init(&am->stats_timer, stats_cb, iv, iv);
        am->stats_timer.data = am;
        ev_timer_start(loop, &am->stats_timer);
    }
    shp_info("topology %s: %zu switches, %zu hosts, %zu links",
             am->cfg.topology, shp_topo_count_type(am->topo, SHP_NODE_SWITCH),
             shp_topo_count_type(am->topo, SHP_NODE_CA),
             shp_topo_links(am->topo));
    return SHP_OK;
}

void shp_am_stop(shp_am_t *am)
{
    ev_timer_stop(am->loop, &am->settle);
    ev_timer_stop(am->loop, &am->stats_timer);
    shp_listener_stop(&am->listener);
    if (am->cfg.admin_socket[0])
        shp_listener_stop(&am->admin);
    /* jobs and groups go first, without notifications; then the peers,
     * with fault handling off */
    shp_am_job_t *j, *jt;
    HASH_ITER(hh, am->jobs, j, jt)
    {
        while (j->groups)
            group_free(am, j->groups);
        job_free(am, j);
    }
    while (am->peers) {
        shp_am_peer_t *p = am->peers;
        p->role = AM_PEER_NEW; /* no fault handling on shutdown */
        shp_conn_flush(&p->conn);
        shp_conn_close(&p->conn, SHP_ERR_CANCELED);
    }
    for (int t = 0; t < SHP_AM_MAX_TREE_ID; t++)
        shp_tree_free(&am->trees[t].t);
    for (int a = 0; a < am->nans; a++)
        json_decref(am->ans[a].counters);
    free(am->ans);
    free(am->an_expected);
    free(am->leaf);
    free(am->mark);
    shp_topo_free(am->topo);
}
