/* sharp_am's Prometheus metrics endpoint (am/metrics.c). */
#ifndef SHP_AM_METRICS_H
#define SHP_AM_METRICS_H

#include "am/am_types.h"
#include "core/status.h"

#include <ev.h>

struct MHD_Daemon;

typedef struct shp_am_metrics {
    struct MHD_Daemon *mhd;
    struct ev_loop *loop;
    ev_io io;       /* MHD's epoll descriptor */
    ev_timer timer; /* MHD's next timeout */
} shp_am_metrics_t;

/* Serve GET /metrics on addr ("ip:port") from `loop`. */
SHP_WUR shp_status_t shp_am_metrics_start(shp_am_metrics_t *m, shp_am_t *am,
                                          struct ev_loop *loop,
                                          const char *addr);
void shp_am_metrics_stop(shp_am_metrics_t *m);

/* One scrape's text (malloc'd; NULL if out of memory). */
char *shp_am_metrics_text(const shp_am_t *am, size_t *len);

#endif
