/* Option tables: parsing, precedence, help and dump (see config.h). */
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

/* Parsers ------------------------------------------------------------------ */

static shp_status_t shp_cfg_parse_i64(const char *str, int64_t *out)
{
    char *end;
    long long v;

    errno = 0;
    v = strtoll(str, &end, 0);
    if (errno != 0 || end == str || *end != '\0') {
        return SHP_ERR_INVALID_PARAM;
    }
    *out = v;
    return SHP_OK;
}

static shp_status_t shp_cfg_check_range(int64_t v, const void *arg,
                                        const char **why)
{
    const shp_config_range_t *r = arg;

    if (r != NULL && (v < r->min || v > r->max)) {
        *why = "a number out of range";
        return SHP_ERR_INVALID_PARAM;
    }
    return SHP_OK;
}

static shp_status_t shp_cfg_int_parse(const char *str, void *dst,
                                      const void *arg, const char **why)
{
    int64_t v;

    if (shp_cfg_parse_i64(str, &v) != SHP_OK || v < INT_MIN || v > INT_MAX) {
        *why = "an integer";
        return SHP_ERR_INVALID_PARAM;
    }
    if (shp_cfg_check_range(v, arg, why) != SHP_OK) {
        return SHP_ERR_INVALID_PARAM;
    }
    *(int *)dst = (int)v;
    return SHP_OK;
}

static void shp_cfg_int_format(const void *src, const void *arg, char *buf,
                               size_t len)
{
    (void)arg;
    snprintf(buf, len, "%d", *(const int *)src);
}

const shp_config_parser_t shp_cfg_int = {"int", shp_cfg_int_parse,
                                         shp_cfg_int_format, NULL};

static shp_status_t shp_cfg_uint_parse(const char *str, void *dst,
                                       const void *arg, const char **why)
{
    int64_t v;

    if (str[0] == '-' || shp_cfg_parse_i64(str, &v) != SHP_OK || v < 0 ||
        v > UINT_MAX) {
        *why = "a non-negative integer";
        return SHP_ERR_INVALID_PARAM;
    }
    if (shp_cfg_check_range(v, arg, why) != SHP_OK) {
        return SHP_ERR_INVALID_PARAM;
    }
    *(unsigned *)dst = (unsigned)v;
    return SHP_OK;
}

static void shp_cfg_uint_format(const void *src, const void *arg, char *buf,
                                size_t len)
{
    (void)arg;
    snprintf(buf, len, "%u", *(const unsigned *)src);
}

const shp_config_parser_t shp_cfg_uint = {"uint", shp_cfg_uint_parse,
                                          shp_cfg_uint_format, NULL};

static shp_status_t shp_cfg_bool_parse(const char *str, void *dst,
                                       const void *arg, const char **why)
{
    static const char *const yes[] = {"1", "yes", "true", "on", "y"};
    static const char *const no[] = {"0", "no", "false", "off", "n"};
    size_t i;

    (void)arg;
    for (i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
        if (!strcasecmp(str, yes[i])) {
            *(int *)dst = 1;
            return SHP_OK;
        }
        if (!strcasecmp(str, no[i])) {
            *(int *)dst = 0;
            return SHP_OK;
        }
    }
    *why = "yes or no";
    return SHP_ERR_INVALID_PARAM;
}

static void shp_cfg_bool_format(const void *src, const void *arg, char *buf,
                                size_t len)
{
    (void)arg;
    snprintf(buf, len, "%s", *(const int *)src ? "yes" : "no");
}

const shp_config_parser_t shp_cfg_bool = {"bool", shp_cfg_bool_parse,
                                          shp_cfg_bool_format, NULL};

/* A string holds what a line of a configuration file can: the same value
 * from the environment or the command line then dumps to a file that
 * loads back to it.  Blanks around it go (inih strips them in a file);
 * control characters and a ';' first or after a blank (where a file's
 * comment starts: "name = ;x" is empty) are refused. */
