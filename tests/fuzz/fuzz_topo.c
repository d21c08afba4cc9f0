/*
 * Topology input: ibnetdiscover text (what sharp_am reads from a file, and
 * what the OpenSM plugin writes for it with shp_topo_write).  A topology
 * that parses must write out to text that parses to an equal topology;
 * small ones then go through what the AM does with them: leaf ANs, trees
 * (checked for shape) and a group plan over every host.
 */
#include "tests/fuzz/fuzz.h"

#include "topology/topo.h"
#include "topology/trees.h"

static void check_tree(const shp_topo_t *t, const shp_tree_t *tr)
{
    FZ_CHECK(tr->n >= 1 && tr->node[0] == tr->root && tr->parent[0] == -1);
    for (int i = 0; i < tr->n; i++) {
        FZ_CHECK(tr->node[i] >= 0 && (size_t)tr->node[i] < shp_topo_count(t));
        FZ_CHECK(i == 0 || (tr->parent[i] >= 0 && tr->parent[i] < i));
        FZ_CHECK(shp_tree_pos(tr, tr->node[i]) == i);
    }
}

static void trees(const shp_topo_t *t, int radix, int flat_max)
{
    size_t n = shp_topo_count(t);
    uint8_t *is_an = calloc(n + 1, 1);
    int *leaf = calloc(n + 1, sizeof(int)),
        *members = calloc(n + 1, sizeof(int));
    shp_an_set_t set = {is_an, NULL};
    shp_tree_opts_t opts = {2, radix};
    shp_tree_t *tr = NULL;
    int ntrees = 0, nm = 0;

    FZ_CHECK(is_an && leaf && members);
    for (size_t i = 0; i < n; i++) {
        is_an[i] = shp_topo_node(t, (int)i)->type == SHP_NODE_SWITCH;
    }
    if (shp_leaf_ans(t, &set, leaf) == SHP_OK &&
        shp_trees_build(t, &set, &opts, NULL, 0, &tr, &ntrees) == SHP_OK) {
        for (int k = 0; k < ntrees; k++) {
            check_tree(t, &tr[k]);
        }
        for (size_t i = 0; i < n && ntrees > 0; i++) {
            if (leaf[i] >= 0 && shp_tree_pos(&tr[0], leaf[i]) >= 0) {
                members[nm++] = (int)i;
            }
        }
        if (nm > 0) {
            shp_group_plan_t plan;
            if (shp_group_plan(&tr[0], leaf, members, nm, flat_max, &plan) ==
                SHP_OK) {
                FZ_CHECK(plan.nmembers == nm && plan.nans >= 1);
                FZ_CHECK(plan.ans[0].parent == -1);
                shp_group_plan_free(&plan);
            }
        }
        shp_trees_free(tr, ntrees);
    }
    free(is_an);
    free(leaf);
    free(members);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    shp_topo_t *t = NULL, *t2 = NULL;
    char err[256], why[256];
    char *text = NULL;
    size_t len = 0;
    FILE *f;

    if (shp_topo_parse((const char *)data, size, "fuzz", &t, err,
                       sizeof(err)) != SHP_OK) {
        FZ_CHECK(t == NULL && err[0] != '\0');
        return 0;
    }
    f = open_memstream(&text, &len);
    FZ_CHECK(f != NULL);
    shp_topo_write(t, f, 0);
    fclose(f);
    if (shp_topo_parse(text, len, "written", &t2, err, sizeof(err)) != SHP_OK) {
        fprintf(stderr, "written topology does not parse: %s\n%s", err, text);
        abort();
    }
    if (!shp_topo_equal(t, t2, why, sizeof(why))) {
        fprintf(stderr, "written topology differs: %s\n%s", why, text);
        abort();
    }
    FZ_CHECK(shp_topo_links(t) == shp_topo_links(t2));
    for (size_t i = 0; i < shp_topo_count(t); i++) {
        const shp_topo_node_t *nd = shp_topo_node(t, (int)i);
        FZ_CHECK(shp_topo_find_guid(t, nd->guid) == (int)i);
        FZ_CHECK(shp_topo_find(t, nd->id) >= 0);
    }
    if (shp_topo_count(t) <= 256) {
        uint8_t last = size > 0 ? data[size - 1] : 0;
        trees(t, 1 + last % 8, (last >> 3) % 4);
    }
    shp_topo_free(t2);
    shp_topo_free(t);
    free(text);
    return 0;
}
