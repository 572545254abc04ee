/* kvstitch cache stats|ls|clear|prune: inspect, bound and empty a prompt KV
 * cache directory. */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cli.h"

static const char *usage_text =
    "usage: kvstitch cache (stats | ls | clear | prune) --cache-dir DIR [options]\n"
    "       kvstitch cache (stats | ls | clear) (--redis URL | --redis-cluster LIST) [-m MODEL [--kv-type T]\n"
    "              [--cache-key-file F]] [--json]\n"
    "  (on Redis: every kvstitch key, kvs:*, found by SCAN; clear deletes only those, never FLUSHALL;\n"
    "   with -m, stats breaks that model's entries down by KV type, ls shows only its chunks)\n"
    "  stats                  entries, bytes and the byte bound, models, damaged files,\n"
    "                         unreachable entries and stale temporary files (what prune reclaims);\n"
    "                         with -m also this model's view: its entries, prefix-reachable\n"
    "                         chunks, foreign/damaged/orphaned, and its entries and KV bytes\n"
    "                         by KV type (each KV type is a fingerprint of its own)\n"
    "  ls                     one line per chunk: key, position, tokens, bytes, created, model;\n"
    "                         with -m only this model's chunks, with their text\n"
    "  clear                  remove every entry of DIR (all models; only the cache's own files), stale\n"
    "                         temporary files and stale junk (reported as prune reports them)\n"
    "  prune                  reclaim space: unreachable entries (their parent chunk is gone, no\n"
    "                         prompt can use them), temporary files of writers that died, junk\n"
    "                         (an entry's name without its magic, untouched for an hour), entries\n"
    "                         unused for --older-than, then the least recently used down to\n"
    "                         --max-bytes (only the cache's own files)\n"
    "  --cache-dir DIR        the cache directory (must exist)\n"
    "  -m, --model PATH       GGUF file (stats, ls); with --cache-key-file F, the model's keyed\n"
    "                         entries (its keyed fingerprint's, in DIR or on Redis)\n"
    "  --kv-type T            with -m: the model's KV type to look at, f16 (default), f32 or q8\n"
    "                         (the entries warm/generate --kv-type T stored)\n"
    "  --verify               stats: also read every payload and check its checksum\n"
    "                         (otherwise payloads are checked when they are used); with -m also\n"
    "                         this model's entries of every KV type as a request reads them: with\n"
    "                         --cache-key-file each MAC too (a forgery recomputes the checksums,\n"
    "                         not the MAC)\n"

    "  --max-bytes N          prune: bound on DIR's entry bytes (K/M/G/T suffixes)\n"
    "  --older-than AGE       prune: remove entries unused for AGE (seconds, or with s/m/h/d)\n"
    "  --cache-max-bytes N    stats: the bound to report (default: the one generate/warm use)\n"
    "  --json                 JSON output\n"
    CLI_REDIS_USAGE;

typedef struct cache_opts {
    const char *verb, *dir, *model_path, *kv_type_name;
    kvs_kv_type kv_type; /* --kv-type, f16 if not given */
    int json, verify;
    unsigned long long max_bytes, cache_max_bytes, older_than_s;
    int has_max_bytes, has_older_than;
    cli_redis_opts redis;
} cache_opts;

int cli_parse_bytes(const char *opt, const char *s, unsigned long long *out) {
    static const char units[] = "KMGT";
    char *end;
    errno = 0;
    unsigned long long v = s && isdigit((unsigned char)*s) ? strtoull(s, &end, 10) : 0;
    int ok = s && isdigit((unsigned char)*s) && !errno;
    if (ok && *end) {
        const char *u = strchr(units, toupper((unsigned char)*end));
        int shift = u ? 10 * (int)(u - units + 1) : 0;
        const char *rest = end + 1;
        ok = u && (!*rest || !strcmp(rest, "B") || !strcmp(rest, "iB")) && v <= (~0ull >> shift);
        if (ok) v <<= shift;
    }
    if (!ok || v == 0) {
        fprintf(stderr, "kvstitch: %s expects a byte count >= 1 (digits, optional K/M/G/T suffix), got '%s'\n", opt,
                s ? s : "");
        return -1;
    }
    *out = v;
    return 0;
}

/* Seconds, or digits with s/m/h/d. */
static int parse_age(const char *opt, const char *s, unsigned long long *out) {
    char *end;
    errno = 0;
    unsigned long long v = s && isdigit((unsigned char)*s) ? strtoull(s, &end, 10) : 0;
    unsigned long long mul = 0;
    if (s && isdigit((unsigned char)*s) && !errno) {
        if (!*end || !strcmp(end, "s")) mul = 1;
        else if (!strcmp(end, "m")) mul = 60;
        else if (!strcmp(end, "h")) mul = 3600;
        else if (!strcmp(end, "d")) mul = 86400;
    }
    if (!mul || v == 0 || v > (1ull << 40) / mul) {
        fprintf(stderr, "kvstitch: %s expects an age >= 1 (seconds, or digits with s/m/h/d), got '%s'\n", opt,
                s ? s : "");
        return -1;
    }
    *out = v * mul;
    return 0;
}