static shp_status_t shp_cfg_string_parse(const char *str, void *dst,
                                         const void *arg, const char **why)
{
    size_t len, i;
    char *copy;

    (void)arg;
    while (isspace((unsigned char)*str)) {
        str++;
    }
    len = strlen(str);
    while (len > 0 && isspace((unsigned char)str[len - 1])) {
        len--;
    }
    for (i = 0; i < len; i++) {
        if ((iscntrl((unsigned char)str[i]) && str[i] != '\t') ||
            (str[i] == ';' && (i == 0 || isspace((unsigned char)str[i - 1])))) {
            *why = "a string on one line, without control characters or "
                   "' ;' (a comment in a file)";
            return SHP_ERR_INVALID_PARAM;
        }
    }
    copy = strndup(str, len);
    if (copy == NULL) {
        *why = "memory";
        return SHP_ERR_NO_MEMORY;
    }
    free(*(char **)dst);
    *(char **)dst = copy;
    return SHP_OK;
}

static void shp_cfg_string_format(const void *src, const void *arg, char *buf,
                                  size_t len)
{
    const char *s = *(char *const *)src;

    (void)arg;
    snprintf(buf, len, "%s", s ? s : "");
}

static void shp_cfg_string_release(void *dst)
{
    free(*(char **)dst);
    *(char **)dst = NULL;
}

const shp_config_parser_t shp_cfg_string = {"string", shp_cfg_string_parse,
                                            shp_cfg_string_format,
                                            shp_cfg_string_release};

/* A number with an optional unit: returns the unit's multiplier. */
static shp_status_t shp_cfg_parse_unit(const char *str, double *num,
                                       const char **unit)
{
    char *end;

    errno = 0;
    *num = strtod(str, &end);
    if (errno != 0 || end == str || *num < 0) {
        return SHP_ERR_INVALID_PARAM;
    }
    while (*end == ' ') {
        end++;
    }
    *unit = end;
    return SHP_OK;
}

static shp_status_t shp_cfg_size_parse(const char *str, void *dst,
                                       const void *arg, const char **why)
{
    static const struct {
        const char *suffix;
        double mult;
    } units[] = {{"", 1},
                 {"b", 1},
                 {"k", 1024.0},
                 {"kb", 1024.0},
                 {"kib", 1024.0},
                 {"m", 1048576.0},
                 {"mb", 1048576.0},
                 {"mib", 1048576.0},
                 {"g", 1073741824.0},
                 {"gb", 1073741824.0},
                 {"gib", 1073741824.0}};
    const char *unit;
    double v;
    size_t i;

    (void)arg;
    if (shp_cfg_parse_unit(str, &v, &unit) == SHP_OK) {
        for (i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
            if (!strcasecmp(unit, units[i].suffix) &&
                v * units[i].mult < 1.8e19) {
                *(size_t *)dst = (size_t)(v * units[i].mult);
                return SHP_OK;
            }
        }
    }
    *why = "a size such as 4096, 64k or 1m";
    return SHP_ERR_INVALID_PARAM;
}

static void shp_cfg_size_format(const void *src, const void *arg, char *buf,
                                size_t len)
{
    size_t v = *(const size_t *)src;

    (void)arg;
    if (v != 0 && v % 1048576 == 0) {
        snprintf(buf, len, "%zum", v / 1048576);
    } else if (v != 0 && v % 1024 == 0) {
        snprintf(buf, len, "%zuk", v / 1024);
    } else {
        snprintf(buf, len, "%zu", v);
    }
}

const shp_config_parser_t shp_cfg_size = {"size", shp_cfg_size_parse,
                                          shp_cfg_size_format, NULL};

