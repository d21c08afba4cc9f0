/* Status codes and logging. */
#include "tests/support/test_util.h"

#include "core/status.h"
#include "core/time.h"

#include <sys/stat.h>
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

static void test_status_strings(void **state)
{
    int v;

    (void)state;
    assert_string_equal(shp_status_str(SHP_OK), "success");
    assert_string_equal(shp_status_name(SHP_ERR_BAD_KEY), "SHP_ERR_BAD_KEY");
    assert_string_equal(shp_status_str((shp_status_t)-999), "unknown status");
    /* every known value has a distinct name */
    for (v = SHP_ERR_LAST; v <= SHP_INPROGRESS; v++) {
        if (shp_status_is_valid(v)) {
            int w;
            for (w = v + 1; w <= SHP_INPROGRESS; w++) {
                if (shp_status_is_valid(w)) {
                    assert_string_not_equal(shp_status_name(v),
                                            shp_status_name(w));
                }
            }
        }
    }
    /* status codes travel in an int16 on the wire */
    assert_true(SHP_ERR_LAST > -32768);
}

static void test_status_from_errno(void **state)
{
    (void)state;
    assert_int_equal(shp_status_from_errno(0), SHP_OK);
    assert_int_equal(shp_status_from_errno(ENOMEM), SHP_ERR_NO_MEMORY);
    assert_int_equal(shp_status_from_errno(ECONNREFUSED), SHP_ERR_CONN_REFUSED);
    assert_int_equal(shp_status_from_errno(ECONNRESET), SHP_ERR_CONN_RESET);
    assert_int_equal(shp_status_from_errno(EPIPE), SHP_ERR_CONN_RESET);
    assert_int_equal(shp_status_from_errno(ETIMEDOUT), SHP_ERR_TIMED_OUT);
    assert_int_equal(shp_status_from_errno(EACCES), SHP_ERR_PERM);
    assert_int_equal(shp_status_from_errno(ENOENT), SHP_ERR_NOT_FOUND);
    assert_int_equal(shp_status_from_errno(EIO), SHP_ERR_IO);
}

static int seen_level;
static char seen_id[32];
static char seen_msg[256];
static int seen_count;

static void capture(int level, const char *err_id, const char *msg, void *arg)
{
    (void)arg;
    seen_level = level;
    snprintf(seen_id, sizeof(seen_id), "%s", err_id ? err_id : "");
    snprintf(seen_msg, sizeof(seen_msg), "%s", msg);
    seen_count++;
}

static int side_effects;
static int side_effect(void)
{
    return ++side_effects;
}

static void test_log_levels(void **state)
{
    (void)state;
    shp_log_set_handler(capture, NULL);
    shp_log_set_level(SHP_LOG_WARN);
    seen_count = 0;
    side_effects = 0;
    shp_info("not shown %d", side_effect());
    assert_int_equal(seen_count, 0);
    assert_int_equal(side_effects, 0); /* arguments not even evaluated */
    shp_error_id("AN0101", "lost child %d", 3);
    assert_int_equal(seen_count, 1);
    assert_int_equal(seen_level, SHP_LOG_ERROR);
    assert_string_equal(seen_id, "AN0101");
    assert_string_equal(seen_msg, "lost child 3");
    shp_trace("compiled out %d", side_effect());
    assert_int_equal(side_effects, 0);
    shp_log_set_level(SHP_LOG_OFF);
    shp_fatal("nothing");
    assert_int_equal(seen_count, 1);
    shp_log_set_handler(NULL, NULL);
    shp_log_set_level(SHP_LOG_INFO);
}

static void test_log_preserves_errno(void **state)
{
    char buf[512] = "";
    FILE *f = fmemopen(buf, sizeof(buf) - 1, "w");

    (void)state;
    shp_log_set_stream(f);
    shp_log_set_component("unit");
    errno = ECONNREFUSED;
    shp_error("connect: %m");
    assert_int_equal(errno, ECONNREFUSED);
    fflush(f);
    assert_non_null(strstr(buf, "connect: Connection refused"));
    assert_non_null(strstr(buf, "unit["));
    assert_non_null(strstr(buf, "ERR"));
    shp_log_set_journal(1);
    shp_warn_id("AM0002", "x");
    shp_log_set_journal(0);
    fflush(f);
    assert_non_null(strstr(buf, "<4>ERR AM0002 x"));
    shp_log_set_stream(NULL);
    fclose(f);
}

/* what a peer names (a host with a newline and a fake line after it, an
 * escape sequence) stays inside its one line */
