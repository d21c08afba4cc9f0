#include "core/log.h"

#include "core/time.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

int shp_log_level = SHP_LOG_INFO;

static const char *shp_log_component = "sharp";
static FILE *shp_log_stream;
static shp_log_handler_t shp_log_handler;
static void *shp_log_handler_arg;
static int shp_log_journal;
static pthread_mutex_t shp_log_lock = PTHREAD_MUTEX_INITIALIZER;

static const char *const shp_log_names[] = {"fatal", "error", "warn",
                                            "info",  "debug", "trace"};
static const char *const shp_log_tags[] = {"FATAL", "ERR", "WARN",
                                           "INFO",  "DBG", "TRACE"};
/* syslog priorities: crit, err, warning, info, debug, debug */
static const int shp_log_prio[] = {2, 3, 4, 6, 7, 7};

void shp_log_set_component(const char *component)
{
    shp_log_component = component;
}

void shp_log_set_level(int level)
{
    if (level < SHP_LOG_OFF) {
        level = SHP_LOG_OFF;
    } else if (level > SHP_LOG_TRACE) {
        level = SHP_LOG_TRACE;
    }
    shp_log_level = level;
}

void shp_log_set_stream(FILE *stream)
{
    shp_log_stream = stream;
}

void shp_log_set_handler(shp_log_handler_t handler, void *arg)
{
    shp_log_handler = handler;
    shp_log_handler_arg = arg;
}

void shp_log_set_journal(int enable)
{
    shp_log_journal = enable;
}

int shp_log_detect_journal(void)
{
    /* systemd sets JOURNAL_STREAM=dev:inode of the stream it connected
     * stderr to; anything else (a terminal, a file) keeps time stamps */
    const char *js = getenv("JOURNAL_STREAM");
    unsigned long long dev, ino;
    struct stat st;

    if (js != NULL && sscanf(js, "%llu:%llu", &dev, &ino) == 2 &&
        fstat(STDERR_FILENO, &st) == 0 &&
        (unsigned long long)st.st_dev == dev &&
        (unsigned long long)st.st_ino == ino) {
        shp_log_journal = 1;
    }
    return shp_log_journal;
}

int shp_log_level_parse(const char *str)
{
    char *end;
    long v;
    int i;

    if (str == NULL || *str == '\0') {
        return -2;
    }
    if (!strcasecmp(str, "off") || !strcasecmp(str, "none")) {
        return SHP_LOG_OFF;
    }
    for (i = 0; i <= SHP_LOG_TRACE; i++) {
        if (!strcasecmp(str, shp_log_names[i])) {
            return i;
        }
    }
    if (!strcasecmp(str, "warning")) {
        return SHP_LOG_WARN;
    }
    errno = 0;
    v = strtol(str, &end, 10);
    if (errno == 0 && *end == '\0' && v >= SHP_LOG_OFF && v <= SHP_LOG_TRACE) {
        return (int)v;
    }
    return -2;
}

const char *shp_log_level_name(int level)
{
    if (level < 0 || level > SHP_LOG_TRACE) {
        return "off";
    }
    return shp_log_names[level];
}

/* Control characters (a newline in a peer's host name, an escape sequence)
 * as \xNN: one log call stays one line, and nothing a peer says can plant
 * a line of its own or drive a terminal. */
static void shp_log_escape(const char *in, char *out, size_t outlen)
{
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)in;
         *p != '\0' && o + 5 < outlen; p++) {
        if (*p < 0x20 || *p == 0x7f) {
            out[o++] = '\\';
            out[o++] = 'x';
            out[o++] = hex[*p >> 4];
            out[o++] = hex[*p & 15];
        } else {
            out[o++] = (char)*p;
        }
    }
    out[o] = '\0';
}

void shp_log_write(int level, const char *err_id, const char *fmt, ...)
{
    int saved_errno = errno;
    char raw[1024], msg[4096];
    char stamp[32];
    struct timeval tv;
    struct tm tm;
    FILE *out;
    va_list ap;

    if (level < 0) {
        level = 0;
    } else if (level > SHP_LOG_TRACE) {
        level = SHP_LOG_TRACE;
    }

    va_start(ap, fmt);
    vsnprintf(raw, sizeof(raw), fmt, ap);
    va_end(ap);
    shp_log_escape(raw, msg, sizeof(msg));

    if (shp_log_handler != NULL) {
        shp_log_handler(level, err_id, msg, shp_log_handler_arg);
        errno = saved_errno;
        return;
    }

    out = shp_log_stream ? shp_log_stream : stderr;
    pthread_mutex_lock(&shp_log_lock);
    if (shp_log_journal) {
        /* The journal time-stamps lines itself. */
        fprintf(out, "<%d>%s%s%s%s\n", shp_log_prio[level],
                err_id ? "ERR " : "", err_id ? err_id : "", err_id ? " " : "",
                msg);
    } else {
        gettimeofday(&tv, NULL);
        localtime_r(&tv.tv_sec, &tm);
        strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
        fprintf(out, "[%s.%06ld] %s[%d] %s%s%s %s\n", stamp, (long)tv.tv_usec,
                shp_log_component, (int)getpid(), shp_log_tags[level],
                err_id ? " " : "", err_id ? err_id : "", msg);
    }
    fflush(out);
    pthread_mutex_unlock(&shp_log_lock);
    errno = saved_errno;
}

unsigned shp_log_sparse_check(shp_log_sparse_t *s, uint64_t interval_ms)
{
    uint64_t now = shp_time_ns();
    unsigned n;

    if (now < s->next_ns) {
        s->suppressed++;
        return 0;
    }
    n = s->suppressed + 1;
    s->suppressed = 0;
    s->next_ns = now + interval_ms * SHP_NSEC_PER_MSEC;
    return n;
}
