/*
 * Logging.
 *
 * The level is checked before anything is formatted; trace messages are
 * compiled out unless SHP_ENABLE_TRACE is defined.  errno is preserved across
 * every log call, so `%m` and a following `return -errno` both work.
 *
 * Daemon errors carry a stable, greppable ID (shp_error_id("AN0101", ...)
 * prints "ERR AN0101 ..."): IDs are documented and never reused.
 * Data-path warnings use shp_warn_sparse(), which prints at most once per
 * interval per call site and says how many it suppressed.
 */
#ifndef SHP_COMMON_LOG_H
#define SHP_COMMON_LOG_H

#include <stdint.h>
#include <stdio.h>

typedef enum shp_log_level {
    SHP_LOG_OFF = -1,
    SHP_LOG_FATAL = 0,
    SHP_LOG_ERROR = 1,
    SHP_LOG_WARN = 2,
    SHP_LOG_INFO = 3,
    SHP_LOG_DEBUG = 4,
    SHP_LOG_TRACE = 5,
} shp_log_level_t;

/* Current threshold: messages with level <= shp_log_level are emitted. */
extern int shp_log_level;

/* Receives every emitted message (already formatted, no newline). */
typedef void (*shp_log_handler_t)(int level, const char *err_id,
                                  const char *msg, void *arg);

/* Name printed in front of every line ("sharp_an", "sharpd", ...). */
void shp_log_set_component(const char *component);
void shp_log_set_level(int level);
/* Where lines go when no handler is set (default: stderr). */
void shp_log_set_stream(FILE *stream);
/* Replace the output; NULL restores the stream.  Tests use it to fail on
 * unexpected warnings. */
void shp_log_set_handler(shp_log_handler_t handler, void *arg);
/* Prefix lines with "<N>" syslog priorities for the systemd journal. */
void shp_log_set_journal(int enable);
/* Journal format when stderr is systemd's journal stream (JOURNAL_STREAM
 * names it); returns whether it is on. */
int shp_log_detect_journal(void);

/* Parse "error", "warn", "3", ...; returns -2 if not a level. */
int shp_log_level_parse(const char *str);
const char *shp_log_level_name(int level);

void shp_log_write(int level, const char *err_id, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Rate limiting state, one per call site. */
typedef struct shp_log_sparse {
    uint64_t next_ns;
    unsigned suppressed;
} shp_log_sparse_t;

/* Returns the number of suppressed messages + 1 if this one may be printed,
 * 0 if it must be suppressed. */
unsigned shp_log_sparse_check(shp_log_sparse_t *s, uint64_t interval_ms);

#define shp_log(_level, _id, _fmt, ...)                                        \
    do {                                                                       \
        if ((int)(_level) <= shp_log_level) {                                  \
            shp_log_write((_level), (_id), _fmt, ##__VA_ARGS__);               \
        }                                                                      \
    } while (0)

#define shp_fatal(_fmt, ...) shp_log(SHP_LOG_FATAL, NULL, _fmt, ##__VA_ARGS__)
#define shp_error(_fmt, ...) shp_log(SHP_LOG_ERROR, NULL, _fmt, ##__VA_ARGS__)
#define shp_error_id(_id, _fmt, ...)                                           \
    shp_log(SHP_LOG_ERROR, (_id), _fmt, ##__VA_ARGS__)
#define shp_warn(_fmt, ...) shp_log(SHP_LOG_WARN, NULL, _fmt, ##__VA_ARGS__)
#define shp_warn_id(_id, _fmt, ...)                                            \
    shp_log(SHP_LOG_WARN, (_id), _fmt, ##__VA_ARGS__)
#define shp_info(_fmt, ...) shp_log(SHP_LOG_INFO, NULL, _fmt, ##__VA_ARGS__)
#define shp_debug(_fmt, ...) shp_log(SHP_LOG_DEBUG, NULL, _fmt, ##__VA_ARGS__)
#ifdef SHP_ENABLE_TRACE
#define shp_trace(_fmt, ...) shp_log(SHP_LOG_TRACE, NULL, _fmt, ##__VA_ARGS__)
#else
#define shp_trace(_fmt, ...)                                                   \
    do {                                                                       \
        if (0) {                                                               \
            shp_log_write(SHP_LOG_TRACE, NULL, _fmt, ##__VA_ARGS__);           \
        }                                                                      \
    } while (0)
#endif

/* At most one warning per `_interval_ms` from this call site. */
#define shp_warn_sparse(_interval_ms, _fmt, ...)                               \
    do {                                                                       \
        static shp_log_sparse_t _shp_sparse;                                   \
        unsigned _shp_n;                                                       \
        if (SHP_LOG_WARN <= shp_log_level &&                                   \
            (_shp_n = shp_log_sparse_check(&_shp_sparse, (_interval_ms)))) {   \
            if (_shp_n > 1) {                                                  \
                shp_log_write(SHP_LOG_WARN, NULL,                              \
                              _fmt " (%u similar suppressed)", ##__VA_ARGS__,  \
                              _shp_n - 1);                                     \
            } else {                                                           \
                shp_log_write(SHP_LOG_WARN, NULL, _fmt, ##__VA_ARGS__);        \
            }                                                                  \
        }                                                                      \
    } while (0)

#endif
