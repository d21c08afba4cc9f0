/*
 * Configuration input (core/config.c): an INI file (through inih), the
 * environment, or a command line, into a table with one option of every
 * type.  The first byte picks the source; the rest is the file, or lines
 * that are variables / arguments.  Whatever loads must dump to text that
 * loads back to the same values (the dump printed again is identical).
 */
#include "tests/fuzz/fuzz.h"
#include "tests/fuzz/fuzz_config_table.h"

#include <sys/mman.h>
#include <unistd.h>

static int memfd = -1;
static char mempath[64];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    shp_log_set_level(SHP_LOG_OFF);
    memfd = memfd_create("fuzz-config", MFD_CLOEXEC);
    FZ_CHECK(memfd >= 0);
    snprintf(mempath, sizeof(mempath), "/proc/self/fd/%d", memfd);
    return 0;
}

static void put_file(const void *data, size_t len)
{
    FZ_CHECK(ftruncate(memfd, 0) == 0);
    FZ_CHECK(pwrite(memfd, data, len, 0) == (ssize_t)len);
}

static char *dump(const fz_cfg_t *c)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);

    FZ_CHECK(f != NULL);
    shp_config_dump(&fz_cfg_table, c, f, SHP_CONFIG_DUMP_HIDDEN);
    fclose(f);
    return buf;
}

/* Dump, load the dump into a fresh object, dump again: same text. */
static void round_trip(const fz_cfg_t *c)
{
    fz_cfg_t again = {0};
    shp_config_err_t err;
    char *d1 = dump(c), *d2;
    char *env = NULL;
    size_t envlen = 0;
    FILE *f;

    /* inih reads lines of at most INI_MAX_LINE (200) bytes: a longer value
     * cannot come back from a file (docs/testing.md) */
    for (const char *l = d1; *l != '\0';) {
        const char *nl = strchr(l, '\n');
        size_t n = nl ? (size_t)(nl - l) : strlen(l);
        if (n >= 198) {
            free(d1);
            return;
        }
        l += n + (nl != NULL);
    }
    put_file(d1, strlen(d1));
    FZ_CHECK(shp_config_defaults(&fz_cfg_table, &again) == SHP_OK);
    if (shp_config_load_file(&fz_cfg_table, &again, mempath, &err) != SHP_OK) {
        fprintf(stderr, "dump does not load back: %s\n%s", err.msg, d1);
        abort();
    }
    d2 = dump(&again);
    if (strcmp(d1, d2) != 0) {
        fprintf(stderr, "dump changes when loaded back:\n%s---\n%s", d1, d2);
        abort();
    }
    /* the environment form too */
    f = open_memstream(&env, &envlen);
    FZ_CHECK(f != NULL);
    shp_config_dump(&fz_cfg_table, c, f,
                    SHP_CONFIG_DUMP_ENV | SHP_CONFIG_DUMP_HIDDEN);
    fclose(f);
    free(env);
    free(d1);
    free(d2);
    shp_config_release(&fz_cfg_table, &again);
}

/* Split the rest of the input into NUL-terminated lines. */
static char **lines(const uint8_t *p, size_t n, int *count, char **store)
{
    char *s = malloc(n + 1), **v;
    int k = 0;
    size_t i;

    FZ_CHECK(s != NULL);
    memcpy(s, p, n);
    s[n] = '\0';
    v = calloc(n + 3, sizeof(*v));
    FZ_CHECK(v != NULL);
    v[k++] = "sharp_fz";
    v[k++] = s;
    for (i = 0; i < n; i++) {
        if (s[i] == '\n') {
            s[i] = '\0';
            v[k++] = s + i + 1;
        }
    }
    v[k] = NULL;
    *count = k;
    *store = s;
    return v;
}

static int harmless_arg(const char *a)
{
    /* no help, dump or man text on stdout, no other file than the input */
    return strcmp(a, "--help") && strcmp(a, "-h") &&
           strcmp(a, "--dump-config") && strcmp(a, "--version") &&
           strncmp(a, "--man-", 6) && strncmp(a, "--config", 8);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_cfg_t c = {0};
    shp_config_err_t err;
    shp_config_action_t action;
    shp_status_t st;
    char **v, *store;
    int n, k, j;

    if (size < 1) {
        return 0;
    }
    FZ_CHECK(shp_config_defaults(&fz_cfg_table, &c) == SHP_OK);
    switch (data[0] % 3) {
    case 0:
        put_file(data + 1, size - 1);
        st = shp_config_load_file(&fz_cfg_table, &c, mempath, &err);
        break;
    case 1:
        v = lines(data + 1, size - 1, &n, &store);
        st = shp_config_load_env(&fz_cfg_table, &c, v + 1, &err);
        free(v);
        free(store);
        break;
    default:
        v = lines(data + 1, size - 1, &n, &store);
        for (k = j = 0; k < n; k++) {
            if (harmless_arg(v[k])) {
                v[j++] = v[k];
            }
        }
        v[j] = NULL;
        shp_config_release(&fz_cfg_table, &c);
        memset(&c, 0, sizeof(c));
        st = shp_config_load(&fz_cfg_table, &c, j, v, "usage", &action, &err);
        if (st == SHP_OK) {
            FZ_CHECK(action == SHP_CONFIG_RUN);
        }
        free(v);
        free(store);
        break;
    }
    if (st == SHP_OK) {
        round_trip(&c);
    } else {
        FZ_CHECK(err.msg[0] != '\0');
    }
    shp_config_release(&fz_cfg_table, &c);
    return 0;
}
