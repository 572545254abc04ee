/* Which slots of a context were ever written (kv_buffer.h kvs_kv_written):
 * a file of its own, with no dependencies past the buffer's header, so the
 * cache entry fuzzer links the writers that mark (chunk.c, disk.c). */
#include <stdlib.h>

#include "base/error.h"
#include "model/kv_buffer.h"

int kvs_kv_buffer_track_written(kvs_kv_buffer *kv) {
    kv->written = calloc(1, sizeof *kv->written + ((size_t)kv->n_ctx / 64 + 1) * sizeof(uint64_t));
    return kv->written ? KVS_OK : kvs_error(KVS_ERR_NOMEM, "kv buffer: out of memory for %d slots' flags", kv->n_ctx);
}

static int slot_written(const kvs_kv_written *w, int s) { return (int)(w->bits[s >> 6] >> (s & 63)) & 1; }

/* filled moved past the written slots that follow it, a word at a time */
static void advance_filled(kvs_kv_written *w, int n_ctx) {
    int s = w->filled;
    while (s < n_ctx && (s & 63)) {
        if (!slot_written(w, s)) break;
        s++;
    }
    if (s < n_ctx && !(s & 63))
        while (s + 64 <= n_ctx && w->bits[s >> 6] == UINT64_MAX) s += 64;
    while (s < n_ctx && slot_written(w, s)) s++;
    w->filled = s;
}

void kvs_kv_mark_run(const kvs_kv_buffer *kv, int slot, int n) {
    kvs_kv_written *w = kv->written;
    if (!w || n <= 0 || slot < 0 || slot > kv->n_ctx - n) return;
    for (int s = slot; s < slot + n; s++) w->bits[s >> 6] |= (uint64_t)1 << (s & 63);
    if (slot <= w->filled) advance_filled(w, kv->n_ctx);
}

void kvs_kv_mark_slots(const kvs_kv_buffer *kv, const int32_t *pos, int m) {
    kvs_kv_written *w = kv->written;
    if (!w) return;
    int touches = 0;
    for (int r = 0; r < m; r++) {
        if (pos[r] < 0 || pos[r] >= kv->n_ctx) continue;
        w->bits[pos[r] >> 6] |= (uint64_t)1 << (pos[r] & 63);
        touches |= pos[r] <= w->filled;
    }
    if (touches) advance_filled(w, kv->n_ctx);
}

int kvs_kv_first_unwritten(const kvs_kv_buffer *kv, const int32_t *pos, int n, int hi) {
    const kvs_kv_written *w = kv->written;
    if (!w || n <= 0) return -1;
    if (hi <= w->filled) return -1; /* (the usual step: slot filled is its token's) */
    /* Each unwritten slot below hi must be one of the call's: a call is a
     * run of positions in order, so look for s in the run first. */
    for (int s = w->filled; s < hi; s++) {
        if (slot_written(w, s)) continue;
        int own = s - pos[0] >= 0 && s - pos[0] < n && pos[s - pos[0]] == s;
        for (int i = 0; !own && i < n; i++) own = pos[i] == s;
        if (!own) return s;
    }
    return -1;
}
