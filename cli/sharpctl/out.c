/*
 * sharpctl's link to the manager and its printing: one request on a
 * connection of its own to the admin socket (protocol/ctl.h frames), its
 * answer or why not with an exit status (1 the manager refused, 3
 * unreachable); and the answer printed, as JSON (--json: stable field
 * names) or as an aligned table whose state column says what an
 * administrator set (drained, frozen).
 */
#include "cli/sharpctl/sharpctl.h"

#include "core/net.h"
#include "core/paths.h"
#include "protocol/ctl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *shp_sharpctl_sock = SHP_PATH_AM_SOCK;
int shp_sharpctl_json;

int shp_sharpctl_usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "sharpctl: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\nTry 'sharpctl --help'.\n");
    return EXIT_USAGE;
}

/* one request, its reply (NULL and an exit code in *rc on failure) */
json_t *shp_sharpctl_call(json_t *req, int *rc)
{
    json_t *reply = NULL;
    shp_status_t st;
    const char *why;
    int fd = shp_unix_connect(shp_sharpctl_sock);

    json_object_set_new(req, "id", json_integer(1));
    if (fd < 0) {
        fprintf(stderr,
                "sharpctl: cannot reach the aggregation manager at %s: %s\n",
                shp_sharpctl_sock, strerror(errno));
        *rc = errno == ENAMETOOLONG ? EXIT_USAGE : EXIT_UNREACHABLE;
        goto out;
    }
    reply = shp_ctl_call_fd(fd, req, &st, &why);
    if (reply == NULL) {
        fprintf(stderr, "sharpctl: %s: %s\n", shp_sharpctl_sock, why);
        *rc = st == SHP_ERR_IO ? EXIT_UNREACHABLE : EXIT_AM;
        goto out;
    }
    int64_t status =
        shp_json_opt_int(reply, "status", INT32_MIN, INT32_MAX, SHP_ERR_PROTO);
    if (status != 0) {
        fprintf(stderr, "sharpctl: %s: %s (%s)\n", shp_ctl_type(req),
                shp_json_opt_str(reply, "error", "failed"),
                shp_status_name((shp_status_t)status));
        json_decref(reply);
        reply = NULL;
        *rc = EXIT_AM;
    }
out:
    if (fd >= 0) {
        close(fd);
    }
    json_decref(req);
    return reply;
}

void shp_sharpctl_print_json(const json_t *v)
{
    char *s = json_dumps(v, JSON_INDENT(2) | JSON_SORT_KEYS);
    if (s != NULL) {
        puts(s);
        free(s);
    }
}

/* a member as text for a table cell */
void shp_sharpctl_cell(const json_t *v, char *buf, size_t len)
{
    if (json_is_string(v)) {
        snprintf(buf, len, "%s", json_string_value(v));
    } else if (json_is_real(v)) {
        snprintf(buf, len, "%.1f", json_real_value(v));
    } else if (json_is_integer(v)) {
        snprintf(buf, len, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    } else if (json_is_boolean(v)) {
        snprintf(buf, len, "%s", json_is_true(v) ? "yes" : "no");
    } else if (json_is_array(v)) {
        size_t i, off = 0;
        buf[0] = '\0';
        for (i = 0; i < json_array_size(v) && off + 1 < len; i++) {
            const json_t *e = json_array_get(v, i);
            const char *s = json_is_string(e)
                                ? json_string_value(e)
                                : json_string_value(json_object_get(e, "name"));
            int n = snprintf(buf + off, len - off, "%s%s", i ? "," : "",
                             s ? s : "?");
            off += n > 0 ? (size_t)n : 0;
        }
        if (off + 1 >= len && len > 4) {
            strcpy(buf + len - 4, "...");
        }
    } else if (json_is_null(v) || v == NULL) {
        snprintf(buf, len, "-");
    } else {
        snprintf(buf, len, "?");
    }
}

/* an aligned table of `rows` (objects) over `keys`, headed by `heads` */
void shp_sharpctl_table(const json_t *rows, const char *const *keys,
                        const char *const *heads, size_t maxw)
{
    size_t nk = 0, w[16] = {0}, r;
    char buf[256];

    while (keys[nk] != NULL && nk < 16) {
        w[nk] = strlen(heads[nk]);
        nk++;
    }
    for (r = 0; r < json_array_size(rows); r++) {
        for (size_t k = 0; k < nk; k++) {
            shp_sharpctl_cell(json_object_get(json_array_get(rows, r), keys[k]),
                              buf, maxw + 1);
            w[k] = strlen(buf) > w[k] ? strlen(buf) : w[k];
        }
    }
    for (size_t k = 0; k < nk; k++) {
        printf("%-*s%s", k + 1 < nk ? (int)w[k] : 0, heads[k],
               k + 1 < nk ? "  " : "\n");
    }
    for (r = 0; r < json_array_size(rows); r++) {
        for (size_t k = 0; k < nk; k++) {
            shp_sharpctl_cell(json_object_get(json_array_get(rows, r), keys[k]),
                              buf, maxw + 1);
            printf("%-*s%s", k + 1 < nk ? (int)w[k] : 0, buf,
                   k + 1 < nk ? "  " : "\n");
        }
    }
}

/* the state column says what an administrator set: "up, drained" */
static void mark_state(json_t *rows, const char *flag, const char *word)
{
    size_t i;
    json_t *row;
    char buf[64];
    json_array_foreach(rows, i, row)
    {
        const char *st = json_string_value(json_object_get(row, "state"));
        if (json_is_true(json_object_get(row, flag)) && st != NULL) {
            snprintf(buf, sizeof(buf), "%s, %s", st, word);
            json_object_set_new(row, "state", json_string(buf));
        }
    }
}

int shp_sharpctl_listing(const char *type, const char *member,
                         const char *const *keys, const char *const *heads,
                         json_t *req)
{
    int rc = 0;
    json_t *r =
        shp_sharpctl_call(req ? req : json_pack("{s:s}", "type", type), &rc);
    if (r == NULL) {
        return rc;
    }
    json_t *rows = json_object_get(r, member);
    if (shp_sharpctl_json) {
        shp_sharpctl_print_json(rows);
    } else if (json_array_size(rows) == 0) {
        printf("no %s\n", member);
    } else {
        mark_state(rows, "drained", "drained");
        mark_state(rows, "frozen", "frozen");
        shp_sharpctl_table(rows, keys, heads, 24);
    }
    json_decref(r);
    return 0;
}