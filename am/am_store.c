/*
 * The manager's state database (am/am_store.h): SQLite, WAL, one file.
 *
 * SQLite rather than a file format of our own: atomic commits that
 * survive a crash at any point (the write-ahead log), a checked format
 * (quick_check), and the schema's version in its header.  Each write is
 * durable when its call returns (synchronous=FULL): a reply that depends
 * on it follows.
 */
#include "am/am_store.h"

#include "core/log.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct shp_am_store {
    sqlite3 *db;
    char path[1024];
    int fresh;
    int in_tx; /* inside shp_am_store_begin */
    char error[1536];
};

static const char am_store_schema[] =
    "CREATE TABLE counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);"
    "CREATE TABLE settings (name TEXT PRIMARY KEY, value TEXT NOT NULL);"
    "CREATE TABLE jobs (job_id INTEGER PRIMARY KEY, uid INTEGER NOT NULL,"
    " key BLOB NOT NULL, max_groups INTEGER NOT NULL, osts INTEGER NOT NULL,"
    " payload INTEGER NOT NULL);"
    "CREATE TABLE job_hosts (job_id INTEGER NOT NULL REFERENCES jobs(job_id)"
    " ON DELETE CASCADE, pos INTEGER NOT NULL, host TEXT NOT NULL,"
    " held INTEGER NOT NULL, PRIMARY KEY (job_id, pos));"
    "PRAGMA user_version = 1;";

#define AM_STORE_WAYOUT                                                        \
    "; sharp_am --reset-state moves it aside and starts with an empty "        \
    "state (the reservations and settings in it are lost; docs/admin.md)"

const char *shp_am_store_path(const shp_am_store_t *s)
{
    return s->path;
}

int shp_am_store_fresh(const shp_am_store_t *s)
{
    return s->fresh;
}

const char *shp_am_store_error(const shp_am_store_t *s)
{
    return s->error;
}

static shp_status_t am_store_fail(shp_am_store_t *s, const char *what)
{
    snprintf(s->error, sizeof(s->error), "state database %s: %s: %s", s->path,
             what, sqlite3_errmsg(s->db));
    return SHP_ERR_IO;
}

static shp_status_t am_store_exec(shp_am_store_t *s, const char *sql)
{
    char *msg = NULL;
    if (sqlite3_exec(s->db, sql, NULL, NULL, &msg) != SQLITE_OK) {
        snprintf(s->error, sizeof(s->error), "state database %s: %s", s->path,
                 msg ? msg : sqlite3_errmsg(s->db));
        sqlite3_free(msg);
        return SHP_ERR_IO;
    }
    return SHP_OK;
}

shp_status_t shp_am_store_begin(shp_am_store_t *s)
{
    if (s->in_tx)
        return SHP_ERR_BUSY;
    shp_status_t st = am_store_exec(s, "BEGIN IMMEDIATE");
    s->in_tx = st == SHP_OK;
    return st;
}

shp_status_t shp_am_store_commit(shp_am_store_t *s)
{
    s->in_tx = 0;
    shp_status_t st = am_store_exec(s, "COMMIT");
    if (st != SHP_OK && !sqlite3_get_autocommit(s->db))
        (void)am_store_exec(s, "ROLLBACK");
    return st;
}

void shp_am_store_rollback(shp_am_store_t *s)
{
    s->in_tx = 0;
    if (!sqlite3_get_autocommit(s->db))
        (void)am_store_exec(s, "ROLLBACK");
}

/* A write of its own transaction, unless the caller holds one. */
static shp_status_t am_store_wbegin(shp_am_store_t *s)
{
    return s->in_tx ? SHP_OK : am_store_exec(s, "BEGIN IMMEDIATE");
}

