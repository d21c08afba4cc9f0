/*
 * sharp-topo: fabric topology files for the aggregation manager.
 *
 *   sharp-topo check FILE          parse an ibnetdiscover dump, print a summary
 *   sharp-topo list FILE           one line per node: switch|host|router NAME GUID
 *   sharp-topo diff FILE1 FILE2    exit 0 if both describe the same fabric
 *   sharp-topo fat-tree [--levels 2|3] --radix R --hosts N [--ibsim]
 *                                  write a synthetic fat-tree to stdout
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "topology/topo.h"

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: sharp-topo COMMAND ...\n"
            "\n"
            "Fabric topology files (ibnetdiscover format) for sharp_am.\n"
            "\n"
            "Commands:\n"
            "  check FILE            parse FILE; print switches, hosts and "
            "links\n"
            "  list FILE             one line per node: \"switch NAME GUID\", "
            "\"host NAME\n"
            "                        GUID\" or \"router NAME GUID\" (NAME: "
            "the switch's\n"
            "                        description, the host name of a CA)\n"
            "  diff FILE1 FILE2      exit 0 if both describe the same fabric "
            "(GUIDs,\n"
            "                        types, descriptions, links), else print "
            "the\n"
            "                        first difference and exit 1\n"
            "  fat-tree [OPTIONS]    write a synthetic fat-tree to stdout\n"
            "      --levels 2|3      switch levels (default 2)\n"
            "      --radix R         ports per switch (even, default 8)\n"
            "      --hosts N         number of hosts (default radix^2/2)\n"
            "      --ibsim           write an ibsim net file instead\n"
            "\n"
            "Exit status: 0 ok, 1 bad topology or difference, 2 usage.\n");
}

static int load(const char *path, shp_topo_t **t)
{
    char err[512];
    if (shp_topo_load(path, t, err, sizeof(err)) != SHP_OK) {
        fprintf(stderr, "sharp-topo: %s\n", err);
        return 1;
    }
    return 0;
}

static int cmd_fat_tree(int argc, char **argv)
{
    static const struct option opts[] = {{"levels", required_argument, 0, 'l'},
                                         {"radix", required_argument, 0, 'r'},
                                         {"hosts", required_argument, 0, 'n'},
                                         {"ibsim", no_argument, 0, 'i'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    shp_fat_tree_spec_t spec = {.levels = 2, .radix = 8, .hosts = 0};
    int flags = 0, c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        char *end;
        long v = 0;
        if (optarg) {
            v = strtol(optarg, &end, 10);
            if (*end || end == optarg || v < 0 || v > 1 << 24) {
                fprintf(stderr, "sharp-topo: bad number \"%s\"\n", optarg);
                return 2;
            }
        }
        switch (c) {
        case 'l': spec.levels = (int)v; break;
        case 'r': spec.radix = (int)v; break;
        case 'n': spec.hosts = (int)v; break;
        case 'i': flags |= SHP_TOPO_IBSIM; break;
        case 'h': usage(stdout); return 0;
        default: return 2;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "sharp-topo: unexpected argument \"%s\"\n",
                argv[optind]);
        return 2;
    }
    if (!spec.hosts)
        spec.hosts = spec.radix * spec.radix / 2;
    shp_topo_t *t;
    char err[256];
    if (shp_topo_fat_tree(&spec, &t, err, sizeof(err)) != SHP_OK) {
        fprintf(stderr, "sharp-topo: %s\n", err);
        return 2;
    }
    shp_topo_write(t, stdout, flags);
    shp_topo_free(t);
    return fflush(stdout) == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "check") && argc == 3) {
        shp_topo_t *t;
        if (load(argv[2], &t))
            return 1;
        printf("%s: %zu switches, %zu hosts, %zu routers, %zu links\n", argv[2],
               shp_topo_count_type(t, SHP_NODE_SWITCH),
               shp_topo_count_type(t, SHP_NODE_CA),
               shp_topo_count_type(t, SHP_NODE_ROUTER), shp_topo_links(t));
        shp_topo_free(t);
        return 0;
    }
    if (!strcmp(cmd, "list") && argc == 3) {
        static const char *const kind[] = {[SHP_NODE_SWITCH] = "switch",
                                           [SHP_NODE_CA] = "host",
                                           [SHP_NODE_ROUTER] = "router"};
        shp_topo_t *t;
        if (load(argv[2], &t))
            return 1;
        for (size_t i = 0; i < shp_topo_count(t); i++) {
            const shp_topo_node_t *n = shp_topo_node(t, (int)i);
            const char *name = n->type == SHP_NODE_CA ? n->host : n->desc;
            printf("%s %s 0x%016llx\n", kind[n->type],
                   name && *name ? name : n->id, (unsigned long long)n->guid);
        }
        shp_topo_free(t);
        return fflush(stdout) == 0 ? 0 : 1;
    }
    if (!strcmp(cmd, "diff") && argc == 4) {
        shp_topo_t *a, *b;
        if (load(argv[2], &a))
            return 1;
        if (load(argv[3], &b)) {
            shp_topo_free(a);
            return 1;
        }
        char why[512];
        int same = shp_topo_equal(a, b, why, sizeof(why));
        if (!same)
            printf("differ: %s\n", why);
        shp_topo_free(a);
        shp_topo_free(b);
        return same ? 0 : 1;
    }
    if (!strcmp(cmd, "fat-tree"))
        return cmd_fat_tree(argc - 1, argv + 1);
    usage(stderr);
    return 2;
}
