/*
 * The option table's engine (see config.h): an option found by name
 * (case and '-' or '_' aside), a value applied through its kind
 * (config_kinds.c) with the error said in full, and the sources in their
 * precedence: defaults, the file (inih), the environment, the command
 * line.  shp_config_load reads the command line twice: first for the file
 * and what makes the program exit early (--help, --dump-config,
 * --version, the man pages' sections: config_print.c), then for the
 * options, which override the file and the environment.
 */
#include "core/config.h"

#include "core/log.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <ini.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

extern char **environ;

static void shp_config_errf(shp_config_err_t *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void shp_config_errf(shp_config_err_t *err, const char *fmt, ...)
{
    va_list ap;

    if (err == NULL) {
        return;
    }
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
    va_end(ap);
}

/* Option names match ignoring case, with '-' equal to '_'. */
static int shp_config_name_eq(const char *opt, const char *name, size_t len)
{
    size_t i;

    for (i = 0; i < len; i++) {
        char a = opt[i], b = name[i];
        if (a == '\0') {
            return 0;
        }
        if (b == '-') {
            b = '_';
        }
        if (tolower((unsigned char)a) != tolower((unsigned char)b)) {
            return 0;
        }
    }
    return opt[len] == '\0';
}

static const shp_config_opt_t *
shp_config_find_n(const shp_config_table_t *table, const char *name, size_t len)
{
    const shp_config_opt_t *o;

    for (o = table->opts; o->name != NULL; o++) {
        if (shp_config_name_eq(o->name, name, len)) {
            return o;
        }
    }
    return NULL;
}

const shp_config_opt_t *shp_config_find(const shp_config_table_t *table,
                                        const char *name)
{
    return shp_config_find_n(table, name, strlen(name));
}

static shp_status_t shp_config_apply(const shp_config_opt_t *o, void *obj,
                                     const char *value, const char *origin,
                                     shp_config_err_t *err)
{
    const char *why = "a valid value";
    shp_status_t status;

    status = o->parser->parse(value, (char *)obj + o->offset, o->arg, &why);
    if (status != SHP_OK) {
        if (o->parser == &shp_cfg_enum) {
            const char *const *names = o->arg;
            char list[256] = "";
            int i;
            for (i = 0; names[i] != NULL; i++) {
                size_t l = strlen(list);
                snprintf(list + l, sizeof(list) - l, "%s%s", i ? "|" : "",
                         names[i]);
            }
            shp_config_errf(err, "%s: invalid value '%s' for %s: expected %s",
                            origin, value, o->name, list);
        } else {
            shp_config_errf(err, "%s: invalid value '%s' for %s: expected %s",
                            origin, value, o->name, why);
        }
    }
    return status;
}

shp_status_t shp_config_defaults(const shp_config_table_t *table, void *obj)
{
    const shp_config_opt_t *o;
    shp_config_err_t err;
    shp_status_t status;

    for (o = table->opts; o->name != NULL; o++) {
        status = shp_config_apply(o, obj, o->defval, "default", &err);
        if (status != SHP_OK) {
            shp_error("bad default in %s: %s", table->component, err.msg);
            return status;
        }
    }
    return SHP_OK;
}

shp_status_t shp_config_set(const shp_config_table_t *table, void *obj,
                            const char *name, const char *value,
                            const char *origin, shp_config_err_t *err)
{
    const shp_config_opt_t *o = shp_config_find(table, name);

    if (o == NULL) {
        shp_config_errf(err, "%s: unknown option '%s'", origin, name);
        return SHP_ERR_NOT_FOUND;
    }
    return shp_config_apply(o, obj, value, origin, err);
}

typedef struct {
    const shp_config_table_t *table;
    void *obj;
    const char *path;
    shp_config_err_t *err;
    shp_status_t status;
} shp_config_file_ctx_t;

static int shp_config_ini_handler(void *user, const char *section,
                                  const char *name, const char *value)
{
    shp_config_file_ctx_t *ctx = user;
    const shp_config_opt_t *o;

    if (ctx->status != SHP_OK) {
        return 0;
    }
    if (section[0] != '\0' && strcmp(section, ctx->table->component) != 0) {
        shp_config_errf(ctx->err, "%s: unknown section [%s] (expected [%s])",
                        ctx->path, section, ctx->table->component);
        ctx->status = SHP_ERR_PARSE;
        return 0;
    }
    o = shp_config_find(ctx->table, name);
    if (o == NULL) {
        shp_config_errf(ctx->err, "%s: unknown option '%s'", ctx->path, name);
        ctx->status = SHP_ERR_PARSE;
        return 0;
    }
    if (value == NULL) {
        shp_config_errf(ctx->err, "%s: option '%s' has no value", ctx->path,
                        name);
        ctx->status = SHP_ERR_PARSE;
        return 0;
    }
    ctx->status = shp_config_apply(o, ctx->obj, value, ctx->path, ctx->err);
    return ctx->status == SHP_OK;
}

shp_status_t shp_config_load_file(const shp_config_table_t *table, void *obj,
                                  const char *path, shp_config_err_t *err)
{
    shp_config_file_ctx_t ctx = {table, obj, path, err, SHP_OK};
    shp_config_err_t inner;
    FILE *f;
    int line;

    f = fopen(path, "r");
    if (f == NULL) {
        shp_config_errf(err, "%s: cannot open: %s", path, strerror(errno));
        return shp_status_from_errno(errno);
    }
    ctx.err = &inner;
    inner.msg[0] = '\0';
    line = ini_parse_file(f, shp_config_ini_handler, &ctx);
    fclose(f);
    if (line == 0) {
        return SHP_OK;
    }
    if (line < 0) {
        shp_config_errf(err, "%s: cannot parse: out of memory", path);
        return SHP_ERR_NO_MEMORY;
    }
    /* "path: msg" -> "path:line: msg" */
    if (inner.msg[0] != '\0' && !strncmp(inner.msg, path, strlen(path))) {
        shp_config_errf(err, "%s:%d%s", path, line, inner.msg + strlen(path));
    } else {
        shp_config_errf(err,
                        "%s:%d: syntax error (expected 'name = value' "
                        "or '[section]')",
                        path, line);
    }
    return ctx.status != SHP_OK ? ctx.status : SHP_ERR_PARSE;
}

shp_status_t shp_config_load_env(const shp_config_table_t *table, void *obj,
                                 char *const *envp, shp_config_err_t *err)
{
    size_t plen = strlen(table->env_prefix);
    const shp_config_opt_t *o;
    char origin[128];
    shp_status_t status;
    const char *eq;

    if (envp == NULL) {
        envp = environ;
    }
    for (; *envp != NULL; envp++) {
        if (strncmp(*envp, table->env_prefix, plen) != 0) {
            continue;
        }
        eq = strchr(*envp, '=');
        if (eq == NULL) {
            continue;
        }
        o = shp_config_find_n(table, *envp + plen, (size_t)(eq - *envp) - plen);
        snprintf(origin, sizeof(origin), "environment %.*s", (int)(eq - *envp),
                 *envp);
        if (o == NULL) {
            shp_warn("%s: no such option, ignored", origin);
            continue;
        }
        status = shp_config_apply(o, obj, eq + 1, origin, err);
        if (status != SHP_OK) {
            return status;
        }
    }
    return SHP_OK;
}

static int shp_config_is_flag(const char *arg, const char *name)
{
    size_t n = strlen(name);

    return !strncmp(arg, name, n) && (arg[n] == '\0' || arg[n] == '=');
}

/* The first pass over the command line: the file (--config) and what
 * makes the program exit early.  The man pages' sections are printed
 * here (*act SHP_CONFIG_MAN). */
static shp_status_t shp_config_first_pass(const shp_config_table_t *table,
                                          int argc, char *const *argv,
                                          const char **file,
                                          shp_config_action_t *act,
                                          shp_config_err_t *err)
{
    int i;

    for (i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            *act = SHP_CONFIG_HELP;
        } else if (!strcmp(argv[i], "--dump-config")) {
            *act = SHP_CONFIG_DUMP;
        } else if (!strcmp(argv[i], "--version")) {
            *act = SHP_CONFIG_VERSION;
        } else if (!strcmp(argv[i], "--man-options")) {
            shp_config_man(table, SHP_CONFIG_MAN_FLAGS, stdout);
            *act = SHP_CONFIG_MAN;
            return SHP_OK;
        } else if (!strcmp(argv[i], "--man-config")) {
            shp_config_man(table, SHP_CONFIG_MAN_FILE, stdout);
            *act = SHP_CONFIG_MAN;
            return SHP_OK;
        } else if (shp_config_is_flag(argv[i], "--config")) {
            if (argv[i][8] == '=') {
                *file = argv[i] + 9;
            } else if (i + 1 < argc) {
                *file = argv[++i];
            } else {
                shp_config_errf(err, "--config needs a file name");
                return SHP_ERR_INVALID_PARAM;
            }
        }
    }
    return SHP_OK;
}