static shp_status_t am_store_wend(shp_am_store_t *s, shp_status_t st)
{
    if (s->in_tx)
        return st;
    if (st == SHP_OK)
        return shp_am_store_commit(s);
    if (!sqlite3_get_autocommit(s->db)) {
        char keep[sizeof(s->error)];
        memcpy(keep, s->error, sizeof(keep));
        (void)am_store_exec(s, "ROLLBACK");
        memcpy(s->error, keep, sizeof(keep));
    }
    return st;
}

static shp_status_t am_store_prepare(shp_am_store_t *s, const char *sql,
                                     sqlite3_stmt **stmt)
{
    if (sqlite3_prepare_v2(s->db, sql, -1, stmt, NULL) != SQLITE_OK)
        return am_store_fail(s, "prepare");
    return SHP_OK;
}

/* Runs a statement that returns no row, then finalizes it. */
static shp_status_t am_store_step_done(shp_am_store_t *s, sqlite3_stmt *stmt)
{
    int rc = sqlite3_step(stmt);
    shp_status_t st = rc == SQLITE_DONE ? SHP_OK : am_store_fail(s, "write");
    sqlite3_finalize(stmt);
    return st;
}

/* The file and its -wal and -shm moved aside, to PATH.corrupt-DATE*. */
static shp_status_t am_store_move_aside(const char *path, char *err,
                                        size_t errlen)
{
    char stamp[48], to[1100], from[1100];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%SZ", &tm);
    /* never over an earlier one (two resets in a second) */
    size_t sl = strlen(stamp);
    for (int n = 1; n < 1000; n++) {
        snprintf(to, sizeof(to), "%s.corrupt-%s", path, stamp);
        if (access(to, F_OK) != 0)
            break;
        snprintf(stamp + sl, sizeof(stamp) - sl, ".%d", n);
    }
    static const char *const sfx[] = {"", "-wal", "-shm"};
    for (int k = 0; k < 3; k++) {
        snprintf(from, sizeof(from), "%s%s", path, sfx[k]);
        snprintf(to, sizeof(to), "%s.corrupt-%s%s", path, stamp, sfx[k]);
        if (rename(from, to) != 0 && errno != ENOENT) {
            snprintf(err, errlen, "cannot move %s aside to %s: %s", from, to,
                     strerror(errno));
            return SHP_ERR_IO;
        }
        if (k == 0 && access(to, F_OK) == 0)
            shp_warn("state database %s moved aside to %s (--reset-state)",
                     path, to);
    }
    return SHP_OK;
}

/* The directory (0700 when this makes it) and the file (0600, created
 * before SQLite opens it: its -wal and -shm take its mode). */
static shp_status_t am_store_file(shp_am_store_t *s, const char *dir, char *err,
                                  size_t errlen)
{
    struct stat sb;
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        snprintf(err, errlen, "cannot make the state directory %s: %s", dir,
                 strerror(errno));
        return SHP_ERR_IO;
    }
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        snprintf(err, errlen, "state_dir %s is not a directory", dir);
        return SHP_ERR_IO;
    }
    int fd =
        open(s->path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd >= 0) {
        s->fresh = 1;
        close(fd);
        return SHP_OK;
    }
    if (errno != EEXIST) {
        snprintf(err, errlen, "cannot create the state database %s: %s",
                 s->path, strerror(errno));
        return SHP_ERR_IO;
    }
    fd = open(s->path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        snprintf(err, errlen, "cannot open the state database %s: %s", s->path,
                 strerror(errno));
        return SHP_ERR_IO;
    }
    if (fstat(fd, &sb) == 0 && sb.st_size == 0)
        s->fresh = 1; /* made by an earlier start that died at once */
    close(fd);
    return SHP_OK;
}

