/* Damaged Redis values removed where they are still what was read (redis_drop.h). */
#include "kv/redis_drop.h"

#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void kvs_redis_damaged_note(kvs_redis_damaged *d, const void *bytes, size_t n, int oversized) {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    d->n_read = n;
    d->oversized = oversized;
    d->sha1[0] = 0;
    if (oversized) { /* no good value is past the limit: its length says it (no 64 MB hash on Redis' thread) */
        memset(d->sha1, '0', 40);
        d->sha1[40] = 0;
        return;
    }
    if (EVP_Digest(bytes, n, md, &len, EVP_sha1(), NULL) != 1 || len != 20) return; /* (then never removed) */
    for (unsigned i = 0; i < len; i++) snprintf(d->sha1 + 2 * i, 3, "%02x", md[i]);
}

/* KEYS[1] is deleted while it holds the bytes read: ARGV[1] of them, whose
 * SHA-1 is ARGV[3]; an oversized value (ARGV[2] == '1') while it is still
 * at least that long. */
static const char drop_script[] =
    "local n = redis.call('STRLEN', KEYS[1]) local want = tonumber(ARGV[1]) "
    "if ARGV[2] == '1' then if n >= want then return redis.call('DEL', KEYS[1]) end return 0 end "
    "if n ~= want then return 0 end "
    "if redis.sha1hex(redis.call('GETRANGE', KEYS[1], 0, want - 1)) ~= ARGV[3] then return 0 end "
    "return redis.call('DEL', KEYS[1])";

typedef struct drop_ctx {
    redis_tier *rt;
    const char *const *keys;
    const size_t *key_lens;
    const kvs_redis_damaged *d;
    const int *which; /* (n) the damaged items' indices */
    char (*n_read)[24];
} drop_ctx;

static int drop_command(void *user, int i, const char **argv, size_t *argvlen) {
    drop_ctx *x = user;
    const int k = x->which[i];
    static const char *const flag[2] = {"0", "1"};
    argv[0] = "EVAL";
    argv[1] = drop_script;
    argv[2] = "1";
    argv[3] = x->keys[k];
    argv[4] = x->n_read[i];
    argv[5] = flag[x->d[k].oversized != 0];
    argv[6] = x->d[k].sha1;
    argvlen[0] = 4;
    argvlen[1] = sizeof drop_script - 1;
    argvlen[2] = 1;
    argvlen[3] = x->key_lens[k];
    argvlen[4] = strlen(x->n_read[i]);
    argvlen[5] = 1;
    argvlen[6] = 40;
    return 7;
}

static void drop_reply(void *user, int i, const redisReply *r) {
    drop_ctx *x = user;
    if (r && r->type == REDIS_REPLY_INTEGER && r->integer == 1) atomic_fetch_add(&x->rt->bad_removed, 1);
}

void kvs_redis_drop_damaged(redis_tier *rt, const char *const *keys, const size_t *key_lens,
                            const kvs_redis_damaged *d, const uint8_t *is_damaged, int n) {
    int m = 0;
    for (int i = 0; i < n; i++) m += is_damaged[i] && d[i].sha1[0];
    if (!m) return;
    int *which = malloc((size_t)m * sizeof *which);
    const char **mkeys = malloc((size_t)m * sizeof *mkeys);
    size_t *mlens = malloc((size_t)m * sizeof *mlens);
    char(*n_read)[24] = malloc((size_t)m * sizeof *n_read);
    size_t *bytes = malloc((size_t)m * sizeof *bytes); /* the script's read and hash: the deadline's */
    if (which && mkeys && mlens && n_read && bytes) {
        for (int i = 0, j = 0; i < n; i++) {
            if (!is_damaged[i] || !d[i].sha1[0]) continue;
            which[j] = i;
            mkeys[j] = keys[i];
            mlens[j] = key_lens[i];
            bytes[j] = d[i].oversized ? 0 : d[i].n_read;
            snprintf(n_read[j++], sizeof n_read[0], "%zu", d[i].n_read);
        }
        drop_ctx x = {rt, keys, key_lens, d, which, n_read};
        kvs_redis_batch b = {m, mkeys, mlens, drop_command, drop_reply, &x, 0, bytes};
        (void)kvs_redis_run_batch(&rt->nodes, &b, NULL);
    }
    free(which);
    free(mkeys);
    free(mlens);
    free(n_read);
    free(bytes);
}
