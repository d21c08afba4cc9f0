/*
 * The kinds of values an option holds (see config.h): each is a parser
 * that reads a string into its field (checked: a number's range, a size's
 * or a time's suffix, an enum's names), a formatter that writes it back in
 * a form the parser accepts, and for strings a release.  The table engine
 * (config.c) and the printers (config_print.c) know a kind only by its
 * shp_config_parser_t.
 */
#include "core/config.h"

#include "core/log.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

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
