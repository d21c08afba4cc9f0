/*
 * Control frames and their JSON bodies: what every daemon and sharpctl
 * decode from a peer.  Two modes, chosen by the first byte:
 *   even: a byte stream cut into frames with shp_ctl_frame_len (as
 *         core/conn.c does), each decoded with shp_ctl_decode; every
 *         member of a decoded message goes through the typed getters, and
 *         the message is encoded again and must decode to an equal object;
 *   odd:  the bytes are what a daemon answers sharpctl: shp_ctl_call_fd
 *         sends a request on a socketpair and reads its answer from them.
 */
#include "tests/fuzz/fuzz.h"

#include "protocol/ctl.h"

#include <sys/socket.h>
#include <unistd.h>

static void getters(const json_t *msg)
{
    const char *key;
    json_t *v;

    json_object_foreach((json_t *)msg, key, v)
    {
        const char *s, *why = NULL;
        uint64_t u;
        int64_t i;
        int b;
        json_t *o;
        uint8_t hex[32];

        if (shp_json_get_str(msg, key, &s, &why) == SHP_OK) {
            FZ_CHECK(json_is_string(v) && s != NULL);
        }
        if (shp_json_get_u64(msg, key, &u, &why) == SHP_OK) {
            FZ_CHECK(json_is_integer(v) || json_is_string(v));
        }
        if (shp_json_get_int(msg, key, -1000, 1000, &i, &why) == SHP_OK) {
            FZ_CHECK(i >= -1000 && i <= 1000);
        }
        (void)shp_json_get_int(msg, key, INT64_MIN, INT64_MAX, &i, &why);
        (void)shp_json_get_bool(msg, key, &b, &why);
        (void)shp_json_get_array(msg, key, &o, &why);
        (void)shp_json_get_object(msg, key, &o, &why);
        if (shp_json_get_hex(msg, key, hex, sizeof(hex), &why) == SHP_OK) {
            json_t *back = shp_json_hex(hex, sizeof(hex));
            FZ_CHECK(back != NULL);
            FZ_CHECK(
                !strcasecmp(json_string_value(back), json_string_value(v)));
            json_decref(back);
        }
        (void)shp_json_opt_str(msg, key, NULL);
        (void)shp_json_opt_int(msg, key, 0, 100, -1);
    }
}

static void frames(const uint8_t *p, size_t avail)
{
    while (avail > 0) {
        const char *why = NULL;
        json_t *msg = NULL, *again = NULL;
        uint8_t type, type2, *enc;
        size_t len = 0, elen;
        shp_status_t st = shp_ctl_frame_len(NULL, p, avail, &len);

        if (st != SHP_OK) {
            break;
        }
        FZ_CHECK(len >= SHP_CTL_HDR_LEN && len <= SHP_CTL_MAX_FRAME);
        if (len > avail) {
            break;
        }
        st = shp_ctl_decode(p, len, &type, &msg, &why);
        if (st == SHP_OK && msg != NULL) {
            FZ_CHECK(type == SHP_CTL_FRAME_MSG);
            FZ_CHECK(shp_ctl_type(msg)[0] != '\0');
            getters(msg);
            FZ_CHECK(shp_ctl_encode(msg, &enc, &elen) == SHP_OK);
            FZ_CHECK(shp_ctl_decode(enc, elen, &type2, &again, &why) == SHP_OK);
            FZ_CHECK(json_equal(msg, again));
            json_decref(again);
            free(enc);
            json_decref(msg);
        } else if (st == SHP_OK) {
            FZ_CHECK(type == SHP_CTL_FRAME_PING || type == SHP_CTL_FRAME_PONG);
        } else {
            FZ_CHECK(why != NULL && msg == NULL);
        }
        p += len;
        avail -= len;
    }
}

static void call(const uint8_t *p, size_t n)
{
    int sv[2];
    shp_status_t st;
    const char *why = NULL;
    json_t *req, *ans;

    if (n > 64 * 1024) {
        return; /* more than a socket buffer holds unread */
    }
    FZ_CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    FZ_CHECK(write(sv[1], p, n) == (ssize_t)n);
    shutdown(sv[1], SHUT_WR);
    req = json_pack("{s:s, s:i}", "type", "stats", "id", 7);
    ans = shp_ctl_call_fd(sv[0], req, &st, &why);
    if (ans != NULL) {
        FZ_CHECK(st == SHP_OK);
        FZ_CHECK(shp_json_opt_int(ans, "id", INT64_MIN, INT64_MAX, -1) == 7);
        json_decref(ans);
    } else {
        FZ_CHECK(st != SHP_OK && why != NULL);
    }
    json_decref(req);
    close(sv[0]);
    close(sv[1]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) {
        return 0;
    }
    if (data[0] & 1) {
        call(data + 1, size - 1);
    } else {
        frames(data + 1, size - 1);
    }
    return 0;
}
