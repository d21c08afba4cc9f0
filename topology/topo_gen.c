/*
 * Synthetic fat-trees in the topology graph, for tests and scale runs.
 *
 * Two levels: radix/2 hosts per leaf, each leaf linked once to each of the
 * radix/2 spines (up to radix leaves, radix^2/2 hosts).
 * Three levels: pods of radix/2 edge and radix/2 aggregation switches, each
 * edge linked to every aggregation switch of its pod, aggregation switch a
 * of every pod linked to cores a*radix/2 .. a*radix/2 + radix/2 - 1 (up to
 * radix pods, radix^3/4 hosts).  Only the edge switches that hosts need are
 * created.  GUIDs are deterministic: switches 0x0002c90300000001.., CAs
 * 0x0002c90400000002.. (even; the port GUID is the node GUID + 1).
 */
#include "topology/topo.h"

#include <inttypes.h>
#include <stdio.h>

#define SW_GUID_BASE 0x0002c90300000000ull
#define CA_GUID_BASE 0x0002c90400000000ull

typedef struct gen {
    shp_topo_t *topo;
    int nsw, nca;
    shp_status_t st;
} gen_t;

static int add_switch(gen_t *g, int radix, const char *fmt, int a, int b)
{
    char desc[64], id[32];
    snprintf(desc, sizeof(desc), fmt, a, b);
    uint64_t guid = SW_GUID_BASE + (uint64_t)++g->nsw;
    snprintf(id, sizeof(id), "S-%016" PRIx64, guid);
    int idx =
        shp_topo_add_node(g->topo, SHP_NODE_SWITCH, guid, id, desc, radix);
    if (idx < 0 && g->st == SHP_OK)
        g->st = (shp_status_t)idx;
    return idx;
}

static int add_host(gen_t *g)
{
    char desc[64], id[32];
    int n = ++g->nca;
    snprintf(desc, sizeof(desc), "n%05d HCA-1", n);
    uint64_t guid = CA_GUID_BASE + 2 * (uint64_t)n;
    snprintf(id, sizeof(id), "H-%016" PRIx64, guid);
    int idx = shp_topo_add_node(g->topo, SHP_NODE_CA, guid, id, desc, 1);
    if (idx < 0) {
        if (g->st == SHP_OK)
            g->st = (shp_status_t)idx;
        return idx;
    }
    shp_topo_set_port_guid(g->topo, idx, 1, guid + 1);
    return idx;
}

static void link(gen_t *g, int a, int pa, int b, int pb)
{
    if (g->st != SHP_OK || a < 0 || b < 0)
        return;
    g->st = shp_topo_link(g->topo, a, pa, b, pb);
}

static void gen2(gen_t *g, int radix, int hosts)
{
    int half = radix / 2;
    int leaves = (hosts + half - 1) / half;
    int spines = leaves > 1 ? half : 0;
    int spine0 = -1;
    for (int s = 0; s < spines; s++) {
        int idx = add_switch(g, radix, "spine%02d", s + 1, 0);
        if (s == 0)
            spine0 = idx;
    }
    for (int l = 0; l < leaves && g->st == SHP_OK; l++) {
        int leaf = add_switch(g, radix, "leaf%02d", l + 1, 0);
        for (int s = 0; s < spines; s++)
            link(g, leaf, half + 1 + s, spine0 + s, l + 1);
        for (int h = 0; h < half && g->nca < hosts; h++)
            link(g, leaf, h + 1, add_host(g), 1);
    }
}

static void gen3(gen_t *g, int radix, int hosts)
{
    int half = radix / 2;
    int per_pod = half * half;
    int pods = (hosts + per_pod - 1) / per_pod;
    int ncore = pods > 1 ? half * half : 0;
    int core0 = -1;
    for (int c = 0; c < ncore; c++) {
        int idx = add_switch(g, radix, "core%03d", c + 1, 0);
        if (c == 0)
            core0 = idx;
    }
    for (int p = 0; p < pods && g->st == SHP_OK; p++) {
        int in_pod = hosts - p * per_pod;
        if (in_pod > per_pod)
            in_pod = per_pod;
        int edges = (in_pod + half - 1) / half;
        int agg0 = -1;
        for (int a = 0; a < half; a++) {
            int idx = add_switch(g, radix, "agg-p%02d-%02d", p + 1, a + 1);
            if (a == 0)
                agg0 = idx;
            for (int c = 0; c < half && ncore; c++)
                link(g, idx, half + 1 + c, core0 + a * half + c, p + 1);
        }
        for (int e = 0; e < edges; e++) {
            int edge = add_switch(g, radix, "edge-p%02d-%02d", p + 1, e + 1);
            for (int a = 0; a < half; a++)
                link(g, edge, half + 1 + a, agg0 + a, e + 1);
            for (int h = 0; h < half && g->nca < hosts; h++)
                link(g, edge, h + 1, add_host(g), 1);
        }
    }
}

shp_status_t shp_topo_fat_tree(const shp_fat_tree_spec_t *spec,
                               shp_topo_t **out, char *err, size_t errlen)
{
    int r = spec->radix, h = spec->hosts;
    if (spec->levels != 2 && spec->levels != 3) {
        snprintf(err, errlen, "fat-tree levels must be 2 or 3, not %d",
                 spec->levels);
        return SHP_ERR_INVALID_PARAM;
    }
    if (r < 4 || r > 254 || r % 2) {
        snprintf(err, errlen, "switch radix must be even, 4..254, not %d", r);
        return SHP_ERR_INVALID_PARAM;
    }
    long max = spec->levels == 2 ? (long)r * r / 2 : (long)r * r * r / 4;
    if (h < 1 || h > max) {
        snprintf(err, errlen,
                 "a %d-level fat-tree of radix %d holds 1..%ld hosts, not %d",
                 spec->levels, r, max, h);
        return SHP_ERR_INVALID_PARAM;
    }
    gen_t g = {.topo = shp_topo_new()};
    if (!g.topo)
        return SHP_ERR_NO_MEMORY;
    if (spec->levels == 2)
        gen2(&g, r, h);
    else
        gen3(&g, r, h);
    if (g.st != SHP_OK) {
        snprintf(err, errlen, "fat-tree generation failed: %s",
                 shp_status_str(g.st));
        shp_topo_free(g.topo);
        return g.st;
    }
    *out = g.topo;
    return SHP_OK;
}
