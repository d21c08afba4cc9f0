/*
 * sharpctl, the administrator's view of a sharp fabric (see main.c): what
 * its files share.  main.c reads the options and dispatches to a command;
 * commands.c holds the commands, each a request to the manager's admin
 * socket and its answer printed; out.c is the socket (one request, one
 * answer) and the printing (JSON, aligned tables, a usage error).
 */
#ifndef SHP_CLI_SHARPCTL_SHARPCTL_H
#define SHP_CLI_SHARPCTL_SHARPCTL_H

#include <jansson.h>
#include <stddef.h>

#ifndef SHP_VERSION
#define SHP_VERSION "0.1.0"
#endif

enum { EXIT_AM = 1, EXIT_USAGE = 2, EXIT_UNREACHABLE = 3 };

/* the manager's admin socket (--socket, $SHARPCTL_SOCKET) and --json */
extern const char *shp_sharpctl_sock;
extern int shp_sharpctl_json;

/* out.c */
/* one request (taken), its reply (NULL and an exit code in *rc on
 * failure, said on stderr) */
json_t *shp_sharpctl_call(json_t *req, int *rc);
void shp_sharpctl_print_json(const json_t *v);
/* a member as text for a table cell */
void shp_sharpctl_cell(const json_t *v, char *buf, size_t len);
/* an aligned table of `rows` (objects) over `keys`, headed by `heads` */
void shp_sharpctl_table(const json_t *rows, const char *const *keys,
                        const char *const *heads, size_t maxw);
/* the request's (NULL: {type}) member array as a table, or JSON */
int shp_sharpctl_listing(const char *type, const char *member,
                         const char *const *keys, const char *const *heads,
                         json_t *req);
/* fmt with arg on stderr, and the hint; EXIT_USAGE */
int shp_sharpctl_usage_error(const char *fmt, const char *arg);

/* commands.c: each returns the exit status */
int shp_sharpctl_ans(void);
int shp_sharpctl_trees(void);
int shp_sharpctl_jobs(void);
int shp_sharpctl_groups(int argc, char **argv);
int shp_sharpctl_job(int argc, char **argv);
int shp_sharpctl_an(int argc, char **argv);
int shp_sharpctl_tree(int argc, char **argv);
int shp_sharpctl_object(const char *type);
int shp_sharpctl_adoption(void);
int shp_sharpctl_status(void);
int shp_sharpctl_topology(int argc, char **argv);
int shp_sharpctl_config(int argc, char **argv, const char *self);

#endif