/* The schema: created in a new file, checked in an old one. */
static shp_status_t am_store_check(shp_am_store_t *s, char *err, size_t errlen)
{
    sqlite3_stmt *stmt = NULL;
    int version = -1, rc;
    const char *why = NULL;
    char buf[256] = "";
    if (sqlite3_prepare_v2(s->db, "PRAGMA user_version", -1, &stmt, NULL) ==
            SQLITE_OK &&
        sqlite3_step(stmt) == SQLITE_ROW)
        version = sqlite3_column_int(stmt, 0);
    else
        snprintf(buf, sizeof(buf), "%s", sqlite3_errmsg(s->db));
    sqlite3_finalize(stmt);
    if (version < 0) {
        snprintf(err, errlen,
                 "state database %s is unreadable (%s)" AM_STORE_WAYOUT,
                 s->path, buf);
        return SHP_ERR_PARSE;
    }
    if (version > SHP_AM_STORE_VERSION) {
        snprintf(
            err, errlen,
            "state database %s has schema version %d, newer than this "
            "sharp_am's %d: run the sharp_am that wrote it" AM_STORE_WAYOUT,
            s->path, version, SHP_AM_STORE_VERSION);
        return SHP_ERR_VERSION;
    }
    if (sqlite3_prepare_v2(s->db, "PRAGMA quick_check", -1, &stmt, NULL) !=
        SQLITE_OK) {
        why = sqlite3_errmsg(s->db);
    } else if ((rc = sqlite3_step(stmt)) != SQLITE_ROW) {
        why = sqlite3_errmsg(s->db);
    } else {
        const char *r = (const char *)sqlite3_column_text(stmt, 0);
        if (!r || strcmp(r, "ok") != 0) {
            snprintf(buf, sizeof(buf), "quick_check: %s", r ? r : "?");
            why = buf;
        }
    }
    if (why) {
        snprintf(err, errlen,
                 "state database %s is corrupt (%s)" AM_STORE_WAYOUT, s->path,
                 why);
        sqlite3_finalize(stmt);
        return SHP_ERR_PARSE;
    }
    sqlite3_finalize(stmt);
    if (version == 0) {
        /* a new file (or one a start left empty): the schema */
        char *msg = NULL;
        if (sqlite3_exec(s->db, "BEGIN IMMEDIATE", NULL, NULL, NULL) !=
                SQLITE_OK ||
            sqlite3_exec(s->db, am_store_schema, NULL, NULL, &msg) !=
                SQLITE_OK ||
            sqlite3_exec(s->db, "COMMIT", NULL, NULL, &msg) != SQLITE_OK) {
            snprintf(err, errlen,
                     "state database %s: cannot create its tables "
                     "(%s)" AM_STORE_WAYOUT,
                     s->path, msg ? msg : sqlite3_errmsg(s->db));
            sqlite3_free(msg);
            return SHP_ERR_PARSE;
        }
        s->fresh = 1;
    }
    return SHP_OK;
}

shp_status_t shp_am_store_open(const char *dir, int reset, shp_am_store_t **out,
                               char *err, size_t errlen)
{
    shp_am_store_t *s = calloc(1, sizeof(*s));
    shp_status_t st;
    *out = NULL;
    if (!s)
        return SHP_ERR_NO_MEMORY;
    if ((size_t)snprintf(s->path, sizeof(s->path), "%s/%s", dir,
                         SHP_AM_STORE_FILE) >= sizeof(s->path)) {
        snprintf(err, errlen, "state_dir is too long");
        free(s);
        return SHP_ERR_INVALID_PARAM;
    }
    if (reset && (st = am_store_move_aside(s->path, err, errlen)) != SHP_OK)
        goto fail;
    if ((st = am_store_file(s, dir, err, errlen)) != SHP_OK)
        goto fail;
    if (sqlite3_open_v2(s->path, &s->db,
                        SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOFOLLOW,
                        NULL) != SQLITE_OK) {
        snprintf(err, errlen, "cannot open the state database %s: %s", s->path,
                 s->db ? sqlite3_errmsg(s->db) : "no memory");
        st = SHP_ERR_IO;
        goto fail;
    }
    sqlite3_extended_result_codes(s->db, 1);
    /* another manager writing the same file waits a little, then fails */
    sqlite3_busy_timeout(s->db, 2000);
    if ((st = am_store_check(s, err, errlen)) != SHP_OK)
        goto fail;
    {
        sqlite3_stmt *stmt = NULL;
        const char *mode = NULL;
        if (sqlite3_prepare_v2(s->db, "PRAGMA journal_mode=WAL", -1, &stmt,
                               NULL) == SQLITE_OK &&
            sqlite3_step(stmt) == SQLITE_ROW)
            mode = (const char *)sqlite3_column_text(stmt, 0);
        int wal = mode && !strcmp(mode, "wal");
        sqlite3_finalize(stmt);
        if (!wal) {
            snprintf(err, errlen, "state database %s: cannot use WAL mode: %s",
                     s->path, sqlite3_errmsg(s->db));
            st = SHP_ERR_IO;
            goto fail;
        }
    }
    if ((st = am_store_exec(s, "PRAGMA synchronous=FULL;"
                               "PRAGMA foreign_keys=ON")) != SHP_OK) {
        snprintf(err, errlen, "%s", s->error);
        goto fail;
    }
    *out = s;
    return SHP_OK;
fail:
    if (s->db)
        sqlite3_close(s->db);
    free(s);
    return st;
}

