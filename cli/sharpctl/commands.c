/*
 * sharpctl's commands: each reads its arguments (a usage error says what
 * it wanted), asks the manager (out.c) and prints the answer, as a table,
 * as text or as JSON.  Two are local: topology generate (a synthetic
 * fat-tree, topology/) and config dump (every daemon's --dump-config).
 */
#include "cli/sharpctl/sharpctl.h"

#include "core/status.h"
#include "protocol/ctl.h"
#include "topology/topo.h"

#include <errno.h>
#include <inttypes.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

int shp_sharpctl_ans(void)
{
    /* AGE: seconds since the manager last read the AN's counters */
    static const char *const k[] = {
        "name", "addr",      "state",  "trees",       "groups",
        "ops",  "ops_per_s", "errors", "stats_age_s", NULL};
    static const char *const h[] = {"NAME",  "ADDRESS", "STATE",
                                    "TREES", "GROUPS",  "OPS",
                                    "OPS/S", "ERRORS",  "AGE S"};
    return shp_sharpctl_listing("ans", "ans", k, h, NULL);
}

int shp_sharpctl_trees(void)
{
    static const char *const k[] = {"id",    "root",   "ans",   "depth",
                                    "hosts", "groups", "state", NULL};
    static const char *const h[] = {"ID",    "ROOT",   "ANS",  "DEPTH",
                                    "HOSTS", "GROUPS", "STATE"};
    return shp_sharpctl_listing("trees", "trees", k, h, NULL);
}

int shp_sharpctl_jobs(void)
{
    static const char *const k[] = {"job_id", "uid",     "hosts",    "groups",
                                    "osts",   "payload", "reserved", NULL};
    static const char *const h[] = {"JOB",  "UID",     "HOSTS",   "GROUPS",
                                    "OSTS", "PAYLOAD", "RESERVED"};
    return shp_sharpctl_listing("jobs", "jobs", k, h, NULL);
}

int shp_sharpctl_groups(int argc, char **argv)
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
            return shp_sharpctl_usage_error("bad job id \"%s\"", argv[2]);
        }
        json_object_set_new(req, "job_id", shp_json_u64(j));
    } else if (argc != 1) {
        json_decref(req);
        return shp_sharpctl_usage_error("usage: %s", "groups [--job J]");
    }
    return shp_sharpctl_listing("groups", "groups", k, h, req);
}