static shp_status_t shp_cfg_time_parse(const char *str, void *dst,
                                       const void *arg, const char **why)
{
    const char *unit;
    double v, mult = -1;

    (void)arg;
    if (!strcasecmp(str, "inf") || !strcasecmp(str, "-1")) {
        *(int64_t *)dst = -1;
        return SHP_OK;
    }
    if (shp_cfg_parse_unit(str, &v, &unit) == SHP_OK) {
        if (!strcasecmp(unit, "ms") || *unit == '\0') {
            mult = 1;
        } else if (!strcasecmp(unit, "us")) {
            mult = 0.001;
        } else if (!strcasecmp(unit, "s")) {
            mult = 1000;
        } else if (!strcasecmp(unit, "m") || !strcasecmp(unit, "min")) {
            mult = 60000;
        }
        if (mult > 0 && v * mult < 9.2e18) {
            *(int64_t *)dst = (int64_t)(v * mult + 0.5);
            return SHP_OK;
        }
    }
    *why = "a duration such as 500ms, 5s, 2m or inf (plain numbers are ms)";
    return SHP_ERR_INVALID_PARAM;
}

static void shp_cfg_time_format(const void *src, const void *arg, char *buf,
                                size_t len)
{
    int64_t v = *(const int64_t *)src;

    (void)arg;
    if (v < 0) {
        snprintf(buf, len, "inf");
    } else if (v != 0 && v % 1000 == 0) {
        snprintf(buf, len, "%" PRId64 "s", v / 1000);
    } else {
        snprintf(buf, len, "%" PRId64 "ms", v);
    }
}

const shp_config_parser_t shp_cfg_time = {"time", shp_cfg_time_parse,
                                          shp_cfg_time_format, NULL};

static shp_status_t shp_cfg_double_parse(const char *str, void *dst,
                                         const void *arg, const char **why)
{
    char *end;
    double v;

    (void)arg;
    errno = 0;
    v = strtod(str, &end);
    if (errno != 0 || end == str || *end != '\0') {
        *why = "a number";
        return SHP_ERR_INVALID_PARAM;
    }
    *(double *)dst = v;
    return SHP_OK;
}

static void shp_cfg_double_format(const void *src, const void *arg, char *buf,
                                  size_t len)
{
    (void)arg;
    snprintf(buf, len, "%.17g", *(const double *)src);
}

const shp_config_parser_t shp_cfg_double = {"double", shp_cfg_double_parse,
                                            shp_cfg_double_format, NULL};

static shp_status_t shp_cfg_enum_parse(const char *str, void *dst,
                                       const void *arg, const char **why)
{
    const char *const *names = arg;
    int i;

    for (i = 0; names[i] != NULL; i++) {
        if (!strcasecmp(str, names[i])) {
            *(int *)dst = i;
            return SHP_OK;
        }
    }
    *why = "one of the listed values";
    return SHP_ERR_INVALID_PARAM;
}

static void shp_cfg_enum_format(const void *src, const void *arg, char *buf,
                                size_t len)
{
    const char *const *names = arg;

    snprintf(buf, len, "%s", names[*(const int *)src]);
}

const shp_config_parser_t shp_cfg_enum = {"enum", shp_cfg_enum_parse,
                                          shp_cfg_enum_format, NULL};

static shp_status_t shp_cfg_loglevel_parse(const char *str, void *dst,
                                           const void *arg, const char **why)
{
    int level = shp_log_level_parse(str);

    (void)arg;
    if (level < SHP_LOG_OFF) {
        *why = "off, fatal, error, warn, info, debug, trace or 0-5";
        return SHP_ERR_INVALID_PARAM;
    }
    *(int *)dst = level;
    return SHP_OK;
}

static void shp_cfg_loglevel_format(const void *src, const void *arg, char *buf,
                                    size_t len)
{
    (void)arg;
    snprintf(buf, len, "%s", shp_log_level_name(*(const int *)src));
}

const shp_config_parser_t shp_cfg_loglevel = {"level", shp_cfg_loglevel_parse,
                                              shp_cfg_loglevel_format, NULL};