static int parse(int argc, char **argv, cache_opts *o) {
    int rc;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { fputs(usage_text, stdout); return 0; }
        else if (!strcmp(a, "--json")) o->json = 1;
        else if (!strcmp(a, "--verify")) o->verify = 1;
        else if (a[0] != '-') {
            if (o->verb) return cli_usage_error("cache", "one action only (got '%s' and '%s')", o->verb, a);
            o->verb = a;
        }
        else if ((rc = cli_redis_option("cache", a, i + 1 < argc ? argv[i + 1] : NULL, &o->redis)) != 0) {
            if (rc < 0) return 2;
            i++;
        }
        else if (!v) return cli_usage_error("cache", "unknown option or missing value: %s", a);
        /* each option takes one value: given again, refused (as the table-driven commands do) */
        else if ((!strcmp(a, "--cache-dir") && o->dir) ||
                 ((!strcmp(a, "-m") || !strcmp(a, "--model")) && o->model_path) ||
                 (!strcmp(a, "--max-bytes") && o->has_max_bytes) ||
                 (!strcmp(a, "--cache-max-bytes") && o->cache_max_bytes) ||
                 (!strcmp(a, "--older-than") && o->has_older_than) ||
                 (!strcmp(a, "--kv-type") && o->kv_type_name))
            return cli_usage_error("cache", "%s given more than once (again with '%s'): it takes one value", a, v);
        else if (!strcmp(a, "--cache-dir")) o->dir = argv[++i];
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) o->model_path = argv[++i];
        else if (!strcmp(a, "--kv-type")) {
            if (kvs_kv_type_parse(v, &o->kv_type) != KVS_OK)
                return cli_usage_error("cache", "--kv-type: unknown KV type '%s' (f16, f32 or q8)", v);
            o->kv_type_name = argv[++i];
        }
        else if (!strcmp(a, "--max-bytes")) {
            if (cli_parse_bytes(a, argv[++i], &o->max_bytes)) return 2;
            o->has_max_bytes = 1;
        } else if (!strcmp(a, "--cache-max-bytes")) {
            if (cli_parse_bytes(a, argv[++i], &o->cache_max_bytes)) return 2;
        } else if (!strcmp(a, "--older-than")) {
            if (parse_age(a, argv[++i], &o->older_than_s)) return 2;
            o->has_older_than = 1;
        }
        else return cli_usage_error("cache", "unknown option: %s", a);
    }
    if (!o->verb) return cli_usage_error("cache", "give an action: stats, ls, clear or prune");
    if (strcmp(o->verb, "stats") && strcmp(o->verb, "ls") && strcmp(o->verb, "clear") && strcmp(o->verb, "prune"))
        return cli_usage_error("cache", "unknown action '%s' (stats, ls, clear, prune)", o->verb);
    if (cli_redis_check("cache", &o->redis)) return 2;
    /* a key names a keyed cache of one model (its fingerprint): the model-free
     * listings see every entry anyway, keyed ones under their own fingerprint */
    if (o->redis.key_file && !o->model_path)
        return cli_usage_error("cache", "--cache-key-file goes with -m (the keyed cache of that model, in --cache-dir "
                               "or on --redis / --redis-cluster)");
    if (o->kv_type_name && !o->model_path)
        return cli_usage_error("cache", "--kv-type goes with -m (which KV type of that model to look at)");
    if (cli_redis_given(&o->redis)) {
        if (o->dir) return cli_usage_error("cache", "give --cache-dir or --redis / --redis-cluster, not both");
        if (!strcmp(o->verb, "prune") || o->verify || o->has_max_bytes || o->has_older_than || o->cache_max_bytes)
            return cli_usage_error("cache", "prune, --verify, --max-bytes, --older-than and --cache-max-bytes are for "
                                   "--cache-dir (on Redis, maxmemory + allkeys-lru evicts; values are verified on use)");
        if (o->model_path && !strcmp(o->verb, "clear"))
            return cli_usage_error("cache", "clear removes the entries of every model; it takes no -m");
        return -1;
    }
    if (!o->dir || !*o->dir) return cli_usage_error("cache", "--cache-dir DIR (or --redis URL / --redis-cluster LIST) is required");
    struct stat sb;
    if (stat(o->dir, &sb)) return cli_usage_error("cache", "--cache-dir %s: %s", o->dir, strerror(errno));
    if (!S_ISDIR(sb.st_mode)) return cli_usage_error("cache", "--cache-dir %s: not a directory", o->dir);
    if ((o->has_max_bytes || o->has_older_than) && strcmp(o->verb, "prune"))
        return cli_usage_error("cache", "--max-bytes and --older-than go with prune");
    if (o->cache_max_bytes && strcmp(o->verb, "stats"))
        return cli_usage_error("cache", "--cache-max-bytes goes with stats (prune takes --max-bytes)");
    if (o->model_path && !strcmp(o->verb, "prune"))
        return cli_usage_error("cache", "prune works on every model's entries; it takes no -m");
    if (o->verify && strcmp(o->verb, "stats")) return cli_usage_error("cache", "--verify goes with stats");
    if (o->model_path && !strcmp(o->verb, "clear"))
        return cli_usage_error("cache", "clear removes the entries of every model; it takes no -m");
    return -1;
}