/* the file (the one named, or the table's default when it exists), then
 * the environment */
static shp_status_t shp_config_file_env(const shp_config_table_t *table,
                                        void *obj, const char *file,
                                        shp_config_err_t *err)
{
    shp_status_t status;

    if (file == NULL && table->default_file != NULL &&
        access(table->default_file, F_OK) == 0) {
        file = table->default_file;
    }
    if (file != NULL) {
        status = shp_config_load_file(table, obj, file, err);
        if (status != SHP_OK) {
            return status;
        }
    }
    return shp_config_load_env(table, obj, NULL, err);
}

/* One argument of the second pass at argv[*i] (past what the first pass
 * took), its value the rest after '=' or the next argument (a boolean
 * alone: yes), applied. */
static shp_status_t shp_config_arg(const shp_config_table_t *table, void *obj,
                                   int argc, char *const *argv, int *i,
                                   shp_config_err_t *err)
{
    const char *arg = argv[*i], *value;
    const shp_config_opt_t *o;
    size_t nlen;

    if (!strcmp(arg, "--help") || !strcmp(arg, "-h") ||
        !strcmp(arg, "--dump-config")) {
        return SHP_OK;
    }
    if (shp_config_is_flag(arg, "--config")) {
        *i += arg[8] == '\0';
        return SHP_OK;
    }
    if (strncmp(arg, "--", 2) != 0 || arg[2] == '\0') {
        shp_config_errf(err, "unexpected argument '%s' (see --help)", arg);
        return SHP_ERR_INVALID_PARAM;
    }
    arg += 2;
    value = strchr(arg, '=');
    nlen = value ? (size_t)(value - arg) : strlen(arg);
    o = shp_config_find_n(table, arg, nlen);
    if (o == NULL) {
        shp_config_errf(err, "unknown option '--%.*s' (see --help)", (int)nlen,
                        arg);
        return SHP_ERR_NOT_FOUND;
    }
    if (value != NULL) {
        value++;
    } else if (o->parser == &shp_cfg_bool &&
               (*i + 1 >= argc || !strncmp(argv[*i + 1], "--", 2))) {
        value = "yes"; /* --flag alone switches a boolean on */
    } else if (*i + 1 < argc) {
        value = argv[++*i];
    } else {
        shp_config_errf(err, "option '--%s' needs a value", o->name);
        return SHP_ERR_INVALID_PARAM;
    }
    return shp_config_apply(o, obj, value, "command line", err);
}

