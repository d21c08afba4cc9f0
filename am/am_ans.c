/*
 * The AN registry: one entry per AN that ever registered (kept while it is
 * down, so that it comes back to the same index), with its capabilities,
 * data address and transport, the trees and groups it carries, and the
 * counters its stats answers bring (polled every stats_interval).
 *
 * An AN registers under the name it proved, for a node of the topology
 * that may host one; the groups it still serves are taken back or removed
 * by am_adopt.c.  An AN lost takes its groups (and only those) with it;
 * its trees take no new groups and are rebuilt once empty.
 */
#include "am/am_int.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/ctl.h"
#include "core/log.h"
#include "core/time.h"

/* An AN is gone: the groups through it are revoked (and only those); the
 * trees through it take no new groups and are rebuilt once empty. */
void shp_am_an_lost(shp_am_t *am, int a, const char *why)
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
                shp_am_group_revoke(am, g, SHP_ERR_TREE_DOWN, reason);
                break;
            }
    }
    for (int t = 0; t < SHP_AM_MAX_TREE_ID; t++)
        if (am->trees[t].used && shp_tree_pos(&am->trees[t].t, an->node) >= 0)
            am->trees[t].up = 0;
    shp_am_trees_schedule(am);
}

/* the AN's data transport ("tcp" when it does not say) */
static int am_transport_known(const json_t *msg, const char **transport,
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

/* A new entry of the registry, for `node`; -1: no memory. */
static int am_an_add(shp_am_t *am, int node)
{
    if (am->nans == am->capans) {
        int cap = am->capans ? am->capans * 2 : 64;
        shp_am_an_t *na = realloc(am->ans, sizeof(*na) * (size_t)cap);
        if (!na)
            return -1;
        am->ans = na;
        am->capans = cap;
    }
    int a = am->nans++;
    memset(&am->ans[a], 0, sizeof(am->ans[a]));
    am->ans[a].node = node;
    return a;
}

/* an_register {name, data_addr, transport?, mcast?, caps {max_trees,
 * max_groups, max_osts, max_payload}, groups [ids]} from an AN that proved
 * `name`: refused (and closed), or registered and the trees rescheduled. */
void shp_am_an_register(shp_am_t *am, shp_am_peer_t *p, const json_t *msg)
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
        !am_transport_known(msg, &transport, &why)) {
        shp_am_send(p, shp_ctl_reply("an_register_ack", 0, SHP_ERR_PROTO, why));
        shp_conn_close(&p->conn, SHP_ERR_PROTO);
        return;
    }
    if (strcmp(name, p->auth.name) != 0) {
        shp_am_send(
            p, shp_ctl_reply("an_register_ack", 0, SHP_ERR_AUTH,
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
        shp_am_send(p,
                    shp_ctl_reply("an_register_ack", 0, SHP_ERR_NOT_FOUND, e));
        shp_conn_push(&p->conn);
        shp_conn_close(&p->conn, SHP_ERR_NOT_FOUND);
        return;
    }
    int a = shp_am_an_of_node(am, node);
    if (a >= 0 && am->ans[a].up) {
        shp_am_send(p,
                    shp_ctl_reply("an_register_ack", 0, SHP_ERR_EXISTS,
                                  "an AN of that node is already registered"));
        shp_conn_close(&p->conn, SHP_ERR_EXISTS);
        return;
    }
    if (a < 0 && (a = am_an_add(am, node)) < 0) {
        shp_conn_close(&p->conn, SHP_ERR_NO_MEMORY);
        return;
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
    shp_am_send(
        p, json_pack("{s:s, s:i}", "type", "an_register_ack", "status", 0));
    shp_info("AN %s registered (data %s)", name, addr);
    /* the groups it serves: taken back or removed (am_adopt.c) */
    shp_am_trees_schedule(am);
}

/* An AN's counters: operations per second since the last answer, and
 * every error it counts. */
static void am_an_stats(shp_am_an_t *an, const json_t *msg)
{
    static const char *const errs[] = {"err_bad_key",    "err_unknown_group",
                                       "err_seq_window", "err_mismatch",
                                       "err_malformed",  "err_protocol",
                                       "err_forged",     "groups_failed",
                                       "join_deadline",  NULL};
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

static void am_stats_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    shp_am_t *am = w->data;
    (void)loop;
    (void)revents;
    for (int a = 0; a < am->nans; a++)
        if (am->ans[a].up && am->ans[a].peer)
            shp_am_send(am->ans[a].peer,
                        json_pack("{s:s, s:I}", "type", "stats_req", "id",
                                  (json_int_t)am->next_req++));
}

void shp_am_an_message(shp_am_t *am, shp_am_peer_t *p, const json_t *msg)
{
    const char *type = shp_ctl_type(msg);
    int64_t id, st = 0;
    if (!strcmp(type, "group_failed")) {
        int64_t gid;
        const char *reason = shp_json_opt_str(msg, "reason", "failed");
        if (shp_json_get_int(msg, "group_id", 0, UINT32_MAX, &gid, NULL))
            return;
        st = shp_json_opt_int(msg, "status", -32768, 32767, 0);
        shp_am_group_t *g = shp_am_group_find(am, (uint32_t)gid);
        if (g) {
            char why[400];
            snprintf(why, sizeof(why), "AN %s: %s", am->ans[p->an].name,
                     reason);
            shp_am_group_revoke(
                am, g, st < 0 ? (shp_status_t)st : SHP_ERR_GROUP_FAILED, why);
        }
        return;
    }
    if (shp_json_get_int(msg, "id", 0, INT64_MAX, &id, NULL))
        return;
    st = shp_json_opt_int(msg, "status", -32768, 32767, 0);
    const char *error = shp_json_opt_str(msg, "error", NULL);
    if (!strcmp(type, "group_add_ack") && id < SHP_AM_REQ_MISC_BASE) {
        shp_am_group_ack(am, id, (shp_status_t)st, error, p->an);
    } else if (!strcmp(type, "stats") && st == 0) {
        am_an_stats(&am->ans[p->an], msg);
    } else if (st != 0) {
        shp_warn("AN %s answered %s with %s: %s", am->ans[p->an].name, type,
                 shp_status_str((shp_status_t)st), error ? error : "");
    }
}

/* Ask the ANs for their counters every stats_interval (0: never). */
void shp_am_ans_poll_start(shp_am_t *am)
{
    if (am->cfg.stats_interval_ms > 0) {
        double iv = (double)am->cfg.stats_interval_ms / 1000.0;
        ev_timer_init(&am->stats_timer, am_stats_cb, iv, iv);
        am->stats_timer.data = am;
        ev_timer_start(am->loop, &am->stats_timer);
    }
}
