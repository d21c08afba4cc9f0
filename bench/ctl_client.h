/*
 * Blocking control-plane client for the benchmarks: a Unix-socket
 * connection to sharpd (or the AM's admin socket) and one request at a
 * time.  Header-only.
 */
#ifndef SHP_BENCH_CTL_CLIENT_H
#define SHP_BENCH_CTL_CLIENT_H

#include "common/ctl.h"

#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static inline int read_full(int fd, void *b, size_t n)
{
    uint8_t *p = b;
    while (n > 0) {
        ssize_t r = read(fd, p, n);
        if (r <= 0) {
            return -1;
        }
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

static inline int sock_open(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (strlen(path) >= sizeof(sa.sun_path)) {
        return -1;
    }
    memcpy(sa.sun_path, path, strlen(path) + 1);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
        return fd;
    }
    if (fd >= 0) {
        close(fd);
    }
    return -1;
}

/* one request on a connected socket, its reply (NULL on failure) */
static inline json_t *call(int fd, json_t *req)
{
    static int64_t id;
    uint8_t *frame, hdr[SHP_CTL_HDR_LEN];
    size_t len;
    json_object_set_new(req, "id", json_integer(++id));
    if (shp_ctl_encode(req, &frame, &len) != SHP_OK ||
        write(fd, frame, len) != (ssize_t)len) {
        json_decref(req);
        return NULL;
    }
    free(frame);
    json_decref(req);
    for (;;) {
        uint8_t type;
        uint32_t blen;
        const char *why;
        json_t *m = NULL;
        if (read_full(fd, hdr, sizeof(hdr)) ||
            shp_ctl_hdr_unpack(hdr, &type, &blen, &why) != SHP_OK) {
            return NULL;
        }
        uint8_t *b = malloc(SHP_CTL_HDR_LEN + blen);
        memcpy(b, hdr, sizeof(hdr));
        if (read_full(fd, b + SHP_CTL_HDR_LEN, blen) ||
            shp_ctl_decode(b, SHP_CTL_HDR_LEN + blen, &type, &m, &why) !=
                SHP_OK) {
            free(b);
            return NULL;
        }
        free(b);
        if (m != NULL && shp_json_opt_int(m, "id", 0, INT64_MAX, -1) == id) {
            return m;
        }
        json_decref(m); /* pings, notifications */
    }
}

static inline int status_of(const json_t *r)
{
    return r ? (int)shp_json_opt_int(r, "status", -32768, 32767, -1) : -1;
}

#endif