/* --- ls ------------------------------------------------------------------------------ */

typedef struct row {
    kvs_cache_entry e;   /* tokens not kept */
    char *text;          /* decoded tokens (with -m), malloc'd */
} row;

typedef struct rows {
    row *r;
    size_t n, cap;
    const kvs_model *model;
    int nomem;
} rows;

/* The chunk's tokens as text (control tokens shown), for ls -m. */
static char *tokens_text(const kvs_model *m, const int32_t *t, int n) {
    size_t cap = 256, len = 0;
    char *s = malloc(cap);
    for (int i = 0; s && i < n; i++) {
        char piece[256];
        size_t pl = 0;
        if (kvs_token_to_bytes(m, t[i], 1, piece, sizeof piece, &pl) != KVS_OK) pl = 0;
        if (len + pl + 1 > cap) {
            cap = 2 * (len + pl + 1);
            char *b = realloc(s, cap);
            if (!b) { free(s); return NULL; }
            s = b;
        }
        memcpy(s + len, piece, pl);
        len += pl;
    }
    if (s) s[len] = 0;
    return s;
}

static int collect(void *user, const kvs_cache_entry *e) {
    rows *x = user;
    if (x->n == x->cap) {
        size_t cap = x->cap ? 2 * x->cap : 64;
        row *r = realloc(x->r, cap * sizeof *r);
        if (!r) { x->nomem = 1; return 1; }
        x->r = r;
        x->cap = cap;
    }
    row *r = &x->r[x->n++];
    r->e = *e;
    r->e.tokens = NULL;
    r->text = x->model ? tokens_text(x->model, e->tokens, e->n_tok) : NULL;
    return 0;
}

static int by_model_pos(const void *a, const void *b) {
    const kvs_cache_entry *x = &((const row *)a)->e, *y = &((const row *)b)->e;
    int c = strcmp(x->fingerprint, y->fingerprint);
    if (c) return c;
    if (x->pos0 != y->pos0) return x->pos0 < y->pos0 ? -1 : 1;
    return strcmp(x->prefix_key, y->prefix_key);
}

