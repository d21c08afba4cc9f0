/*
 * The tree table: up to SHP_AM_MAX_TREE_ID aggregation trees over the live
 * ANs (topology/trees.c builds them), each told to its ANs by tree_config.
 *
 * ANs coming and going schedule a rebuild after tree_settle of quiet.  A
 * rebuild keeps the trees that carry groups and replaces the others; a
 * tree with a lost AN is down (no new groups) and is dropped once its last
 * group goes.
 */
#include "am/am_int.h"

#include <stdlib.h>
#include <string.h>

#include "protocol/ctl.h"
#include "core/log.h"

/* Forget a tree that carries no group. */
void shp_am_tree_drop(shp_am_t *am, int t)
{
    shp_am_tree_t *tr = &am->trees[t];
    for (int i = 0; i < tr->t.n; i++) {
        int a = shp_am_an_of_node(am, tr->t.node[i]);
        if (a >= 0)
            am->ans[a].ntrees--;
    }
    shp_tree_free(&tr->t);
    memset(tr, 0, sizeof(*tr));
}

static void am_send_tree_config(shp_am_t *am, int t)
{
    shp_am_tree_t *tr = &am->trees[t];
    for (int i = 0; i < tr->t.n; i++) {
        shp_am_an_t *an = &am->ans[shp_am_an_of_node(am, tr->t.node[i])];
        json_t *parent =
            tr->t.parent[i] < 0
                ? json_null()
                : json_string(am->ans[shp_am_an_of_node(
                                          am, tr->t.node[tr->t.parent[i]])]
                                  .data_addr);
        shp_am_send(an->peer,
                    json_pack("{s:s, s:I, s:i, s:o}", "type", "tree_config",
                              "id", (json_int_t)am->next_req++, "tree_id", t,
                              "parent", parent));
    }
}

/* Rebuild: trees in use whose ANs are all up are kept as they are; the
 * others are replaced by trees over the live ANs. */
/* Every AN the topology expects is up. */
static int am_trees_all_ans(shp_am_t *am)
{
    for (size_t n = 0; n < shp_topo_count(am->topo); n++) {
        if (!am->an_expected[n])
            continue;
        int a = shp_am_an_of_node(am, (int)n);
        if (a < 0 || !am->ans[a].up)
            return 0;
    }
    return 1;
}

void shp_am_trees_rebuild(shp_am_t *am)
{
    size_t n = shp_topo_count(am->topo);
    /* a restart takes a running fabric back: its trees are those built
     * over every AN (am_adopt.c lifts the hold at adopt_timeout) */
    if (am->trees_hold && !am_trees_all_ans(am))
        return;
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
            shp_am_tree_drop(am, t);
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
            am->ans[shp_am_an_of_node(am, trees[k].node[i])].ntrees++;
        am_send_tree_config(am, t);
        /* a freeze of this id set on a tree of another root is no
         * freeze of this one */
        shp_am_settings_tree_built(am, t);
        shp_info("tree %d: root %s, %d ANs, depth %d, %d hosts", t,
                 shp_am_an_name(am, trees[k].root), trees[k].n, trees[k].depth,
                 trees[k].nhosts);
    }
    free(trees);
    free(is_an);
    free(cap);
    if (am->trees_built)
        am->trees_built(am);
}

static void am_settle_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    shp_am_trees_rebuild(w->data);
}

void shp_am_trees_schedule(shp_am_t *am)
{
    ev_timer_stop(am->loop, &am->settle);
    ev_timer_set(&am->settle, (double)am->cfg.tree_settle_ms / 1000.0, 0.);
    ev_timer_start(am->loop, &am->settle);
}

void shp_am_trees_init(shp_am_t *am)
{
    ev_timer_init(&am->settle, am_settle_cb, 0., 0.);
    am->settle.data = am;
}
