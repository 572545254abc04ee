#include "kv/chunking.h"

#include "base/error.h"

int kvs_chunking_max_spans(int n, int chunk_size, int n_borders) {
    if (n <= 0 || chunk_size <= 0) return 0;
    /* grid cuts inside (0, n) + borders + the first span + a possible head */
    return n / chunk_size + 2 + (n_borders > 0 ? n_borders : 0);
}

int kvs_chunking_split(int n, int pos0, int chunk_size, const int *borders, int n_borders,
                       kvs_span *out, int cap, int *n_out) {
    if (n < 0 || pos0 < 0 || chunk_size <= 0 || n_borders < 0 || (n_borders && !borders))
        return kvs_error(KVS_ERR_INVALID_ARG, "chunking: n %d, pos0 %d, chunk_size %d, %d borders", n, pos0,
                         chunk_size, n_borders);
    for (int i = 1; i < n_borders; i++)
        if (borders[i] < borders[i - 1])
            return kvs_error(KVS_ERR_INVALID_ARG, "chunking: borders not ascending at %d (%d after %d)", i,
                             borders[i], borders[i - 1]);
    int count = 0, start = 0, b = 0;
    while (start < n) {
        /* next grid line strictly after start, in token indices */
        long long p = (long long)pos0 + start;
        long long grid = (p / chunk_size + 1) * chunk_size - pos0;
        int end = grid < n ? (int)grid : n;
        int flags = 0;
        while (b < n_borders && borders[b] <= start) b++;
        if (b < n_borders && borders[b] < end) end = borders[b];
        if (b < n_borders && borders[b] == end && end < n) flags |= KVS_SPAN_BORDER;
        if (end == n && grid > n) flags |= KVS_SPAN_PARTIAL;
        if (count < cap) out[count] = (kvs_span){start, end, flags};
        count++;
        start = end;
    }
    *n_out = count;
    if (count > cap) return kvs_error(KVS_ERR_BUFFER_TOO_SMALL, "chunking: %d spans, room for %d", count, cap);
    return KVS_OK;
}
