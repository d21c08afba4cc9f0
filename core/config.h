/*
 * Configuration: one option table per component drives the INI file, the
 * environment, the command line, --help and the dump.
 *
 * Precedence: default < file < environment < command line.
 *
 *   static const shp_config_opt_t opts[] = {
 *       {"listen", "0.0.0.0:7100", "address:port to accept children on",
 *        offsetof(my_cfg_t, listen), &shp_cfg_string},
 *       ...
 *       {NULL}
 *   };
 *
 * Option names use underscores; on the command line '-' may stand for '_'
 * (--log-level == --log_level).  In the environment an option is
 * <env_prefix><NAME> in upper case (SHARP_AN_LOG_LEVEL).  In the file it is
 * `name = value`, at the top or in a section named after the component.
 */
#ifndef SHP_COMMON_CONFIG_H
#define SHP_COMMON_CONFIG_H

#include "core/status.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct shp_config_parser {
    const char *type_name;
    /* parse `str` into `dst`; on failure *why says what is expected */
    shp_status_t (*parse)(const char *str, void *dst, const void *arg,
                          const char **why);
    /* print the value in a form `parse` accepts */
    void (*format)(const void *src, const void *arg, char *buf, size_t len);
    /* free what parse allocated (may be NULL) */
    void (*release)(void *dst);
} shp_config_parser_t;

/* Range of an integer option (arg of shp_cfg_int / shp_cfg_uint). */
typedef struct shp_config_range {
    int64_t min;
    int64_t max;
} shp_config_range_t;

#define SHP_CFG_HIDDEN (1u << 0) /* not shown unless asked */

typedef struct shp_config_opt {
    const char *name;
    const char *defval;
    const char *doc;
    size_t offset;
    const shp_config_parser_t *parser;
    const void *arg; /* range, enum names (NULL-terminated), ... */
    unsigned flags;
} shp_config_opt_t;

typedef struct shp_config_table {
    const char *component;        /* "sharp_an": section name, help title */
    const char *env_prefix;       /* "SHARP_AN_" */
    const char *default_file;     /* used when --config is not given and the
                                 file exists; may be NULL */
    const shp_config_opt_t *opts; /* ends with {NULL} */
} shp_config_table_t;

extern const shp_config_parser_t shp_cfg_int;      /* int, arg: range */
extern const shp_config_parser_t shp_cfg_uint;     /* unsigned, arg: range */
extern const shp_config_parser_t shp_cfg_bool;     /* int 0/1: yes/no/... */
extern const shp_config_parser_t shp_cfg_string;   /* char * (owned) */
extern const shp_config_parser_t shp_cfg_size;     /* size_t, k/m/g suffix */
extern const shp_config_parser_t shp_cfg_time;     /* int64 ms: 100ms 5s 2m */
extern const shp_config_parser_t shp_cfg_double;   /* double */
extern const shp_config_parser_t shp_cfg_enum;     /* int index, arg: names */
extern const shp_config_parser_t shp_cfg_loglevel; /* int SHP_LOG_* */

/* Error text of the last failed load/set: "file:line: ...". */
typedef struct shp_config_err {
    char msg[512];
} shp_config_err_t;

/* Set every option to its default (call first, on a zeroed object). */
SHP_WUR shp_status_t shp_config_defaults(const shp_config_table_t *table,
                                         void *obj);

/* An option's environment variable: the table's prefix and the name in
 * capitals (SHARP_MPI_ + regroup_calls: SHARP_MPI_REGROUP_CALLS). */
void shp_config_env_name(const shp_config_table_t *table, const char *name,
                         char *buf, size_t len);

/* Set one option by name; SHP_ERR_NOT_FOUND for an unknown name,
 * SHP_ERR_INVALID_PARAM for a bad value.  `origin` prefixes the error. */
