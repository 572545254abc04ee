/* Where the Redis tier connects: the URL or the cluster seed list, and the
 * password from the URL, a file or the environment. Messages never contain
 * the password (they name the URL with the password part masked). */
#include "kv/tier_redis_impl.h"

#include "base/error.h"
#include "base/file.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* "%41" -> 'A'; returns a malloc'd decoded copy of s[0, len) or NULL. */
static char *percent_decode(const char *s, size_t len) {
    char *out = malloc(len + 1);
    if (!out) return NULL;
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] == '%' && i + 2 < len && isxdigit((unsigned char)s[i + 1]) && isxdigit((unsigned char)s[i + 2])) {
            char hex[3] = {s[i + 1], s[i + 2], 0};
            unsigned v = (unsigned)strtoul(hex, NULL, 16);
            out[o++] = (char)v;
            i += 2;
        } else {
            out[o++] = s[i];
        }
    }
    out[o] = 0;
    return out;
}

/* The URL with the password replaced by "***", for messages. */
static void masked_url(const char *url, char *buf, size_t cap) {
    const char *at = strrchr(url, '@'), *scheme = strstr(url, "://");
    const char *user = scheme ? scheme + 3 : url;
    const char *colon = at ? memchr(user, ':', (size_t)(at - user)) : NULL;
    if (colon) snprintf(buf, cap, "%.*s:***%s", (int)(colon - url), url, at);
    else snprintf(buf, cap, "%s", url);
}

/* The first line of a regular file (kvs_open_regular: a FIFO had blocked
 * the open, and a server could not even be stopped; a directory read as
 * empty), whole: a line longer than the buffer is refused, not cut. */
static int read_password_file(const char *path, char **out) {
    char line[1024];
    size_t n = 0;
    int more = 0;
    const int rc = kvs_read_regular_small(path, line, sizeof line - 1, &n, &more);
    if (rc == KVS_OPEN_NOT_REGULAR)
        return kvs_error(KVS_ERR_INVALID_ARG, "%s: the Redis password file is not a regular file", path);
    if (rc < 0) return kvs_error(KVS_ERR_IO, "%s: cannot read the Redis password file: %s", path, strerror(errno));
    line[n] = 0;
    const size_t len = strcspn(line, "\r\n");
    if (len == sizeof line - 1) {
        memset(line, 0, sizeof line);
        return kvs_error(KVS_ERR_INVALID_ARG, "%s: the Redis password (its first line) is longer than %zu bytes",
                         path, sizeof line - 2);
    }
    line[len] = 0;
    if (!line[0]) return kvs_error(KVS_ERR_INVALID_ARG, "%s: the Redis password file is empty", path);
    *out = strdup(line);
    memset(line, 0, sizeof line);
    return *out ? KVS_OK : kvs_error(KVS_ERR_NOMEM, "out of memory");
}

/* redis://[user[:password]@]host[:port][/db] */
static int parse_url(redis_tier *rt, const char *url, char *host, size_t host_cap, int *port) {
    char shown[512];
    masked_url(url, shown, sizeof shown);
    if (strncmp(url, "redis://", 8))
        return kvs_error(KVS_ERR_INVALID_ARG, "--redis %s: expected redis://[user:pass@]host:port[/db]", shown);
    const char *p = url + 8, *end = p + strlen(p);
    const char *at = strrchr(p, '@');
    if (at) {
        const char *colon = memchr(p, ':', (size_t)(at - p));
        size_t ulen = (size_t)((colon ? colon : at) - p);
        if (ulen && !(rt->user = percent_decode(p, ulen))) return kvs_error(KVS_ERR_NOMEM, "out of memory");
        if (colon && !(rt->password = percent_decode(colon + 1, (size_t)(at - colon - 1))))
            return kvs_error(KVS_ERR_NOMEM, "out of memory");
        p = at + 1;
    }
    const char *slash = strchr(p, '/');
    const char *hp_end = slash ? slash : end;
    const size_t hp_len = (size_t)(hp_end - p);
    int colons = 0;
    for (const char *q = p; q < hp_end; q++) colons += *q == ':';
    if (*p == '[') { /* an IPv6 address: [addr] or [addr]:port */
        const char *rb = memchr(p, ']', hp_len);
        if (!rb || rb == p + 1 || (rb + 1 < hp_end && rb[1] != ':') || (size_t)(rb - p - 1) >= host_cap)
            return kvs_error(KVS_ERR_INVALID_ARG, "--redis %s: bad [IPv6 address]:port", shown);
        if (rb + 1 < hp_end) {
            if (kvs_redis_parse_hostport(p, hp_len, host, host_cap, port))
                return kvs_error(KVS_ERR_INVALID_ARG, "--redis %s: bad [IPv6 address]:port", shown);
        } else {
            memcpy(host, p + 1, (size_t)(rb - p - 1));
            host[rb - p - 1] = 0;
            *port = 6379;
        }
    } else if (colons > 1) { /* "::1" had been read as host ":" and port 1 */
        return kvs_error(KVS_ERR_INVALID_ARG, "--redis %s: an IPv6 address goes in brackets (redis://[::1]:6379)",
                         shown);
    } else if (colons) {
        if (kvs_redis_parse_hostport(p, hp_len, host, host_cap, port))
            return kvs_error(KVS_ERR_INVALID_ARG, "--redis %s: bad host:port", shown);
    } else {
        if (hp_end == p || (size_t)(hp_end - p) >= host_cap)
            return kvs_error(KVS_ERR_INVALID_ARG, "--redis %s: no host", shown);
        memcpy(host, p, (size_t)(hp_end - p));
        host[hp_end - p] = 0;
        *port = 6379;
    }
    if (slash && slash[1]) {
        char *e;
        long db = strtol(slash + 1, &e, 10);
        if (*e || db < 0 || db > 1000000)
            return kvs_error(KVS_ERR_INVALID_ARG, "--redis %s: database '%s' is not a number", shown, slash + 1);
        rt->policy.db = (int)db;
    }
    return KVS_OK;
}

int kvs_redis_setup_endpoint(redis_tier *rt, const kvs_redis_tier_params *p) {
    int has_url = p->url && *p->url, has_cluster = p->cluster && *p->cluster;
    if (has_url == has_cluster)
        return kvs_error(KVS_ERR_INVALID_ARG, "redis tier: give exactly one of --redis URL and --redis-cluster LIST");
    char host[256];
    int port = 0, st = KVS_OK;
    if (has_url) st = parse_url(rt, p->url, host, sizeof host, &port);
    if (!st && !rt->password && p->password_file && *p->password_file)
        st = read_password_file(p->password_file, &rt->password);
    if (!st && !rt->password) {
        const char *env = getenv(KVS_REDIS_PASSWORD_ENV);
        if (env && *env && !(rt->password = strdup(env))) st = kvs_error(KVS_ERR_NOMEM, "out of memory");
    }
    if (st) return st;
    rt->policy.user = rt->user;
    rt->policy.password = rt->password;
    if (has_url) return kvs_redis_nodes_init_single(&rt->nodes, host, port, &rt->policy);
    return kvs_redis_nodes_init_cluster(&rt->nodes, p->cluster, &rt->policy);
}
