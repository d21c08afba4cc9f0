/*
 * The manager's state database (am/am_store.c): created and reopened,
 * reservations round trip, the epoch only grows, counters (where group
 * ids resume) survive a reopen, a newer schema or a corrupt file is
 * refused with the way out named, and --reset-state moves it aside.
 */
#include "tests/support/test_util.h"

#include "am/am_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[256];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/shp-store-XXXXXX");
    assert_non_null(mkdtemp(dir));
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
    return 0;
}

static shp_am_store_t *open_ok(const char *d, int reset)
{
    shp_am_store_t *s = NULL;
    char err[2048] = "";
    shp_status_t st = shp_am_store_open(d, reset, &s, err, sizeof(err));
    if (st != SHP_OK)
        fail_msg("open %s: %s", d, err);
    return s;
}

/* a new directory (0700), a new file (0600), WAL; reopened: not fresh */
static void test_create_reopen(void **state)
{
    (void)state;
    char d[300], f[400];
    struct stat sb;
    snprintf(d, sizeof(d), "%s/state", dir);
    shp_am_store_t *s = open_ok(d, 0);
    assert_true(shp_am_store_fresh(s));
    snprintf(f, sizeof(f), "%s/am.db", d);
    assert_string_equal(shp_am_store_path(s), f);
    assert_int_equal(stat(d, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0700);
    assert_int_equal(stat(f, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0600);
    assert_int_equal(shp_am_store_setting_set(s, "topology", "/x/t.ibnd"),
                     SHP_OK);
    shp_am_store_close(s);
    s = open_ok(d, 0);
    assert_false(shp_am_store_fresh(s));
    char v[64];
    assert_int_equal(shp_am_store_setting(s, "topology", v, sizeof(v)), SHP_OK);
    assert_string_equal(v, "/x/t.ibnd");
    assert_int_equal(shp_am_store_setting(s, "topology", v, 4),
                     SHP_ERR_TOO_LARGE);
    assert_int_equal(shp_am_store_setting(s, "nothing", v, sizeof(v)),
                     SHP_ERR_NOT_FOUND);
    assert_int_equal(shp_am_store_setting_set(s, "topology", NULL), SHP_OK);
    assert_int_equal(shp_am_store_setting(s, "topology", v, sizeof(v)),
                     SHP_ERR_NOT_FOUND);
    shp_am_store_close(s);
    /* the journal mode is WAL, in the file */
    sqlite3 *db;
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_open(f, &db), SQLITE_OK);
    assert_int_equal(
        sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &st, NULL),
        SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(st, 0), "wal");
    sqlite3_finalize(st);
    sqlite3_close(db);
}

/* the epoch strictly grows, across reopens, and never below the floor */
static void test_epoch(void **state)
{
    (void)state;
    uint64_t e1, e2, e3;
    shp_am_store_t *s = open_ok(dir, 0);
    assert_int_equal(shp_am_store_epoch(s), 0);
    assert_int_equal(shp_am_store_epoch_advance(s, 0, &e1), SHP_OK);
    assert_int_equal(e1, 1);
    assert_int_equal(shp_am_store_epoch(s), 1);
    shp_am_store_close(s);
    s = open_ok(dir, 0);
    assert_int_equal(shp_am_store_epoch(s), 1);
    assert_int_equal(shp_am_store_epoch_advance(s, 0, &e2), SHP_OK);
    assert_true(e2 > e1);
    assert_int_equal(shp_am_store_epoch_advance(s, 1000, &e3), SHP_OK);
    assert_int_equal(e3, 1000);
    assert_int_equal(shp_am_store_epoch_advance(s, 5, &e3), SHP_OK);
    assert_int_equal(e3, 1001);
    shp_am_store_close(s);
}

/* a counter (where group ids resume) survives a reopen; a transaction
 * rolled back leaves nothing */
static void test_counters(void **state)
{
    (void)state;
    uint64_t v = 0;
    shp_am_store_t *s = open_ok(dir, 0);
    assert_int_equal(shp_am_store_counter(s, "group_next", &v),
                     SHP_ERR_NOT_FOUND);
    assert_int_equal(shp_am_store_counter_set(s, "group_next", 4097), SHP_OK);
    assert_int_equal(shp_am_store_begin(s), SHP_OK);
    assert_int_equal(shp_am_store_counter_set(s, "group_next", 9), SHP_OK);
    shp_am_store_rollback(s);
    shp_am_store_close(s);
    s = open_ok(dir, 0);
    assert_int_equal(shp_am_store_counter(s, "group_next", &v), SHP_OK);
    assert_int_equal(v, 4097);
    shp_am_store_close(s);
}

static void on_setting(void *arg, const char *name, const char *value)
{
    char *out = arg;
    size_t n = strlen(out);
    snprintf(out + n, 512 - n, "%s=%s;", name, value);
}

/* the settings of a prefix, in name order, after a reopen; a name's _ and
 * % are no patterns; more than max: refused before any call */
