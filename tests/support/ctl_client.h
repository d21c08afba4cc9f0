/*
 * Blocking control-plane client for the tests and the benchmarks: one
 * request at a time on a connected socket (to sharpd: shp_unix_connect).
 * Header-only.
 */
#ifndef SHP_TEST_CTL_CLIENT_H
#define SHP_TEST_CTL_CLIENT_H

#include "protocol/ctl.h"

/* one request on a connected socket, its reply (NULL on failure) */
static inline json_t *call(int fd, json_t *req)
{
    static int64_t id;
    shp_status_t st;
    const char *why;
    json_object_set_new(req, "id", json_integer(++id));
    json_t *r = shp_ctl_call_fd(fd, req, &st, &why);
    json_decref(req);
    return r;
}

static inline int status_of(const json_t *r)
{
    return r ? (int)shp_json_opt_int(r, "status", -32768, 32767, -1) : -1;
}

#endif
