/*
 * sharpctl: the administrator's view of a sharp fabric, through the
 * aggregation manager's admin socket (JSON requests, protocol/ctl.h frames).
 *
 * Exit status: 0 ok, 1 the AM answered with an error, 2 usage, 3 the AM
 * cannot be reached (the message names the socket).
 */
#include "topology/topo.h"
#include "protocol/ctl.h"
#include "core/paths.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#ifndef SHP_VERSION
#define SHP_VERSION "0.1.0"
#endif

enum { EXIT_AM = 1, EXIT_USAGE = 2, EXIT_UNREACHABLE = 3 };

static const char *sock_path = SHP_PATH_AM_SOCK;
static int as_json;

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

static int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "sharpctl: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\nTry 'sharpctl --help'.\n");
    return EXIT_USAGE;
}

/* The admin socket ------------------------------------------------------- */

/* one request, its reply (NULL and an exit code in *rc on failure) */
static json_t *call(json_t *req, int *rc)
{
    json_t *reply = NULL;
    shp_status_t st;
    const char *why;
    int fd = shp_unix_connect(sock_path);

    json_object_set_new(req, "id", json_integer(1));
    if (fd < 0) {
        fprintf(stderr,
                "sharpctl: cannot reach the aggregation manager at %s: %s\n",
                sock_path, strerror(errno));
        *rc = errno == ENAMETOOLONG ? EXIT_USAGE : EXIT_UNREACHABLE;
        goto out;
    }
    reply = shp_ctl_call_fd(fd, req, &st, &why);
    if (reply == NULL) {
        fprintf(stderr, "sharpctl: %s: %s\n", sock_path, why);
        *rc = st == SHP_ERR_IO ? EXIT_UNREACHABLE : EXIT_AM;
        goto out;
    }
    int64_t status =
        shp_json_opt_int(reply, "status", INT32_MIN, INT32_MAX, SHP_ERR_PROTO);
    if (status != 0) {
        fprintf(stderr, "sharpctl: %s: %s (%s)\n", shp_ctl_type(req),
                shp_json_opt_str(reply, "error", "failed"),
                shp_status_name((shp_status_t)status));
        json_decref(reply);
        reply = NULL;
        *rc = EXIT_AM;
    }
out:
    if (fd >= 0) {
        close(fd);
    }
    json_decref(req);
    return reply;
}

static void print_json(const json_t *v)
{
    char *s = json_dumps(v, JSON_INDENT(2) | JSON_SORT_KEYS);
    if (s != NULL) {
        puts(s);
        free(s);
    }
}