static void test_log_escapes(void **state)
{
    char buf[512] = "";
    FILE *f = fmemopen(buf, sizeof(buf) - 1, "w");

    (void)state;
    shp_log_set_stream(f);
    shp_warn("sharpd of host %s registered",
             "n1\n[2026-01-01T00:00:00.000000] sharp_am[1] WARN job 5555 "
             "killed by uid 0\x1b[2J");
    fflush(f);
    assert_int_equal(strchr(buf, '\n') - buf, (long)strlen(buf) - 1);
    assert_null(strchr(buf, '\x1b'));
    assert_non_null(strstr(buf, "n1\\x0a[2026"));
    assert_non_null(strstr(buf, "\\x1b[2J"));
    shp_log_set_stream(NULL);
    fclose(f);
}

/* the journal format only when stderr is the stream JOURNAL_STREAM names */
static void test_log_detect_journal(void **state)
{
    struct stat st;
    char js[64];

    (void)state;
    assert_int_equal(fstat(STDERR_FILENO, &st), 0);
    unsetenv("JOURNAL_STREAM");
    assert_int_equal(shp_log_detect_journal(), 0);
    snprintf(js, sizeof(js), "%llu:%llu", (unsigned long long)st.st_dev,
             (unsigned long long)st.st_ino + 1);
    setenv("JOURNAL_STREAM", js, 1);
    assert_int_equal(shp_log_detect_journal(), 0);
    snprintf(js, sizeof(js), "%llu:%llu", (unsigned long long)st.st_dev,
             (unsigned long long)st.st_ino);
    setenv("JOURNAL_STREAM", js, 1);
    assert_int_equal(shp_log_detect_journal(), 1);
    shp_log_set_journal(0);
    unsetenv("JOURNAL_STREAM");
}

static void test_log_parse(void **state)
{
    (void)state;
    assert_int_equal(shp_log_level_parse("debug"), SHP_LOG_DEBUG);
    assert_int_equal(shp_log_level_parse("WARNING"), SHP_LOG_WARN);
    assert_int_equal(shp_log_level_parse("0"), SHP_LOG_FATAL);
    assert_int_equal(shp_log_level_parse("5"), SHP_LOG_TRACE);
    assert_int_equal(shp_log_level_parse("off"), SHP_LOG_OFF);
    assert_int_equal(shp_log_level_parse("6"), -2);
    assert_int_equal(shp_log_level_parse(""), -2);
    assert_int_equal(shp_log_level_parse("loud"), -2);
    assert_string_equal(shp_log_level_name(SHP_LOG_INFO), "info");
}

static void test_log_sparse(void **state)
{
    int i;

    (void)state;
    shp_log_set_handler(capture, NULL);
    shp_log_set_level(SHP_LOG_INFO);
    seen_count = 0;
    for (i = 0; i < 100; i++) {
        shp_warn_sparse(200, "flood %d", i);
    }
    assert_int_equal(seen_count, 1);
    usleep(250 * 1000);
    shp_warn_sparse(200, "flood %d", 100);
    assert_int_equal(seen_count, 2);
    /* this is a different call site: not limited by the one above */
    shp_warn_sparse(200, "other");
    assert_int_equal(seen_count, 3);
    shp_log_set_handler(NULL, NULL);
}

static void test_sparse_counts_suppressed(void **state)
{
    shp_log_sparse_t s = {0};
    int i;

    (void)state;
    assert_int_equal(shp_log_sparse_check(&s, 1000), 1);
    for (i = 0; i < 5; i++) {
        assert_int_equal(shp_log_sparse_check(&s, 1000), 0);
    }
    s.next_ns = 0; /* interval over */
    assert_int_equal(shp_log_sparse_check(&s, 1000), 6);
}

static void test_deadlines(void **state)
{
    uint64_t d;

    (void)state;
    assert_int_equal(shp_deadline_left_ms(shp_deadline_ms(-1)), -1);
    assert_false(shp_deadline_passed(shp_deadline_ms(-1)));
    d = shp_deadline_ms(1000);
    assert_true(shp_deadline_left_ms(d) > 900);
    assert_true(shp_deadline_left_ms(d) <= 1000);
    d = shp_deadline_ms(0);
    assert_true(shp_deadline_passed(d));
    assert_int_equal(shp_deadline_left_ms(d), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_status_strings),
        cmocka_unit_test(test_status_from_errno),
        cmocka_unit_test(test_log_levels),
        cmocka_unit_test(test_log_preserves_errno),
        cmocka_unit_test(test_log_escapes),
        cmocka_unit_test(test_log_detect_journal),
        cmocka_unit_test(test_log_parse),
        cmocka_unit_test(test_log_sparse),
        cmocka_unit_test(test_sparse_counts_suppressed),
        cmocka_unit_test(test_deadlines),
    };
    return cmocka_run_group_tests_name("status_log", tests, NULL, NULL);
}
