/*
 * Aggregation trees over the topology, and the trimmed sub-trees of groups.
 *
 * Pure functions of the topology and the set of live ANs, so that they are
 * unit-tested on hand-checked fabrics and benchmarked on large ones.
 *
 * The AN graph: two ANs are neighbours when a path of switches that host no
 * AN joins them (usually a direct link).  Each host (CA) hangs off its leaf
 * AN: the nearest AN reached from its ports (lowest port, then lowest GUID on
 * ties).  Roots are the ANs farthest from every leaf AN (spines, cores),
 * ranked by eccentricity, then GUID; only the best-ranked class roots trees
 * (in a fat-tree the spines or cores, one tree each).  A tree grows from its root level by
 * level; each AN takes as parent the least-loaded neighbour one level up that
 * still has radix room (or, if none has, waits a level); branches without
 * hosts are pruned.
 */
#ifndef SHP_AM_TREES_H
#define SHP_AM_TREES_H

#include <stdint.h>

#include "topology/topo.h"
#include "core/status.h"

typedef struct shp_tree {
    int id;
    int root;    /* topology node index of the root AN */
    int n;       /* ANs in the tree */
    int *node;   /* [n] topology node index, BFS order, root first */
    int *parent; /* [n] position of the parent in node[], -1 at the root */
    int *nchild; /* [n] AN children */
    int depth;   /* levels below the root */
    int nhosts;  /* hosts whose leaf AN is in the tree */
} shp_tree_t;

typedef struct shp_tree_opts {
    int max_trees; /* trees to build (>= 1) */
    int radix;     /* AN children per AN (>= 1) */
} shp_tree_opts_t;

/* Per-node input: is_an[i] != 0 if topology node i hosts a live AN; cap[i]
 * the number of further trees it can join (NULL = unlimited). */
typedef struct shp_an_set {
    const uint8_t *is_an;
    const int *cap;
} shp_an_set_t;

/* leaf[i] for every topology node: the leaf AN node of a CA, -1 for nodes
 * that are not CAs or reach no AN. */
SHP_WUR shp_status_t shp_leaf_ans(const shp_topo_t *topo,
                                  const shp_an_set_t *ans, int *leaf);

/* Builds up to opts->max_trees trees; *ntrees set.  Roots listed in
 * skip_roots (nskip of them) are not used (they root kept trees).  cap (if
 * given) is decremented for every AN placed. */
SHP_WUR shp_status_t shp_trees_build(const shp_topo_t *topo,
                                     const shp_an_set_t *ans,
                                     const shp_tree_opts_t *opts,
                                     const int *skip_roots, int nskip,
                                     shp_tree_t **trees, int *ntrees);

void shp_tree_free(shp_tree_t *tree); /* frees the arrays, not tree itself */
void shp_trees_free(shp_tree_t *trees, int ntrees);

/* Position of topology node `node` in the tree, or -1. */
int shp_tree_pos(const shp_tree_t *tree, int node);

/* A group's trimmed sub-tree.  Members are hosts (topology CA nodes) in rank
 * order; a host may appear several times (several processes). */
typedef struct shp_group_child {
    int is_an; /* 1: an AN (index into ans[]), 0: a member (rank) */
    int index;
} shp_group_child_t;

typedef struct shp_group_an {
    int node;         /* topology node */
    int parent;       /* index into ans[], -1 at the top */
    int parent_index; /* this AN's position among its parent's children */
    int nchildren;
    shp_group_child_t *children; /* fixed fold order: by lowest rank below */
} shp_group_an_t;

typedef struct shp_group_plan {
    int nans;
    shp_group_an_t *ans; /* ans[0] is the top */
    int nmembers;
    int *member_an;    /* [nmembers] index into ans[] of the leaf AN */
    int *member_index; /* [nmembers] child index at the leaf AN */
} shp_group_plan_t;

/* Plans a group over `tree`.  Returns SHP_ERR_NO_TREE if some member's leaf
 * AN is not in the tree (leaf[] from shp_leaf_ans). */
SHP_WUR shp_status_t shp_group_plan(const shp_tree_t *tree, const int *leaf,
                                    const int *members, int nmembers,
                                    int flat_max, shp_group_plan_t *plan);
void shp_group_plan_free(shp_group_plan_t *plan);

#endif