/* a member as text for a table cell */
static void cell(const json_t *v, char *buf, size_t len)
{
    if (json_is_string(v)) {
        snprintf(buf, len, "%s", json_string_value(v));
    } else if (json_is_real(v)) {
        snprintf(buf, len, "%.1f", json_real_value(v));
    } else if (json_is_integer(v)) {
        snprintf(buf, len, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    } else if (json_is_boolean(v)) {
        snprintf(buf, len, "%s", json_is_true(v) ? "yes" : "no");
    } else if (json_is_array(v)) {
        size_t i, off = 0;
        buf[0] = '\0';
        for (i = 0; i < json_array_size(v) && off + 1 < len; i++) {
            const json_t *e = json_array_get(v, i);
            const char *s = json_is_string(e)
                                ? json_string_value(e)
                                : json_string_value(json_object_get(e, "name"));
            int n = snprintf(buf + off, len - off, "%s%s", i ? "," : "",
                             s ? s : "?");
            off += n > 0 ? (size_t)n : 0;
        }
        if (off + 1 >= len && len > 4) {
            strcpy(buf + len - 4, "...");
        }
    } else if (json_is_null(v) || v == NULL) {
        snprintf(buf, len, "-");
    } else {
        snprintf(buf, len, "?");
    }
}

/* an aligned table of `rows` (objects) over `keys`, headed by `heads` */
static void table(const json_t *rows, const char *const *keys,
                  const char *const *heads, size_t maxw)
{
    size_t nk = 0, w[16] = {0}, r;
    char buf[256];

    while (keys[nk] != NULL && nk < 16) {
        w[nk] = strlen(heads[nk]);
        nk++;
    }
    for (r = 0; r < json_array_size(rows); r++) {
        for (size_t k = 0; k < nk; k++) {
            cell(json_object_get(json_array_get(rows, r), keys[k]), buf,
                 maxw + 1);
            w[k] = strlen(buf) > w[k] ? strlen(buf) : w[k];
        }
    }
    for (size_t k = 0; k < nk; k++) {
        printf("%-*s%s", k + 1 < nk ? (int)w[k] : 0, heads[k],
               k + 1 < nk ? "  " : "\n");
    }
    for (r = 0; r < json_array_size(rows); r++) {
        for (size_t k = 0; k < nk; k++) {
            cell(json_object_get(json_array_get(rows, r), keys[k]), buf,
                 maxw + 1);
            printf("%-*s%s", k + 1 < nk ? (int)w[k] : 0, buf,
                   k + 1 < nk ? "  " : "\n");
        }
    }
}

/* Commands ----------------------------------------------------------------- */

/* the state column says what an administrator set: "up, drained" */
static void mark_state(json_t *rows, const char *flag, const char *word)
{
    size_t i;
    json_t *row;
    char buf[64];
    json_array_foreach(rows, i, row)
    {
        const char *st = json_string_value(json_object_get(row, "state"));
        if (json_is_true(json_object_get(row, flag)) && st != NULL) {
            snprintf(buf, sizeof(buf), "%s, %s", st, word);
            json_object_set_new(row, "state", json_string(buf));
        }
    }
}

static int listing(const char *type, const char *member,
                   const char *const *keys, const char *const *heads,
                   json_t *req)
{
    int rc = 0;
    json_t *r = call(req ? req : json_pack("{s:s}", "type", type), &rc);
    if (r == NULL) {
        return rc;
    }
    json_t *rows = json_object_get(r, member);
    if (as_json) {
        print_json(rows);
    } else if (json_array_size(rows) == 0) {
        printf("no %s\n", member);
    } else {
        mark_state(rows, "drained", "drained");
        mark_state(rows, "frozen", "frozen");
        table(rows, keys, heads, 24);
    }
    json_decref(r);
    return 0;
}

static int cmd_ans(void)
{
    /* AGE: seconds since the manager last read the AN's counters */
    static const char *const k[] = {
        "name", "addr",      "state",  "trees",       "groups",
        "ops",  "ops_per_s", "errors", "stats_age_s", NULL};
    static const char *const h[] = {"NAME",  "ADDRESS", "STATE",
                                    "TREES", "GROUPS",  "OPS",
                                    "OPS/S", "ERRORS",  "AGE S"};
    return listing("ans", "ans", k, h, NULL);
}

static int cmd_trees(void)
{
    static const char *const k[] = {"id",    "root",   "ans",   "depth",
                                    "hosts", "groups", "state", NULL};
    static const char *const h[] = {"ID",    "ROOT",   "ANS",  "DEPTH",
                                    "HOSTS", "GROUPS", "STATE"};
    return listing("trees", "trees", k, h, NULL);
}

static int cmd_jobs(void)
{
    static const char *const k[] = {"job_id", "uid",     "hosts",    "groups",
                                    "osts",   "payload", "reserved", NULL};
    static const char *const h[] = {"JOB",  "UID",     "HOSTS",   "GROUPS",
                                    "OSTS", "PAYLOAD", "RESERVED"};
    return listing("jobs", "jobs", k, h, NULL);
}

static int cmd_groups(int argc, char **argv)
{
    /* EXACT OPS: exact-mode sums (SHARP_OP_SUM_EXACT) the group's top AN
     * has folded, as of the manager's last poll of it */
    static const char *const k[] = {"group_id", "job_id", "tree_id",   "state",
                                    "members",  "ans",    "exact_ops", NULL};
    static const char *const h[] = {"GROUP",   "JOB", "TREE",     "STATE",
                                    "MEMBERS", "ANS", "EXACT OPS"};
    json_t *req = json_pack("{s:s}", "type", "groups");
    if (argc == 3 && !strcmp(argv[1], "--job")) {
        char *end;
        unsigned long long j = strtoull(argv[2], &end, 0);
        if (*end != '\0' || end == argv[2]) {
            json_decref(req);
            return usage_error("bad job id \"%s\"", argv[2]);
        }
        json_object_set_new(req, "job_id", shp_json_u64(j));
    } else if (argc != 1) {
        json_decref(req);
        return usage_error("usage: %s", "groups [--job J]");
    }
    return listing("groups", "groups", k, h, req);
}

static int cmd_job(int argc, char **argv)
{
    char *end;
    if (argc != 3 || strcmp(argv[1], "kill") != 0) {
        return usage_error("usage: %s", "job kill J");
    }
    unsigned long long j = strtoull(argv[2], &end, 0);
    if (*end != '\0' || end == argv[2]) {
        return usage_error("bad job id \"%s\"", argv[2]);
    }
    int rc = 0;
    json_t *r = call(
        json_pack("{s:s, s:o}", "type", "job_kill", "job_id", shp_json_u64(j)),
        &rc);
    if (r == NULL) {
        return rc;
    }
    if (as_json) {
        print_json(r);
    } else {
        printf("job %llu killed\n", j);
    }
    json_decref(r);
    return 0;
}

/* an drain NAME [--reason TEXT] | an undrain NAME; tree freeze ID
 * [--reason TEXT] | tree thaw ID: the request, or NULL after a usage
 * error (*rc) */
static json_t *setting_request(int argc, char **argv, int *rc)
{
    const char *reason = NULL, *what = argv[0], *verb = argv[1];
    int on = !strcmp(verb, "drain") || !strcmp(verb, "freeze");
    for (int a = 3; a < argc; a++) {
        if (on && !strcmp(argv[a], "--reason") && a + 1 < argc) {
            reason = argv[++a];
        } else if (on && !strncmp(argv[a], "--reason=", 9)) {
            reason = argv[a] + 9;
        } else {
            *rc = usage_error("unknown option \"%s\"", argv[a]);
            return NULL;
        }
    }
    char type[32];
    snprintf(type, sizeof(type), "%s_%s", !strcmp(what, "an") ? "an" : "tree",
             verb);
    json_t *req = json_pack("{s:s}", "type", type);
    if (!strcmp(what, "an")) {
        json_object_set_new(req, "name", json_string(argv[2]));
    } else {
        char *end;
        long id = strtol(argv[2], &end, 10);
        if (*end != '\0' || end == argv[2] || id < 0 || id > 1000000) {
            json_decref(req);
            *rc = usage_error("bad tree id \"%s\"", argv[2]);
            return NULL;
        }
        json_object_set_new(req, "tree_id", json_integer(id));
    }
    if (reason != NULL) {
        json_object_set_new(req, "reason", json_string(reason));
    }
    return req;
}

static int cmd_setting(int argc, char **argv)
{
    int rc = 0;
    json_t *req = setting_request(argc, argv, &rc);
    if (req == NULL) {
        return rc;
    }
    json_t *r = call(req, &rc);
    if (r == NULL) {
        return rc;
    }
    if (as_json) {
        print_json(r);
    } else {
        static const char *const done[][2] = {{"drain", "drained"},
                                              {"undrain", "undrained"},
                                              {"freeze", "frozen"},
                                              {"thaw", "thawed"}};
        const char *d = argv[1];
        for (size_t k = 0; k < 4; k++) {
            if (!strcmp(argv[1], done[k][0])) {
                d = done[k][1];
            }
        }
        printf("%s %s %s\n", !strcmp(argv[0], "an") ? "AN" : "tree", argv[2],
               d);
    }
    json_decref(r);
    return 0;
}

static int cmd_an(int argc, char **argv)
{
    if (argc < 3 ||
        (strcmp(argv[1], "drain") != 0 && strcmp(argv[1], "undrain") != 0)) {
        return usage_error("usage: %s",
                           "an drain NAME [--reason TEXT] | an undrain NAME");
    }
    return cmd_setting(argc, argv);
}

static void tree_text(const json_t *nodes, const char *parent, int depth)
{
    for (size_t i = 0; i < json_array_size(nodes); i++) {
        const json_t *n = json_array_get(nodes, i);
        const char *p = json_string_value(json_object_get(n, "parent"));
        const char *name = json_string_value(json_object_get(n, "name"));
        if ((parent == NULL) != (p == NULL) ||
            (parent != NULL && strcmp(parent, p) != 0) || name == NULL) {
            continue;
        }
        printf("%*s%s\n", 2 * depth, "", name);
        if (depth < 64) {
            tree_text(nodes, name, depth + 1);
        }
    }
}

static void tree_dot(FILE *f, const json_t *t)
{
    const json_t *nodes = json_object_get(t, "nodes");
    fprintf(f, "digraph tree_%" JSON_INTEGER_FORMAT " {\n  rankdir=TB;\n",
            json_integer_value(json_object_get(t, "id")));
    for (size_t i = 0; i < json_array_size(nodes); i++) {
        const json_t *n = json_array_get(nodes, i);
        const char *p = json_string_value(json_object_get(n, "parent"));
        const char *name = json_string_value(json_object_get(n, "name"));
        fprintf(f, "  \"%s\";\n", name ? name : "?");
        if (p != NULL) {
            fprintf(f, "  \"%s\" -> \"%s\";\n", p, name ? name : "?");
        }
    }
    fprintf(f, "}\n");
}

static int cmd_tree(int argc, char **argv)
{
    int dot = 0, rc = 0;
    const char *png = NULL;
    char *end;
    if (argc >= 3 && (!strcmp(argv[1], "freeze") || !strcmp(argv[1], "thaw"))) {
        return cmd_setting(argc, argv);
    }
    if (argc < 3 || strcmp(argv[1], "show") != 0) {
        return usage_error("usage: %s", "tree show ID [--dot] [--png FILE] | "
                                        "tree freeze ID [--reason TEXT] | "
                                        "tree thaw ID");
    }
    long id = strtol(argv[2], &end, 10);
    if (*end != '\0' || end == argv[2] || id < 0) {
        return usage_error("bad tree id \"%s\"", argv[2]);
    }
    for (int a = 3; a < argc; a++) {
        if (!strcmp(argv[a], "--dot")) {
            dot = 1;
        } else if (!strcmp(argv[a], "--png") && a + 1 < argc) {
            png = argv[++a];
        } else {
            return usage_error("unknown option \"%s\"", argv[a]);
        }
    }
    json_t *r =
        call(json_pack("{s:s, s:i}", "type", "tree", "tree_id", (int)id), &rc);
    if (r == NULL) {
        return rc;
    }
    json_t *t = json_object_get(r, "tree");
    if (png != NULL) {
        if (system("command -v dot >/dev/null 2>&1") != 0) {
            fprintf(stderr, "sharpctl: --png needs Graphviz's dot, which is "
                            "not installed (use --dot)\n");
            json_decref(r);
            return EXIT_USAGE;
        }
        /* dot gets the file name as an argument, never through a shell */
        int pfd[2];
        pid_t pid = -1;
        posix_spawn_file_actions_t fa;
        char *const dargv[] = {"dot", "-Tpng", "-o", (char *)png, NULL};
        if (pipe(pfd) != 0) {
            json_decref(r);
            return EXIT_AM;
        }
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_adddup2(&fa, pfd[0], STDIN_FILENO);
        posix_spawn_file_actions_addclose(&fa, pfd[1]);
        int err = posix_spawnp(&pid, "dot", &fa, NULL, dargv, environ);
        posix_spawn_file_actions_destroy(&fa);
        close(pfd[0]);
        FILE *f = err == 0 ? fdopen(pfd[1], "w") : NULL;
        if (f == NULL) {
            close(pfd[1]);
            if (pid > 0) {
                waitpid(pid, NULL, 0);
            }
            json_decref(r);
            return EXIT_AM;
        }
        tree_dot(f, t);
        fclose(f);
        int wst = 0;
        rc = waitpid(pid, &wst, 0) == pid && WIFEXITED(wst) &&
                     WEXITSTATUS(wst) == 0
                 ? 0
                 : EXIT_AM;
        if (rc == 0 && !as_json) {
            printf("tree %ld written to %s\n", id, png);
        }
    } else if (dot) {
        tree_dot(stdout, t);
    } else if (as_json) {
        print_json(t);
    } else {
        printf("tree %ld: root %s, depth %" JSON_INTEGER_FORMAT
               ", %" JSON_INTEGER_FORMAT " hosts\n",
               id, shp_json_opt_str(t, "root", "?"),
               json_integer_value(json_object_get(t, "depth")),
               json_integer_value(json_object_get(t, "hosts")));
        tree_text(json_object_get(t, "nodes"), NULL, 1);
    }
    json_decref(r);
    return rc;
}

static int cmd_object(const char *type)
{
    int rc = 0;
    json_t *r = call(json_pack("{s:s}", "type", type), &rc);
    if (r == NULL) {
        return rc;
    }
    json_t *o = json_object_get(r, type);
    if (as_json) {
        print_json(o);
    } else {
        const char *key;
        json_t *v;
        char buf[256];
        json_object_foreach(o, key, v)
        {
            cell(v, buf, sizeof(buf));
            printf("%-16s %s\n", key, buf);
        }
    }
    json_decref(r);
    return 0;
}

/* adoption: the counts, then one line per group revoked and why */
static int cmd_adoption(void)
{
    int rc = 0;
    json_t *r = call(json_pack("{s:s}", "type", "adoption"), &rc);
    if (r == NULL) {
        return rc;
    }
    json_t *o = json_object_get(r, "adoption"), *v;
    if (as_json) {
        print_json(o);
    } else {
        const char *key;
        char buf[256];
        size_t i;
        json_object_foreach(o, key, v)
        {
            if (strcmp(key, "revoked") != 0) {
                cell(v, buf, sizeof(buf));
                printf("%-16s %s\n", key, buf);
            }
        }
        json_array_foreach(json_object_get(o, "revoked"), i, v)
        {
            char job[32];
            cell(json_object_get(v, "job_id"), job, sizeof(job));
            printf("revoked          group %" JSON_INTEGER_FORMAT
                   " of job %s: %s\n",
                   json_integer_value(json_object_get(v, "group_id")), job,
                   json_string_value(json_object_get(v, "reason")));
        }
    }
    json_decref(r);
    return 0;
}

/* a wall-clock time as UTC text */
static const char *utc(double t, char *buf, size_t len)
{
    time_t s = (time_t)t;
    struct tm tm;
    if (t <= 0 || gmtime_r(&s, &tm) == NULL ||
        strftime(buf, len, "%Y-%m-%d %H:%M:%S UTC", &tm) == 0) {
        snprintf(buf, len, "?");
    }
    return buf;
}

static int cmd_status(void)
{
    int rc = 0;
    json_t *r = call(json_pack("{s:s}", "type", "status"), &rc);
    if (r == NULL) {
        return rc;
    }
    json_t *m = json_object_get(r, "manager"),
           *a = json_object_get(m, "active");
    char t[64];
    if (as_json) {
        print_json(m);
        json_decref(r);
        return 0;
    }
    printf("%-10s %s, %s since %s, epoch %" JSON_INTEGER_FORMAT "\n", "this",
           shp_json_opt_str(m, "address", "?"),
           shp_json_opt_str(m, "role", "?"),
           utc(json_number_value(json_object_get(m, "since")), t, sizeof(t)),
           json_integer_value(json_object_get(m, "epoch")));
    if (json_is_object(a)) {
        printf(
            "%-10s %s since %s, epoch %" JSON_INTEGER_FORMAT "\n", "active",
            shp_json_opt_str(a, "address", "?"),
            utc(json_number_value(json_object_get(a, "since")), t, sizeof(t)),
            json_integer_value(json_object_get(a, "epoch")));
    } else {
        printf("%-10s none known", "active");
        if (json_is_integer(json_object_get(m, "takeover_in_ms"))) {
            printf(" (this one takes over in %" JSON_INTEGER_FORMAT " ms)",
                   json_integer_value(json_object_get(m, "takeover_in_ms")));
        }
        printf("\n");
    }
    size_t i;
    json_t *p;
    json_array_foreach(json_object_get(m, "peers"), i, p)
    {
        printf("%-10s %s, link %s", "peer", shp_json_opt_str(p, "address", "?"),
               shp_json_opt_str(p, "link", "?"));
        if (json_object_get(p, "role")) {
            printf(", %s, epoch %" JSON_INTEGER_FORMAT
                   ", heard %" JSON_INTEGER_FORMAT " ms ago",
                   shp_json_opt_str(p, "role", "?"),
                   json_integer_value(json_object_get(p, "epoch")),
                   json_integer_value(json_object_get(p, "heard_ms_ago")));
        }
        printf("\n");
    }
    json_decref(r);
    return 0;
}

static int cmd_topology(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "show")) {
        return cmd_object("topology");
    }
    if (argc == 3 && !strcmp(argv[1], "load")) {
        char *abs = realpath(argv[2], NULL);
        int rc = 0;
        if (abs == NULL) {
            fprintf(stderr, "sharpctl: %s: %s\n", argv[2], strerror(errno));
            return EXIT_USAGE;
        }
        json_t *r = call(
            json_pack("{s:s, s:s}", "type", "topology_load", "file", abs), &rc);
        if (r != NULL && !as_json) {
            printf("topology %s loaded\n", abs);
        } else if (r != NULL) {
            print_json(r);
        }
        json_decref(r);
        free(abs);
        return rc;
    }
    if (argc >= 3 && !strcmp(argv[1], "generate") &&
        !strcmp(argv[2], "fat-tree")) {
        shp_fat_tree_spec_t spec = {.levels = 2, .radix = 8, .hosts = 0};
        for (int a = 3; a < argc; a++) {
            char *end;
            long v = a + 1 < argc ? strtol(argv[a + 1], &end, 10) : -1;
            if (a + 1 >= argc || *end != '\0' || v <= 0 || v > 1 << 24) {
                return usage_error("bad or missing value for %s", argv[a]);
            }
            if (!strcmp(argv[a], "--levels")) {
                spec.levels = (int)v;
            } else if (!strcmp(argv[a], "--radix")) {
                spec.radix = (int)v;
            } else if (!strcmp(argv[a], "--hosts")) {
                spec.hosts = (int)v;
            } else {
                return usage_error("unknown option \"%s\"", argv[a]);
            }
            a++;
        }
        if (spec.hosts == 0) {
            spec.hosts = spec.radix * spec.radix / 2;
        }
        shp_topo_t *t;
        char err[256];
        if (shp_topo_fat_tree(&spec, &t, err, sizeof(err)) != SHP_OK) {
            fprintf(stderr, "sharpctl: %s\n", err);
            return EXIT_USAGE;
        }
        shp_topo_write(t, stdout, 0);
        shp_topo_free(t);
        return fflush(stdout) == 0 ? 0 : EXIT_AM;
    }
    return usage_error("usage: %s", "topology show | topology load FILE | "
                                    "topology generate fat-tree ...");
}

