/*
 * The manager's own state on disk: what no AN or sharpd can tell a
 * restarted manager (docs/am.md, "State").  One SQLite database in WAL
 * mode, STATE_DIR/am.db, schema versioned with PRAGMA user_version:
 *
 *   counters  name -> integer: the epoch, the next group id to resume from
 *   settings  name -> text: the topology in use (path, hash), ...
 *   jobs, job_hosts  the scheduler's reservations (their uid, key, quotas
 *             and hosts, with each host's hold)
 *
 * Every write is committed (synchronous=FULL) before the function returns,
 * in one transaction, unless the caller opened one (shp_am_store_begin):
 * a reply that depends on a write is sent only after it.  Raw SQLite, no
 * knowledge of the manager's tables: am_persist.c maps them.
 */
#ifndef SHP_AM_AM_STORE_H
#define SHP_AM_AM_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

#define SHP_AM_STORE_FILE "am.db"
#define SHP_AM_STORE_VERSION 1 /* PRAGMA user_version of this schema */

typedef struct shp_am_store shp_am_store_t;

/* A reservation as stored: hosts by name (the topology may change while
 * the manager is down), each with its hold. */
typedef struct shp_am_store_job {
    uint64_t job_id;
    uint32_t uid;
    uint8_t key[32];
    unsigned max_groups, osts;
    uint32_t payload;
    int nhosts;
    char **hosts;
    uint8_t *held;
} shp_am_store_job_t;

/* Opens (creates, mode 0600, in `dir` made 0700 when missing) the database
 * and checks it: a file that is not a database, fails quick_check, or has
 * a newer schema than this program's is refused, err naming the file and
 * the way out (--reset-state).  `reset`: an existing database (and its
 * -wal, -shm) is first moved aside to am.db.corrupt-YYYYmmddTHHMMSS and a
 * new one begins. */
SHP_WUR shp_status_t shp_am_store_open(const char *dir, int reset,
                                       shp_am_store_t **out, char *err,
                                       size_t errlen);
void shp_am_store_close(shp_am_store_t *s);
const char *shp_am_store_path(const shp_am_store_t *s);
/* the database was created by this open (nothing of an earlier run) */
int shp_am_store_fresh(const shp_am_store_t *s);
/* the last error of a failed call, for logs and replies */
const char *shp_am_store_error(const shp_am_store_t *s);

/* One transaction around several writes (no nesting). */
SHP_WUR shp_status_t shp_am_store_begin(shp_am_store_t *s);
SHP_WUR shp_status_t shp_am_store_commit(shp_am_store_t *s);
void shp_am_store_rollback(shp_am_store_t *s);

/* The epoch: the last one handed out (0: none yet), and a new one,
 * committed before it is returned: max(last + 1, floor).  It only grows. */
uint64_t shp_am_store_epoch(shp_am_store_t *s);
SHP_WUR shp_status_t shp_am_store_epoch_advance(shp_am_store_t *s,
                                                uint64_t floor,
                                                uint64_t *epoch);

/* Counters by name; SHP_ERR_NOT_FOUND when never set. */
SHP_WUR shp_status_t shp_am_store_counter(shp_am_store_t *s, const char *name,
                                          uint64_t *v);
SHP_WUR shp_status_t shp_am_store_counter_set(shp_am_store_t *s,
                                              const char *name, uint64_t v);

/* Settings by name; SHP_ERR_NOT_FOUND when unset, SHP_ERR_TOO_LARGE when
 * the value does not fit `len` (with its NUL).  value NULL: unset. */
SHP_WUR shp_status_t shp_am_store_setting(shp_am_store_t *s, const char *name,
                                          char *buf, size_t len);
SHP_WUR shp_status_t shp_am_store_setting_set(shp_am_store_t *s,
                                              const char *name,
                                              const char *value);

/* The settings whose name begins with `prefix`, in name order: fn for
 * each, at most `max` of them (more: SHP_ERR_TOO_LARGE before any call);
 * name and value are the store's, valid during the call. */
typedef void shp_am_store_setting_fn(void *arg, const char *name,
                                     const char *value);
SHP_WUR shp_status_t shp_am_store_settings(shp_am_store_t *s,
                                           const char *prefix, unsigned max,
                                           shp_am_store_setting_fn *fn,
                                           void *arg);

/* Reservations: put replaces the job's row and hosts; del forgets it (no
 * row: SHP_OK).  jobs() calls fn for each stored job in id order, at most
 * `max` of them (more: SHP_ERR_TOO_LARGE before any call) and `max_hosts`
 * hosts each (more: SHP_ERR_TOO_LARGE at that job, the calls before it
 * made: the caller gives up the whole load); the job's memory is the
 * store's, valid during the call. */
SHP_WUR shp_status_t shp_am_store_job_put(shp_am_store_t *s,
                                          const shp_am_store_job_t *j);
SHP_WUR shp_status_t shp_am_store_job_del(shp_am_store_t *s, uint64_t job_id);
typedef void shp_am_store_job_fn(void *arg, const shp_am_store_job_t *j);
SHP_WUR shp_status_t shp_am_store_jobs(shp_am_store_t *s, unsigned max,
                                       unsigned max_hosts,
                                       shp_am_store_job_fn *fn, void *arg);

#endif
