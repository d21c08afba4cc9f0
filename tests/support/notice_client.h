/*
 * A blocking control client that keeps what it reads besides the replies
 * to its requests (notices: group_revoked, job_killed, ...), for the tests
 * that watch what a manager or a sharpd tells a process (tests/am).  One
 * request at a time; ids its own.  Header-only; include after cmocka.
 */
#ifndef SHP_TEST_NOTICE_CLIENT_H
#define SHP_TEST_NOTICE_CLIENT_H

#include <poll.h>
#include <stdlib.h>
#include <unistd.h>

#include "protocol/ctl.h"
#include "core/net.h"

typedef struct client {
    int fd;
    json_t *notices; /* messages that answered no request */
    int64_t next_id;
} client_t;

/* connected to the unix socket at path, trying for tries x 20 ms */
static inline client_t *client_connect(const char *p, int tries)
{
    int fd = -1;
    for (int i = 0; i < tries && fd < 0; i++) {
        fd = shp_unix_connect(p);
        if (fd < 0)
            usleep(20000);
    }
    if (fd < 0)
        fail_msg("cannot connect to %s", p);
    client_t *c = calloc(1, sizeof(*c));
    c->fd = fd;
    c->notices = json_array();
    c->next_id = 1;
    return c;
}

static inline void client_close(client_t *c)
{
    close(c->fd);
    json_decref(c->notices);
    free(c);
}

static inline int read_full(int fd, void *buf, size_t len, int ms)
{
    size_t got = 0;
    while (got < len) {
        struct pollfd pf = {fd, POLLIN, 0};
        if (poll(&pf, 1, ms) <= 0)
            return -1;
        ssize_t n = read(fd, (char *)buf + got, len - got);
        if (n <= 0)
            return -1;
        got += (size_t)n;
    }
    return 0;
}

/* The next message, or NULL after ms or on EOF. */
static inline json_t *client_read(client_t *c, int ms)
{
    uint8_t hdr[SHP_CTL_HDR_LEN], type;
    uint32_t len;
    if (read_full(c->fd, hdr, sizeof(hdr), ms))
        return NULL;
    assert_int_equal(shp_ctl_hdr_unpack(hdr, &type, &len, NULL), SHP_OK);
    uint8_t *frame = malloc(sizeof(hdr) + len);
    memcpy(frame, hdr, sizeof(hdr));
    if (read_full(c->fd, frame + sizeof(hdr), len, ms)) {
        free(frame);
        return NULL;
    }
    json_t *msg = NULL;
    assert_int_equal(
        shp_ctl_decode(frame, sizeof(hdr) + len, &type, &msg, NULL), SHP_OK);
    free(frame);
    return msg;
}

static inline void client_send(client_t *c, json_t *msg)
{
    uint8_t *frame;
    size_t len;
    assert_int_equal(shp_ctl_encode(msg, &frame, &len), SHP_OK);
    assert_int_equal(write(c->fd, frame, len), (ssize_t)len);
    free(frame);
    json_decref(msg);
}

/* Sends msg with a fresh id; returns the reply (new reference). */
static inline json_t *call(client_t *c, json_t *msg)
{
    int64_t id = c->next_id++;
    json_object_set_new(msg, "id", json_integer(id));
    client_send(c, msg);
    for (;;) {
        json_t *r = client_read(c, 15000);
        if (!r)
            fail_msg("no answer to request %lld", (long long)id);
        if (json_integer_value(json_object_get(r, "id")) == id &&
            json_object_get(r, "status"))
            return r;
        json_array_append_new(c->notices, r);
    }
}

static inline int status_of(const json_t *r)
{
    return (int)json_integer_value(json_object_get(r, "status"));
}

static inline int call_status(client_t *c, json_t *msg)
{
    json_t *r = call(c, msg);
    int st = status_of(r);
    json_decref(r);
    return st;
}

#endif
