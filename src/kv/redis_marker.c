/* Partial-chunk markers of the Redis tier (redis_marker.h). */
#include "kv/redis_marker.h"

#include "base/error.h"
#include "base/le.h"
#include "kv/keys.h"

#include <string.h>

int kvs_rm_is_marker(const uint8_t *v, size_t len) { return len >= 4 && !memcmp(v, KVS_RM_MAGIC, 4); }

int kvs_rm_lengths(int n_tok, int lens[KVS_RM_MAX]) {
    const int last = n_tok - 1;
    /* KVS_RM_MAX - 1 strided lengths at most, then the last */
    const int stride = last <= KVS_RM_MAX ? 1 : (last + KVS_RM_MAX - 2) / (KVS_RM_MAX - 1);
    int n = 0;
    for (int len = stride; len < last && n < KVS_RM_MAX - 1; len += stride) lens[n++] = len;
    if (last >= 1) lens[n++] = last;
    return n;
}

void kvs_rm_encode(const kvs_rm_marker *m, uint8_t out[KVS_RM_BYTES]) {
    memcpy(out, KVS_RM_MAGIC, 4);
    kvs_put_le32(out + 4, KVS_RM_VERSION);
    kvs_put_le32(out + 8, (uint32_t)m->n_named);
    kvs_put_le32(out + 12, (uint32_t)m->n_target);
    memcpy(out + 16, m->fp.b, 32);
    memcpy(out + 48, m->named.b, 32);
    memcpy(out + 80, m->target.b, 32);
}

int kvs_rm_decode(const uint8_t *v, size_t len, const kvs_key *fp, const kvs_key *named_key, int max_tokens,
                  kvs_rm_marker *out, kvs_disk_verdict *verdict) {
    kvs_disk_verdict why = KVS_DISK_OK;
    if (!kvs_rm_is_marker(v, len)) why = KVS_DISK_BAD_MAGIC;
    else if (len != KVS_RM_BYTES) why = KVS_DISK_TRUNCATED;
    else if (kvs_get_le32(v + 4) != KVS_RM_VERSION) why = KVS_DISK_BAD_VERSION;
    else if (fp && memcmp(v + 16, fp->b, 32)) why = KVS_DISK_FOREIGN;
    if (why != KVS_DISK_OK) {
        *verdict = why;
        return kvs_error(kvs_disk_verdict_status(why), "redis marker: %s", kvs_disk_verdict_name(why));
    }
    kvs_rm_marker m;
    m.n_named = (int)(kvs_get_le32(v + 8) & 0x7fffffffu);
    m.n_target = (int)(kvs_get_le32(v + 12) & 0x7fffffffu);
    memcpy(m.named.b, v + 48, 32);
    memcpy(m.target.b, v + 80, 32);
    memcpy(m.fp.b, v + 16, 32);
    if (kvs_get_le32(v + 8) != (uint32_t)m.n_named || kvs_get_le32(v + 12) != (uint32_t)m.n_target ||
        m.n_named < 1 || m.n_named >= m.n_target || m.n_target > max_tokens || !kvs_key_equal(&m.named, named_key)) {
        *verdict = KVS_DISK_BAD_HEADER;
        return kvs_error(kvs_disk_verdict_status(KVS_DISK_BAD_HEADER),
                         "redis marker: lengths %u of %u or its key do not fit", kvs_get_le32(v + 8),
                         kvs_get_le32(v + 12));
    }
    *out = m;
    *verdict = KVS_DISK_OK;
    return KVS_OK;
}

int kvs_rm_target_fits(const kvs_rm_marker *m, const kvs_chunk *c) {
    if (!c || c->n_tok != m->n_target || !kvs_key_equal(&c->prefix_key, &m->target)) return 0;
    kvs_key k;
    kvs_key_prefix(&c->parent_key, c->tokens, m->n_named, &k);
    return kvs_key_equal(&k, &m->named);
}