static void test_settings_prefix(void **state)
{
    (void)state;
    char out[512] = "";
    shp_am_store_t *s = open_ok(dir, 0);
    assert_int_equal(shp_am_store_setting_set(s, "an_drain:leaf02", "b"),
                     SHP_OK);
    assert_int_equal(shp_am_store_setting_set(s, "an_drain:leaf01", "a"),
                     SHP_OK);
    assert_int_equal(shp_am_store_setting_set(s, "anXdrain:leaf03", "x"),
                     SHP_OK);
    assert_int_equal(shp_am_store_setting_set(s, "an_drain", "short"), SHP_OK);
    assert_int_equal(shp_am_store_setting_set(s, "topology", "/t"), SHP_OK);
    shp_am_store_close(s);
    s = open_ok(dir, 0);
    assert_int_equal(shp_am_store_settings(s, "an_drain:", 10, on_setting, out),
                     SHP_OK);
    assert_string_equal(out, "an_drain:leaf01=a;an_drain:leaf02=b;");
    out[0] = '\0';
    assert_int_equal(shp_am_store_settings(s, "an_drain:", 1, on_setting, out),
                     SHP_ERR_TOO_LARGE);
    assert_string_equal(out, "");
    assert_int_equal(shp_am_store_setting_set(s, "an_drain:leaf01", NULL),
                     SHP_OK);
    assert_int_equal(shp_am_store_settings(s, "an_drain:", 1, on_setting, out),
                     SHP_OK);
    assert_string_equal(out, "an_drain:leaf02=b;");
    out[0] = '\0';
    assert_int_equal(
        shp_am_store_settings(s, "tree_freeze:", 0, on_setting, out), SHP_OK);
    assert_string_equal(out, "");
    shp_am_store_close(s);
}

typedef struct {
    int n;
    shp_am_store_job_t j;
    char hosts[4][32];
    uint8_t held[4];
} seen_t;

static void on_job(void *arg, const shp_am_store_job_t *j)
{
    seen_t *s = arg;
    s->n++;
    s->j = *j;
    for (int h = 0; h < j->nhosts && h < 4; h++) {
        snprintf(s->hosts[h], sizeof(s->hosts[h]), "%s", j->hosts[h]);
        s->held[h] = j->held[h];
    }
}

/* a reservation comes back as it was put; put again replaces; del forgets;
 * more than the limits: refused */
static void test_reservation(void **state)
{
    (void)state;
    char *hosts[] = {"n00001", "n00003", "n00005"};
    uint8_t held[] = {1, 0, 1};
    shp_am_store_job_t j = {.job_id = UINT64_MAX - 3,
                            .uid = 65534,
                            .max_groups = 7,
                            .osts = 2,
                            .payload = 4096,
                            .nhosts = 3,
                            .hosts = hosts,
                            .held = held};
    for (int b = 0; b < 32; b++)
        j.key[b] = (uint8_t)(b * 7 + 1);
    shp_am_store_t *s = open_ok(dir, 0);
    assert_int_equal(shp_am_store_job_put(s, &j), SHP_OK);
    shp_am_store_close(s);
    s = open_ok(dir, 0);
    seen_t seen = {0};
    assert_int_equal(shp_am_store_jobs(s, 10, 10, on_job, &seen), SHP_OK);
    assert_int_equal(seen.n, 1);
    assert_true(seen.j.job_id == UINT64_MAX - 3);
    assert_int_equal(seen.j.uid, 65534);
    assert_memory_equal(seen.j.key, j.key, 32);
    assert_int_equal(seen.j.max_groups, 7);
    assert_int_equal(seen.j.osts, 2);
    assert_int_equal(seen.j.payload, 4096);
    assert_int_equal(seen.j.nhosts, 3);
    assert_string_equal(seen.hosts[1], "n00003");
    assert_int_equal(seen.held[0], 1);
    assert_int_equal(seen.held[1], 0);
    assert_int_equal(seen.held[2], 1);
    /* replaced: one host fewer, all held */
    held[1] = 1;
    j.nhosts = 2;
    assert_int_equal(shp_am_store_job_put(s, &j), SHP_OK);
    memset(&seen, 0, sizeof(seen));
    assert_int_equal(shp_am_store_jobs(s, 10, 10, on_job, &seen), SHP_OK);
    assert_int_equal(seen.n, 1);
    assert_int_equal(seen.j.nhosts, 2);
    assert_int_equal(seen.held[1], 1);
    /* limits of what is loaded */
    assert_int_equal(shp_am_store_jobs(s, 0, 10, on_job, &seen),
                     SHP_ERR_TOO_LARGE);
    assert_int_equal(shp_am_store_jobs(s, 10, 1, on_job, &seen),
                     SHP_ERR_TOO_LARGE);
    assert_non_null(strstr(shp_am_store_error(s), "more than 1 hosts"));
    assert_int_equal(shp_am_store_job_del(s, j.job_id), SHP_OK);
    assert_int_equal(shp_am_store_job_del(s, j.job_id), SHP_OK);
    memset(&seen, 0, sizeof(seen));
    assert_int_equal(shp_am_store_jobs(s, 10, 10, on_job, &seen), SHP_OK);
    assert_int_equal(seen.n, 0);
    shp_am_store_close(s);
}