/* every daemon's --dump-config, from the binaries next to this one or on
 * the PATH */
static int cmd_config(int argc, char **argv, const char *self)
{
    static const char *const daemons[] = {"sharp_am", "sharp_an", "sharpd"};
    char dir[512], cmd[1200];
    int rc = 0;

    if (argc != 2 || strcmp(argv[1], "dump") != 0) {
        return usage_error("usage: %s", "config dump");
    }
    ssize_t n = readlink("/proc/self/exe", dir, sizeof(dir) - 1);
    dir[n > 0 ? n : 0] = '\0';
    char *slash = strrchr(dir, '/');
    if (slash != NULL) {
        *slash = '\0';
    }
    (void)self;
    for (int i = 0; i < 3; i++) {
        snprintf(cmd, sizeof(cmd),
                 "if [ -x '%s/%s' ]; then exec '%s/%s' --dump-config "
                 "--config /dev/null; else exec %s --dump-config --config "
                 "/dev/null; fi",
                 dir, daemons[i], dir, daemons[i], daemons[i]);
        printf("# ---- %s ----\n", daemons[i]);
        fflush(stdout);
        if (system(cmd) != 0) {
            fprintf(stderr, "sharpctl: cannot run %s --dump-config\n",
                    daemons[i]);
            rc = EXIT_AM;
        }
    }
    return rc;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {{"socket", required_argument, 0, 's'},
                                         {"json", no_argument, 0, 'j'},
                                         {"help", no_argument, 0, 'h'},
                                         {"version", no_argument, 0, 'V'},
                                         {0, 0, 0, 0}};
    int c;

    if (getenv("SHARPCTL_SOCKET") != NULL) {
        sock_path = getenv("SHARPCTL_SOCKET");
    }
    /* options anywhere before the command's own arguments */
    while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
        switch (c) {
        case 's': sock_path = optarg; break;
        case 'j': as_json = 1; break;
        case 'h': fputs(usage_text, stdout); return 0;
        case 'V': printf("sharpctl %s\n", SHP_VERSION); return 0;
        default: fputs(usage_text, stderr); return EXIT_USAGE;
        }
    }
    argc -= optind;
    argv += optind;
    if (argc < 1) {
        fputs(usage_text, stderr);
        return EXIT_USAGE;
    }
    /* trailing --json / --help after the command */
    for (int a = 1; a < argc; a++) {
        if (!strcmp(argv[a], "--json")) {
            as_json = 1;
            memmove(&argv[a], &argv[a + 1], (size_t)(argc - a) * sizeof(*argv));
            argc--;
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
    const char *cmd = argv[0];
    if (!strcmp(cmd, "ans") && argc == 1) {
        return cmd_ans();
    }
    if (!strcmp(cmd, "trees") && argc == 1) {
        return cmd_trees();
    }
    if (!strcmp(cmd, "tree")) {
        return cmd_tree(argc, argv);
    }
    if (!strcmp(cmd, "an")) {
        return cmd_an(argc, argv);
    }
    if (!strcmp(cmd, "groups")) {
        return cmd_groups(argc, argv);
    }
    if (!strcmp(cmd, "jobs") && argc == 1) {
        return cmd_jobs();
    }
    if (!strcmp(cmd, "job")) {
        return cmd_job(argc, argv);
    }
    if (!strcmp(cmd, "topology")) {
        return cmd_topology(argc, argv);
    }
    if (!strcmp(cmd, "stats") && argc == 1) {
        return cmd_object("stats");
    }
    if (!strcmp(cmd, "adoption") && argc == 1) {
        return cmd_adoption();
    }
    if (!strcmp(cmd, "status") && argc == 1) {
        return cmd_status();
    }
    if (!strcmp(cmd, "config")) {
        return cmd_config(argc, argv, argv[0]);
    }
    if (!strcmp(cmd, "version") && argc == 1) {
        if (as_json) {
            printf("{\"version\": \"%s\"}\n", SHP_VERSION);
        } else {
            printf("sharpctl %s\n", SHP_VERSION);
        }
        return 0;
    }
    return usage_error("unknown command or arguments: \"%s\"", cmd);
}