void shp_am_store_close(shp_am_store_t *s)
{
    if (!s)
        return;
    if (!sqlite3_get_autocommit(s->db))
        (void)am_store_exec(s, "ROLLBACK");
    sqlite3_close(s->db);
    free(s);
}

shp_status_t shp_am_store_counter(shp_am_store_t *s, const char *name,
                                  uint64_t *v)
{
    sqlite3_stmt *stmt;
    shp_status_t st = am_store_prepare(
        s, "SELECT value FROM counters WHERE name = ?1", &stmt);
    if (st != SHP_OK)
        return st;
    sqlite3_bind_text(stmt, 1, name, -1, SQLITE_STATIC);
    int rc = sqlite3_step(stmt);
    if (rc == SQLITE_ROW)
        *v = (uint64_t)sqlite3_column_int64(stmt, 0);
    else
        st = rc == SQLITE_DONE ? SHP_ERR_NOT_FOUND : am_store_fail(s, "read");
    sqlite3_finalize(stmt);
    return st;
}

static shp_status_t am_store_counter_write(shp_am_store_t *s, const char *name,
                                           uint64_t v)
{
    sqlite3_stmt *stmt;
    shp_status_t st = am_store_prepare(
        s, "INSERT OR REPLACE INTO counters (name, value) VALUES (?1, ?2)",
        &stmt);
    if (st != SHP_OK)
        return st;
    sqlite3_bind_text(stmt, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(stmt, 2, (sqlite3_int64)v);
    return am_store_step_done(s, stmt);
}

shp_status_t shp_am_store_counter_set(shp_am_store_t *s, const char *name,
                                      uint64_t v)
{
    shp_status_t st = am_store_wbegin(s);
    if (st != SHP_OK)
        return st;
    return am_store_wend(s, am_store_counter_write(s, name, v));
}

uint64_t shp_am_store_epoch(shp_am_store_t *s)
{
    uint64_t e = 0;
    if (shp_am_store_counter(s, "epoch", &e) != SHP_OK)
        e = 0;
    return e;
}

shp_status_t shp_am_store_epoch_advance(shp_am_store_t *s, uint64_t floor,
                                        uint64_t *epoch)
{
    uint64_t last = 0;
    shp_status_t st = am_store_wbegin(s);
    if (st != SHP_OK)
        return st;
    st = shp_am_store_counter(s, "epoch", &last);
    if (st == SHP_ERR_NOT_FOUND) {
        last = 0;
        st = SHP_OK;
    }
    uint64_t next = last + 1 > floor ? last + 1 : floor;
    if (st == SHP_OK && next > (uint64_t)INT64_MAX) {
        snprintf(s->error, sizeof(s->error),
                 "state database %s: the epoch is exhausted", s->path);
        st = SHP_ERR_TOO_LARGE;
    }
    if (st == SHP_OK)
        st = am_store_counter_write(s, "epoch", next);
    if ((st = am_store_wend(s, st)) == SHP_OK)
        *epoch = next;
    return st;
}

shp_status_t shp_am_store_setting(shp_am_store_t *s, const char *name,
                                  char *buf, size_t len)
{
    sqlite3_stmt *stmt;
    shp_status_t st = am_store_prepare(
        s, "SELECT value FROM settings WHERE name = ?1", &stmt);
    if (st != SHP_OK)
        return st;
    sqlite3_bind_text(stmt, 1, name, -1, SQLITE_STATIC);
    int rc = sqlite3_step(stmt);
    if (rc == SQLITE_ROW) {
        const char *v = (const char *)sqlite3_column_text(stmt, 0);
        int n = sqlite3_column_bytes(stmt, 0);
        if (!v || (size_t)n >= len)
            st = SHP_ERR_TOO_LARGE;
        else
            memcpy(buf, v, (size_t)n + 1);
    } else {
        st = rc == SQLITE_DONE ? SHP_ERR_NOT_FOUND : am_store_fail(s, "read");
    }
    sqlite3_finalize(stmt);
    return st;
}

shp_status_t shp_am_store_setting_set(shp_am_store_t *s, const char *name,
                                      const char *value)
{
    sqlite3_stmt *stmt;
    shp_status_t st = am_store_wbegin(s);
    if (st != SHP_OK)
        return st;
    st = am_store_prepare(s,
                          value ? "INSERT OR REPLACE INTO settings (name, "
                                  "value) VALUES (?1, ?2)"
                                : "DELETE FROM settings WHERE name = ?1",
                          &stmt);
    if (st == SHP_OK) {
        sqlite3_bind_text(stmt, 1, name, -1, SQLITE_STATIC);
        if (value)
            sqlite3_bind_text(stmt, 2, value, -1, SQLITE_STATIC);
        st = am_store_step_done(s, stmt);
    }
    return am_store_wend(s, st);
}

shp_status_t shp_am_store_settings(shp_am_store_t *s, const char *prefix,
                                   unsigned max, shp_am_store_setting_fn *fn,
                                   void *arg)
{
    sqlite3_stmt *stmt = NULL;
    shp_status_t st;
    int rc;
    /* substr, not LIKE: a name's _ and % are no patterns */
    if ((st = am_store_prepare(s,
                               "SELECT count(*) FROM settings WHERE "
                               "substr(name, 1, ?2) = ?1",
                               &stmt)) != SHP_OK)
        return st;
    sqlite3_bind_text(stmt, 1, prefix, -1, SQLITE_STATIC);
    sqlite3_bind_int(stmt, 2, (int)strlen(prefix));
    if (sqlite3_step(stmt) != SQLITE_ROW) {
        st = am_store_fail(s, "read");
        sqlite3_finalize(stmt);
        return st;
    }
    sqlite3_int64 n = sqlite3_column_int64(stmt, 0);
    sqlite3_finalize(stmt);
    if (n > (sqlite3_int64)max) {
        snprintf(s->error, sizeof(s->error),
                 "state database %s: %lld settings %s*, more than %u", s->path,
                 (long long)n, prefix, max);
        return SHP_ERR_TOO_LARGE;
    }
    if ((st = am_store_prepare(s,
                               "SELECT name, value FROM settings WHERE "
                               "substr(name, 1, ?2) = ?1 ORDER BY name",
                               &stmt)) != SHP_OK)
        return st;
    sqlite3_bind_text(stmt, 1, prefix, -1, SQLITE_STATIC);
    sqlite3_bind_int(stmt, 2, (int)strlen(prefix));
    while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
        const char *name = (const char *)sqlite3_column_text(stmt, 0);
        const char *value = (const char *)sqlite3_column_text(stmt, 1);
        fn(arg, name ? name : "", value ? value : "");
    }
    if (rc != SQLITE_DONE)
        st = am_store_fail(s, "read");
    sqlite3_finalize(stmt);
    return st;
}

