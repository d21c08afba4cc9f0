/*
 * bench_am: the aggregation manager's tree building at scale.
 *
 * For synthetic 3-level fat-trees of 1k, 4k and 16k hosts (radix 16, 32,
 * 48; every switch hosts an AN) each size runs in its own child process and
 * reports: generation of the topology, the trees (leaf ANs + up to 8 trees,
 * radix 64), and the peak resident memory of that process (getrusage
 * ru_maxrss: topology + trees + the allocator's slack).  Then the planning
 * part of a group create for 1000 members spread over the 16k fabric (the
 * sub-tree, trim and child order; the AN round trips are not included).
 *
 * Last line: RESULT am_trees_16k_s=<s> am_trees_16k_mib=<MiB>
 */
#include "topology/topo.h"
#include "topology/trees.h"
#include "core/time.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct result {
    double gen_s, trees_s, plan_us, mib;
    int ntrees, nswitch;
} result_t;

static void run(int hosts, int radix, result_t *r)
{
    shp_fat_tree_spec_t spec = {3, radix, hosts};
    shp_topo_t *t;
    char err[256];
    uint64_t t0 = shp_time_ns();
    if (shp_topo_fat_tree(&spec, &t, err, sizeof(err)) != SHP_OK) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
    uint64_t t1 = shp_time_ns();
    size_t n = shp_topo_count(t);
    uint8_t *is_an = calloc(n, 1);
    int *leaf = malloc(sizeof(int) * n);
    for (size_t i = 0; i < n; i++)
        is_an[i] = shp_topo_node(t, (int)i)->type == SHP_NODE_SWITCH;
    shp_an_set_t set = {is_an, NULL};
    shp_tree_opts_t o = {.max_trees = 8, .radix = 64};
    shp_tree_t *trees;
    int nt;
    if (shp_leaf_ans(t, &set, leaf) != SHP_OK ||
        shp_trees_build(t, &set, &o, NULL, 0, &trees, &nt) != SHP_OK ||
        nt < 1) {
        fprintf(stderr, "tree build failed\n");
        exit(1);
    }
    uint64_t t2 = shp_time_ns();

    /* 1000 members spread evenly over the hosts */
    int members[1000], nm = hosts < 1000 ? hosts : 1000, k = 0;
    for (size_t i = 0; i < n && k < nm; i++)
        if (leaf[i] >= 0 && (int)(i % (size_t)(hosts / nm)) == 0)
            members[k++] = (int)i;
    shp_group_plan_t p;
    int reps = 20;
    uint64_t t3 = shp_time_ns();
    for (int i = 0; i < reps; i++) {
        if (shp_group_plan(&trees[0], leaf, members, k, 0, &p) != SHP_OK) {
            fprintf(stderr, "plan failed\n");
            exit(1);
        }
        shp_group_plan_free(&p);
    }
    uint64_t t4 = shp_time_ns();
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    r->gen_s = (double)(t1 - t0) / 1e9;
    r->trees_s = (double)(t2 - t1) / 1e9;
    r->plan_us = (double)(t4 - t3) / 1e3 / reps;
    r->mib = (double)ru.ru_maxrss / 1024.0;
    r->ntrees = nt;
    r->nswitch = (int)shp_topo_count_type(t, SHP_NODE_SWITCH);
    shp_trees_free(trees, nt);
    shp_topo_free(t);
    free(is_an);
    free(leaf);
}

int main(void)
{
    static const int sizes[][2] = {{1024, 16}, {4096, 32}, {16384, 48}};
    result_t last = {0};
    printf("%8s %6s %9s %8s %9s %6s %12s\n", "hosts", "radix", "switches",
           "gen_s", "trees_s", "trees", "peak_MiB");
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        int fd[2];
        if (pipe(fd) != 0)
            return 1;
        pid_t pid = fork();
        if (pid == 0) {
            result_t r;
            run(sizes[i][0], sizes[i][1], &r);
            if (write(fd[1], &r, sizeof(r)) != sizeof(r))
                _exit(1);
            _exit(0);
        }
        result_t r;
        if (read(fd[0], &r, sizeof(r)) != sizeof(r))
            return 1;
        waitpid(pid, NULL, 0);
        close(fd[0]);
        close(fd[1]);
        printf("%8d %6d %9d %8.3f %9.3f %6d %12.1f\n", sizes[i][0], sizes[i][1],
               r.nswitch, r.gen_s, r.trees_s, r.ntrees, r.mib);
        printf("         group plan, 1000 members: %.0f us\n", r.plan_us);
        last = r;
    }
    printf("RESULT am_trees_16k_s=%.3f am_trees_16k_mib=%.1f\n", last.trees_s,
           last.mib);
    return 0;
}
