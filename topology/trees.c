/* Aggregation trees and group plans; the algorithms are described in
 * trees.h and docs/am.md. */
#include "topology/trees.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* The AN graph in CSR form over AN positions 0..nan-1. */
typedef struct an_graph {
    int nan;
    int *node;  /* [nan] topology node of each AN */
    int *pos;   /* [topology nodes] AN position or -1 */
    int *off;   /* [nan + 1] */
    int *adj;   /* neighbours, ascending */
    int *hosts; /* [nan] hosts whose leaf AN it is */
} an_graph_t;

static void graph_free(an_graph_t *g)
{
    free(g->node);
    free(g->pos);
    free(g->off);
    free(g->adj);
    free(g->hosts);
}

static int is_transit(const shp_topo_t *topo, const shp_an_set_t *ans, int n)
{
    return !ans->is_an[n] && shp_topo_node(topo, n)->type != SHP_NODE_CA;
}

/* Nearest AN of a CA: breadth-first from its ports through switches that
 * host no AN; the first found at the smallest distance wins (port order). */
static int nearest_an(const shp_topo_t *topo, const shp_an_set_t *ans, int h,
                      int *queue, int *seen, int stamp)
{
    if (ans->is_an[h])
        return h;
    int qh = 0, qt = 0;
    queue[qt++] = h;
    seen[h] = stamp;
    while (qh < qt) {
        int v = queue[qh++];
        const shp_topo_node_t *n = shp_topo_node(topo, v);
        for (int p = 1; p <= n->nports; p++) {
            int w = n->ports[p].peer;
            if (w < 0 || seen[w] == stamp)
                continue;
            seen[w] = stamp;
            if (ans->is_an[w])
                return w;
            if (is_transit(topo, ans, w))
                queue[qt++] = w;
        }
    }
    return -1;
}