static shp_status_t am_store_job_delete(shp_am_store_t *s, uint64_t job_id)
{
    sqlite3_stmt *stmt;
    shp_status_t st =
        am_store_prepare(s, "DELETE FROM jobs WHERE job_id = ?1", &stmt);
    if (st != SHP_OK)
        return st;
    sqlite3_bind_int64(stmt, 1, (sqlite3_int64)job_id);
    return am_store_step_done(s, stmt);
}

shp_status_t shp_am_store_job_del(shp_am_store_t *s, uint64_t job_id)
{
    shp_status_t st = am_store_wbegin(s);
    if (st != SHP_OK)
        return st;
    return am_store_wend(s, am_store_job_delete(s, job_id));
}

shp_status_t shp_am_store_job_put(shp_am_store_t *s,
                                  const shp_am_store_job_t *j)
{
    sqlite3_stmt *stmt = NULL;
    shp_status_t st = am_store_wbegin(s);
    if (st != SHP_OK)
        return st;
    if ((st = am_store_job_delete(s, j->job_id)) != SHP_OK)
        goto out;
    if ((st = am_store_prepare(s,
                               "INSERT INTO jobs (job_id, uid, key, "
                               "max_groups, osts, payload) VALUES "
                               "(?1, ?2, ?3, ?4, ?5, ?6)",
                               &stmt)) != SHP_OK)
        goto out;
    sqlite3_bind_int64(stmt, 1, (sqlite3_int64)j->job_id);
    sqlite3_bind_int64(stmt, 2, j->uid);
    sqlite3_bind_blob(stmt, 3, j->key, sizeof(j->key), SQLITE_STATIC);
    sqlite3_bind_int64(stmt, 4, j->max_groups);
    sqlite3_bind_int64(stmt, 5, j->osts);
    sqlite3_bind_int64(stmt, 6, j->payload);
    if ((st = am_store_step_done(s, stmt)) != SHP_OK)
        goto out;
    if ((st = am_store_prepare(s,
                               "INSERT INTO job_hosts (job_id, pos, host, "
                               "held) VALUES (?1, ?2, ?3, ?4)",
                               &stmt)) != SHP_OK)
        goto out;
    for (int h = 0; h < j->nhosts && st == SHP_OK; h++) {
        sqlite3_reset(stmt);
        sqlite3_bind_int64(stmt, 1, (sqlite3_int64)j->job_id);
        sqlite3_bind_int(stmt, 2, h);
        sqlite3_bind_text(stmt, 3, j->hosts[h], -1, SQLITE_STATIC);
        sqlite3_bind_int(stmt, 4, j->held[h] ? 1 : 0);
        if (sqlite3_step(stmt) != SQLITE_DONE)
            st = am_store_fail(s, "write");
    }
    sqlite3_finalize(stmt);
out:
    return am_store_wend(s, st);
}

