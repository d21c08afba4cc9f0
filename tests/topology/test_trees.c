/* Tree building and group plans on small hand-checked fabrics. */
#include "tests/support/test_util.h"

#include "topology/topo.h"
#include "topology/trees.h"

#include <stdlib.h>

typedef struct fab {
    shp_topo_t *topo;
    uint8_t *is_an;
    int *leaf;
    int n;
} fab_t;

/* ANs on every switch */
static void fab_init(fab_t *f, shp_topo_t *t)
{
    f->topo = t;
    f->n = (int)shp_topo_count(t);
    f->is_an = calloc((size_t)f->n, 1);
    f->leaf = calloc((size_t)f->n, sizeof(int));
    for (int i = 0; i < f->n; i++)
        f->is_an[i] = shp_topo_node(t, i)->type == SHP_NODE_SWITCH;
}

static void fab_leaves(fab_t *f)
{
    shp_an_set_t s = {f->is_an, NULL};
    assert_int_equal(shp_leaf_ans(f->topo, &s, f->leaf), SHP_OK);
}

static void fab_free(fab_t *f)
{
    shp_topo_free(f->topo);
    free(f->is_an);
    free(f->leaf);
}

static shp_topo_t *fat_tree(int levels, int radix, int hosts)
{
    shp_fat_tree_spec_t s = {levels, radix, hosts};
    shp_topo_t *t;
    char err[256];
    assert_int_equal(shp_topo_fat_tree(&s, &t, err, sizeof(err)), SHP_OK);
    return t;
}

static shp_topo_t *capture(const char *name)
{
    char path[512], err[512];
    const char *d = getenv("SHARP_TOPO_DATA");
    snprintf(path, sizeof(path), "%s/%s", d ? d : "tests/topology/data", name);
    shp_topo_t *t;
    if (shp_topo_load(path, &t, err, sizeof(err)) != SHP_OK)
        fail_msg("%s", err);
    return t;
}

static const char *desc(const fab_t *f, int node)
{
    return shp_topo_node(f->topo, node)->desc;
}

static int node(const fab_t *f, const char *name)
{
    int i = shp_topo_find(f->topo, name);
    if (i < 0)
        fail_msg("no node %s", name);
    return i;
}

/* Every host reaches its leaf AN in the tree, radix respected, parents
 * are physical neighbours one level up. */
static void check_tree(const fab_t *f, const shp_tree_t *t, int radix)
{
    int hosts = 0;
    for (int i = 0; i < f->n; i++)
        if (f->leaf[i] >= 0) {
            assert_true(shp_tree_pos(t, f->leaf[i]) >= 0);
            hosts++;
        }
    assert_int_equal(t->nhosts, hosts);
    assert_int_equal(t->node[0], t->root);
    assert_int_equal(t->parent[0], -1);
    for (int i = 0; i < t->n; i++) {
        assert_true(t->nchild[i] <= radix);
        if (i == 0)
            continue;
        assert_true(t->parent[i] < i);
        /* the parent is linked to the child */
        const shp_topo_node_t *c = shp_topo_node(f->topo, t->node[i]);
        int linked = 0;
        for (int p = 1; p <= c->nports; p++)
            linked |= c->ports[p].peer == t->node[t->parent[i]];
        assert_true(linked);
    }
}

