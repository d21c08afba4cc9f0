/* Configuration tables: every parser, precedence default < file < env <
 * command line, errors with line numbers, and dump -> load round trips. */
#include "tests/support/test_util.h"

#include "core/config.h"

#include <stdlib.h>
#include <unistd.h>

typedef struct {
    int port;
    unsigned osts;
    int mcast;
    char *name;
    size_t payload;
    int64_t timeout_ms;
    double ratio;
    int transport;
    int level;
} cfg_t;

static const shp_config_range_t port_range = {1, 65535};
static const char *const transports[] = {"tcp", "udp", "verbs", NULL};

static const shp_config_opt_t opts[] = {
    {"port", "7100", "port to listen on", offsetof(cfg_t, port), &shp_cfg_int,
     &port_range},
    {"osts", "256", "outstanding operations", offsetof(cfg_t, osts),
     &shp_cfg_uint},
    {"mcast", "no", "send results by multicast", offsetof(cfg_t, mcast),
     &shp_cfg_bool},
    {"name", "an0", "node name", offsetof(cfg_t, name), &shp_cfg_string},
    {"payload", "256", "payload per operation", offsetof(cfg_t, payload),
     &shp_cfg_size},
    {"timeout", "5s", "peer timeout", offsetof(cfg_t, timeout_ms),
     &shp_cfg_time},
    /* a doc longer than a line of the file parser (inih splits what is
     * longer): the dump must wrap it, or its tail would load as an option */
    {"ratio", "0.5",
     "a ratio, documented at length as some options are: what it is for, "
     "when it applies and when not, what its unit is and what the default "
     "does on a host of its own; only on some hosts; 0: off, any other "
     "value: on, as the sentence that ends here says",
     offsetof(cfg_t, ratio), &shp_cfg_double},
    {"transport", "tcp", "data transport", offsetof(cfg_t, transport),
     &shp_cfg_enum, transports},
    {"log_level", "info", "log level", offsetof(cfg_t, level),
     &shp_cfg_loglevel},
    {NULL}};

static const shp_config_table_t table = {"test_comp", "SHPTEST_", NULL, opts};

static char tmpdir[64];

static int setup(void **state)
{
    (void)state;
    strcpy(tmpdir, "/tmp/shp_cfg_XXXXXX");
    assert_non_null(mkdtemp(tmpdir));
    test_log_capture();
    return 0;
}

static int teardown(void **state)
{
    char cmd[128];

    snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
    if (system(cmd) != 0) {
        return -1;
    }
    return test_log_teardown(state);
}

static const char *write_file(const char *name, const char *text)
{
    static char path[128];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
    f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    return path;
}

static void test_defaults(void **state)
{
    cfg_t c = {0};

    (void)state;
    assert_int_equal(shp_config_defaults(&table, &c), SHP_OK);
    assert_int_equal(c.port, 7100);
    assert_int_equal(c.osts, 256);
    assert_int_equal(c.mcast, 0);
    assert_string_equal(c.name, "an0");
    assert_int_equal(c.payload, 256);
    assert_int_equal(c.timeout_ms, 5000);
    assert_true(c.ratio == 0.5);
    assert_int_equal(c.transport, 0);
    assert_int_equal(c.level, SHP_LOG_INFO);
    shp_config_release(&table, &c);
    assert_null(c.name);
}

