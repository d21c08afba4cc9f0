/*
 * sharpd (libshp_sharpd.a: the daemon without its main) driven by a
 * sequence of events: local processes connecting to its socket, the AM
 * connection coming up (registered, or still to prove the secret),
 * messages from both sides, hang-ups, and the AM answering the requests
 * sharpd relays.  The daemon's ends are socketpairs handed to it as an
 * accepted process (shp_sharpd_accept) and as its AM connection
 * (shp_sharpd_am_attach), so messages go through core/conn.c into the
 * handlers it runs for a socket.  Checks: every frame it sends decodes; it
 * never takes the AM as registered before the AM proved the cluster secret
 * (the input cannot forge that proof).  Operations: tests/fuzz/fuzz.h
 * (FZ_SD_*).
 */
#include "tests/fuzz/fuzz.h"
#include "tests/fuzz/fuzz_peer.h"

#include "core/log.h"
#include "sharpd/sharpd.h"

static shp_sharpd_t d;

static const char *const fz_pend_types[] = {
    "job_begin",     "job_attach",  "job_end",     "group_create",
    "group_destroy", "job_reserve", "job_release", NULL};
static int proved; /* the AM of this input proved the secret */

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    shp_log_set_level(getenv("SHARP_FUZZ_LOG") ? SHP_LOG_DEBUG : SHP_LOG_OFF);
    FZ_CHECK(shp_auth_init() == SHP_OK);
    loop = ev_default_loop(EVFLAG_AUTO);
    FZ_CHECK(loop != NULL);
    for (int i = 0; i < FZ_NPEERS; i++) {
        peers[i].fd = -1;
    }
    return 0;
}

static void op_client(void)
{
    int sv[2];

    for (int i = 1; i < FZ_NPEERS; i++) {
        if (peers[i].fd < 0) {
            FZ_CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) ==
                     0);
            FZ_CHECK(shp_sharpd_accept(&d, sv[0]) == SHP_OK);
            peers[i].fd = sv[1];
            return;
        }
    }
}

static void op_am(uint8_t mode)
{
    int sv[2];

    if (shp_conn_is_open(&d.am) || peers[0].fd >= 0) {
        return;
    }
    FZ_CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    peers[0].fd = sv[1];
    FZ_CHECK(shp_sharpd_am_attach(&d, sv[0]) == SHP_OK); /* hello */
    proved = mode & 1;
    if (proved) { /* as if the handshake and registration were done */
        d.am_state = SHP_SHARPD_AM_REGISTERED;
    }
    pump();
}

static void op_answer(uint8_t how)
{
    fz_peer_t *p = &peers[0];
    int st = (how & 3) == 0 ? 0 : -(int)(how % 40);

    for (int i = 0; i < p->npend && p->fd >= 0; i++) {
        json_t *m = shp_ctl_reply(p->pend[i].type, p->pend[i].id,
                                  (shp_status_t)st, st ? "refused" : NULL);
        char type[48];
        uint8_t *frame;
        size_t len;
        snprintf(type, sizeof(type), "%s_ack", p->pend[i].type);
        json_object_set_new(m, "type", json_string(type));
        if (st == 0 && !strcmp(p->pend[i].type, "group_create")) {
            json_object_set_new(m, "group",
                                json_pack("{s:s, s:i}", "job_id", "77",
                                          "group_id", 1 + how % 3));
        }
        if (st == 0 && !strcmp(p->pend[i].type, "job_attach")) {
            json_object_set_new(m, "job_id", json_string("77"));
        }
        FZ_CHECK(shp_ctl_encode(m, &frame, &len) == SHP_OK);
        peer_send(p, frame, len);
        free(frame);
        json_decref(m);
    }
    p->npend = 0;
    pump();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char host[] = "n00001", am_addr[] = "", sock[] = "", secret[] = "";
    fz_in_t in = {data, size};

    memset(&d, 0, sizeof(d));
    d.cfg.host = host;
    d.cfg.am = am_addr; /* a reconnect finds no address: stays down */
    d.cfg.socket = sock;
    d.cfg.secret_file = secret;
    shp_sharpd_init(&d, loop);
    shp_auth_key_from_bytes("the cluster secret of sharpd", 28, &d.key);
    proved = 0;
    while (fz_more(&in)) {
        fz_peer_t *p;
        switch (fz_u8(&in) % FZ_SD_NOPS) {
        case FZ_SD_CLIENT: op_client(); break;
        case FZ_SD_AM: op_am(fz_u8(&in)); break;
        case FZ_SD_SEND: op_send(&in, 0); break;
        case FZ_SD_RAW: op_send(&in, 1); break;
        case FZ_SD_CLOSE:
            p = &peers[fz_u8(&in) % FZ_NPEERS];
            if (p->fd >= 0) {
                peer_drop(p);
                pump();
            }
            break;
        case FZ_SD_ANSWER: op_answer(fz_u8(&in)); break;
        }
        /* the input cannot compute the AM's proof */
        FZ_CHECK(proved || d.am_state != 2);
    }
    /* shut down as main() does */
    shp_sharpd_stop(&d);
    FZ_CHECK(d.pending == NULL && d.clients == NULL && d.jobs == NULL);
    for (int i = 0; i < FZ_NPEERS; i++) {
        peer_drop(&peers[i]);
    }
    return 0;
}