static void test_fat_tree_2l(void **state)
{
    (void)state;
    fab_t f;
    fab_init(&f, capture("fat-tree-2l.ibnd"));
    fab_leaves(&f);
    assert_string_equal(desc(&f, f.leaf[node(&f, "n00001")]), "leaf01");
    assert_string_equal(desc(&f, f.leaf[node(&f, "n00032")]), "leaf08");

    shp_an_set_t s = {f.is_an, NULL};
    shp_tree_opts_t o = {.max_trees = 16, .radix = 64};
    shp_tree_t *t;
    int nt;
    assert_int_equal(shp_trees_build(f.topo, &s, &o, NULL, 0, &t, &nt), SHP_OK);
    /* one tree per spine, never a leaf as root */
    assert_int_equal(nt, 4);
    for (int i = 0; i < nt; i++) {
        assert_true(strncmp(desc(&f, t[i].root), "spine", 5) == 0);
        for (int j = 0; j < i; j++)
            assert_int_not_equal(t[i].root, t[j].root);
        assert_int_equal(t[i].n, 9); /* the spine and the 8 leaves */
        assert_int_equal(t[i].depth, 1);
        check_tree(&f, &t[i], 64);
    }
    shp_trees_free(t, nt);

    /* a skipped root and a tree limit */
    int skip = t ? node(&f, "spine02") : -1;
    o.max_trees = 2;
    assert_int_equal(shp_trees_build(f.topo, &s, &o, &skip, 1, &t, &nt),
                     SHP_OK);
    assert_int_equal(nt, 2);
    assert_string_equal(desc(&f, t[0].root), "spine01");
    assert_string_equal(desc(&f, t[1].root), "spine03");
    shp_trees_free(t, nt);
    fab_free(&f);
}

static void test_radix_bound(void **state)
{
    (void)state;
    fab_t f;
    fab_init(&f, fat_tree(2, 8, 32));
    fab_leaves(&f);
    shp_an_set_t s = {f.is_an, NULL};
    shp_tree_opts_t o = {.max_trees = 1, .radix = 3};
    shp_tree_t *t;
    int nt;
    assert_int_equal(shp_trees_build(f.topo, &s, &o, NULL, 0, &t, &nt), SHP_OK);
    assert_int_equal(nt, 1);
    /* spine01 takes 3 leaves; the others hang below other spines */
    check_tree(&f, &t[0], 3);
    assert_int_equal(t[0].nchild[0], 3);
    assert_true(t[0].depth >= 3);
    shp_trees_free(t, nt);
    fab_free(&f);
}

static void test_fat_tree_3l(void **state)
{
    (void)state;
    fab_t f;
    fab_init(&f, fat_tree(3, 8, 128));
    fab_leaves(&f);
    shp_an_set_t s = {f.is_an, NULL};
    shp_tree_opts_t o = {.max_trees = 4, .radix = 64};
    shp_tree_t *t;
    int nt;
    assert_int_equal(shp_trees_build(f.topo, &s, &o, NULL, 0, &t, &nt), SHP_OK);
    assert_int_equal(nt, 4);
    for (int i = 0; i < nt; i++) {
        assert_true(strncmp(desc(&f, t[i].root), "core", 4) == 0);
        assert_int_equal(t[i].depth, 2);
        /* core, one aggregation switch a pod, every edge */
        assert_int_equal(t[i].n, 1 + 8 + 32);
        check_tree(&f, &t[i], 64);
    }

    /* a group inside one pod is trimmed to that pod's aggregation switch */
    int m[3] = {node(&f, "n00001"), node(&f, "n00005"), node(&f, "n00006")};
    shp_group_plan_t p;
    assert_int_equal(shp_group_plan(&t[0], f.leaf, m, 3, 0, &p), SHP_OK);
    assert_int_equal(p.nans, 3);
    assert_true(strncmp(desc(&f, p.ans[0].node), "agg-p01-", 8) == 0);
    assert_int_equal(p.ans[0].nchildren, 2);
    assert_string_equal(desc(&f, p.ans[1].node), "edge-p01-01");
    assert_string_equal(desc(&f, p.ans[2].node), "edge-p01-02");
    shp_group_plan_free(&p);

    /* across pods: the core is the top */
    m[2] = node(&f, "n00128");
    assert_int_equal(shp_group_plan(&t[0], f.leaf, m, 3, 0, &p), SHP_OK);
    assert_int_equal(p.ans[0].node, t[0].root);
    assert_int_equal(p.nans, 1 + 2 + 3);
    shp_group_plan_free(&p);

    /* flat: at most flat_max members are direct children of that top, in
     * rank order; one more member and the levels come back */
    int f4[4] = {m[0], m[1], m[2], node(&f, "n00002")};
    assert_int_equal(shp_group_plan(&t[0], f.leaf, f4, 4, 4, &p), SHP_OK);
    assert_int_equal(p.nans, 1);
    assert_int_equal(p.ans[0].node, t[0].root);
    assert_int_equal(p.ans[0].nchildren, 4);
    for (int r = 0; r < 4; r++) {
        assert_false(p.ans[0].children[r].is_an);
        assert_int_equal(p.ans[0].children[r].index, r);
        assert_int_equal(p.member_an[r], 0);
        assert_int_equal(p.member_index[r], r);
    }
    shp_group_plan_free(&p);
    assert_int_equal(shp_group_plan(&t[0], f.leaf, f4, 4, 3, &p), SHP_OK);
    assert_int_equal(p.nans, 1 + 2 + 3);
    shp_group_plan_free(&p);
    /* one leaf: flat or not, that leaf alone */
    int one[2] = {m[1], node(&f, "n00006")};
    assert_int_equal(shp_group_plan(&t[0], f.leaf, one, 2, 16, &p), SHP_OK);
    assert_int_equal(p.nans, 1);
    assert_string_equal(desc(&f, p.ans[0].node), "edge-p01-02");
    shp_group_plan_free(&p);
    shp_trees_free(t, nt);
    fab_free(&f);
}

