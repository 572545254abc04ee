/* GGUF metadata accessors. Open validated every value, so reads here stay in
 * bounds; they only check that the stored type fits what the caller asks. */
#include "gguf/gguf_internal.h"

#include "base/error.h"

#include <string.h>

int64_t kvs_gguf_n_kv(const kvs_gguf *g) { return g->n_kv; }

int64_t kvs_gguf_find_key(const kvs_gguf *g, const char *key) {
    if (!key) return -1;
    return kvs_gguf_index_find(&g->key_index, key, strlen(key));
}

kvs_gguf_str kvs_gguf_key(const kvs_gguf *g, int64_t i) {
    if (i < 0 || i >= g->n_kv) return (kvs_gguf_str){NULL, 0};
    return g->kv[i].key;
}

kvs_gguf_vtype kvs_gguf_kv_type(const kvs_gguf *g, int64_t i) {
    if (i < 0 || i >= g->n_kv) return KVS_GGUF_VTYPE_COUNT;
    return g->kv[i].type;
}

static const char *vtype_str(kvs_gguf_vtype t) {
    static const char *names[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool",
                                  "string", "array", "u64", "i64", "f64"};
    return (unsigned)t < KVS_GGUF_VTYPE_COUNT ? names[t] : "unknown";
}

/* Looks the key up; KVS_ERR_NOT_FOUND when absent, with no message: an
 * absent key is no failure to the many optional ones (a default), and a
 * message here had outlived the successful load that read them (the
 * header's kvs_last_error() changes only on a failing call); a caller that
 * needs the key says which and why. */
static int lookup(const kvs_gguf *g, const char *key, const kvs_gguf_kv **out) {
    int64_t i = kvs_gguf_find_key(g, key);
    if (i < 0) return KVS_ERR_NOT_FOUND;
    *out = &g->kv[i];
    return KVS_OK;
}

static int wrong_type(const kvs_gguf *g, const kvs_gguf_kv *kv, const char *key, const char *want) {
    return kvs_error(KVS_ERR_FORMAT, "%s: key %s: type is %s, expected %s (at offset %zu)", g->path,
                     key, vtype_str(kv->type), want, kv->value_off);
}

/* Integer value widened to a sign flag + magnitude-safe pair; 0 if not an integer type. */
static int read_int(const kvs_gguf *g, const kvs_gguf_kv *kv, int *neg, uint64_t *u, int64_t *s) {
    const uint8_t *p = g->base + kv->value_off;
    switch (kv->type) {
    case KVS_GGUF_U8: { uint8_t v; memcpy(&v, p, 1); *u = v; *neg = 0; break; }
    case KVS_GGUF_U16: { uint16_t v; memcpy(&v, p, 2); *u = v; *neg = 0; break; }
    case KVS_GGUF_U32: { uint32_t v; memcpy(&v, p, 4); *u = v; *neg = 0; break; }
    case KVS_GGUF_U64: { uint64_t v; memcpy(&v, p, 8); *u = v; *neg = 0; break; }
    case KVS_GGUF_I8: { int8_t v; memcpy(&v, p, 1); *s = v; *neg = v < 0; break; }
    case KVS_GGUF_I16: { int16_t v; memcpy(&v, p, 2); *s = v; *neg = v < 0; break; }
    case KVS_GGUF_I32: { int32_t v; memcpy(&v, p, 4); *s = v; *neg = v < 0; break; }
    case KVS_GGUF_I64: { int64_t v; memcpy(&v, p, 8); *s = v; *neg = v < 0; break; }
    default: return 0;
    }
    if (kv->type == KVS_GGUF_I8 || kv->type == KVS_GGUF_I16 || kv->type == KVS_GGUF_I32 ||
        kv->type == KVS_GGUF_I64) {
        if (!*neg) *u = (uint64_t)*s;
    } else {
        *s = *u > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)*u;
    }
    return 1;
}

int kvs_gguf_get_u32(const kvs_gguf *g, const char *key, uint32_t *out) {
    const kvs_gguf_kv *kv;
    int st = lookup(g, key, &kv);
    if (st) return st;
    int neg;
    uint64_t u = 0;
    int64_t s = 0;
    if (!read_int(g, kv, &neg, &u, &s)) return wrong_type(g, kv, key, "an integer");
    if (neg)
        return kvs_error(KVS_ERR_FORMAT, "%s: key %s: value %lld does not fit in u32 (at offset %zu)",
                         g->path, key, (long long)s, kv->value_off);
    if (u > UINT32_MAX)
        return kvs_error(KVS_ERR_FORMAT, "%s: key %s: value %llu does not fit in u32 (at offset %zu)",
                         g->path, key, (unsigned long long)u, kv->value_off);
    *out = (uint32_t)u;
    return KVS_OK;
}