/* the files am.db.corrupt-* in dir */
static int moved_aside(void)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d)))
        n += !strncmp(e->d_name, "am.db.corrupt-", 14) &&
             !strchr(e->d_name + 14, '-');
    closedir(d);
    return n;
}

/* a database of a newer schema: refused, naming the file and the way out;
 * reset moves it aside and starts clean */
static void test_newer(void **state)
{
    (void)state;
    char f[400], err[2048];
    shp_am_store_t *s = open_ok(dir, 0);
    assert_int_equal(shp_am_store_counter_set(s, "group_next", 77), SHP_OK);
    shp_am_store_close(s);
    snprintf(f, sizeof(f), "%s/am.db", dir);
    sqlite3 *db;
    assert_int_equal(sqlite3_open(f, &db), SQLITE_OK);
    assert_int_equal(
        sqlite3_exec(db, "PRAGMA user_version = 99", NULL, NULL, NULL),
        SQLITE_OK);
    sqlite3_close(db);
    s = NULL;
    assert_int_equal(shp_am_store_open(dir, 0, &s, err, sizeof(err)),
                     SHP_ERR_VERSION);
    assert_null(s);
    assert_non_null(strstr(err, f));
    assert_non_null(strstr(err, "version 99"));
    assert_non_null(strstr(err, "--reset-state"));
    s = open_ok(dir, 1);
    assert_true(shp_am_store_fresh(s));
    uint64_t v;
    assert_int_equal(shp_am_store_counter(s, "group_next", &v),
                     SHP_ERR_NOT_FOUND);
    shp_am_store_close(s);
    assert_int_equal(moved_aside(), 1);
}

/* a file that is not a database, and one damaged inside: refused */
static void test_corrupt(void **state)
{
    (void)state;
    char f[400], err[2048];
    snprintf(f, sizeof(f), "%s/am.db", dir);
    int fd = open(f, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    const char junk[] = "this is not a database, it is a file of text that "
                        "an editor or a broken disk left here............";
    for (int i = 0; i < 100; i++)
        assert_int_equal(write(fd, junk, sizeof(junk)), (ssize_t)sizeof(junk));
    close(fd);
    shp_am_store_t *s = NULL;
    assert_int_equal(shp_am_store_open(dir, 0, &s, err, sizeof(err)),
                     SHP_ERR_PARSE);
    assert_null(s);
    assert_non_null(strstr(err, f));
    assert_non_null(strstr(err, "--reset-state"));
    s = open_ok(dir, 1);
    assert_true(shp_am_store_fresh(s));
    /* many rows, then pages of the table overwritten with junk */
    char *hosts[] = {"n00001"};
    uint8_t held[] = {1};
    shp_am_store_job_t j = {.nhosts = 1, .hosts = hosts, .held = held};
    assert_int_equal(shp_am_store_begin(s), SHP_OK);
    for (uint64_t id = 1; id <= 2000; id++) {
        j.job_id = id;
        assert_int_equal(shp_am_store_job_put(s, &j), SHP_OK);
    }
    assert_int_equal(shp_am_store_commit(s), SHP_OK);
    shp_am_store_close(s); /* the last close checkpoints the WAL */
    fd = open(f, O_WRONLY);
    assert_true(fd >= 0);
    for (off_t off = 4096 * 2; off < 4096 * 12; off += sizeof(junk))
        assert_int_equal(pwrite(fd, junk, sizeof(junk), off),
                         (ssize_t)sizeof(junk));
    close(fd);
    s = NULL;
    assert_int_equal(shp_am_store_open(dir, 0, &s, err, sizeof(err)),
                     SHP_ERR_PARSE);
    assert_non_null(strstr(err, "corrupt"));
    assert_non_null(strstr(err, "--reset-state"));
    s = open_ok(dir, 1);
    seen_t seen = {0};
    assert_int_equal(shp_am_store_jobs(s, 10, 10, on_job, &seen), SHP_OK);
    assert_int_equal(seen.n, 0);
    shp_am_store_close(s);
    assert_true(moved_aside() >= 1);
}

/* a state_dir that cannot be made: a clear error, no crash */
static void test_bad_dir(void **state)
{
    (void)state;
    char d[300], err[2048] = "";
    shp_am_store_t *s = NULL;
    snprintf(d, sizeof(d), "%s/no/such/dir", dir);
    assert_int_equal(shp_am_store_open(d, 0, &s, err, sizeof(err)), SHP_ERR_IO);
    assert_non_null(strstr(err, d));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_create_reopen, setup, teardown),
        cmocka_unit_test_setup_teardown(test_epoch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_counters, setup, teardown),
        cmocka_unit_test_setup_teardown(test_settings_prefix, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reservation, setup, teardown),
        cmocka_unit_test_setup_teardown(test_newer, setup, teardown),
        cmocka_unit_test_setup_teardown(test_corrupt, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_dir, setup, teardown),
    };
    return cmocka_run_group_tests_name("am_store", tests, NULL, NULL);
}