static void am_store_job_clear(shp_am_store_job_t *j)
{
    for (int h = 0; h < j->nhosts; h++)
        free(j->hosts[h]);
    free(j->hosts);
    free(j->held);
    memset(j, 0, sizeof(*j));
}

/* The hosts of a job, in order, into j (at most max_hosts). */
static shp_status_t am_store_job_hosts(shp_am_store_t *s, sqlite3_stmt *hq,
                                       shp_am_store_job_t *j,
                                       unsigned max_hosts)
{
    int cap = 0, rc;
    sqlite3_reset(hq);
    sqlite3_bind_int64(hq, 1, (sqlite3_int64)j->job_id);
    while ((rc = sqlite3_step(hq)) == SQLITE_ROW) {
        const char *h = (const char *)sqlite3_column_text(hq, 0);
        if ((unsigned)j->nhosts >= max_hosts) {
            snprintf(s->error, sizeof(s->error),
                     "state database %s: job %" PRIu64
                     " has more than %u hosts",
                     s->path, j->job_id, max_hosts);
            return SHP_ERR_TOO_LARGE;
        }
        if (j->nhosts == cap) {
            int nc = cap ? 2 * cap : 8;
            char **nh = realloc(j->hosts, sizeof(char *) * (size_t)nc);
            if (!nh)
                return SHP_ERR_NO_MEMORY;
            j->hosts = nh;
            uint8_t *nd = realloc(j->held, (size_t)nc);
            if (!nd)
                return SHP_ERR_NO_MEMORY;
            j->held = nd;
            cap = nc;
        }
        if (!(j->hosts[j->nhosts] = strdup(h ? h : "")))
            return SHP_ERR_NO_MEMORY;
        j->held[j->nhosts++] = sqlite3_column_int(hq, 1) != 0;
    }
    return rc == SQLITE_DONE ? SHP_OK : am_store_fail(s, "read");
}

