/* Store statistics (store.h): atomics read one by one (a snapshot is
 * consistent per field, not across fields), tier counters added. */
#include "kv/store_impl.h"

#include "kv/tier_dir.h"

#include <string.h>

void kvs_store_get_stats(kvs_store *s, kvs_store_stats *st) {
    memset(st, 0, sizeof *st);
    pthread_rwlock_rdlock(&s->lock);
    kvs_radix_stats rs;
    kvs_radix_get_stats(s->radix, &rs);
    st->index_bytes = rs.bytes + (s->pmap.nb + s->cmap.nb) * sizeof(kvs_chunk *) + GET(s->tier_meta_bytes);
    st->prefix_reachable = rs.n_items;
    if (s->dir_tier) {
        kvs_tier_dir_last_scan(s->dir_tier, &st->last_scan);
        st->dir_max_bytes = kvs_tier_dir_max_bytes(s->dir_tier);
    }
    st->n_tiers = s->n_tiers;
    for (int i = 0; i < s->n_tiers && i < KVS_STORE_MAX_TIERS; i++) {
        s->tiers[i]->ops->stats(s->tiers[i], &st->tier[i]);
        st->tier_name[i] = s->tiers[i]->ops->name;
    }
    pthread_rwlock_unlock(&s->lock);
    st->entries = GET(s->entries);
    st->resident = GET(s->resident);
    st->bytes = GET(s->bytes);
    st->budget_bytes = s->budget;
    st->lookups = GET(s->lookups);
    st->hits = GET(s->hits);
    st->misses = GET(s->misses);
    st->hit_tokens = GET(s->hit_tokens);
    st->lookup_tokens = GET(s->lookup_tokens);
    st->lookup_seconds = (double)GET(s->lookup_ns) * 1e-9;
    st->lookups_per_s = st->lookup_seconds > 0 ? (double)st->lookups / st->lookup_seconds : 0;
    st->inserts = GET(s->inserts);
    st->insert_exists = GET(s->insert_exists);
    st->insert_too_big = GET(s->insert_too_big);
    st->evictions = GET(s->evictions);
    st->evict_walks = GET(s->evict_walks);
    st->stub_drops = GET(s->stub_drops);
    st->stub_bytes = GET(s->tier_meta_bytes);
    st->stub_budget_bytes = s->stub_budget;
    for (int i = 0; i < s->n_tiers && i < KVS_STORE_MAX_TIERS; i++) {
        if (s->tiers[i] != s->dir_tier) continue; /* the cache directory's only */
        st->disk_writes = GET(s->tier_writes[i]);
        st->disk_write_errors = GET(s->tier_write_errors[i]);
        st->disk_loads = GET(s->tier_loads[i]);
        st->disk_load_bytes = GET(s->tier_load_bytes[i]);
        st->disk_load_seconds = (double)GET(s->tier_load_ns[i]) * 1e-9;
    }
    st->disk_bad = GET(s->tier_bad);
    st->disk_bad_mac = GET(s->tier_bad_mac);
    st->disk_foreign = GET(s->tier_foreign);
    st->disk_missing = GET(s->tier_missing);
    st->disk_orphans = GET(s->tier_orphans);
    st->tier_key_hits = GET(s->tier_key_hits);
    st->tier_partial_hits = GET(s->tier_partial_hits);
}
