/*
 * sharpctl: the administrator's view of a sharp fabric, through the
 * aggregation manager's admin socket (JSON requests, protocol/ctl.h frames).
 * This file reads the options (before the command, and --json or --help
 * after it), prints the help of the program or of one command, and hands
 * the command to its function (commands.c).
 *
 * Exit status: 0 ok, 1 the AM answered with an error, 2 usage, 3 the AM
 * cannot be reached (the message names the socket).
 */
#include "cli/sharpctl/sharpctl.h"

#include "core/paths.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage_text[] =
    "Usage: sharpctl [--socket PATH] [--json] COMMAND ...\n"
    "\n"
    "Look at and steer a sharp fabric through the aggregation manager.\n"
    "\n"
    "Commands:\n"
    "  ans                         aggregation nodes: name, address, state,\n"
    "                              trees, groups, operations (total, per\n"
    "                              second), errors\n"
    "  trees                       trees: id, root, ANs, depth, hosts, "
    "groups,\n"
    "                              state\n"
    "  tree show ID [--dot] [--png FILE]\n"
    "                              one tree, indented; as Graphviz; rendered\n"
    "  tree freeze ID [--reason TEXT]\n"
    "                              tree ID takes no new groups (its groups\n"
    "                              run on); kept across a manager restart\n"
    "  tree thaw ID                it takes new groups again\n"
    "  an drain NAME [--reason TEXT]\n"
    "                              AN NAME takes no new groups (its groups\n"
    "                              run on); kept across a manager restart\n"
    "  an undrain NAME             it takes new groups again\n"
    "  groups [--job J]            groups (of one job)\n"
    "  jobs                        jobs: id, uid, hosts, groups, quotas,\n"
    "                              reserved (by a scheduler)\n"
    "  job kill J                  end job J now (its processes are told)\n"
    "  topology show               what the manager's topology holds\n"
    "  topology load FILE          replace it with FILE (ibnetdiscover "
    "format;\n"
    "                              refused while jobs run; the manager reads\n"
    "                              FILE itself)\n"
    "  topology generate fat-tree [--levels 2|3] --radix R --hosts N\n"
    "                              a synthetic fabric in ibnetdiscover "
    "format\n"
    "  status                      which manager is active, since when, its\n"
    "                              epoch; this one's role and its peers\n"
    "  stats                       the manager's counters\n"
    "  adoption                    what a restarted manager took back, what it "
    "revoked\n"
    "  config dump                 every option of sharp_am, sharp_an and\n"
    "                              sharpd with its default and doc\n"
    "  version                     this program's version\n"
    "\n"
    "Options:\n"
    "  --socket PATH   the manager's admin socket (default\n"
    "                  " SHP_PATH_AM_SOCK ",\n"
    "                  or $SHARPCTL_SOCKET)\n"
    "  --json          machine-readable output (stable field names)\n"
    "  --help          this text (also after any command)\n"
    "\n"
    "Exit status: 0 ok, 1 error from the manager, 2 usage, 3 cannot reach "
    "the\n"
    "manager.\n";

