/*
 * The verbs transport (libibverbs + librdmacm): not built yet.  Every slot
 * is a stub answering SHP_ERR_UNSUPPORTED, so that choosing it fails with a
 * clear error instead of a crash; see issue 3.
 */
#include "common/transport.h"

const shp_tp_ops_t shp_tp_verbs_ops = {
    .name = "verbs",
    .init = shp_tp_stub_init,
    .cleanup = shp_tp_stub_cleanup,
    .listen = shp_tp_stub_listen,
    .listen_addr = shp_tp_stub_listen_addr,
    .connect = shp_tp_stub_ep,
    .send = shp_tp_stub_send,
    .close = shp_tp_stub_close,
    .mcast_join = shp_tp_stub_ep,
    .mcast_sender = shp_tp_stub_ep,
};
