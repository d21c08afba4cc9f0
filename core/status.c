#include "core/status.h"

#include <errno.h>
#include <stddef.h>

typedef struct {
    shp_status_t status;
    const char *name;
    const char *str;
} shp_status_desc_t;

#define SHP_STATUS_DESC(_s, _str)                                              \
    {                                                                          \
        _s, #_s, _str                                                          \
    }

static const shp_status_desc_t shp_status_descs[] = {
    SHP_STATUS_DESC(SHP_OK, "success"),
    SHP_STATUS_DESC(SHP_INPROGRESS, "operation in progress"),
    SHP_STATUS_DESC(SHP_ERR_NO_MEMORY, "out of memory"),
    SHP_STATUS_DESC(SHP_ERR_INVALID_PARAM, "invalid parameter"),
    SHP_STATUS_DESC(SHP_ERR_UNSUPPORTED, "operation not supported"),
    SHP_STATUS_DESC(SHP_ERR_IO, "input/output error"),
    SHP_STATUS_DESC(SHP_ERR_TIMED_OUT, "timed out"),
    SHP_STATUS_DESC(SHP_ERR_NO_RESOURCE, "out of resources"),
    SHP_STATUS_DESC(SHP_ERR_BUSY, "resource busy"),
    SHP_STATUS_DESC(SHP_ERR_NOT_FOUND, "not found"),
    SHP_STATUS_DESC(SHP_ERR_EXISTS, "already exists"),
    SHP_STATUS_DESC(SHP_ERR_PARSE, "parse error"),
    SHP_STATUS_DESC(SHP_ERR_PROTO, "malformed message"),
    SHP_STATUS_DESC(SHP_ERR_VERSION, "unsupported protocol version"),
    SHP_STATUS_DESC(SHP_ERR_TOO_LARGE, "message too large"),
    SHP_STATUS_DESC(SHP_ERR_PERM, "permission denied"),
    SHP_STATUS_DESC(SHP_ERR_CANCELED, "operation canceled"),
    SHP_STATUS_DESC(SHP_ERR_AGAIN, "try again"),
    SHP_STATUS_DESC(SHP_ERR_CONN_REFUSED, "connection refused"),
    SHP_STATUS_DESC(SHP_ERR_CONN_RESET, "connection reset by peer"),
    SHP_STATUS_DESC(SHP_ERR_UNREACHABLE, "destination unreachable"),
    SHP_STATUS_DESC(SHP_ERR_KEEPALIVE, "peer stopped answering keepalives"),
    SHP_STATUS_DESC(SHP_ERR_AUTH, "authentication failed"),
    SHP_STATUS_DESC(SHP_ERR_CLOSED, "connection closed"),
    SHP_STATUS_DESC(SHP_ERR_STANDBY, "a standby manager, not the active one"),
    SHP_STATUS_DESC(SHP_ERR_STALE_EPOCH,
                    "a manager older than the active one (stale epoch)"),
    SHP_STATUS_DESC(SHP_ERR_GROUP_FAILED, "group failed"),
    SHP_STATUS_DESC(SHP_ERR_GROUP_UNKNOWN, "unknown group"),
    SHP_STATUS_DESC(SHP_ERR_TREE_DOWN, "aggregation tree is down"),
    SHP_STATUS_DESC(SHP_ERR_NO_TREE, "no tree spans the members"),
    SHP_STATUS_DESC(SHP_ERR_BAD_KEY, "wrong job key"),
    SHP_STATUS_DESC(SHP_ERR_SEQ_WINDOW,
                    "sequence number outside the quota window"),
    SHP_STATUS_DESC(SHP_ERR_MISMATCH,
                    "operation does not match the other members'"),
    SHP_STATUS_DESC(SHP_ERR_QUOTA, "quota exceeded"),
    SHP_STATUS_DESC(SHP_ERR_GROUP_REVOKED, "group revoked"),
    SHP_STATUS_DESC(SHP_ERR_JOB_REFUSED, "job refused"),
    SHP_STATUS_DESC(SHP_ERR_JOB_KILLED, "job killed"),
    SHP_STATUS_DESC(SHP_ERR_JOB_UNKNOWN, "unknown job"),
};

static const shp_status_desc_t *shp_status_find(int value)
{
    size_t i;

    for (i = 0; i < sizeof(shp_status_descs) / sizeof(shp_status_descs[0]);
         i++) {
        if ((int)shp_status_descs[i].status == value) {
            return &shp_status_descs[i];
        }
    }
    return NULL;
}

const char *shp_status_str(shp_status_t status)
{
    const shp_status_desc_t *d = shp_status_find(status);

    return d ? d->str : "unknown status";
}

const char *shp_status_name(shp_status_t status)
{
    const shp_status_desc_t *d = shp_status_find(status);

    return d ? d->name : "SHP_ERR_UNKNOWN";
}

int shp_status_is_valid(int value)
{
    return shp_status_find(value) != NULL;
}

shp_status_t shp_status_from_errno(int err)
{
    switch (err) {
    case 0: return SHP_OK;
    case ENOMEM:
    case ENOBUFS: return SHP_ERR_NO_MEMORY;
    case EINVAL:
    case EBADF: return SHP_ERR_INVALID_PARAM;
    case EOPNOTSUPP:
    case ENOSYS:
    case EAFNOSUPPORT:
    case EPROTONOSUPPORT: return SHP_ERR_UNSUPPORTED;
    case ETIMEDOUT: return SHP_ERR_TIMED_OUT;
    case EMFILE:
    case ENFILE:
    case ENOSPC: return SHP_ERR_NO_RESOURCE;
    case EBUSY:
    case EADDRINUSE: return SHP_ERR_BUSY;
    case ENOENT:
    case ENODEV:
    case ENXIO: return SHP_ERR_NOT_FOUND;
    case EEXIST: return SHP_ERR_EXISTS;
    case EPERM:
    case EACCES: return SHP_ERR_PERM;
    case ECANCELED: return SHP_ERR_CANCELED;
    case EAGAIN:
    case EINTR: return SHP_ERR_AGAIN;
    case ECONNREFUSED: return SHP_ERR_CONN_REFUSED;
    case ECONNRESET:
    case ECONNABORTED:
    case EPIPE: return SHP_ERR_CONN_RESET;
    case EHOSTUNREACH:
    case ENETUNREACH:
    case EADDRNOTAVAIL:
    case ENETDOWN: return SHP_ERR_UNREACHABLE;
    case EMSGSIZE:
    case E2BIG: return SHP_ERR_TOO_LARGE;
    case EPROTO:
    case EBADMSG: return SHP_ERR_PROTO;
    default: return SHP_ERR_IO;
    }
}