int shp_sharpctl_job(int argc, char **argv)
{
    char *end;
    if (argc != 3 || strcmp(argv[1], "kill") != 0) {
        return shp_sharpctl_usage_error("usage: %s", "job kill J");
    }
    unsigned long long j = strtoull(argv[2], &end, 0);
    if (*end != '\0' || end == argv[2]) {
        return shp_sharpctl_usage_error("bad job id \"%s\"", argv[2]);
    }
    int rc = 0;
    json_t *r = shp_sharpctl_call(
        json_pack("{s:s, s:o}", "type", "job_kill", "job_id", shp_json_u64(j)),
        &rc);
    if (r == NULL) {
        return rc;
    }
    if (shp_sharpctl_json) {
        shp_sharpctl_print_json(r);
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
            *rc = shp_sharpctl_usage_error("unknown option \"%s\"", argv[a]);
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
            *rc = shp_sharpctl_usage_error("bad tree id \"%s\"", argv[2]);
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
    json_t *r = shp_sharpctl_call(req, &rc);
    if (r == NULL) {
        return rc;
    }
    if (shp_sharpctl_json) {
        shp_sharpctl_print_json(r);
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

int shp_sharpctl_an(int argc, char **argv)
{
    if (argc < 3 ||
        (strcmp(argv[1], "drain") != 0 && strcmp(argv[1], "undrain") != 0)) {
        return shp_sharpctl_usage_error(
            "usage: %s", "an drain NAME [--reason TEXT] | an undrain NAME");
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

/* tree t rendered by Graphviz's dot into png; the exit status */
static int tree_png(const json_t *t, const char *png, long id)
{
    if (system("command -v dot >/dev/null 2>&1") != 0) {
        fprintf(stderr, "sharpctl: --png needs Graphviz's dot, which is "
                        "not installed (use --dot)\n");
        return EXIT_USAGE;
    }
    /* dot gets the file name as an argument, never through a shell */
    int pfd[2];
    pid_t pid = -1;
    posix_spawn_file_actions_t fa;
    char *const dargv[] = {"dot", "-Tpng", "-o", (char *)png, NULL};
    if (pipe(pfd) != 0) {
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
        return EXIT_AM;
    }
    tree_dot(f, t);
    fclose(f);
    int wst = 0;
    int rc =
        waitpid(pid, &wst, 0) == pid && WIFEXITED(wst) && WEXITSTATUS(wst) == 0
            ? 0
            : EXIT_AM;
    if (rc == 0 && !shp_sharpctl_json) {
        printf("tree %ld written to %s\n", id, png);
    }
    return rc;
}

int shp_sharpctl_tree(int argc, char **argv)
{
    int dot = 0, rc = 0;
    const char *png = NULL;
    char *end;
    if (argc >= 3 && (!strcmp(argv[1], "freeze") || !strcmp(argv[1], "thaw"))) {
        return cmd_setting(argc, argv);
    }
    if (argc < 3 || strcmp(argv[1], "show") != 0) {
        return shp_sharpctl_usage_error("usage: %s",
                                        "tree show ID [--dot] [--png FILE] | "
                                        "tree freeze ID [--reason TEXT] | "
                                        "tree thaw ID");
    }
    long id = strtol(argv[2], &end, 10);
    if (*end != '\0' || end == argv[2] || id < 0) {
        return shp_sharpctl_usage_error("bad tree id \"%s\"", argv[2]);
    }
    for (int a = 3; a < argc; a++) {
        if (!strcmp(argv[a], "--dot")) {
            dot = 1;
        } else if (!strcmp(argv[a], "--png") && a + 1 < argc) {
            png = argv[++a];
        } else {
            return shp_sharpctl_usage_error("unknown option \"%s\"", argv[a]);
        }
    }
    json_t *r = shp_sharpctl_call(
        json_pack("{s:s, s:i}", "type", "tree", "tree_id", (int)id), &rc);
    if (r == NULL) {
        return rc;
    }
    json_t *t = json_object_get(r, "tree");
    if (png != NULL) {
        rc = tree_png(t, png, id);
    } else if (dot) {
        tree_dot(stdout, t);
    } else if (shp_sharpctl_json) {
        shp_sharpctl_print_json(t);
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

int shp_sharpctl_object(const char *type)
{
    int rc = 0;
    json_t *r = shp_sharpctl_call(json_pack("{s:s}", "type", type), &rc);
    if (r == NULL) {
        return rc;
    }
    json_t *o = json_object_get(r, type);
    if (shp_sharpctl_json) {
        shp_sharpctl_print_json(o);
    } else {
        const char *key;
        json_t *v;
        char buf[256];
        json_object_foreach(o, key, v)
        {
            shp_sharpctl_cell(v, buf, sizeof(buf));
            printf("%-16s %s\n", key, buf);
        }
    }
    json_decref(r);
    return 0;
}

/* adoption: the counts, then one line per group revoked and why */
int shp_sharpctl_adoption(void)
{
    int rc = 0;
    json_t *r = shp_sharpctl_call(json_pack("{s:s}", "type", "adoption"), &rc);
    if (r == NULL) {
        return rc;
    }
    json_t *o = json_object_get(r, "adoption"), *v;
    if (shp_sharpctl_json) {
        shp_sharpctl_print_json(o);
    } else {
        const char *key;
        char buf[256];
        size_t i;
        json_object_foreach(o, key, v)
        {
            if (strcmp(key, "revoked") != 0) {
                shp_sharpctl_cell(v, buf, sizeof(buf));
                printf("%-16s %s\n", key, buf);
            }
        }
        json_array_foreach(json_object_get(o, "revoked"), i, v)
        {
            char job[32];
            shp_sharpctl_cell(json_object_get(v, "job_id"), job, sizeof(job));
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

int shp_sharpctl_status(void)
{
    int rc = 0;
    json_t *r = shp_sharpctl_call(json_pack("{s:s}", "type", "status"), &rc);
    if (r == NULL) {
        return rc;
    }
    json_t *m = json_object_get(r, "manager"),
           *a = json_object_get(m, "active");
    char t[64];
    if (shp_sharpctl_json) {
        shp_sharpctl_print_json(m);
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

int shp_sharpctl_topology(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "show")) {
        return shp_sharpctl_object("topology");
    }
    if (argc == 3 && !strcmp(argv[1], "load")) {
        char *abs = realpath(argv[2], NULL);
        int rc = 0;
        if (abs == NULL) {
            fprintf(stderr, "sharpctl: %s: %s\n", argv[2], strerror(errno));
            return EXIT_USAGE;
        }
        json_t *r = shp_sharpctl_call(
            json_pack("{s:s, s:s}", "type", "topology_load", "file", abs), &rc);
        if (r != NULL && !shp_sharpctl_json) {
            printf("topology %s loaded\n", abs);
        } else if (r != NULL) {
            shp_sharpctl_print_json(r);
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
                return shp_sharpctl_usage_error("bad or missing value for %s",
                                                argv[a]);
            }
            if (!strcmp(argv[a], "--levels")) {
                spec.levels = (int)v;
            } else if (!strcmp(argv[a], "--radix")) {
                spec.radix = (int)v;
            } else if (!strcmp(argv[a], "--hosts")) {
                spec.hosts = (int)v;
            } else {
                return shp_sharpctl_usage_error("unknown option \"%s\"",
                                                argv[a]);
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
    return shp_sharpctl_usage_error("usage: %s",
                                    "topology show | topology load FILE | "
                                    "topology generate fat-tree ...");
}

/* every daemon's --dump-config, from the binaries next to this one or on
 * the PATH */
int shp_sharpctl_config(int argc, char **argv, const char *self)
{
    static const char *const daemons[] = {"sharp_am", "sharp_an", "sharpd"};
    char dir[512], cmd[1200];
    int rc = 0;

    if (argc != 2 || strcmp(argv[1], "dump") != 0) {
        return shp_sharpctl_usage_error("usage: %s", "config dump");
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