static void test_parsers(void **state)
{
    shp_config_err_t err;
    cfg_t c = {0};

    (void)state;
    assert_int_equal(shp_config_defaults(&table, &c), SHP_OK);
#define OK(_n, _v)                                                             \
    assert_int_equal(shp_config_set(&table, &c, _n, _v, "t", &err), SHP_OK)
#define BAD(_n, _v)                                                            \
    assert_int_equal(shp_config_set(&table, &c, _n, _v, "t", &err),            \
                     SHP_ERR_INVALID_PARAM)
    OK("port", "0x10");
    assert_int_equal(c.port, 16);
    BAD("port", "0");
    assert_non_null(strstr(err.msg, "out of range"));
    BAD("port", "65536");
    BAD("port", "12abc");
    BAD("port", "");
    assert_int_equal(c.port, 16); /* a bad value changes nothing */
    BAD("osts", "-1");
    OK("mcast", "YES");
    assert_int_equal(c.mcast, 1);
    OK("mcast", "off");
    assert_int_equal(c.mcast, 0);
    BAD("mcast", "maybe");
    OK("payload", "64k");
    assert_int_equal(c.payload, 65536);
    OK("payload", "1.5m");
    assert_int_equal(c.payload, 1572864);
    BAD("payload", "12q");
    BAD("payload", "-4");
    OK("timeout", "250ms");
    assert_int_equal(c.timeout_ms, 250);
    OK("timeout", "2m");
    assert_int_equal(c.timeout_ms, 120000);
    OK("timeout", "inf");
    assert_int_equal(c.timeout_ms, -1);
    OK("timeout", "42");
    assert_int_equal(c.timeout_ms, 42);
    BAD("timeout", "5 parsecs");
    OK("ratio", "1e-3");
    assert_true(c.ratio == 1e-3);
    BAD("ratio", "x");
    OK("transport", "VERBS");
    assert_int_equal(c.transport, 2);
    BAD("transport", "carrier-pigeon");
    assert_non_null(strstr(err.msg, "tcp|udp|verbs"));
    OK("log_level", "debug");
    assert_int_equal(c.level, SHP_LOG_DEBUG);
    OK("log-level", "2");
    assert_int_equal(c.level, SHP_LOG_WARN);
    BAD("log_level", "loud");
    assert_int_equal(shp_config_set(&table, &c, "nope", "1", "t", &err),
                     SHP_ERR_NOT_FOUND);
    assert_non_null(strstr(err.msg, "unknown option 'nope'"));
    shp_config_release(&table, &c);
#undef OK
#undef BAD
}

static void test_file(void **state)
{
    shp_config_err_t err;
    const char *path;
    cfg_t c = {0};

    (void)state;
    assert_int_equal(shp_config_defaults(&table, &c), SHP_OK);
    path = write_file("ok.conf", "# comment\n"
                                 "port = 7200\n"
                                 "\n"
                                 "[test_comp]\n"
                                 "name = leaf-1 ; inline comment\n"
                                 "payload=1k\n");
    assert_int_equal(shp_config_load_file(&table, &c, path, &err), SHP_OK);
    assert_int_equal(c.port, 7200);
    assert_string_equal(c.name, "leaf-1");
    assert_int_equal(c.payload, 1024);
    shp_config_release(&table, &c);
}

static void test_file_errors(void **state)
{
    shp_config_err_t err;
    const char *path;
    cfg_t c = {0};
    char want[160];

    (void)state;
    assert_int_equal(shp_config_defaults(&table, &c), SHP_OK);

    path = write_file("bad1.conf", "port = 7200\n\nosts = many\n");
    assert_int_equal(shp_config_load_file(&table, &c, path, &err),
                     SHP_ERR_INVALID_PARAM);
    snprintf(want, sizeof(want), "%s:3: invalid value 'many' for osts", path);
    assert_non_null(strstr(err.msg, want));

    path = write_file("bad2.conf", "port = 7200\nbogus = 1\n");
    assert_int_equal(shp_config_load_file(&table, &c, path, &err),
                     SHP_ERR_PARSE);
    snprintf(want, sizeof(want), "%s:2: unknown option 'bogus'", path);
    assert_non_null(strstr(err.msg, want));

    path = write_file("bad3.conf", "\n\nthis is not ini\n");
    assert_int_equal(shp_config_load_file(&table, &c, path, &err),
                     SHP_ERR_PARSE);
    snprintf(want, sizeof(want), "%s:3: syntax error", path);
    assert_non_null(strstr(err.msg, want));

    path = write_file("bad4.conf", "[other]\nport = 1\n");
    assert_int_equal(shp_config_load_file(&table, &c, path, &err),
                     SHP_ERR_PARSE);
    assert_non_null(strstr(err.msg, "unknown section [other]"));

    assert_int_equal(
        shp_config_load_file(&table, &c, "/nonexistent/x.conf", &err),
        SHP_ERR_NOT_FOUND);
    assert_non_null(strstr(err.msg, "cannot open"));
    shp_config_release(&table, &c);
}