shp_status_t shp_leaf_ans(const shp_topo_t *topo, const shp_an_set_t *ans,
                          int *leaf)
{
    int n = (int)shp_topo_count(topo);
    int *queue = malloc(sizeof(int) * (size_t)n);
    int *seen = calloc((size_t)n, sizeof(int));
    if (!queue || !seen) {
        free(queue);
        free(seen);
        return SHP_ERR_NO_MEMORY;
    }
    for (int i = 0; i < n; i++)
        leaf[i] = shp_topo_node(topo, i)->type == SHP_NODE_CA
                      ? nearest_an(topo, ans, i, queue, seen, i + 1)
                      : -1;
    free(queue);
    free(seen);
    return SHP_OK;
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

static shp_status_t graph_build(const shp_topo_t *topo, const shp_an_set_t *ans,
                                an_graph_t *g)
{
    int n = (int)shp_topo_count(topo);
    memset(g, 0, sizeof(*g));
    g->pos = malloc(sizeof(int) * (size_t)n);
    int *queue = malloc(sizeof(int) * (size_t)n);
    int *seen = calloc((size_t)n, sizeof(int));
    int *leaf = malloc(sizeof(int) * (size_t)n);
    size_t cap = 1024, len = 0;
    g->adj = malloc(sizeof(int) * cap);
    if (!g->pos || !queue || !seen || !leaf || !g->adj)
        goto nomem;
    for (int i = 0; i < n; i++)
        g->pos[i] = ans->is_an[i] ? g->nan++ : -1;
    g->node = malloc(sizeof(int) * ((size_t)g->nan + 1));
    g->off = malloc(sizeof(int) * ((size_t)g->nan + 1));
    g->hosts = calloc((size_t)g->nan + 1, sizeof(int));
    if (!g->node || !g->off || !g->hosts)
        goto nomem;
    for (int i = 0; i < n; i++)
        if (g->pos[i] >= 0)
            g->node[g->pos[i]] = i;

    int stamp = 0;
    for (int a = 0; a < g->nan; a++) {
        g->off[a] = (int)len;
        int qh = 0, qt = 0;
        queue[qt++] = g->node[a];
        seen[g->node[a]] = ++stamp;
        while (qh < qt) {
            const shp_topo_node_t *nd = shp_topo_node(topo, queue[qh++]);
            for (int p = 1; p <= nd->nports; p++) {
                int w = nd->ports[p].peer;
                if (w < 0 || seen[w] == stamp)
                    continue;
                seen[w] = stamp;
                if (ans->is_an[w]) {
                    if (len == cap) {
                        cap *= 2;
                        int *na = realloc(g->adj, sizeof(int) * cap);
                        if (!na)
                            goto nomem;
                        g->adj = na;
                    }
                    g->adj[len++] = g->pos[w];
                } else if (is_transit(topo, ans, w)) {
                    queue[qt++] = w;
                }
            }
        }
        qsort(g->adj + g->off[a], len - (size_t)g->off[a], sizeof(int),
              cmp_int);
    }
    g->off[g->nan] = (int)len;

    shp_status_t st = shp_leaf_ans(topo, ans, leaf);
    if (st != SHP_OK)
        goto nomem;
    for (int i = 0; i < n; i++)
        if (leaf[i] >= 0)
            g->hosts[g->pos[leaf[i]]]++;
    free(queue);
    free(seen);
    free(leaf);
    return SHP_OK;
nomem:
    free(queue);
    free(seen);
    free(leaf);
    graph_free(g);
    return SHP_ERR_NO_MEMORY;
}

/* Root ranking: leaf ANs not reached (fewest first), eccentricity over the
 * leaf ANs (smallest first), GUID. */
typedef struct root_rank {
    int an;
    int unreached;
    int ecc;
    uint64_t guid;
} root_rank_t;

static int cmp_rank(const void *a, const void *b)
{
    const root_rank_t *x = a, *y = b;
    if (x->unreached != y->unreached)
        return x->unreached < y->unreached ? -1 : 1;
    if (x->ecc != y->ecc)
        return x->ecc < y->ecc ? -1 : 1;
    return (x->guid > y->guid) - (x->guid < y->guid);
}

static void bfs_dist(const an_graph_t *g, int src, int *dist, int *queue)
{
    for (int i = 0; i < g->nan; i++)
        dist[i] = -1;
    int qh = 0, qt = 0;
    dist[src] = 0;
    queue[qt++] = src;
    while (qh < qt) {
        int v = queue[qh++];
        for (int k = g->off[v]; k < g->off[v + 1]; k++) {
            int w = g->adj[k];
            if (dist[w] < 0) {
                dist[w] = dist[v] + 1;
                queue[qt++] = w;
            }
        }
    }
}

/* The BFS that places ANs level by level under `root`: each neighbour of
 * a level not yet placed (and with capacity) goes under the parent of that
 * level with the fewest children below radix; one that finds none waits
 * in `pending` for the next level.  lvl, par, nch, order, pending: scratch
 * of nan entries; the number placed (in order) returned. */
static int grow_levels(const an_graph_t *g, const shp_an_set_t *ans, int root,
                       int radix, int *lvl, int *par, int *nch, int *order,
                       int *pending)
{
    int nan = g->nan;
    for (int i = 0; i < nan; i++) {
        lvl[i] = -1;
        par[i] = -1;
        nch[i] = 0;
    }
    int norder = 0, npend = 0;
    lvl[root] = 0;
    order[norder++] = root;
    int cur_start = 0, level = 0;
    while (cur_start < norder) {
        int cur_end = norder;
        /* candidates: neighbours of this level not placed, then waiting */
        int ncand = 0;
        int *cand = pending + npend; /* after the waiting ones */
        for (int i = cur_start; i < cur_end; i++) {
            int v = order[i];
            for (int k = g->off[v]; k < g->off[v + 1]; k++) {
                int w = g->adj[k];
                if (lvl[w] != -1 || (ans->cap && ans->cap[g->node[w]] <= 0))
                    continue;
                lvl[w] = -2; /* queued */
                cand[ncand++] = w;
            }
        }
        int total = npend + ncand;
        npend = 0;
        for (int i = 0; i < total; i++) {
            int w = pending[i];
            int best = -1;
            for (int k = g->off[w]; k < g->off[w + 1]; k++) {
                int p = g->adj[k];
                if (lvl[p] != level || nch[p] >= radix)
                    continue;
                if (best < 0 || nch[p] < nch[best])
                    best = p;
            }
            if (best < 0) {
                pending[npend++] = w; /* compacts in place: npend <= i */
                continue;
            }
            lvl[w] = level + 1;
            par[w] = best;
            nch[best]++;
            order[norder++] = w;
        }
        cur_start = cur_end;
        level++;
    }
    return norder;
}

/* The placed ANs (order, BFS) as tree t, pruned of the branches without
 * hosts (keep: marked in reverse BFS order); tpos: scratch of nan. */
static shp_status_t grow_prune(const an_graph_t *g, int root, const int *lvl,
                               const int *par, const int *order, int norder,
                               char *keep, int *tpos, shp_tree_t *t)
{
    for (int i = norder - 1; i >= 0; i--) {
        int v = order[i];
        if (g->hosts[v] > 0)
            keep[v] = 1;
        if (keep[v] && par[v] >= 0)
            keep[par[v]] = 1;
    }
    int n = 0;
    for (int i = 0; i < norder; i++)
        n += keep[order[i]];
    memset(t, 0, sizeof(*t));
    t->root = g->node[root];
    if (n == 0)
        return SHP_OK;
    t->node = malloc(sizeof(int) * (size_t)n);
    t->parent = malloc(sizeof(int) * (size_t)n);
    t->nchild = calloc((size_t)n, sizeof(int));
    if (!t->node || !t->parent || !t->nchild) {
        shp_tree_free(t);
        return SHP_ERR_NO_MEMORY;
    }
    for (int i = 0; i < norder; i++) {
        int v = order[i];
        if (!keep[v])
            continue;
        int p = par[v] >= 0 ? tpos[par[v]] : -1;
        tpos[v] = t->n;
        t->node[t->n] = g->node[v];
        t->parent[t->n] = p;
        if (p >= 0)
            t->nchild[p]++;
        if (lvl[v] > t->depth)
            t->depth = lvl[v];
        t->nhosts += g->hosts[v];
        t->n++;
    }
    return SHP_OK;
}

/* One tree from AN position `root`: its levels grown (grow_levels), then
 * pruned (grow_prune).  lvl, par, nch, order, pending are scratch arrays
 * of nan entries. */
static shp_status_t grow_tree(const an_graph_t *g, const shp_an_set_t *ans,
                              int root, int radix, shp_tree_t *t, int *lvl,
                              int *par, int *nch, int *order, int *pending)
{
    int nan = g->nan;
    int norder =
        grow_levels(g, ans, root, radix, lvl, par, nch, order, pending);
    char *keep = calloc((size_t)nan, 1);
    int *tpos = malloc(sizeof(int) * (size_t)nan);
    shp_status_t st = SHP_ERR_NO_MEMORY;

    if (keep && tpos)
        st = grow_prune(g, root, lvl, par, order, norder, keep, tpos, t);
    free(keep);
    free(tpos);
    return st;
}

shp_status_t shp_trees_build(const shp_topo_t *topo, const shp_an_set_t *ans,
                             const shp_tree_opts_t *opts, const int *skip_roots,
                             int nskip, shp_tree_t **trees_out, int *ntrees_out)
{
    *trees_out = NULL;
    *ntrees_out = 0;
    if (opts->max_trees < 1 || opts->radix < 1)
        return SHP_ERR_INVALID_PARAM;
    an_graph_t g;
    shp_status_t st = graph_build(topo, ans, &g);
    if (st != SHP_OK)
        return st;
    int nan = g.nan;
    size_t sz = sizeof(int) * ((size_t)nan + 1);
    int *dist = malloc(sz), *queue = malloc(sz), *lvl = malloc(sz),
        *par = malloc(sz), *nch = malloc(sz), *order = malloc(sz),
        *pending = malloc(2 * sz);
    root_rank_t *rank = malloc(sizeof(*rank) * ((size_t)nan + 1));
    shp_tree_t *trees = calloc((size_t)opts->max_trees, sizeof(*trees));
    int ntrees = 0;
    if (!dist || !queue || !lvl || !par || !nch || !order || !pending ||
        !rank || !trees) {
        st = SHP_ERR_NO_MEMORY;
        goto out;
    }
    for (int a = 0; a < nan; a++) {
        bfs_dist(&g, a, dist, queue);
        rank[a] = (root_rank_t){.an = a,
                                .guid = shp_topo_node(topo, g.node[a])->guid};
        for (int b = 0; b < nan; b++) {
            if (g.hosts[b] == 0)
                continue;
            if (dist[b] < 0)
                rank[a].unreached++;
            else if (dist[b] > rank[a].ecc)
                rank[a].ecc = dist[b];
        }
    }
    qsort(rank, (size_t)nan, sizeof(*rank), cmp_rank);
    /* only the best class of roots: in a fat-tree the spines (or cores),
     * never a leaf */
    for (int r = 0; r < nan && ntrees < opts->max_trees; r++) {
        if (rank[r].unreached != rank[0].unreached ||
            rank[r].ecc != rank[0].ecc)
            break;
        int root = rank[r].an, skip = 0;
        for (int k = 0; k < nskip; k++)
            skip |= skip_roots[k] == g.node[root];
        if (skip || (ans->cap && ans->cap[g.node[root]] <= 0))
            continue;
        shp_tree_t t;
        st = grow_tree(&g, ans, root, opts->radix, &t, lvl, par, nch, order,
                       pending);
        if (st != SHP_OK)
            goto out;
        if (t.n == 0 || t.nhosts == 0) {
            shp_tree_free(&t);
            continue;
        }
        if (ans->cap)
            for (int i = 0; i < t.n; i++)
                ((int *)ans->cap)[t.node[i]]--;
        trees[ntrees++] = t;
    }
out:
    free(dist);
    free(queue);
    free(lvl);
    free(par);
    free(nch);
    free(order);
    free(pending);
    free(rank);
    graph_free(&g);
    if (st != SHP_OK) {
        shp_trees_free(trees, ntrees);
        return st;
    }
    *trees_out = trees;
    *ntrees_out = ntrees;
    return SHP_OK;
}

void shp_tree_free(shp_tree_t *t)
{
    if (!t)
        return;
    free(t->node);
    free(t->parent);
    free(t->nchild);
    t->node = t->parent = t->nchild = NULL;
    t->n = 0;
}

void shp_trees_free(shp_tree_t *trees, int ntrees)
{
    for (int i = 0; i < ntrees; i++)
        shp_tree_free(&trees[i]);
    free(trees);
}

int shp_tree_pos(const shp_tree_t *tree, int node)
{
    for (int i = 0; i < tree->n; i++)
        if (tree->node[i] == node)
            return i;
    return -1;
}

/* Group plans ------------------------------------------------------------ */

typedef struct sort_child {
    int key; /* lowest rank below */
    shp_group_child_t c;
} sort_child_t;

static int cmp_child(const void *a, const void *b)
{
    const sort_child_t *x = a, *y = b;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    /* a member before an AN whose lowest rank is the same: cannot happen
     * (a rank lives in one place), kept for a total order */
    return x->c.is_an - y->c.is_an;
}

void shp_group_plan_free(shp_group_plan_t *plan)
{
    if (!plan)
        return;
    for (int i = 0; i < plan->nans; i++)
        free(plan->ans[i].children);
    free(plan->ans);
    free(plan->member_an);
    free(plan->member_index);
    memset(plan, 0, sizeof(*plan));
}

/* The scratch of shp_group_plan, by tree position (n) or member (m). */
typedef struct {
    int *mpos;    /* m: the tree position a member hangs from */
    int *minrank; /* n: the lowest member below a position (INT_MAX: none) */
    int *direct;  /* n: members hanging right from a position */
    int *subch;   /* n: marked children of a position */
    int *gidx;    /* n: tree position -> index in plan->ans (-1: none) */
    int *queue;   /* n: the marked positions, breadth first from the top */
    sort_child_t *tmp;
} plan_work_t;

static void plan_work_free(plan_work_t *w)
{
    free(w->mpos);
    free(w->minrank);
    free(w->direct);
    free(w->subch);
    free(w->gidx);
    free(w->queue);
    free(w->tmp);
}

static shp_status_t plan_work_alloc(plan_work_t *w, int n, int nmembers)
{
    w->mpos = malloc(sizeof(int) * (size_t)nmembers);
    w->minrank = malloc(sizeof(int) * (size_t)n);
    w->direct = calloc((size_t)n, sizeof(int));
    w->subch = calloc((size_t)n, sizeof(int));
    w->gidx = malloc(sizeof(int) * (size_t)n);
    w->queue = malloc(sizeof(int) * (size_t)n);
    w->tmp = malloc(sizeof(*w->tmp) * ((size_t)nmembers + (size_t)n));
    if (!w->mpos || !w->minrank || !w->direct || !w->subch || !w->gidx ||
        !w->queue || !w->tmp)
        return SHP_ERR_NO_MEMORY;
    for (int i = 0; i < n; i++) {
        w->minrank[i] = INT_MAX;
        w->gidx[i] = -1;
    }
    return SHP_OK;
}

/* Marks the positions with members below them, each with its lowest. */
static shp_status_t plan_mark(const shp_tree_t *tree, const int *leaf,
                              const int *members, int nmembers, plan_work_t *w)
{
    for (int r = 0; r < nmembers; r++) {
        int l = members[r] >= 0 ? leaf[members[r]] : -1;
        int p = l >= 0 ? shp_tree_pos(tree, l) : -1;
        if (p < 0)
            return SHP_ERR_NO_TREE;
        w->mpos[r] = p;
        w->direct[p]++;
        /* ranks ascend: the first to reach a node sets its lowest rank */
        for (int v = p; v >= 0 && w->minrank[v] == INT_MAX;
             v = tree->parent[v]) {
            w->minrank[v] = r;
            if (tree->parent[v] >= 0)
                w->subch[tree->parent[v]]++;
        }
    }
    return SHP_OK;
}

/* The group's top: down from the root while one child and no members of
 * its own.  A group of at most flat_max members is served by its top AN
 * alone, every member a direct child (one AN hop instead of one per
 * level). */
static int plan_top(const shp_tree_t *tree, int nmembers, int flat_max,
                    plan_work_t *w)
{
    int top = 0;

    while (w->direct[top] == 0 && w->subch[top] == 1) {
        int next = -1;
        for (int i = 0; i < tree->n && next < 0; i++)
            if (tree->parent[i] == top && w->minrank[i] != INT_MAX)
                next = i;
        top = next;
    }
    if (nmembers <= flat_max) {
        for (int r = 0; r < nmembers; r++)
            w->mpos[r] = top;
        for (int i = 0; i < tree->n; i++)
            if (i != top)
                w->minrank[i] = INT_MAX;
    }
    return top;
}

/* The marked positions breadth first from the top; how many. */
static int plan_order(const shp_tree_t *tree, int top, plan_work_t *w)
{
    int qh = 0, qt = 0;

    w->queue[qt++] = top;
    w->gidx[top] = 0;
    while (qh < qt) {
        int v = w->queue[qh++];
        for (int i = v + 1; i < tree->n; i++)
            if (tree->parent[i] == v && w->minrank[i] != INT_MAX) {
                w->gidx[i] = qt;
                w->queue[qt++] = i;
            }
    }
    return qt;
}

/* AN a of the plan: its parent, and its children (members and ANs) in the
 * order of their lowest member. */
static shp_status_t plan_an(const shp_tree_t *tree, int nmembers, int a,
                            plan_work_t *w, shp_group_plan_t *plan)
{
    int v = w->queue[a], k = 0;
    shp_group_an_t *ga = &plan->ans[a];

    ga->node = tree->node[v];
    ga->parent = a == 0 ? -1 : w->gidx[tree->parent[v]];
    for (int r = 0; r < nmembers; r++)
        if (w->mpos[r] == v)
            w->tmp[k++] = (sort_child_t){r, {0, r}};
    for (int b = a + 1; b < plan->nans; b++)
        if (tree->parent[w->queue[b]] == v)
            w->tmp[k++] = (sort_child_t){w->minrank[w->queue[b]], {1, b}};
    qsort(w->tmp, (size_t)k, sizeof(*w->tmp), cmp_child);
    ga->nchildren = k;
    ga->children = malloc(sizeof(*ga->children) * (size_t)k);
    if (!ga->children)
        return SHP_ERR_NO_MEMORY;
    for (int i = 0; i < k; i++) {
        ga->children[i] = w->tmp[i].c;
        if (w->tmp[i].c.is_an) {
            plan->ans[w->tmp[i].c.index].parent_index = i;
        } else {
            plan->member_an[w->tmp[i].c.index] = a;
            plan->member_index[w->tmp[i].c.index] = i;
        }
    }
    return SHP_OK;
}

shp_status_t shp_group_plan(const shp_tree_t *tree, const int *leaf,
                            const int *members, int nmembers, int flat_max,
                            shp_group_plan_t *plan)
{
    plan_work_t w = {0};
    shp_status_t st;

    memset(plan, 0, sizeof(*plan));
    if (nmembers < 1)
        return SHP_ERR_INVALID_PARAM;
    st = plan_work_alloc(&w, tree->n, nmembers);
    if (st == SHP_OK)
        st = plan_mark(tree, leaf, members, nmembers, &w);
    if (st != SHP_OK)
        goto out;
    plan->nans = plan_order(tree, plan_top(tree, nmembers, flat_max, &w), &w);
    plan->nmembers = nmembers;
    plan->ans = calloc((size_t)plan->nans, sizeof(*plan->ans));
    plan->member_an = malloc(sizeof(int) * (size_t)nmembers);
    plan->member_index = malloc(sizeof(int) * (size_t)nmembers);
    if (!plan->ans || !plan->member_an || !plan->member_index) {
        st = SHP_ERR_NO_MEMORY;
        goto out;
    }
    for (int a = 0; a < plan->nans && st == SHP_OK; a++)
        st = plan_an(tree, nmembers, a, &w, plan);
out:
    plan_work_free(&w);
    if (st != SHP_OK)
        shp_group_plan_free(plan);
    return st;
}
