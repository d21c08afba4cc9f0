/* A node's managers and its epoch rules: see am_list.h. */
#include "protocol/am_list.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "protocol/ctl.h"

#define BACKOFF_MIN 0.1
#define BACKOFF_MAX 5.0

shp_status_t shp_am_list_parse(shp_am_list_t *l, const char *spec, char *err,
                               size_t errlen)
{
    memset(l, 0, sizeof(*l));
    l->backoff = BACKOFF_MIN;
    if (spec == NULL)
        return SHP_OK;
    const char *s = spec;
    while (*s) {
        while (*s == ' ' || *s == ',')
            s++;
        if (!*s)
            break;
        size_t len = strcspn(s, ", ");
        if (l->n == SHP_AM_LIST_MAX) {
            snprintf(err, errlen, "am: more than %d managers in \"%s\"",
                     SHP_AM_LIST_MAX, spec);
            return SHP_ERR_INVALID_PARAM;
        }
        if (len >= SHP_AM_LIST_ADDR) {
            snprintf(err, errlen, "am: address too long in \"%s\"", spec);
            return SHP_ERR_INVALID_PARAM;
        }
        memcpy(l->addr[l->n], s, len);
        l->addr[l->n][len] = '\0';
        l->n++;
        s += len;
    }
    return SHP_OK;
}

const char *shp_am_list_current(const shp_am_list_t *l)
{
    return l->n ? l->addr[l->cur] : "";
}

double shp_am_list_failed(shp_am_list_t *l)
{
    if (l->n == 0)
        return l->backoff;
    l->cur = (l->cur + 1) % l->n;
    if (++l->failed < l->n)
        return 0.; /* the next one, at once */
    /* a whole round failed */
    l->failed = 0;
    double d = l->backoff;
    if (l->hint > 0 && l->hint < d)
        d = l->hint;
    l->hint = 0;
    l->backoff = l->backoff * 2 > BACKOFF_MAX ? BACKOFF_MAX : l->backoff * 2;
    return d;
}

double shp_am_list_lost(shp_am_list_t *l)
{
    snprintf(l->lost, sizeof(l->lost), "%s", shp_am_list_current(l));
    l->failed = 0;
    l->hint = 0;
    l->backoff = BACKOFF_MIN * 2;
    return BACKOFF_MIN;
}

void shp_am_list_stamp(const shp_am_list_t *l, json_t *reg)
{
    if (l->lost[0])
        json_object_set_new(reg, "lost", json_string(l->lost));
    if (l->epoch == 0)
        return;
    json_object_set_new(reg, "epoch", json_integer((json_int_t)l->epoch));
    json_object_set_new(reg, "epoch_proof", json_string(l->proof));
}

static int am_list_index(const shp_am_list_t *l, const char *addr)
{
    for (int i = 0; i < l->n; i++)
        if (!strcmp(l->addr[i], addr))
            return i;
    return -1;
}

shp_status_t shp_am_list_ack(shp_am_list_t *l, const json_t *ack, char *why,
                             size_t whylen)
{
    int64_t st = shp_json_opt_int(ack, "status", -32768, 32767, SHP_ERR_PROTO);
    const char *cur = shp_am_list_current(l);
    if (st == SHP_ERR_STANDBY) {
        const char *active = shp_json_opt_str(ack, "active", "");
        int64_t ms = shp_json_opt_int(ack, "retry_ms", 0, 60000, 0);
        if (ms > 0) {
            double h = (double)ms / 1000.0;
            h = h < 0.01 ? 0.01 : h > BACKOFF_MAX ? BACKOFF_MAX : h;
            if (l->hint == 0 || h < l->hint)
                l->hint = h;
        }
        int i = active[0] ? am_list_index(l, active) : -1;
        snprintf(why, whylen, "the manager at %s is standby (active: %s)", cur,
                 active[0] ? active : "none yet");
        if (i >= 0 && i != l->cur) /* the next one tried is the active */
            l->cur = (i + l->n - 1) % l->n;
        return SHP_ERR_STANDBY;
    }
    if (st != SHP_OK) {
        snprintf(why, whylen, "the manager at %s refused the registration: %s",
                 cur, shp_json_opt_str(ack, "error", shp_status_str((int)st)));
        return (shp_status_t)st;
    }
    int64_t e = shp_json_opt_int(ack, "epoch", 0, INT64_MAX, 0);
    const char *proof = shp_json_opt_str(ack, "epoch_proof", "");
    if ((uint64_t)e < l->epoch) {
        snprintf(why, whylen,
                 "refusing the manager at %s: its epoch %" PRId64
                 " is older than %" PRIu64 ", which another manager holds",
                 cur, e, l->epoch);
        return SHP_ERR_STALE_EPOCH;
    }
    if ((uint64_t)e > l->epoch && strlen(proof) == SHP_AUTH_EPOCH_PROOF_LEN) {
        l->epoch = (uint64_t)e;
        memcpy(l->proof, proof, sizeof(l->proof));
    }
    l->failed = 0;
    l->hint = 0;
    l->backoff = BACKOFF_MIN;
    l->lost[0] = '\0';
    snprintf(why, whylen,
             "registered with the manager at %s (epoch %" PRId64 ")", cur, e);
    return SHP_OK;
}

json_t *shp_am_list_refusal(const shp_am_list_t *l)
{
    return json_pack("{s:s, s:i, s:I, s:s}", "type", "am_refused", "status",
                     (int)SHP_ERR_STALE_EPOCH, "epoch", (json_int_t)l->epoch,
                     "epoch_proof", l->proof);
}