static void iso_time(int64_t ns, char *buf, size_t cap) {
    time_t t = (time_t)(ns / 1000000000);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static void print_rows(const rows *x, int json) {
    if (json) printf("{\"entries\": [");
    else printf("%-16s %6s %5s %-9s %10s  %-20s  %-12s%s\n", "prefix key", "pos", "tok", "origin", "kv bytes",
                "created (UTC)", "model", x->model ? "  text" : "");
    for (size_t i = 0; i < x->n; i++) {
        const kvs_cache_entry *e = &x->r[i].e;
        char when[32];
        iso_time(e->created_ns, when, sizeof when);
        if (json) {
            printf("%s{\"prefix_key\": \"%s\", \"parent_key\": \"%s\", \"content_key\": \"%s\", \"fingerprint\": \"%s\", "
                   "\"pos0\": %d, \"tokens\": %d, \"origin\": \"%s\", \"neighbours\": %d, \"kv_bytes\": %llu, "
                   "\"kv_type\": \"%s\", \"created\": \"%s\"",
                   i ? ", " : "", e->prefix_key, e->parent_key, e->content_key, e->fingerprint, e->pos0, e->n_tok,
                   e->origin, e->n_neighbours, (unsigned long long)e->kv_bytes, kvs_kv_type_name(e->kv_type),
                   when);
            if (x->model) {
                printf(", \"resident\": %s, \"prefix_reachable\": %s, \"text\": ", e->resident ? "true" : "false",
                       e->prefix_reachable ? "true" : "false");
                const char *t = x->r[i].text ? x->r[i].text : "";
                cli_json_string(stdout, t, strlen(t));
            }
            printf("}");
        } else {
            char origin[16];
            if (e->n_neighbours) snprintf(origin, sizeof origin, "%s/%d", e->origin, e->n_neighbours);
            else snprintf(origin, sizeof origin, "%s", e->origin);
            printf("%.16s %6d %5d %-9s %10llu  %-20s  %.12s", e->prefix_key, e->pos0, e->n_tok, origin,
                   (unsigned long long)e->kv_bytes, when, e->fingerprint);
            if (x->model) {
                /* one line: control characters shown as spaces, long texts cut */
                char preview[61];
                const char *t = x->r[i].text ? x->r[i].text : "";
                size_t k = 0;
                for (; t[k] && k < 60; k++) preview[k] = (unsigned char)t[k] < 0x20 ? ' ' : t[k];
                /* do not cut a UTF-8 sequence */
                while (k > 0 && t[k] && ((unsigned char)t[k] & 0xC0) == 0x80) k--;
                preview[k] = 0;
                printf("  %s%s", preview, t[k] ? "..." : "");
            }
            printf("\n");
        }
    }
    if (json) printf("]}\n");
}

/* --- stats --------------------------------------------------------------------------- */

#define ULL(x) ((unsigned long long)(x))

/* verified: --verify read every payload (checksums: no model, no key) */
static void print_dir_stats(const char *dir, const kvs_cache_dir_stats *d, uint64_t max_bytes, int verified, int json) {
    if (json) {
        printf("\"dir\": ");
        cli_json_string(stdout, dir, strlen(dir));
        printf(", \"checked\": \"%s\"", verified ? "checksums" : "headers");
        printf(", \"entries\": %llu, \"bytes\": %llu, \"max_bytes\": %llu, \"models\": %llu, \"damaged\": %llu, "
               "\"unreadable\": %llu, \"tmp_files\": %llu, \"stale_tmp_files\": %llu, \"unreachable\": %llu, "
               "\"unreachable_bytes\": %llu, \"other_files\": %llu",
               ULL(d->entries), ULL(d->bytes), ULL(max_bytes), ULL(d->models), ULL(d->damaged), ULL(d->unreadable),
               ULL(d->tmp), ULL(d->stale_tmp), ULL(d->unreachable), ULL(d->unreachable_bytes), ULL(d->other_files));
    } else {
        printf("cache dir:        %s\n", dir);
        printf("entries:          %llu (%.1f MiB on disk) of %llu fingerprint%s (model x KV type)\n", ULL(d->entries),
               (double)d->bytes / (1 << 20), ULL(d->models), d->models == 1 ? "" : "s");
        printf("byte bound:       %.1f MiB (%.0f%% used; least recently used entries are evicted beyond it)\n",
               (double)max_bytes / (1 << 20), max_bytes ? 100.0 * (double)d->bytes / (double)max_bytes : 0.0);
        printf("unreachable:      %llu entries, %.1f MiB (their parent chunk is gone: no prompt reaches them\n"
               "                  until it is stored again; `cache prune` removes them)\n",
               ULL(d->unreachable), (double)d->unreachable_bytes / (1 << 20));
        printf("damaged files:    %llu (never served; dropped when a request meets them)\n", ULL(d->damaged));
        if (verified)
            printf("                  (--verify: every payload's checksum read too, of every model; a MAC is\n"
                   "                  checked only for the model and key given: -m M --cache-key-file F)\n");
        if (d->unreadable) printf("unreadable files: %llu (read errors, or not regular files: left alone)\n", ULL(d->unreadable));
        if (d->tmp)
            printf("temporary files:  %llu, %llu stale (writers that died; `cache prune` removes them)\n", ULL(d->tmp),
                   ULL(d->stale_tmp));
        if (d->other_files) printf("other files:      %llu (not the cache's: never touched)\n", ULL(d->other_files));
    }
}

/* --- a model's entries by KV type ------------------------------------------------------ */

/* The KV dtype is part of the fingerprint, so one model's entries in f16 and
 * in q8 carry two fingerprints. With -m a scan's entries are sorted by the
 * fingerprint each KV type gives the model (its q8 entries had been counted
 * as another model's beside the f16 view that -m opened). */
enum { KV_TYPES_MAX = 8 };
typedef struct kv_types {
    int n;                           /* the KV types: kvs_kv_type_name(0 .. n - 1) */
    char fp[KV_TYPES_MAX][65];       /* the model's fingerprint with each */
    uint64_t entries[KV_TYPES_MAX];  /* valid entries of each (headers) */
    uint64_t kv_bytes[KV_TYPES_MAX]; /* their payload bytes (ls's kv_bytes) */
    uint64_t other_models;           /* entries under no fingerprint of this model */
} kv_types;

/* The fingerprint a cache of m with KV type t (and key_file's key, if not
 * NULL) names its entries by. A key is folded into it: a memory-only cache
 * opened with the key says which (the key is read, never printed). */
static int fingerprint_of(kvs_model *m, kvs_kv_type t, const char *key_file, char hex[65]) {
    if (!key_file) return kvs_model_fingerprint_hex(m, t, hex);
    kvs_cache_params p = kvs_cache_default_params();
    p.kv_type = t;
    p.cache_key_file = key_file;
    kvs_cache *c = NULL;
    int st = kvs_cache_open(m, p, &c);
    if (st == KVS_OK) kvs_cache_fingerprint_hex(c, hex);
    kvs_cache_free(c);
    return st;
}

/* 0, or 1 after a message. key_file: the keyed fingerprints (--cache-key-file). */
static int kv_types_init(kvs_model *m, const char *model_path, const char *key_file, kv_types *k) {
    memset(k, 0, sizeof *k);
    for (; k->n < KV_TYPES_MAX && kvs_kv_type_name((kvs_kv_type)k->n); k->n++) {
        int st = fingerprint_of(m, (kvs_kv_type)k->n, key_file, k->fp[k->n]);
        /* a KV type this model cannot have (q8 past 256-wide heads): no
         * entries of it, its fingerprint "" (matching none) */
        if (st == KVS_ERR_UNSUPPORTED) k->fp[k->n][0] = 0;
        else if (st != KVS_OK) return cli_fail(st, model_path);
    }
    return 0;
}

static int count_kv_type(void *user, const kvs_cache_entry *e) {
    kv_types *k = user;
    const int t = (int)e->kv_type;
    if (t >= 0 && t < k->n && !strcmp(e->fingerprint, k->fp[t])) {
        k->entries[t]++;
        k->kv_bytes[t] += e->kv_bytes;
    } else {
        k->other_models++;
    }
    return 0;
}

/* JSON: the "kv_types" and "other_models" members; text: the lines after
 * "its entries" (shown: the KV type the model's view is of). */
static void print_kv_types(const kv_types *k, kvs_kv_type shown, int json) {
    if (json) {
        printf("\"kv_types\": {");
        for (int t = 0; t < k->n; t++)
            printf("%s\"%s\": {\"fingerprint\": \"%s\", \"entries\": %llu, \"kv_bytes\": %llu}", t ? ", " : "",
                   kvs_kv_type_name((kvs_kv_type)t), k->fp[t], ULL(k->entries[t]), ULL(k->kv_bytes[t]));
        printf("}, \"other_models\": %llu", ULL(k->other_models));
        return;
    }
    printf("  by KV type:      ");
    int listed = 0, others = 0;
    for (int t = 0; t < k->n; t++) {
        if (!k->entries[t]) continue;
        printf("%s%s %llu entr%s (%.1f MiB of KV)", listed++ ? ", " : "", kvs_kv_type_name((kvs_kv_type)t),
               ULL(k->entries[t]), k->entries[t] == 1 ? "y" : "ies", (double)k->kv_bytes[t] / (1 << 20));
        others += t != (int)shown;
    }
    printf("%s\n", listed ? "" : "none");
    if (others)
        printf("                   (each KV type is a fingerprint of its own; --kv-type T shows T's entries above)\n");
    printf("  other models':   %llu entries (never served to this model)\n", ULL(k->other_models));
}

/* What --verify found among this model's entries (kvs_cache_verify): with
 * a key each MAC was checked too, which is what tells a forgery (its
 * checksums recomputed) from a good entry. */
/* The names of the KV types whose bits are set, sep between them, each in
 * quote. */
static void print_type_names(unsigned types, const char *sep, const char *quote) {
    for (int t = 0, n = 0; t < KV_TYPES_MAX; t++)
        if (types >> t & 1) printf("%s%s%s%s", n++ ? sep : "", quote, kvs_kv_type_name((kvs_kv_type)t), quote);
}

static void print_model_verify(const kvs_cache_verify_report *v, unsigned types_read, int json) {
    if (json) {
        printf(", \"verify\": {\"checked\": \"%s\", \"entries\": %llu, \"damaged\": %llu, \"bad_mac\": %llu, "
               "\"unreadable\": %llu, \"kv_types\": [",
               v->macs_checked ? "checksums+mac" : "checksums", ULL(v->entries), ULL(v->damaged), ULL(v->bad_mac),
               ULL(v->unreadable));
        print_type_names(types_read, ", ", "\"");
        printf("]}");
        return;
    }
    printf("  --verify:        ");
    print_type_names(types_read, " + ", "");
    printf(" entries: %llu read whole and good, %llu failed the checksum", ULL(v->entries), ULL(v->damaged));
    if (v->macs_checked) printf(", %llu failed the MAC (forged, or written without the key)\n", ULL(v->bad_mac));
    else printf("\n                   (no cache key: MACs not checked; keyed entries are another fingerprint's)\n");
    if (v->unreadable) printf("                   %llu unreadable or gone meanwhile\n", ULL(v->unreadable));
}

/* keyed: --cache-key-file (the fingerprint is the keyed one); v: --verify's
 * reading of this model's entries of the KV types in types_read, or NULL. */
static void print_model_stats(const kvs_cache *cache, const kvs_cache_stats *s, const kv_types *k, kvs_kv_type kv_type,
                              int keyed, const kvs_cache_verify_report *v, unsigned types_read, int json) {
    char fp[65];
    kvs_cache_fingerprint_hex(cache, fp);
    if (json) {
        printf(", \"model\": {\"fingerprint\": \"%s\", \"keyed\": %s, \"entries\": %llu, \"prefix_reachable\": %llu, "
               "\"chunk_tokens\": %d, \"foreign\": %llu, \"damaged\": %llu, \"bad_mac\": %llu, \"orphans\": %llu, "
               "\"index_bytes\": %llu, \"kv_type\": \"%s\", ",
               fp, keyed ? "true" : "false", ULL(s->entries), ULL(s->prefix_reachable), s->chunk_tokens,
               ULL(s->disk_foreign), ULL(s->disk_bad), ULL(s->disk_bad_mac), ULL(s->disk_orphans), ULL(s->index_bytes),
               kvs_kv_type_name(kv_type));
        print_kv_types(k, kv_type, json);
        if (v) print_model_verify(v, types_read, json);
        printf("}");
    } else {
        printf("model fingerprint: %s (KV type %s%s)\n", fp, kvs_kv_type_name(kv_type), keyed ? ", keyed" : "");
        printf("  its entries:     %llu (%llu reachable by prefix, %llu orphaned: parent chunk missing)\n",
               ULL(s->entries), ULL(s->prefix_reachable), ULL(s->disk_orphans));
        if (s->disk_bad_mac)
            printf("  bad MAC:         %llu (keyless entries under the keyed name: never served)\n", ULL(s->disk_bad_mac));
        print_kv_types(k, kv_type, json);
        if (v) {
            /* the counts above include entries whose payload fails */
            printf("  (this model's figures come from the entries' headers; --verify read them whole:)\n");
            print_model_verify(v, types_read, json);
        }
    }
}

/* The params of the cache of the model's entries of KV type t in o's dir. */
static kvs_cache_params model_cache_params(const cache_opts *o, kvs_kv_type t) {
    kvs_cache_params pp = kvs_cache_default_params();
    pp.cache_dir = o->dir;
    pp.cache_max_bytes = o->cache_max_bytes;
    pp.kv_type = t;
    pp.cache_key_file = o->redis.key_file;
    return pp;
}

/* -m --verify: the model's entries of the shown KV type and of every other
 * type that has any (k, from their headers), each type its own fingerprint
 * and so its own cache (shown's is open), read whole as a request would;
 * the reports summed into v, the types read as bits of *types_read. */
static int verify_model_types(kvs_model *m, const cache_opts *o, kvs_cache *shown, const kv_types *k,
                              kvs_cache_verify_report *v, unsigned *types_read) {
    memset(v, 0, sizeof *v);
    *types_read = 0;
    for (int t = 0; t < k->n; t++) {
        if (t != (int)o->kv_type && !k->entries[t]) continue;
        kvs_cache *c = shown;
        int st = t == (int)o->kv_type ? KVS_OK : kvs_cache_open(m, model_cache_params(o, (kvs_kv_type)t), &c);
        kvs_cache_verify_report r;
        if (st == KVS_OK) st = kvs_cache_verify(c, &r);
        if (c != shown) kvs_cache_free(c);
        if (st != KVS_OK) return st;
        v->macs_checked = r.macs_checked; /* one key (or none) for every type */
        v->entries += r.entries;
        v->damaged += r.damaged;
        v->bad_mac += r.bad_mac;
        v->unreadable += r.unreadable;
        *types_read |= 1u << t;
    }
    return KVS_OK;
}

/* --- on Redis ------------------------------------------------------------------------ */

typedef struct redis_rows {
    rows *x;
    const char *fp; /* only this model's entries (ls -m), or NULL */
} redis_rows;

static int collect_model(void *user, const kvs_cache_entry *e) {
    redis_rows *r = user;
    return r->fp && strcmp(e->fingerprint, r->fp) ? 0 : collect(r->x, e);
}

/* stats | ls | clear of the kvstitch keys on the Redis tier of o. */
static int cache_redis(const cache_opts *o) {
    kvs_cache_params pp = kvs_cache_default_params();
    cli_redis_apply(&o->redis, &pp);
    const char *where = o->redis.cluster ? o->redis.cluster : "redis";
    if (!strcmp(o->verb, "clear")) {
        uint64_t n = 0;
        int st = kvs_cache_redis_clear(&pp, &n);
        if (st != KVS_OK) return cli_fail(st, where);
        if (o->json) printf("{\"removed\": %llu}\n", (unsigned long long)n);
        else printf("removed %llu entr%s from Redis\n", (unsigned long long)n, n == 1 ? "y" : "ies");
        return 0;
    }
    kvs_model *model = NULL;
    rows x;
    memset(&x, 0, sizeof x);
    kv_types k;
    redis_rows rr = {&x, NULL};
    int rc = 1, st;
    if (o->model_path) {
        if ((st = kvs_model_load(o->model_path, kvs_model_default_params(), &model)) != KVS_OK) {
            cli_fail(st, o->model_path);
            goto done;
        }
        if (kv_types_init(model, o->model_path, o->redis.key_file, &k)) goto done;
        rr.fp = k.fp[o->kv_type]; /* ls -m: this KV type's chunks */
        x.model = model;
    }
    kvs_cache_dir_stats d;
    int ls = !strcmp(o->verb, "ls");
    st = ls ? kvs_cache_redis_scan(&pp, collect_model, &rr, &d)
            : kvs_cache_redis_scan(&pp, model ? count_kv_type : NULL, &k, &d);
    if (st != KVS_OK) {
        cli_fail(st, where);
        goto done;
    }
    if (ls) {
        if (x.nomem) { fprintf(stderr, "kvstitch cache: out of memory\n"); goto done; }
        if (x.n) qsort(x.r, x.n, sizeof *x.r, by_model_pos); /* (qsort of NULL, 0 is undefined) */
        print_rows(&x, o->json);
    } else if (o->json) {
        printf("{\"redis\": \"%s\", \"entries\": %llu, \"bytes\": %llu, \"models\": %llu, \"damaged\": %llu",
               o->redis.cluster ? "cluster" : "single", (unsigned long long)d.entries, (unsigned long long)d.bytes,
               (unsigned long long)d.models, (unsigned long long)d.damaged);
        if (model) {
            printf(", \"model\": {\"fingerprint\": \"%s\", \"keyed\": %s, \"kv_type\": \"%s\", \"entries\": %llu, ",
                   k.fp[o->kv_type], o->redis.key_file ? "true" : "false", kvs_kv_type_name(o->kv_type),
                   ULL(k.entries[o->kv_type]));
            print_kv_types(&k, o->kv_type, 1);
            printf("}");
        }
        printf("}\n");
    } else {
        printf("redis:            %s\n", o->redis.cluster ? o->redis.cluster : "(URL given)");
        printf("entries:          %llu (%.1f MiB of values) of %llu fingerprint%s (model x KV type)\n",
               (unsigned long long)d.entries, (double)d.bytes / (1 << 20), (unsigned long long)d.models,
               d.models == 1 ? "" : "s");
        printf("damaged values:   %llu\n", (unsigned long long)d.damaged);
        if (model) {
            printf("model fingerprint: %s (KV type %s%s)\n", k.fp[o->kv_type], kvs_kv_type_name(o->kv_type),
                   o->redis.key_file ? ", keyed" : "");
            printf("  its entries:     %llu\n", ULL(k.entries[o->kv_type]));
            print_kv_types(&k, o->kv_type, 0);
        }
    }
    rc = 0;
done:
    for (size_t i = 0; i < x.n; i++) free(x.r[i].text);
    free(x.r);
    kvs_model_free(model);
    return rc;
}

int cmd_cache(int argc, char **argv) {
    cache_opts o;
    memset(&o, 0, sizeof o);
    int rc = parse(argc, argv, &o);
    if (rc >= 0) { /* a usage error after --redis: its URL copy too */
        cli_redis_free(&o.redis);
        return rc;
    }
    if (cli_redis_given(&o.redis)) {
        rc = cache_redis(&o);
        cli_redis_free(&o.redis);
        return rc;
    }

    if (!strcmp(o.verb, "clear")) {
        kvs_cache_clear_report r;
        int st = kvs_cache_dir_clear_report(o.dir, &r);
        /* KVS_ERR_IO: a file it could not remove; what it did remove is said first */
        if (st != KVS_OK && st != KVS_ERR_IO) return cli_fail(st, o.dir);
        if (o.json) {
            printf("{\"removed\": %llu, \"removed_bytes\": %llu, \"tmp_removed\": %llu, \"junk_removed\": %llu, "
                   "\"junk_bytes\": %llu, \"dir\": ",
                   ULL(r.removed), ULL(r.removed_bytes), ULL(r.tmp_removed), ULL(r.junk_removed), ULL(r.junk_bytes));
            cli_json_string(stdout, o.dir, strlen(o.dir));
            printf("}\n");
        } else {
            printf("removed %llu entr%s (%.1f MiB), %llu junk file%s (%.1f MiB) and %llu stale temporary file%s "
                   "from %s\n",
                   ULL(r.removed), r.removed == 1 ? "y" : "ies", (double)r.removed_bytes / (1 << 20),
                   ULL(r.junk_removed), r.junk_removed == 1 ? "" : "s", (double)r.junk_bytes / (1 << 20),
                   ULL(r.tmp_removed), r.tmp_removed == 1 ? "" : "s", o.dir);
        }
        return st == KVS_OK ? 0 : cli_fail(st, o.dir);
    }

    if (!strcmp(o.verb, "prune")) {
        kvs_cache_prune_params pp = {o.max_bytes, (int64_t)o.older_than_s, 0};
        kvs_cache_prune_report r;
        int st = kvs_cache_dir_prune(o.dir, &pp, &r);
        /* KVS_ERR_IO: files it could not remove; the report is filled: shown, then the error */
        if (st != KVS_OK && st != KVS_ERR_IO) return cli_fail(st, o.dir);
        if (st == KVS_ERR_IO && !r.removed && !r.tmp_removed && !r.junk_removed && !r.entries)
            return cli_fail(st, o.dir); /* no report */
        if (o.json) {
            printf("{\"removed\": %llu, \"removed_bytes\": %llu, \"unreachable_removed\": %llu, \"tmp_removed\": %llu, "
                   "\"junk_removed\": %llu, \"junk_bytes\": %llu, \"entries\": %llu, \"bytes\": %llu, \"dir\": ",
                   ULL(r.removed), ULL(r.removed_bytes), ULL(r.unreachable_removed), ULL(r.tmp_removed),
                   ULL(r.junk_removed), ULL(r.junk_bytes), ULL(r.entries), ULL(r.bytes));
            cli_json_string(stdout, o.dir, strlen(o.dir));
            printf("}\n");
        } else {
            printf("removed %llu entr%s (%.1f MiB; %llu unreachable), %llu junk file%s (%.1f MiB) and %llu stale "
                   "temporary file%s from %s; %llu entry files (%.1f MiB; damaged ones included: `cache stats`) remain\n",
                   ULL(r.removed), r.removed == 1 ? "y" : "ies", (double)r.removed_bytes / (1 << 20),
                   ULL(r.unreachable_removed), ULL(r.junk_removed), r.junk_removed == 1 ? "" : "s",
                   (double)r.junk_bytes / (1 << 20), ULL(r.tmp_removed), r.tmp_removed == 1 ? "" : "s", o.dir,
                   ULL(r.entries), (double)r.bytes / (1 << 20));
        }
        return st == KVS_OK ? 0 : cli_fail(st, o.dir);
    }

    kvs_model *model = NULL;
    kvs_cache *cache = NULL;
    rows x;
    memset(&x, 0, sizeof x);
    rc = 1;
    int st;
    if (o.model_path) {
        if ((st = kvs_model_load(o.model_path, kvs_model_default_params(), &model)) != KVS_OK) {
            cli_fail(st, o.model_path);
            goto done;
        }
        if ((st = kvs_cache_open(model, model_cache_params(&o, o.kv_type), &cache)) != KVS_OK) {
            cli_fail(st, o.dir);
            goto done;
        }
    }
    if (!strcmp(o.verb, "ls")) {
        x.model = model;
        st = cache ? kvs_cache_ls(cache, collect, &x) : kvs_cache_dir_scan(o.dir, collect, &x, NULL);
        if (st != KVS_OK) { cli_fail(st, o.dir); goto done; }
        if (x.nomem) { fprintf(stderr, "kvstitch cache: out of memory\n"); goto done; }
        if (x.n) qsort(x.r, x.n, sizeof *x.r, by_model_pos); /* (qsort of NULL, 0 is undefined) */
        print_rows(&x, o.json);
    } else {
        kvs_cache_dir_stats d;
        kv_types k;
        if (cache && kv_types_init(model, o.model_path, o.redis.key_file, &k)) goto done;
        /* -m: the model's entries by KV type from the headers (a second pass with --verify) */
        if (o.verify) {
            st = kvs_cache_dir_verify(o.dir, &d);
            if (st == KVS_OK && cache) st = kvs_cache_dir_scan(o.dir, count_kv_type, &k, NULL);
        } else {
            st = kvs_cache_dir_scan(o.dir, cache ? count_kv_type : NULL, &k, &d);
        }
        if (st != KVS_OK) { cli_fail(st, o.dir); goto done; }
        /* -m --verify: this model's entries of every KV type read whole as a
         * request would (with a key, each MAC checked: what the checksums
         * above cannot tell) */
        kvs_cache_verify_report v;
        unsigned types_read = 0;
        if (cache && o.verify && (st = verify_model_types(model, &o, cache, &k, &v, &types_read)) != KVS_OK) {
            cli_fail(st, o.dir);
            goto done;
        }
        if (o.json) printf("{");
        uint64_t max_bytes = o.cache_max_bytes ? o.cache_max_bytes : kvs_cache_dir_default_max_bytes(o.dir);
        print_dir_stats(o.dir, &d, max_bytes, o.verify, o.json);
        if (cache) {
            kvs_cache_stats s;
            kvs_cache_get_stats(cache, &s);
            print_model_stats(cache, &s, &k, o.kv_type, o.redis.key_file != NULL, o.verify ? &v : NULL, types_read,
                              o.json);
        }
        if (o.json) printf("}\n");
    }
    rc = 0;
done:
    for (size_t i = 0; i < x.n; i++) free(x.r[i].text);
    free(x.r);
    kvs_cache_free(cache);
    kvs_model_free(model);
    return rc;
}