static void test_env(void **state)
{
    char *envp[] = {"SHPTEST_PORT=7300", "SHPTEST_LOG_LEVEL=error",
                    "OTHER_PORT=1", NULL};
    char *bad[] = {"SHPTEST_OSTS=lots", NULL};
    char *unknown[] = {"SHPTEST_NOPE=1", NULL};
    shp_config_err_t err;
    cfg_t c = {0};

    (void)state;
    assert_int_equal(shp_config_defaults(&table, &c), SHP_OK);
    assert_int_equal(shp_config_load_env(&table, &c, envp, &err), SHP_OK);
    assert_int_equal(c.port, 7300);
    assert_int_equal(c.level, SHP_LOG_ERROR);
    assert_int_equal(shp_config_load_env(&table, &c, bad, &err),
                     SHP_ERR_INVALID_PARAM);
    assert_non_null(strstr(err.msg, "environment SHPTEST_OSTS"));
    /* unknown names with the prefix draw a warning, not an error */
    assert_int_equal(shp_config_load_env(&table, &c, unknown, &err), SHP_OK);
    assert_int_equal(test_log_warnings, 1);
    assert_non_null(strstr(test_log_last, "SHPTEST_NOPE"));
    test_log_warnings = 0;
    shp_config_release(&table, &c);
}

static void test_precedence(void **state)
{
    const char *path = write_file("p.conf", "port = 1000\nosts = 10\n"
                                            "name = fromfile\n");
    char *argv[] = {"prog",   "--config", (char *)path, "--osts=30",
                    "--name", "fromcli",  "--mcast",    NULL};
    shp_config_action_t action;
    shp_config_err_t err;
    cfg_t c = {0};

    (void)state;
    setenv("SHPTEST_OSTS", "20", 1);
    setenv("SHPTEST_PORT", "2000", 1);
    assert_int_equal(
        shp_config_load(&table, &c, 7, argv, "usage", &action, &err), SHP_OK);
    unsetenv("SHPTEST_OSTS");
    unsetenv("SHPTEST_PORT");
    assert_int_equal(action, SHP_CONFIG_RUN);
    assert_int_equal(c.port, 2000);         /* env beats file */
    assert_int_equal(c.osts, 30);           /* cli beats env */
    assert_string_equal(c.name, "fromcli"); /* cli beats file */
    assert_int_equal(c.mcast, 1);           /* bare boolean flag */
    assert_int_equal(c.payload, 256);       /* default */
    shp_config_release(&table, &c);
}

static void test_cli_errors(void **state)
{
    char *a1[] = {"prog", "--bogus", "1", NULL};
    char *a2[] = {"prog", "stray", NULL};
    char *a3[] = {"prog", "--port", NULL};
    char *a4[] = {"prog", "--config", NULL};
    char *a5[] = {"prog", "--port", "99999", NULL};
    shp_config_action_t action;
    shp_config_err_t err;
    cfg_t c = {0};

    (void)state;
    assert_int_equal(shp_config_load(&table, &c, 3, a1, "u", &action, &err),
                     SHP_ERR_NOT_FOUND);
    assert_non_null(strstr(err.msg, "--bogus"));
    shp_config_release(&table, &c);
    assert_int_equal(shp_config_load(&table, &c, 2, a2, "u", &action, &err),
                     SHP_ERR_INVALID_PARAM);
    assert_non_null(strstr(err.msg, "stray"));
    shp_config_release(&table, &c);
    assert_int_equal(shp_config_load(&table, &c, 2, a3, "u", &action, &err),
                     SHP_ERR_INVALID_PARAM);
    assert_non_null(strstr(err.msg, "needs a value"));
    shp_config_release(&table, &c);
    assert_int_equal(shp_config_load(&table, &c, 2, a4, "u", &action, &err),
                     SHP_ERR_INVALID_PARAM);
    shp_config_release(&table, &c);
    assert_int_equal(shp_config_load(&table, &c, 3, a5, "u", &action, &err),
                     SHP_ERR_INVALID_PARAM);
    assert_non_null(strstr(err.msg, "command line"));
    shp_config_release(&table, &c);
}