SHP_WUR shp_status_t shp_config_set(const shp_config_table_t *table, void *obj,
                                    const char *name, const char *value,
                                    const char *origin, shp_config_err_t *err);

/* Load an INI file: unknown keys, unknown sections and bad values are
 * errors, reported with their line number.  Lines before the bad one stay
 * applied: callers treat an error as fatal. */
SHP_WUR shp_status_t shp_config_load_file(const shp_config_table_t *table,
                                          void *obj, const char *path,
                                          shp_config_err_t *err);

/* Apply <prefix>* variables from `envp` (NULL: the process environment).
 * A variable with the prefix that names no option draws a warning. */
SHP_WUR shp_status_t shp_config_load_env(const shp_config_table_t *table,
                                         void *obj, char *const *envp,
                                         shp_config_err_t *err);

/* What shp_config_load() found on the command line besides options. */
typedef enum shp_config_action {
    SHP_CONFIG_RUN = 0, /* go on */
    SHP_CONFIG_HELP,    /* --help was given: help printed, exit 0 */
    SHP_CONFIG_DUMP,    /* --dump-config: dump printed, exit 0 */
    SHP_CONFIG_VERSION, /* --version */
    SHP_CONFIG_MAN,     /* --man-options / --man-config: roff printed */
} shp_config_action_t;

/*
 * The whole sequence for a daemon: defaults, the file (--config FILE or the
 * table's default file), the environment, then every --name[=value] /
 * --name value on the command line.  --help prints shp_config_help(),
 * --dump-config prints the resulting configuration.  Errors are reported in
 * *err; positional arguments are errors.
 */
SHP_WUR shp_status_t shp_config_load(const shp_config_table_t *table, void *obj,
                                     int argc, char *const *argv,
                                     const char *usage,
                                     shp_config_action_t *action,
                                     shp_config_err_t *err);

#define SHP_CONFIG_DUMP_DOC (1u << 0)       /* a comment line with the doc */
#define SHP_CONFIG_DUMP_COMMENTED (1u << 1) /* '# name = value' lines */
#define SHP_CONFIG_DUMP_HIDDEN (1u << 2)    /* include hidden options */
#define SHP_CONFIG_DUMP_ENV (1u << 3)       /* VAR=value, environment form */

/* Prints the current values as an INI file (or environment lines) that
 * shp_config_load_file() reads back to the same values. */
void shp_config_dump(const shp_config_table_t *table, const void *obj,
                     FILE *stream, unsigned flags);

void shp_config_help(const shp_config_table_t *table, const char *usage,
                     FILE *stream);

/*
 * The options as a man page section body (roff, for .SH OPTIONS and the
 * like), from the table that drives --help, so that the pages cannot drift
 * from it.  Programs print it for `--man-options` (the command line: the
 * flags --help lists) and `--man-config` (the file's keys); the build
 * puts it into man/<page>.in at the line `@OPTIONS@`.
 */
typedef enum shp_config_man_form {
    SHP_CONFIG_MAN_FLAGS, /* --name VALUE, with --config, --help ... */
    SHP_CONFIG_MAN_FILE,  /* name = VALUE */
    SHP_CONFIG_MAN_ENV,   /* PREFIX_NAME (a library's variables) */
} shp_config_man_form_t;

void shp_config_man(const shp_config_table_t *table, shp_config_man_form_t form,
                    FILE *stream);

/* Free what the parsers allocated (strings). */
void shp_config_release(const shp_config_table_t *table, void *obj);

/* SIGHUP for a daemon: re-reads the file and environment into `scratch` (a
 * zeroed object of the table's type), applies the log level found at
 * `level_offset`, logs the outcome and releases `scratch`. */
void shp_config_reload_log_level(const shp_config_table_t *table, void *scratch,
                                 size_t level_offset);

/* Find an option by name ('-' matches '_'); NULL if none. */
const shp_config_opt_t *shp_config_find(const shp_config_table_t *table,
                                        const char *name);

#endif
