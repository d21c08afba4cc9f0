/*
 * The printers of an option table (see config.h): the dump (a file the
 * program reads back, or the environment's form), --help, and the man
 * pages' OPTIONS, FILES and ENVIRONMENT sections, each option with its
 * documentation, kind, default and its names elsewhere.  They read the
 * table and the kinds (config_kinds.c) only.
 */
#include "core/config.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

void shp_config_env_name(const shp_config_table_t *table, const char *name,
                         char *buf, size_t len)
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

/* --config, --dump-config, --help and --version: the options every
 * program has besides its table's */
static void shp_config_man_builtin(const shp_config_table_t *table,
                                   FILE *stream)
{
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

/* an option's tag: its flag, its file name or its variable */
static void shp_config_man_tag(const shp_config_opt_t *o,
                               shp_config_man_form_t form, const char *envname,
                               FILE *stream)
{
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
    case SHP_CONFIG_MAN_ENV: fprintf(stream, "\\fB%s\\fR\n", envname); break;
    }
}

/* an enum's names */
static void shp_config_man_enum(const shp_config_opt_t *o, FILE *stream)
{
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

/* "Type: ..." with what the kind accepts, then "Default: ..." */
static void shp_config_man_type(const shp_config_opt_t *o, FILE *stream)
{
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
}

/* where else the option is set: the file and the environment, or the
 * command line and the environment */
static void shp_config_man_elsewhere(const shp_config_opt_t *o,
                                     shp_config_man_form_t form,
                                     const char *envname, FILE *stream)
{
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

void shp_config_man(const shp_config_table_t *table, shp_config_man_form_t form,
                    FILE *stream)
{
    const shp_config_opt_t *o;
    char envname[128];

    if (form == SHP_CONFIG_MAN_FLAGS) {
        shp_config_man_builtin(table, stream);
    }
    for (o = table->opts; o->name != NULL; o++) {
        if (o->flags & SHP_CFG_HIDDEN) {
            continue;
        }
        shp_config_env_name(table, o->name, envname, sizeof(envname));
        shp_config_man_tag(o, form, envname, stream);
        shp_config_roff(stream, o->doc);
        fputs(".\n", stream);
        if (o->parser == &shp_cfg_enum) {
            shp_config_man_enum(o, stream);
        }
        shp_config_man_type(o, stream);
        shp_config_man_elsewhere(o, form, envname, stream);
    }
}