int kvs_gguf_get_i64(const kvs_gguf *g, const char *key, int64_t *out) {
    const kvs_gguf_kv *kv;
    int st = lookup(g, key, &kv);
    if (st) return st;
    int neg;
    uint64_t u = 0;
    int64_t s = 0;
    if (!read_int(g, kv, &neg, &u, &s)) return wrong_type(g, kv, key, "an integer");
    if (!neg && u > (uint64_t)INT64_MAX)
        return kvs_error(KVS_ERR_FORMAT, "%s: key %s: value %llu does not fit in i64 (at offset %zu)",
                         g->path, key, (unsigned long long)u, kv->value_off);
    *out = s;
    return KVS_OK;
}

int kvs_gguf_get_f32(const kvs_gguf *g, const char *key, float *out) {
    const kvs_gguf_kv *kv;
    int st = lookup(g, key, &kv);
    if (st) return st;
    const uint8_t *p = g->base + kv->value_off;
    if (kv->type == KVS_GGUF_F32) { memcpy(out, p, 4); return KVS_OK; }
    if (kv->type == KVS_GGUF_F64) { double d; memcpy(&d, p, 8); *out = (float)d; return KVS_OK; }
    return wrong_type(g, kv, key, "f32 or f64");
}

int kvs_gguf_get_bool(const kvs_gguf *g, const char *key, int *out) {
    const kvs_gguf_kv *kv;
    int st = lookup(g, key, &kv);
    if (st) return st;
    if (kv->type != KVS_GGUF_BOOL) return wrong_type(g, kv, key, "bool");
    *out = g->base[kv->value_off] != 0;
    return KVS_OK;
}

int kvs_gguf_get_str(const kvs_gguf *g, const char *key, kvs_gguf_str *out) {
    const kvs_gguf_kv *kv;
    int st = lookup(g, key, &kv);
    if (st) return st;
    if (kv->type != KVS_GGUF_STRING) return wrong_type(g, kv, key, "string");
    uint64_t len;
    memcpy(&len, g->base + kv->value_off, 8);
    out->ptr = (const char *)g->base + kv->value_off + 8;
    out->len = len;
    return KVS_OK;
}

int kvs_gguf_get_arr(const kvs_gguf *g, const char *key, kvs_gguf_vtype *elem_type, uint64_t *n) {
    const kvs_gguf_kv *kv;
    int st = lookup(g, key, &kv);
    if (st) return st;
    if (kv->type != KVS_GGUF_ARRAY) return wrong_type(g, kv, key, "array");
    if (elem_type) *elem_type = kv->elem_type;
    if (n) *n = kv->n;
    return KVS_OK;
}

int kvs_gguf_get_arr_data(const kvs_gguf *g, const char *key, const void **data) {
    const kvs_gguf_kv *kv;
    int st = lookup(g, key, &kv);
    if (st) return st;
    if (kv->type != KVS_GGUF_ARRAY) return wrong_type(g, kv, key, "array");
    if (kv->elem_type == KVS_GGUF_STRING || kv->elem_type == KVS_GGUF_ARRAY)
        return kvs_error(KVS_ERR_FORMAT, "%s: key %s: array of %s, expected a numeric array (at offset %zu)",
                         g->path, key, vtype_str(kv->elem_type), kv->value_off);
    *data = g->base + kv->data_off;
    return KVS_OK;
}

int kvs_gguf_get_arr_str(const kvs_gguf *g, const char *key, uint64_t i, kvs_gguf_str *out) {
    const kvs_gguf_kv *kv;
    int st = lookup(g, key, &kv);
    if (st) return st;
    if (kv->type != KVS_GGUF_ARRAY || kv->elem_type != KVS_GGUF_STRING)
        return kvs_error(KVS_ERR_FORMAT, "%s: key %s: not a string array (at offset %zu)", g->path,
                         key, kv->value_off);
    if (i >= kv->n)
        return kvs_error(KVS_ERR_INVALID_ARG, "%s: key %s: index %llu out of range (%llu strings)",
                         g->path, key, (unsigned long long)i, (unsigned long long)kv->n);
    size_t at = (size_t)kv->str_offs[i];
    uint64_t len;
    memcpy(&len, g->base + at, 8);
    out->ptr = (const char *)g->base + at + 8;
    out->len = len;
    return KVS_OK;
}