static void test_ring(void **state)
{
    (void)state;
    fab_t f;
    fab_init(&f, capture("ring.ibnd"));
    fab_leaves(&f);
    shp_an_set_t s = {f.is_an, NULL};
    shp_tree_opts_t o = {.max_trees = 16, .radix = 2};
    shp_tree_t *t;
    int nt;
    assert_int_equal(shp_trees_build(f.topo, &s, &o, NULL, 0, &t, &nt), SHP_OK);
    /* every switch is as central as any other: six trees, depth 3 */
    assert_int_equal(nt, 6);
    for (int i = 0; i < nt; i++) {
        assert_int_equal(t[i].n, 6);
        assert_int_equal(t[i].depth, 3);
        check_tree(&f, &t[i], 2);
    }
    shp_trees_free(t, nt);

    /* an AN may join at most cap trees */
    int *cap = malloc(sizeof(int) * (size_t)f.n);
    for (int i = 0; i < f.n; i++)
        cap[i] = 2;
    shp_an_set_t sc = {f.is_an, cap};
    assert_int_equal(shp_trees_build(f.topo, &sc, &o, NULL, 0, &t, &nt),
                     SHP_OK);
    assert_true(nt >= 1);
    for (int i = 0; i < f.n; i++)
        assert_true(cap[i] >= 0);
    for (int i = 0; i < nt; i++)
        check_tree(&f, &t[i], 2);
    shp_trees_free(t, nt);
    free(cap);
    fab_free(&f);
}

static void test_transit_and_host_an(void **state)
{
    (void)state;
    fab_t f;
    fab_init(&f, capture("parallel.ibnd"));
    /* only sw-a hosts an AN: sw-b is a transit switch */
    f.is_an[node(&f, "sw-b")] = 0;
    fab_leaves(&f);
    assert_string_equal(desc(&f, f.leaf[node(&f, "pd")]), "sw-a");
    assert_string_equal(desc(&f, f.leaf[node(&f, "pa")]), "sw-a");

    /* the AN lives on host pc; both switches are transit */
    f.is_an[node(&f, "sw-a")] = 0;
    f.is_an[node(&f, "pc")] = 1;
    fab_leaves(&f);
    for (int i = 0; i < f.n; i++)
        if (shp_topo_node(f.topo, i)->type == SHP_NODE_CA)
            assert_string_equal(desc(&f, f.leaf[i]), "pc HCA-1");
    shp_an_set_t s = {f.is_an, NULL};
    shp_tree_opts_t o = {.max_trees = 4, .radix = 8};
    shp_tree_t *t;
    int nt;
    assert_int_equal(shp_trees_build(f.topo, &s, &o, NULL, 0, &t, &nt), SHP_OK);
    assert_int_equal(nt, 1);
    assert_int_equal(t[0].n, 1);
    assert_int_equal(t[0].nhosts, 4);
    shp_trees_free(t, nt);

    /* no AN at all: no tree, no leaf */
    memset(f.is_an, 0, (size_t)f.n);
    fab_leaves(&f);
    assert_int_equal(f.leaf[node(&f, "pa")], -1);
    assert_int_equal(shp_trees_build(f.topo, &s, &o, NULL, 0, &t, &nt), SHP_OK);
    assert_int_equal(nt, 0);
    free(t);
    fab_free(&f);
}