/* per-command help: `sharpctl COMMAND --help` */
static const struct {
    const char *cmd, *text;
} cmd_help[] = {
    {"ans", "Usage: sharpctl ans [--json]\n\nEvery aggregation node the "
            "manager knows: name, data address, state (up/down,\nand "
            "drained: sharpctl an drain), trees and groups through it, "
            "operations\nper second and errors (from its counters, polled "
            "every stats_interval).\n--json adds the guid, the raw counters, "
            "the number of registrations,\n\"drained\" and "
            "\"drain_reason\".\n"},
    {"an", "Usage: sharpctl an drain NAME [--reason TEXT]\n"
           "       sharpctl an undrain NAME\n\ndrain: AN NAME (its topology "
           "node) takes no new groups: a group is placed\non a tree whose "
           "sub-tree for it avoids the AN, or fails with the reason when\n"
           "none does; the groups it serves run until they end. undrain: it "
           "takes new\ngroups again. Kept in the manager's state database "
           "(a restart keeps it).\nExit 1 if the topology has no such AN.\n"},
    {"trees", "Usage: sharpctl trees [--json]\n\nEvery aggregation tree: "
              "id, root AN, number of ANs, depth, hosts it spans,\ngroups on "
              "it, state (down: an AN of it is lost; rebuilt once empty;\n"
              "frozen: sharpctl tree freeze). --json adds \"frozen\" and "
              "\"freeze_reason\".\n"},
    {"tree", "Usage: sharpctl tree show ID [--dot | --png FILE] [--json]\n"
             "       sharpctl tree freeze ID [--reason TEXT]\n"
             "       sharpctl tree thaw ID\n\n"
             "show: one tree, its ANs indented under their parents; --dot "
             "writes Graphviz,\n--png renders it with dot (Graphviz must be "
             "installed). freeze: the tree\ntakes no new groups (its groups "
             "run until they end); thaw: it takes them\nagain. A freeze is "
             "kept in the manager's state database with the tree's\nroot: "
             "when the tree is rebuilt with another root, the freeze is "
             "dropped.\nExit 1 if there is no such tree.\n"},
    {"groups", "Usage: sharpctl groups [--job J] [--json]\n\nGroups (of job "
               "J): id, job, tree, state, members, ANs, exact ops\n(exact-mode "
               "sums, SHARP_OP_SUM_EXACT, its top AN folded, as of\nthe "
               "manager's last poll); --json adds the distribution,\nmulticast "
               "address, quotas and each AN's parent."
               "\n"},
    {"jobs", "Usage: sharpctl jobs [--json]\n\nJobs: id, uid, hosts, groups, "
             "OSTs and payload per group, whether a\nscheduler reserved it "
             "(the Slurm plugin: it lasts until the job's epilog).\n"},
    {"job", "Usage: sharpctl job kill J\n\nEnd job J now: its groups are "
            "removed and its processes told (their\noperations fail with an "
            "error). Exit 1 if there is no such job.\n"},
    {"topology",
     "Usage: sharpctl topology show [--json]\n"
     "       sharpctl topology load FILE\n"
     "       sharpctl topology generate fat-tree [--levels 2|3] --radix R "
     "--hosts N\n\nshow: the manager's topology (file, switches, hosts, "
     "links). load: replace\nit with FILE (ibnetdiscover format; the manager "
     "reads FILE itself; refused\nwhile jobs run; a file that does not parse "
     "changes nothing). generate: a\nsynthetic fat-tree on stdout.\n"},
    {"status", "Usage: sharpctl status [--json]\n\nThe manager asked (its "
               "address, active or standby, its epoch), the active\nmanager "
               "as it knows it (address, since when, epoch) and each peer "
               "manager\n(link, role, epoch, when last heard).\n"},
    {"stats", "Usage: sharpctl stats [--json]\n\nThe manager's counters: "
              "jobs, groups, refusals, failures, tree builds.\n"},
    {"adoption",
     "Usage: sharpctl adoption [--json]\n\nWhat the manager took back of "
     "a running fabric when it started (its ANs'\nand sharpds' reports, "
     "docs/am.md): its state, the jobs and groups taken\nback, and every "
     "group it revoked instead, with the reason.\n"},
    {"config", "Usage: sharpctl config dump\n\nEvery option of sharp_am, "
               "sharp_an and sharpd with its default and doc, as\nthe "
               "configuration files take them.\n"},
    {"version", "Usage: sharpctl version [--json]\n"},
};

/* The options before the command; -1 to go on, else the exit status.
 * *first: the command's index in argv. */
