/* An option table with one option of every parser type, for fuzz_config
 * and its seeds (gen_seeds.c). */
#ifndef SHP_TESTS_FUZZ_CONFIG_TABLE_H
#define SHP_TESTS_FUZZ_CONFIG_TABLE_H

#include "core/config.h"
#include "core/log.h"

#include <stddef.h>

typedef struct fz_cfg {
    int i;
    unsigned u;
    int b;
    char *s;
    char *s2;
    size_t size;
    int64_t time_ms;
    double d;
    int e;
    int level;
} fz_cfg_t;

static const shp_config_range_t fz_cfg_irange = {-1000, 1000};
static const shp_config_range_t fz_cfg_urange = {1, 65536};
static const char *const fz_cfg_enum_names[] = {"tcp", "verbs", "udp", NULL};

static const shp_config_opt_t fz_cfg_opts[] = {
    {"int_opt", "-5", "an int", offsetof(fz_cfg_t, i), &shp_cfg_int,
     &fz_cfg_irange},
    {"uint_opt", "64", "an unsigned", offsetof(fz_cfg_t, u), &shp_cfg_uint,
     &fz_cfg_urange},
    {"bool_opt", "no", "a boolean", offsetof(fz_cfg_t, b), &shp_cfg_bool},
    {"string_opt", "127.0.0.1:0", "a string", offsetof(fz_cfg_t, s),
     &shp_cfg_string},
    {"hidden_string", "", "a hidden string", offsetof(fz_cfg_t, s2),
     &shp_cfg_string, NULL, SHP_CFG_HIDDEN},
    {"size_opt", "64k", "a size", offsetof(fz_cfg_t, size), &shp_cfg_size},
    {"time_opt", "2s", "a time", offsetof(fz_cfg_t, time_ms), &shp_cfg_time},
    {"double_opt", "0.25", "a double", offsetof(fz_cfg_t, d), &shp_cfg_double},
    {"enum_opt", "tcp", "an enum", offsetof(fz_cfg_t, e), &shp_cfg_enum,
     fz_cfg_enum_names},
    {"log_level", "info", "a log level", offsetof(fz_cfg_t, level),
     &shp_cfg_loglevel},
    {NULL}};

static const shp_config_table_t fz_cfg_table = {"sharp_fz", "SHARP_FZ_", NULL,
                                                fz_cfg_opts};

#endif