static void test_dump_roundtrip(void **state)
{
    shp_config_err_t err;
    char path[128];
    cfg_t a = {0}, b = {0};
    FILE *f;

    (void)state;
    assert_int_equal(shp_config_defaults(&table, &a), SHP_OK);
    assert_int_equal(shp_config_set(&table, &a, "port", "9", "t", &err),
                     SHP_OK);
    assert_int_equal(shp_config_set(&table, &a, "name", "x y", "t", &err),
                     SHP_OK);
    assert_int_equal(shp_config_set(&table, &a, "payload", "3m", "t", &err),
                     SHP_OK);
    assert_int_equal(shp_config_set(&table, &a, "timeout", "1500ms", "t", &err),
                     SHP_OK);
    assert_int_equal(shp_config_set(&table, &a, "transport", "udp", "t", &err),
                     SHP_OK);
    assert_int_equal(shp_config_set(&table, &a, "ratio", "0.1", "t", &err),
                     SHP_OK);
    snprintf(path, sizeof(path), "%s/dump.conf", tmpdir);
    f = fopen(path, "w");
    assert_non_null(f);
    shp_config_dump(&table, &a, f, SHP_CONFIG_DUMP_DOC);
    fclose(f);

    assert_int_equal(shp_config_defaults(&table, &b), SHP_OK);
    assert_int_equal(shp_config_load_file(&table, &b, path, &err), SHP_OK);
    assert_int_equal(b.port, 9);
    assert_string_equal(b.name, "x y");
    assert_int_equal(b.payload, 3 * 1048576);
    assert_int_equal(b.timeout_ms, 1500);
    assert_int_equal(b.transport, 1);
    assert_true(b.ratio == 0.1);
    shp_config_release(&table, &a);
    shp_config_release(&table, &b);
}

/* Found by tests/fuzz/fuzz_config: a string from the environment with a
 * blank at its end dumped to a file that loaded back without it. */
static void test_string_fits_a_file(void **state)
{
    char *envp[] = {"SHPTEST_NAME=  leaf 01  ", NULL};
    shp_config_err_t err;
    char path[128];
    cfg_t a = {0}, b = {0};
    FILE *f;

    (void)state;
    assert_int_equal(shp_config_defaults(&table, &a), SHP_OK);
    assert_int_equal(shp_config_load_env(&table, &a, envp, &err), SHP_OK);
    assert_string_equal(a.name, "leaf 01");
    snprintf(path, sizeof(path), "%s/strings.conf", tmpdir);
    f = fopen(path, "w");
    assert_non_null(f);
    shp_config_dump(&table, &a, f, 0);
    fclose(f);
    assert_int_equal(shp_config_defaults(&table, &b), SHP_OK);
    assert_int_equal(shp_config_load_file(&table, &b, path, &err), SHP_OK);
    assert_string_equal(b.name, a.name);
    /* what no line of a file can hold is refused */
    assert_int_equal(shp_config_set(&table, &a, "name", "a\nb", "t", &err),
                     SHP_ERR_INVALID_PARAM);
    assert_int_equal(shp_config_set(&table, &a, "name", "a ;b", "t", &err),
                     SHP_ERR_INVALID_PARAM);
    assert_non_null(strstr(err.msg, "comment"));
    assert_int_equal(shp_config_set(&table, &a, "name", " ;x", "t", &err),
                     SHP_ERR_INVALID_PARAM);
    assert_int_equal(shp_config_set(&table, &a, "name", "a;b\tc", "t", &err),
                     SHP_OK);
    assert_string_equal(a.name, "a;b\tc");
    shp_config_release(&table, &a);
    shp_config_release(&table, &b);
}

