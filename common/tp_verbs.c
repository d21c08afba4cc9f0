/*
 * The verbs transport (libibverbs + librdmacm): not built yet.  Every slot
 * answers SHP_ERR_UNSUPPORTED so that choosing it fails with a clear error
 * instead of a crash; see issue 3.
 */
#include "common/transport.h"

static shp_status_t shp_verbs_init(shp_tp_t *tp)
{
    (void)tp;
    return SHP_ERR_UNSUPPORTED;
}

static void shp_verbs_cleanup(shp_tp_t *tp)
{
    (void)tp;
}

static shp_status_t shp_verbs_listen(shp_tp_t *tp, const char *addr,
                                     shp_tp_accept_cb_t on_accept)
{
    (void)tp;
    (void)addr;
    (void)on_accept;
    return SHP_ERR_UNSUPPORTED;
}

static const char *shp_verbs_listen_addr(shp_tp_t *tp)
{
    (void)tp;
    return NULL;
}

static shp_status_t shp_verbs_ep_new(shp_tp_t *tp, const char *addr,
                                     const shp_tp_ep_cbs_t *cbs, void *arg,
                                     shp_tp_ep_t **ep)
{
    (void)tp;
    (void)addr;
    (void)cbs;
    (void)arg;
    (void)ep;
    return SHP_ERR_UNSUPPORTED;
}

static shp_status_t shp_verbs_send(shp_tp_ep_t *ep, const shp_wire_hdr_t *hdr,
                                   const void *payload)
{
    (void)ep;
    (void)hdr;
    (void)payload;
    return SHP_ERR_UNSUPPORTED;
}

static void shp_verbs_close(shp_tp_ep_t *ep)
{
    (void)ep;
}

const shp_tp_ops_t shp_tp_verbs_ops = {
    .name = "verbs",
    .init = shp_verbs_init,
    .cleanup = shp_verbs_cleanup,
    .listen = shp_verbs_listen,
    .listen_addr = shp_verbs_listen_addr,
    .connect = shp_verbs_ep_new,
    .send = shp_verbs_send,
    .close = shp_verbs_close,
    .mcast_join = shp_verbs_ep_new,
    .mcast_sender = shp_verbs_ep_new,
};