shp_status_t shp_config_load(const shp_config_table_t *table, void *obj,
                             int argc, char *const *argv, const char *usage,
                             shp_config_action_t *action, shp_config_err_t *err)
{
    const char *file = NULL;
    shp_config_action_t act = SHP_CONFIG_RUN;
    shp_status_t status;
    int i;

    status = shp_config_defaults(table, obj);
    if (status != SHP_OK) {
        shp_config_errf(err, "bad built-in defaults");
        return status;
    }
    status = shp_config_first_pass(table, argc, argv, &file, &act, err);
    if (status != SHP_OK) {
        return status;
    }
    if (act == SHP_CONFIG_MAN) {
        *action = act;
        return SHP_OK;
    }
    if (act == SHP_CONFIG_HELP) {
        shp_config_help(table, usage, stdout);
        *action = act;
        return SHP_OK;
    }
    if (act == SHP_CONFIG_VERSION) {
        *action = act;
        return SHP_OK;
    }
    status = shp_config_file_env(table, obj, file, err);
    if (status != SHP_OK) {
        return status;
    }
    /* second pass: options */
    for (i = 1; i < argc; i++) {
        status = shp_config_arg(table, obj, argc, argv, &i, err);
        if (status != SHP_OK) {
            return status;
        }
    }
    if (act == SHP_CONFIG_DUMP) {
        shp_config_dump(table, obj, stdout, SHP_CONFIG_DUMP_DOC);
    }
    *action = act;
    return SHP_OK;
}

void shp_config_release(const shp_config_table_t *table, void *obj)
{
    const shp_config_opt_t *o;

    for (o = table->opts; o->name != NULL; o++) {
        if (o->parser->release != NULL) {
            o->parser->release((char *)obj + o->offset);
        }
    }
}

void shp_config_reload_log_level(const shp_config_table_t *table, void *scratch,
                                 size_t level_offset)
{
    char *argv[] = {(char *)table->component, NULL};
    shp_config_action_t action;
    shp_config_err_t err;

    if (shp_config_load(table, scratch, 1, argv, "", &action, &err) == SHP_OK) {
        int level = *(int *)((char *)scratch + level_offset);
        shp_log_set_level(level);
        shp_info("reloaded: log level %s", shp_log_level_name(level));
    } else {
        shp_warn("reload failed: %s", err.msg);
    }
    shp_config_release(table, scratch);
}