static void test_dump_commented_is_default(void **state)
{
    shp_config_err_t err;
    char path[128];
    cfg_t a = {0}, b = {0};
    FILE *f;

    (void)state;
    /* a fully commented file (what install ships) loads as the defaults */
    assert_int_equal(shp_config_defaults(&table, &a), SHP_OK);
    snprintf(path, sizeof(path), "%s/commented.conf", tmpdir);
    f = fopen(path, "w");
    assert_non_null(f);
    shp_config_dump(&table, &a, f,
                    SHP_CONFIG_DUMP_DOC | SHP_CONFIG_DUMP_COMMENTED);
    fclose(f);
    assert_int_equal(shp_config_defaults(&table, &b), SHP_OK);
    assert_int_equal(shp_config_set(&table, &b, "port", "1", "t", &err),
                     SHP_OK);
    assert_int_equal(shp_config_load_file(&table, &b, path, &err), SHP_OK);
    assert_int_equal(b.port, 1); /* nothing was set by the file */
    shp_config_release(&table, &a);
    shp_config_release(&table, &b);
}

static void test_help(void **state)
{
    char buf[4096] = "";
    FILE *f = fmemopen(buf, sizeof(buf) - 1, "w");

    (void)state;
    assert_non_null(f);
    shp_config_help(&table, "usage: prog [options]", f);
    fclose(f);
    assert_non_null(strstr(buf, "usage: prog"));
    assert_non_null(strstr(buf, "--log-level VALUE"));
    assert_non_null(strstr(buf, "(default: 7100)"));
    assert_non_null(strstr(buf, "SHPTEST_<NAME>"));
}

/* the man page form: every option, its flag, key or variable, roff-safe */
static void test_man(void **state)
{
    static const shp_config_opt_t tricky[] = {
        {"dot_doc", "-1", ".starts with a dot, has a \\ and a -dash",
         offsetof(cfg_t, port), &shp_cfg_int, &port_range},
        {NULL}};
    static const shp_config_table_t t2 = {"t2", "T2_", NULL, tricky};
    char buf[8192] = "";
    FILE *f = fmemopen(buf, sizeof(buf) - 1, "w");

    (void)state;
    assert_non_null(f);
    shp_config_man(&table, SHP_CONFIG_MAN_FLAGS, f);
    fclose(f);
    /* every option as a flag, with its key and variable; --config & co */
    assert_non_null(strstr(buf, "\\fB\\-\\-log\\-level\\fR \\fIVALUE\\fR"));
    assert_non_null(strstr(buf, "In the file: \\fBlog_level\\fR"));
    assert_non_null(strstr(buf, "\\fBSHPTEST_LOG_LEVEL\\fR"));
    assert_non_null(
        strstr(buf, "\\fB\\-\\-mcast\\fR [\\fIyes\\fR|\\fIno\\fR]"));
    assert_non_null(strstr(buf, "\\fB\\-\\-dump\\-config\\fR"));
    assert_non_null(strstr(buf, "One of\\fB tcp\\fR"));
    assert_non_null(strstr(buf, "Type: int, 1 to 65535"));

    memset(buf, 0, sizeof(buf));
    f = fmemopen(buf, sizeof(buf) - 1, "w");
    assert_non_null(f);
    shp_config_man(&t2, SHP_CONFIG_MAN_FILE, f);
    fclose(f);
    /* a doc starting with '.' is text, backslashes and dashes escaped */
    assert_non_null(
        strstr(buf, "\n\\&.starts with a dot, has a \\e and a \\-dash.\n"));
    assert_non_null(strstr(buf, "\\fBdot_doc\\fR = \\fIVALUE\\fR"));
    assert_non_null(strstr(buf, "Default: \\fB\\-1\\fR"));
    assert_null(strstr(buf, "\n.starts"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_defaults, setup, teardown),
        cmocka_unit_test_setup_teardown(test_parsers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_file_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_env, setup, teardown),
        cmocka_unit_test_setup_teardown(test_precedence, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cli_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dump_roundtrip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_string_fits_a_file, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_dump_commented_is_default, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_help, setup, teardown),
        cmocka_unit_test_setup_teardown(test_man, setup, teardown),
    };
    return cmocka_run_group_tests_name("config", tests, NULL, NULL);
}