/* Tables ---------------------------------------------------------------------- */

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

    /* first pass: the file, and what makes us exit early */
    for (i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            act = SHP_CONFIG_HELP;
        } else if (!strcmp(argv[i], "--dump-config")) {
            act = SHP_CONFIG_DUMP;
        } else if (!strcmp(argv[i], "--version")) {
            act = SHP_CONFIG_VERSION;
        } else if (!strcmp(argv[i], "--man-options")) {
            shp_config_man(table, SHP_CONFIG_MAN_FLAGS, stdout);
            *action = SHP_CONFIG_MAN;
            return SHP_OK;
        } else if (!strcmp(argv[i], "--man-config")) {
            shp_config_man(table, SHP_CONFIG_MAN_FILE, stdout);
            *action = SHP_CONFIG_MAN;
            return SHP_OK;
        } else if (shp_config_is_flag(argv[i], "--config")) {
            if (argv[i][8] == '=') {
                file = argv[i] + 9;
            } else if (i + 1 < argc) {
                file = argv[++i];
            } else {
                shp_config_errf(err, "--config needs a file name");
                return SHP_ERR_INVALID_PARAM;
            }
        }
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
    status = shp_config_load_env(table, obj, NULL, err);
    if (status != SHP_OK) {
        return status;
    }

    /* second pass: options */
    for (i = 1; i < argc; i++) {
        const char *arg = argv[i], *value;
        const shp_config_opt_t *o;
        size_t nlen;

        if (!strcmp(arg, "--help") || !strcmp(arg, "-h") ||
            !strcmp(arg, "--dump-config")) {
            continue;
        }
        if (shp_config_is_flag(arg, "--config")) {
            i += arg[8] == '\0';
            continue;
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
            shp_config_errf(err, "unknown option '--%.*s' (see --help)",
                            (int)nlen, arg);
            return SHP_ERR_NOT_FOUND;
        }
        if (value != NULL) {
            value++;
        } else if (o->parser == &shp_cfg_bool &&
                   (i + 1 >= argc || !strncmp(argv[i + 1], "--", 2))) {
            value = "yes"; /* --flag alone switches a boolean on */
        } else if (i + 1 < argc) {
            value = argv[++i];
        } else {
            shp_config_errf(err, "option '--%s' needs a value", o->name);
            return SHP_ERR_INVALID_PARAM;
        }
        status = shp_config_apply(o, obj, value, "command line", err);
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

static void shp_config_env_name(const shp_config_table_t *table,
                                const char *name, char *buf, size_t len)
{
    size_t i, n;

    n = (size_t)snprintf(buf, len, "%s", table->env_prefix);
    for (i = 0; name[i] != '\0' && n + 1 < len; i++) {
        buf[n++] = (char)toupper((unsigned char)name[i]);
    }
    buf[n < len ? n : len - 1] = '\0';
}

/* `text` as "# " comment lines of at most 78 columns, broken between
 * words: the file parser (inih) splits longer lines, and the rest of a
 * long comment would then be read as an option */
static void shp_config_comment(FILE *stream, const char *text)
{
    const char *p = text;

    while (*p != '\0') {
        size_t len = strlen(p), cut = len;
        if (len > 76) {
            for (cut = 76; cut > 0 && p[cut] != ' '; cut--) {
            }
            if (cut == 0) { /* one word longer than a line */
                cut = strcspn(p, " ");
            }
        }
        fprintf(stream, "# %.*s\n", (int)cut, p);
        p += cut;
        while (*p == ' ') {
            p++;
        }
    }
}

void shp_config_dump(const shp_config_table_t *table, const void *obj,
                     FILE *stream, unsigned flags)
{
    const shp_config_opt_t *o;
    char value[1024], envname[128];

    if (!(flags & SHP_CONFIG_DUMP_ENV)) {
        fprintf(stream, "[%s]\n", table->component);
    }
    for (o = table->opts; o->name != NULL; o++) {
        if ((o->flags & SHP_CFG_HIDDEN) && !(flags & SHP_CONFIG_DUMP_HIDDEN)) {
            continue;
        }
        o->parser->format((const char *)obj + o->offset, o->arg, value,
                          sizeof(value));
        if (flags & SHP_CONFIG_DUMP_DOC) {
            char doc[2048];
            int n = snprintf(doc, sizeof(doc), "%s", o->doc);
            if (o->parser == &shp_cfg_enum) {
                const char *const *names = o->arg;
                for (int i = 0;
                     names[i] != NULL && n > 0 && (size_t)n < sizeof(doc);
                     i++) {
                    n += snprintf(doc + n, sizeof(doc) - (size_t)n, "%s%s",
                                  i ? "|" : " (", names[i]);
                }
                if (n > 0 && (size_t)n < sizeof(doc)) {
                    snprintf(doc + n, sizeof(doc) - (size_t)n, ")");
                }
            }
            fputc('\n', stream);
            shp_config_comment(stream, doc);
            fprintf(stream, "# type: %s, default: %s\n", o->parser->type_name,
                    o->defval[0] != '\0' ? o->defval : "(empty)");
        }
        if (flags & SHP_CONFIG_DUMP_ENV) {
            shp_config_env_name(table, o->name, envname, sizeof(envname));
            fprintf(stream, "%s%s=%s\n",
                    (flags & SHP_CONFIG_DUMP_COMMENTED) ? "# " : "", envname,
                    value);
        } else {
            fprintf(stream, "%s%s = %s\n",
                    (flags & SHP_CONFIG_DUMP_COMMENTED) ? "# " : "", o->name,
                    value);
        }
    }
}

void shp_config_help(const shp_config_table_t *table, const char *usage,
                     FILE *stream)
{
    const shp_config_opt_t *o;
    char flag[64];

    fprintf(stream,
            "%s\n\nOptions (also settable in the config file as "
            "'name = value' and in the environment as %s<NAME>):\n",
            usage, table->env_prefix);
    fprintf(stream, "  %-28s %s\n", "--config FILE",
            table->default_file ? "configuration file (default: see below)"
                                : "configuration file");
    if (table->default_file != NULL) {
        fprintf(stream, "  %-28s   default file: %s\n", "",
                table->default_file);
    }
    fprintf(stream, "  %-28s %s\n", "--dump-config",
            "print the resulting configuration and exit");
    fprintf(stream, "  %-28s %s\n", "--help", "print this help and exit");
    fprintf(stream, "  %-28s %s\n", "--version", "print the version and exit");
    for (o = table->opts; o->name != NULL; o++) {
        size_t i;
        if (o->flags & SHP_CFG_HIDDEN) {
            continue;
        }
        snprintf(flag, sizeof(flag), "--%s %s", o->name,
                 o->parser == &shp_cfg_bool ? "[yes|no]" : "VALUE");
        for (i = 2; flag[i] != ' '; i++) {
            if (flag[i] == '_') {
                flag[i] = '-';
            }
        }
        fprintf(stream, "  %-28s %s (default: %s)\n", flag, o->doc,
                o->defval[0] != '\0' ? o->defval : "none");
    }
}

/* `text` as roff: backslashes and hyphens escaped, a leading control
 * character made text */
static void shp_config_roff(FILE *stream, const char *text)
{
    if (*text == '.' || *text == '\'') {
        fputs("\\&", stream);
    }
    for (; *text != '\0'; text++) {
        switch (*text) {
        case '\\': fputs("\\e", stream); break;
        case '-': fputs("\\-", stream); break;
        case '\n': fputc(' ', stream); break;
        default: fputc(*text, stream); break;
        }
    }
}

/* `name` with '_' as '-' (the command-line spelling), as roff */
static void shp_config_roff_flag(FILE *stream, const char *name)
{
    fputs("\\-\\-", stream);
    for (; *name != '\0'; name++) {
        if (*name == '_' || *name == '-') {
            fputs("\\-", stream);
        } else {
            fputc(*name, stream);
        }
    }
}

void shp_config_man(const shp_config_table_t *table, shp_config_man_form_t form,
                    FILE *stream)
{
    const shp_config_opt_t *o;
    char envname[128];

    if (form == SHP_CONFIG_MAN_FLAGS) {
        fputs(".TP\n\\fB\\-\\-config\\fR \\fIFILE\\fR\n"
              "the configuration file to read",
              stream);
        if (table->default_file != NULL) {
            fputs(" (default: \\fB", stream);
            shp_config_roff(stream, table->default_file);
            fputs("\\fR, when it exists)", stream);
        }
        fputs(".\n.TP\n\\fB\\-\\-dump\\-config\\fR\n"
              "print the resulting configuration (every option, with its "
              "documentation) as a file this program reads back, and exit.\n"
              ".TP\n\\fB\\-\\-help\\fR, \\fB\\-h\\fR\n"
              "print the options and exit.\n"
              ".TP\n\\fB\\-\\-version\\fR\nprint the version and exit.\n",
              stream);
    }
    for (o = table->opts; o->name != NULL; o++) {
        if (o->flags & SHP_CFG_HIDDEN) {
            continue;
        }
        shp_config_env_name(table, o->name, envname, sizeof(envname));
        fputs(".TP\n", stream);
        switch (form) {
        case SHP_CONFIG_MAN_FLAGS:
            fputs("\\fB", stream);
            shp_config_roff_flag(stream, o->name);
            fputs(o->parser == &shp_cfg_bool ? "\\fR [\\fIyes\\fR|\\fIno\\fR]\n"
                                             : "\\fR \\fIVALUE\\fR\n",
                  stream);
            break;
        case SHP_CONFIG_MAN_FILE:
            fputs("\\fB", stream);
            shp_config_roff(stream, o->name);
            fputs("\\fR = \\fIVALUE\\fR\n", stream);
            break;
        case SHP_CONFIG_MAN_ENV:
            fprintf(stream, "\\fB%s\\fR\n", envname);
            break;
        }
        shp_config_roff(stream, o->doc);
        fputs(".\n", stream);
        if (o->parser == &shp_cfg_enum) {
            const char *const *names = o->arg;
            fputs("One of", stream);
            for (int i = 0; names[i] != NULL; i++) {
                fprintf(stream, "%s\\fB", i ? "," : "");
                fputc(' ', stream);
                shp_config_roff(stream, names[i]);
                fputs("\\fR", stream);
            }
            fputs(".\n", stream);
        }
        fprintf(stream, "Type: %s", o->parser->type_name);
        if (o->parser == &shp_cfg_size) {
            fputs(" (bytes; suffixes k, m, g)", stream);
        } else if (o->parser == &shp_cfg_time) {
            fputs(" (500ms, 5s, 2m; a bare number is ms; inf or \\-1: none)",
                  stream);
        } else if (o->parser == &shp_cfg_bool) {
            fputs(" (yes or no, 1 or 0, true or false, on or off)", stream);
        } else if (o->parser == &shp_cfg_loglevel) {
            fputs(" (off, fatal, error, warn, info, debug, trace or 0\\-5)",
                  stream);
        } else if ((o->parser == &shp_cfg_int || o->parser == &shp_cfg_uint) &&
                   o->arg != NULL) {
            const shp_config_range_t *r = o->arg;
            fprintf(stream, ", %s%lld to %lld", r->min < 0 ? "\\-" : "",
                    r->min < 0 ? -(long long)r->min : (long long)r->min,
                    (long long)r->max);
        }
        fputs(".\nDefault: ", stream);
        if (o->defval[0] != '\0') {
            fputs("\\fB", stream);
            shp_config_roff(stream, o->defval);
            fputs("\\fR", stream);
        } else {
            fputs("none", stream);
        }
        fputs(".\n", stream);
        switch (form) {
        case SHP_CONFIG_MAN_FLAGS:
            fputs("In the file: \\fB", stream);
            shp_config_roff(stream, o->name);
            fprintf(stream, "\\fR; in the environment: \\fB%s\\fR.\n", envname);
            break;
        case SHP_CONFIG_MAN_FILE:
            fputs("Command line: \\fB", stream);
            shp_config_roff_flag(stream, o->name);
            fprintf(stream, "\\fR; environment: \\fB%s\\fR.\n", envname);
            break;
        case SHP_CONFIG_MAN_ENV: break;
        }
    }
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