static void test_group_plans(void **state)
{
    (void)state;
    fab_t f;
    fab_init(&f, fat_tree(2, 8, 32));
    fab_leaves(&f);
    shp_an_set_t s = {f.is_an, NULL};
    shp_tree_opts_t o = {.max_trees = 1, .radix = 64};
    shp_tree_t *t;
    int nt;
    assert_int_equal(shp_trees_build(f.topo, &s, &o, NULL, 0, &t, &nt), SHP_OK);
    shp_group_plan_t p;

    /* one leaf: trimmed to it */
    int one[2] = {node(&f, "n00001"), node(&f, "n00002")};
    assert_int_equal(shp_group_plan(&t[0], f.leaf, one, 2, 0, &p), SHP_OK);
    assert_int_equal(p.nans, 1);
    assert_string_equal(desc(&f, p.ans[0].node), "leaf01");
    assert_int_equal(p.ans[0].parent, -1);
    assert_int_equal(p.ans[0].nchildren, 2);
    assert_int_equal(p.member_index[0], 0);
    assert_int_equal(p.member_index[1], 1);
    shp_group_plan_free(&p);

    /* ranks out of leaf order: children ordered by lowest rank below */
    int m[4] = {node(&f, "n00005"), node(&f, "n00001"), node(&f, "n00006"),
                node(&f, "n00001")};
    assert_int_equal(shp_group_plan(&t[0], f.leaf, m, 4, 0, &p), SHP_OK);
    assert_int_equal(p.nans, 3);
    assert_int_equal(p.ans[0].node, t[0].root);
    assert_int_equal(p.ans[0].nchildren, 2);
    shp_group_an_t *l2 = &p.ans[p.ans[0].children[0].index];
    shp_group_an_t *l1 = &p.ans[p.ans[0].children[1].index];
    assert_true(p.ans[0].children[0].is_an && p.ans[0].children[1].is_an);
    assert_string_equal(desc(&f, l2->node), "leaf02");
    assert_string_equal(desc(&f, l1->node), "leaf01");
    assert_int_equal(l2->parent_index, 0);
    assert_int_equal(l1->parent_index, 1);
    assert_int_equal(l2->nchildren, 2);
    assert_int_equal(l1->nchildren, 2);
    /* rank 0 and 2 at leaf02, ranks 1 and 3 (same host twice) at leaf01 */
    assert_int_equal(p.member_index[0], 0);
    assert_int_equal(p.member_index[2], 1);
    assert_int_equal(p.member_index[1], 0);
    assert_int_equal(p.member_index[3], 1);
    assert_int_equal(p.member_an[0], p.member_an[2]);
    assert_int_equal(p.member_an[1], p.member_an[3]);
    assert_int_not_equal(p.member_an[0], p.member_an[1]);
    shp_group_plan_free(&p);

    /* a member that is not a spanned host */
    int bad[2] = {node(&f, "n00001"), node(&f, "spine01")};
    assert_int_equal(shp_group_plan(&t[0], f.leaf, bad, 2, 0, &p),
                     SHP_ERR_NO_TREE);
    assert_int_equal(shp_group_plan(&t[0], f.leaf, bad, 0, 0, &p),
                     SHP_ERR_INVALID_PARAM);
    shp_trees_free(t, nt);
    fab_free(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fat_tree_2l),
        cmocka_unit_test(test_radix_bound),
        cmocka_unit_test(test_fat_tree_3l),
        cmocka_unit_test(test_ring),
        cmocka_unit_test(test_transit_and_host_an),
        cmocka_unit_test(test_group_plans),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
