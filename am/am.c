/*
 * The aggregation manager's core, start to stop: the state database of the
 * last run (am_persist.c), the topology and the nodes that may host an AN,
 * the control listener and admin socket (am_peers.c),
 * the tree timer, the AN counter polls; and a topology replaced while the
 * manager runs.
 *
 * The top of the core's files (am/am_int.h lists them, bottom first):
 * it starts and stops the others.  Protocols: docs/am.md.
 */
#include "am/am.h"
#include "am/am_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/ctl.h"
#include "core/log.h"
#include "core/net.h"

static shp_status_t am_mark_an_hosts(shp_am_t *am, char *err, size_t errlen)
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

/* The AN marks and leaf table of another fabric `nt` (the manager's own
 * are left as they are). */
static shp_status_t am_mark_an_hosts_of(shp_am_t *am, shp_topo_t *nt,
                                        uint8_t **ne, int **nl, char *err,
                                        size_t errlen)
{
    shp_topo_t *ot = am->topo;
    uint8_t *oe = am->an_expected;
    int *ol = am->leaf;
    am->topo = nt;
    am->an_expected = NULL;
    am->leaf = NULL;
    shp_status_t st = am_mark_an_hosts(am, err, errlen);
    *ne = am->an_expected;
    *nl = am->leaf;
    am->topo = ot;
    am->an_expected = oe;
    am->leaf = ol;
    return st;
}

/* The ANs and sharpds the new fabric `nt` does not have are disconnected
 * now, under the old topology. */
static void am_evict_absent(shp_am_t *am, shp_topo_t *nt, const uint8_t *ne)
{
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
    uint8_t *oe = am->an_expected, *ne;
    int *ol = am->leaf, *nl;
    if ((st = am_mark_an_hosts_of(am, nt, &ne, &nl, err, errlen)) != SHP_OK) {
        free(ne);
        free(nl);
        shp_topo_free(nt);
        free(newpath);
        return st;
    }
    /* on disk first: a restart loads this one */
    if ((st = shp_am_persist_topology(am, path, err, errlen)) != SHP_OK) {
        free(ne);
        free(nl);
        shp_topo_free(nt);
        free(newpath);
        return st;
    }
    /* no jobs, so no groups: every tree goes */
    for (int t = 0; t < SHP_AM_MAX_TREE_ID; t++)
        if (am->trees[t].used)
            shp_am_tree_drop(am, t);
    am_evict_absent(am, nt, ne);
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
    shp_am_trees_rebuild(am);
    return SHP_OK;
}

/* What a manager starts when it becomes active: at once without peers,
 * or when it takes over from another (am_ha.c calls it through am->serve,
 * after the new epoch is committed).  ANs and sharpds register from now
 * on; whatever a fresh manager does to take the fabric over belongs
 * here. */
static void am_serve(shp_am_t *am)
{
    shp_am_trees_init(am);
    /* the fabric as the ANs and sharpds report it, taken back (a manager
     * that stepped down and comes back starts a new adoption) */
    shp_am_adopt_stop(am);
    if (shp_am_adopt_start(am) != SHP_OK)
        shp_error("adoption: out of memory: the fabric's groups are not "
                  "taken back");
    shp_am_ans_poll_start(am);
}

shp_status_t shp_am_start(shp_am_t *am, struct ev_loop *loop, char *err,
                          size_t errlen)
{
    shp_status_t st;
    am->loop = loop;
    am->next_group = 1;
    am->id_stride = 1; /* every id, until shp_am_ids_stripe says */
    am->next_req = SHP_AM_REQ_MISC_BASE;
    if (!am->cfg.topology[0]) {
        snprintf(err, errlen, "no topology file (--topology)");
        return SHP_ERR_INVALID_PARAM;
    }
    if (am->cfg.admin_socket[0] && !am->admin_handler) {
        snprintf(err, errlen, "an admin socket (%s) but no admin handler",
                 am->cfg.admin_socket);
        return SHP_ERR_INVALID_PARAM;
    }
    /* the state of the last run (the topology an administrator loaded
     * then, reservations) before any peer is heard */
    if ((st = shp_am_persist_open(am, err, errlen)) ||
        (st = shp_topo_load(am->cfg.topology, &am->topo, err, errlen)) ||
        (st = am_mark_an_hosts(am, err, errlen)) ||
        (st = shp_am_persist_topology(am, am->cfg.topology, err, errlen)) ||
        (st = shp_am_settings_load(am, err, errlen)) ||
        (st = shp_am_reserve_restore(am, err, errlen)))
        return st;
    if ((st = shp_auth_init()) ||
        (st = shp_auth_key_load(am->cfg.secret_file, &am->key, err, errlen)))
        return st;
    if (am->key.node) { /* it would refuse every AN and sharpd */
        snprintf(err, errlen,
                 "secret_file %s holds the node secret of %s %s, not the "
                 "cluster secret",
                 am->cfg.secret_file, am->key.role, am->key.name);
        return SHP_ERR_INVALID_PARAM;
    }
    if ((st = shp_am_listen(am, err, errlen)) != SHP_OK)
        return st;
    shp_am_trees_init(am); /* idle timers, so a standby's stop is clean */
    am->serve = am_serve;
    shp_info("topology %s: %zu switches, %zu hosts, %zu links",
             am->cfg.topology, shp_topo_count_type(am->topo, SHP_NODE_SWITCH),
             shp_topo_count_type(am->topo, SHP_NODE_CA),
             shp_topo_links(am->topo));
    /* active now, or standby until no peer is (am_ha.c) */
    if ((st = shp_am_ha_start(am, err, errlen)) != SHP_OK) {
        shp_am_unlisten(am);
        return st;
    }
    return SHP_OK;
}

void shp_am_stop(shp_am_t *am)
{
    shp_am_ha_stop(am);
    ev_timer_stop(am->loop, &am->settle);
    ev_timer_stop(am->loop, &am->stats_timer);
    shp_am_unlisten(am);
    /* jobs and groups go first, without notifications; then the peers,
     * with fault handling off */
    shp_am_job_t *j, *jt;
    HASH_ITER(hh, am->jobs, j, jt)
    {
        while (j->groups)
            shp_am_group_free(am, j->groups);
        shp_am_job_free(am, j);
    }
    shp_am_peers_close(am);
    shp_am_sharpd_holds_clear(am);
    shp_am_adopt_stop(am);
    for (int t = 0; t < SHP_AM_MAX_TREE_ID; t++)
        shp_tree_free(&am->trees[t].t);
    for (int a = 0; a < am->nans; a++)
        json_decref(am->ans[a].counters);
    free(am->ans);
    free(am->an_expected);
    free(am->leaf);
    free(am->mark);
    shp_topo_free(am->topo);
    shp_am_settings_free(am);
    shp_am_persist_close(am);
}
