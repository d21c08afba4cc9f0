/*
 * bench_group_create: the full group-create round trip for 1000 members.
 *
 * A 2-level fat-tree of radix 48 (48 leaves, 24 spines, 1000 hosts) runs
 * as real processes on loopback: sharp_am, one sharp_an per switch (72) and
 * one sharpd.  A client asks sharpd for a job over the 1000 hosts, then
 * creates and destroys a 1000-member group 20 times: sharpd -> AM (plan)
 * -> group_add to every AN of the sub-tree -> non-top ANs join their
 * parents -> every AN confirms -> AM -> sharpd -> client.  Printed side by
 * side: the planning alone (the same plan computed in this process), and
 * the whole round trip.  Every process shares this machine's cores.
 *
 * Last line: RESULT am_group_create_1k_ms=<median ms> am_group_plan_1k_ms=<ms>
 */
#include "topology/topo.h"
#include "topology/trees.h"
#include "protocol/ctl.h"
#include "core/time.h"
#include "tests/support/ctl_client.h"
#include "tests/support/fabric.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define HOSTS 1000
#define RADIX 48
#define ROUNDS 20

static test_fabric_t fab;
static char dir[64];

static void cleanup(void)
{
    test_fabric_stop(&fab);
    if (test_fabric_sh("rm -rf %s", dir) != 0) {
        fprintf(stderr, "cannot remove %s\n", dir);
    }
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(void)
{
    char topo_path[128], secret[600], sd_sock[128];
    snprintf(dir, sizeof(dir), "/tmp/sharp-bench-gc.%d", (int)getpid());
    if (test_fabric_init(&fab, "", dir) != 0) {
        return 1;
    }
    if (mkdir(dir, 0700) != 0) {
        perror(dir);
        return 1;
    }
    atexit(cleanup);
    signal(SIGPIPE, SIG_IGN);

    /* the fabric, and the plan alone, in this process */
    shp_fat_tree_spec_t spec = {2, RADIX, HOSTS};
    shp_topo_t *t;
    char err[256];
    if (shp_topo_fat_tree(&spec, &t, err, sizeof(err)) != SHP_OK) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    snprintf(topo_path, sizeof(topo_path), "%s/ft.ibnd", dir);
    FILE *f = fopen(topo_path, "w");
    shp_topo_write(t, f, 0);
    fclose(f);
    size_t nn = shp_topo_count(t);
    uint8_t *is_an = calloc(nn, 1);
    int *cap = calloc(nn, sizeof(int)), *leaf = calloc(nn, sizeof(int));
    int nsw = 0;
    for (size_t i = 0; i < nn; i++) {
        if (shp_topo_node(t, (int)i)->type == SHP_NODE_SWITCH) {
            is_an[i] = 1;
            cap[i] = 64;
            nsw++;
        }
    }
    shp_an_set_t set = {is_an, cap};
    shp_tree_opts_t o = {.max_trees = 8, .radix = 64};
    shp_tree_t *trees;
    int ntrees;
    int members[HOSTS];
    for (int h = 0; h < HOSTS; h++) {
        char name[16];
        snprintf(name, sizeof(name), "n%05d", h + 1);
        members[h] = shp_topo_find(t, name);
    }
    double plan_ms = 0;
    if (shp_leaf_ans(t, &set, leaf) != SHP_OK ||
        shp_trees_build(t, &set, &o, NULL, 0, &trees, &ntrees) != SHP_OK ||
        ntrees < 1) {
        fprintf(stderr, "tree build failed\n");
        return 1;
    }
    {
        uint64_t t0 = shp_time_ns();
        for (int r = 0; r < ROUNDS; r++) {
            shp_group_plan_t plan;
            if (shp_group_plan(&trees[0], leaf, members, HOSTS, 0, &plan) !=
                SHP_OK) {
                fprintf(stderr, "plan failed\n");
                return 1;
            }
            shp_group_plan_free(&plan);
        }
        plan_ms = (double)(shp_time_ns() - t0) / 1e6 / ROUNDS;
    }

    /* the processes */
    if (test_fabric_secret(&fab, secret, sizeof(secret)) != 0) {
        return 1;
    }
    snprintf(sd_sock, sizeof(sd_sock), "%s/sd.sock", dir);
    test_fabric_spawn_daemons(&fab, secret, t, topo_path, "127.17", "",
                              sd_sock);
    json_t *hosts = test_fabric_hosts(HOSTS);
    int fd = test_fabric_job_begin(sd_sock, hosts);
    if (fd < 0) {
        fprintf(stderr, "the fabric did not come up (see %s)\n", dir);
        return 1;
    }
    double ms[ROUNDS];
    int nans = 0;
    for (int r = 0; r < ROUNDS; r++) {
        uint64_t t0 = shp_time_ns();
        json_t *g =
            call(fd, json_pack("{s:s, s:o, s:O}", "type", "group_create",
                               "job_id", shp_json_u64(1), "members", hosts));
        ms[r] = (double)(shp_time_ns() - t0) / 1e6;
        json_t *grp = json_object_get(g, "group");
        if (status_of(g) != 0 || grp == NULL) {
            fprintf(stderr, "group_create failed: %s\n",
                    shp_json_opt_str(g, "error", "?"));
            return 1;
        }
        nans = (int)json_array_size(json_object_get(grp, "ans"));
        int64_t gid = shp_json_opt_int(grp, "group_id", 0, INT64_MAX, 0);
        json_decref(g);
        json_t *d = call(
            fd, json_pack("{s:s, s:o, s:I}", "type", "group_destroy", "job_id",
                          shp_json_u64(1), "group_id", (json_int_t)gid));
        json_decref(d);
    }
    qsort(ms, ROUNDS, sizeof(ms[0]), cmp);
    printf("fabric: 2-level fat-tree radix %d, %d switches (one sharp_an "
           "each), %d hosts; all processes on this machine\n",
           RADIX, nsw, HOSTS);
    printf("group of %d members over %d ANs, %d rounds:\n", HOSTS, nans,
           ROUNDS);
    printf("  planning alone (in process)      %8.3f ms\n", plan_ms);
    printf("  full round trip (client..ANs..)  %8.3f ms median, %.3f min, "
           "%.3f max\n",
           ms[ROUNDS / 2], ms[0], ms[ROUNDS - 1]);
    printf("  round trip / planning            %8.1fx\n",
           ms[ROUNDS / 2] / plan_ms);
    printf("RESULT am_group_create_1k_ms=%.3f am_group_plan_1k_ms=%.3f\n",
           ms[ROUNDS / 2], plan_ms);
    json_decref(hosts);
    close(fd);
    return 0;
}