shp_status_t shp_am_store_jobs(shp_am_store_t *s, unsigned max,
                               unsigned max_hosts, shp_am_store_job_fn *fn,
                               void *arg)
{
    sqlite3_stmt *jq = NULL, *hq = NULL, *cq = NULL;
    shp_status_t st;
    shp_am_store_job_t j = {0};
    int rc;
    if ((st = am_store_prepare(s, "SELECT count(*) FROM jobs", &cq)) != SHP_OK)
        return st;
    if (sqlite3_step(cq) != SQLITE_ROW) {
        st = am_store_fail(s, "read");
        sqlite3_finalize(cq);
        return st;
    }
    sqlite3_int64 n = sqlite3_column_int64(cq, 0);
    sqlite3_finalize(cq);
    if (n > (sqlite3_int64)max) {
        snprintf(s->error, sizeof(s->error),
                 "state database %s: %lld reservations, more than max_jobs %u",
                 s->path, (long long)n, max);
        return SHP_ERR_TOO_LARGE;
    }
    if ((st = am_store_prepare(s,
                               "SELECT job_id, uid, key, max_groups, osts, "
                               "payload FROM jobs ORDER BY job_id",
                               &jq)) != SHP_OK ||
        (st = am_store_prepare(s,
                               "SELECT host, held FROM job_hosts WHERE "
                               "job_id = ?1 ORDER BY pos",
                               &hq)) != SHP_OK)
        goto out;
    while ((rc = sqlite3_step(jq)) == SQLITE_ROW) {
        am_store_job_clear(&j);
        j.job_id = (uint64_t)sqlite3_column_int64(jq, 0);
        j.uid = (uint32_t)sqlite3_column_int64(jq, 1);
        const void *key = sqlite3_column_blob(jq, 2);
        if (!key || sqlite3_column_bytes(jq, 2) != (int)sizeof(j.key)) {
            snprintf(s->error, sizeof(s->error),
                     "state database %s: job %" PRIu64 " has a bad key",
                     s->path, j.job_id);
            st = SHP_ERR_PARSE;
            goto out;
        }
        memcpy(j.key, key, sizeof(j.key));
        j.max_groups = (unsigned)sqlite3_column_int64(jq, 3);
        j.osts = (unsigned)sqlite3_column_int64(jq, 4);
        j.payload = (uint32_t)sqlite3_column_int64(jq, 5);
        if ((st = am_store_job_hosts(s, hq, &j, max_hosts)) != SHP_OK)
            goto out;
        fn(arg, &j);
    }
    if (rc != SQLITE_DONE)
        st = am_store_fail(s, "read");
out:
    am_store_job_clear(&j);
    sqlite3_finalize(jq);
    sqlite3_finalize(hq);
    return st;
}