static int ctl_options(int argc, char **argv, int *first)
{
    static const struct option opts[] = {{"socket", required_argument, 0, 's'},
                                         {"json", no_argument, 0, 'j'},
                                         {"help", no_argument, 0, 'h'},
                                         {"version", no_argument, 0, 'V'},
                                         {0, 0, 0, 0}};
    int c;

    if (getenv("SHARPCTL_SOCKET") != NULL) {
        shp_sharpctl_sock = getenv("SHARPCTL_SOCKET");
    }
    /* options anywhere before the command's own arguments */
    while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
        switch (c) {
        case 's': shp_sharpctl_sock = optarg; break;
        case 'j': shp_sharpctl_json = 1; break;
        case 'h': fputs(usage_text, stdout); return 0;
        case 'V': printf("sharpctl %s\n", SHP_VERSION); return 0;
        default: fputs(usage_text, stderr); return EXIT_USAGE;
        }
    }
    if (argc - optind < 1) {
        fputs(usage_text, stderr);
        return EXIT_USAGE;
    }
    *first = optind;
    return -1;
}

/* --json and --help after the command (argv[0]): --json taken out of
 * argv, --help answered with the command's help; -1 to go on, else the
 * exit status */
static int ctl_trailing(int *argc, char **argv)
{
    for (int a = 1; a < *argc; a++) {
        if (!strcmp(argv[a], "--json")) {
            shp_sharpctl_json = 1;
            memmove(&argv[a], &argv[a + 1],
                    (size_t)(*argc - a) * sizeof(*argv));
            (*argc)--;
            a--;
        } else if (!strcmp(argv[a], "--help") || !strcmp(argv[a], "-h")) {
            for (size_t k = 0; k < sizeof(cmd_help) / sizeof(cmd_help[0]);
                 k++) {
                if (!strcmp(cmd_help[k].cmd, argv[0])) {
                    fputs(cmd_help[k].text, stdout);
                    return 0;
                }
            }
            fputs(usage_text, stdout);
            return 0;
        }
    }
    return -1;
}

static int ctl_version(void)
{
    if (shp_sharpctl_json) {
        printf("{\"version\": \"%s\"}\n", SHP_VERSION);
    } else {
        printf("sharpctl %s\n", SHP_VERSION);
    }
    return 0;
}

/* the command argv[0] with its arguments */
static int ctl_dispatch(int argc, char **argv)
{
    const char *cmd = argv[0];
    int alone = argc == 1;

    if (!strcmp(cmd, "ans") && alone) {
        return shp_sharpctl_ans();
    }
    if (!strcmp(cmd, "trees") && alone) {
        return shp_sharpctl_trees();
    }
    if (!strcmp(cmd, "tree")) {
        return shp_sharpctl_tree(argc, argv);
    }
    if (!strcmp(cmd, "an")) {
        return shp_sharpctl_an(argc, argv);
    }
    if (!strcmp(cmd, "groups")) {
        return shp_sharpctl_groups(argc, argv);
    }
    if (!strcmp(cmd, "jobs") && alone) {
        return shp_sharpctl_jobs();
    }
    if (!strcmp(cmd, "job")) {
        return shp_sharpctl_job(argc, argv);
    }
    if (!strcmp(cmd, "topology")) {
        return shp_sharpctl_topology(argc, argv);
    }
    if (!strcmp(cmd, "stats") && alone) {
        return shp_sharpctl_object("stats");
    }
    if (!strcmp(cmd, "adoption") && alone) {
        return shp_sharpctl_adoption();
    }
    if (!strcmp(cmd, "status") && alone) {
        return shp_sharpctl_status();
    }
    if (!strcmp(cmd, "config")) {
        return shp_sharpctl_config(argc, argv, argv[0]);
    }
    if (!strcmp(cmd, "version") && alone) {
        return ctl_version();
    }
    return shp_sharpctl_usage_error("unknown command or arguments: \"%s\"",
                                    cmd);
}

int main(int argc, char **argv)
{
    int first = 0;
    int rc = ctl_options(argc, argv, &first);

    if (rc >= 0) {
        return rc;
    }
    argc -= first;
    argv += first;
    rc = ctl_trailing(&argc, argv);
    if (rc >= 0) {
        return rc;
    }
    return ctl_dispatch(argc, argv);
}
