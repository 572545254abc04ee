/*
 * Chunk persistence: a cache directory with one file per chunk, named by the
 * chunk's prefix key: DIR/<64 hex digits>.kvc
 *
 * File layout (all integers little-endian):
 *
 *   offset  size        field
 *   0       4           magic "KVSC"
 *   4       4   u32     version (KVS_DISK_VERSION)
 *   8       4   u32     header_bytes: offset of the payload (a multiple of 64)
 *   12      4   u32     flags: the chunk's origin (chunk.h: 0, KVS_CHUNK_DOC, KVS_CHUNK_BAKED |
 *                           neighbours) | KVS_DISK_FLAG_MAC (bit 31: the entry carries
 *                           a keyed MAC); other bits are damage (readers before the MAC
 *                           reject such an entry as a bad header: never misread)
 *   16      32          model fingerprint
 *   48      32          prefix key   = SHA-256(parent key || tokens)
 *   80      32          content key  = SHA-256(fingerprint || tokens)
 *   112     32          parent key   (the fingerprint for a chunk at position 0)
 *   144     4   u32     KV dtype (0 f16, 1 f32)
 *   148     4*4 i32     n_layer, n_kv_head, head_dim, n_tok
 *   164     4   i32     pos0: absolute position of the first token
 *   168     8   i64     created, ns since the epoch
 *   176     8   u64     payload_bytes
 *   184     8   u64     payload checksum (kvs_checksum64, seed 0)
 *   192     4*n_tok     token ids, int32
 *   ...     32          SHA-256 of bytes [0, 192 + 4*n_tok): the header digest
 *   ...     32          with KVS_DISK_FLAG_MAC only: the entry MAC (entry_mac.h),
 *                       HMAC-SHA256(key, bytes [0, header digest end) || payload)
 *   ...                 zero padding up to header_bytes
 *                       (header_bytes = 192 + 4*n_tok + 32 [+ 32] rounded up to 64)
 *   header_bytes        payload (n_layer, 2, n_kv_head, n_tok, head_dim), see chunk.h
 *
 * The file size must be exactly header_bytes + payload_bytes.
 *
 * Checks. Reading a header checks magic, version, the header digest, the
 * shape, the size of the file, the keys against the tokens (prefix key and
 * content key are recomputed) and the file name against the prefix key; the
 * fingerprint and shape are compared with the reader's (another model's
 * entries are "foreign", skipped, never deleted). Loading a payload re-reads
 * and re-checks the header, then verifies the payload checksum. A file that
 * fails any check is never served.
 *
 * Keyed readers (a kvs_entry_mac given: the cache was opened with a key, and
 * its fingerprint has the key id folded in, so its entries' names are its
 * own) require, of an entry that is theirs (fingerprint and shape: the owner
 * check comes first, so another key's or a keyless cache's entries stay
 * foreign), the MAC flag at the header read and a MAC that verifies over the
 * header and the payload as it is read (KVS_DISK_BAD_MAC otherwise, damage:
 * never served, removed as a bad payload is). A forger who can write the
 * directory but lacks the key can recompute the digest and the checksum,
 * not the MAC. Keyless readers ignore the MAC (they never own such entries).
 *
 * Writers create DIR/.<hex>.<pid>.<n>.tmp (O_EXCL), write it whole, optionally
 * fsync it, and rename() it onto the final name, which is atomic within one
 * file system: readers (other threads or processes) see either no file or a
 * complete one. Two writers of the same key write the same bytes (same key,
 * deterministic KV); the last rename wins.
 *
 * All functions are thread-safe (no shared state) and never print.
 */
#ifndef KVS_KV_DISK_H
#define KVS_KV_DISK_H

#include "kv/chunk.h"
#include "kv/entry_mac.h"

#include <stddef.h>
#include <stdint.h>

#define KVS_DISK_MAGIC "KVSC"
#define KVS_DISK_MEMO_MAGIC "KVSW" /* the weights memo (cache/fingerprint.c), written under an entry's temp name */
#define KVS_DISK_VERSION 1u
#define KVS_DISK_EXT ".kvc"
#define KVS_DISK_FIXED_BYTES 192  /* header bytes before the token ids */
#define KVS_DISK_MAX_TOKENS (1 << 24) /* tokens an entry may hold */
#define KVS_DISK_FLAG_MAC (1u << 31)  /* flags: the header holds an entry MAC */

/* What a check found. */
typedef enum kvs_disk_verdict {
    KVS_DISK_OK = 0,
    KVS_DISK_MISSING,      /* the file does not exist (any more) */
    KVS_DISK_BAD_MAGIC,
    KVS_DISK_BAD_VERSION,
    KVS_DISK_BAD_HEADER,   /* header digest, impossible fields, keys or name disagree */
    KVS_DISK_TRUNCATED,    /* file size differs from header_bytes + payload_bytes */
    KVS_DISK_FOREIGN,      /* another model's fingerprint or another KV shape */
    KVS_DISK_BAD_PAYLOAD,  /* payload checksum mismatch */
    KVS_DISK_NOT_REGULAR,  /* a FIFO, device, directory, symlink... in an entry's place: never
                              opened for reading (symlinks not followed), never removed */
    KVS_DISK_IO,           /* read error */
    KVS_DISK_BAD_MAC,      /* a keyed reader's own entry without a MAC, or whose MAC does not
                              verify: written without the key (forged) or damaged */
    KVS_DISK_VERDICT_COUNT
} kvs_disk_verdict;

const char *kvs_disk_verdict_name(kvs_disk_verdict v);

/* The file a reader opened, by device and inode, and its size and mtime
 * as read: a damaged entry is removed only while that file is still under
 * its name (kvs_disk_remove), not a good one another process renamed onto
 * it after the read began, even one whose inode number was the damaged
 * file's, freed and given again (the writer sets a new mtime; a rename
 * keeps it). */
typedef struct kvs_disk_file_id {
    uint64_t dev, ino; /* both 0: not known (the file was not opened) */
    int64_t size, mtime_s, mtime_ns;
} kvs_disk_file_id;

/* Counts from a scan. */
typedef struct kvs_disk_counts {
    uint64_t n[KVS_DISK_VERDICT_COUNT]; /* files by verdict (n[KVS_DISK_OK] = valid) */
    uint64_t known;                     /* skipped because the caller already had them */
    uint64_t tmp;                       /* temporary files of writers (ignored) */
} kvs_disk_counts;

/* Files of counts that are damaged (bad magic, version, header, truncated,
 * bad payload, bad MAC). */
uint64_t kvs_disk_counts_damaged(const kvs_disk_counts *counts);

/* --- the entry header codec (also the header of a Redis value, redis_value.h) --- */

/* A parsed header (the fields of the layout above). */
typedef struct kvs_disk_header {
    kvs_key fp, prefix, content, parent;
    kvs_kv_shape shape;
    int32_t n_tok, pos0;
    uint32_t origin;  /* the flags word without KVS_DISK_FLAG_MAC */
    int has_mac;      /* KVS_DISK_FLAG_MAC was set */
    uint8_t mac[KVS_ENTRY_MAC_BYTES]; /* the entry MAC (if has_mac) */
    int64_t created_ns;
    uint64_t payload_bytes, payload_sum;
    size_t header_bytes;
    int32_t *tokens; /* (n_tok) malloc'd by kvs_disk_header_parse_rest; the caller frees */
} kvs_disk_header;

/* A chunk (no payload unless with_payload) with the header's identity,
 * origin, creation time and tokens. */
int kvs_disk_header_to_chunk(const kvs_disk_header *hd, int with_payload, kvs_chunk **out);

/* The status a verdict maps to (KVS_OK, KVS_ERR_CORRUPT, ...). */
int kvs_disk_verdict_status(kvs_disk_verdict v);
/* header_bytes of an entry of n_tok tokens (a multiple of 64), with room
 * for the MAC if with_mac. */
size_t kvs_disk_header_bytes(int n_tok, int with_mac);
/* Writes the header of resident chunk c (payload checksum sum) into
 * h[0, hbytes) (hbytes = kvs_disk_header_bytes(c->n_tok, mac != NULL)),
 * with its MAC over the header and c's payload when mac is not NULL.
 * KVS_OK, or an error of libcrypto. */
int kvs_disk_header_build(uint8_t *h, size_t hbytes, const kvs_key *fingerprint, const kvs_chunk *c, uint64_t sum,
                          const kvs_entry_mac *mac);
/* Step 1 of a check: the fixed part (got = bytes available, may be short):
 * magic, version, possible fields. Sets every field but tokens. what names
 * the entry in messages. */
int kvs_disk_header_parse_fixed(const uint8_t *fixed, size_t got, const char *what, kvs_disk_header *hd,
                                kvs_disk_verdict *verdict);
/* Step 2: h holds the whole header (hd->header_bytes): the SHA-256 digest, zero padding,
 * the tokens (hd->tokens, malloc'd on success only), the keys recomputed
 * from the tokens. */
int kvs_disk_header_parse_rest(const uint8_t *h, const char *what, kvs_disk_header *hd, kvs_disk_verdict *verdict);
/* Step 3: KVS_DISK_FOREIGN unless the entry is of want_fp / want_shape
 * (NULL = any). */
int kvs_disk_header_check_owner(const kvs_disk_header *hd, const kvs_key *want_fp, const kvs_kv_shape *want_shape,
                                const char *what, kvs_disk_verdict *verdict);
/* Step 4, keyed readers only (after the owner check): KVS_DISK_BAD_MAC if
 * the entry has no MAC; then, if s is not NULL, begins s over the header's
 * MAC'd bytes (h: the whole header). The caller feeds s the payload
 * (kvs_entry_mac_update) and ends with kvs_disk_header_mac_check. */
int kvs_disk_header_mac_begin(const uint8_t *h, const kvs_disk_header *hd, const kvs_entry_mac *mac,
                              kvs_entry_mac_state *s, const char *what, kvs_disk_verdict *verdict);
/* Ends s: KVS_DISK_BAD_MAC unless its tag is the header's. */
int kvs_disk_header_mac_check(const kvs_disk_header *hd, kvs_entry_mac_state *s, const char *what,
                              kvs_disk_verdict *verdict);

/* Creates dir (one level) if it does not exist. */
int kvs_disk_init_dir(const char *dir);

/* DIR/<hex>.kvc into buf. KVS_ERR_BUFFER_TOO_SMALL if it does not fit. */
int kvs_disk_path(const char *dir, const kvs_key *prefix_key, char *buf, size_t cap);

/* A temporary file name of this process for the entry of hex (its 64 hex
 * digits): DIR/.<hex>.<pid>.<n>.tmp, n new at each call (writers, and
 * junk moved aside before its removal). KVS_ERR_BUFFER_TOO_SMALL if it does
 * not fit. */
int kvs_disk_tmp_path(const char *dir, const char *hex, char *buf, size_t cap);

/* Writes a chunk (identity fields, tokens and resident payload) atomically.
 * do_fsync: 1 = fsync the file before the rename and the directory after it
 * (durable across power loss; slower); 0 = rely on the page cache. */
int kvs_disk_write(const char *dir, const kvs_key *fingerprint, const kvs_chunk *c, int do_fsync,
                   const kvs_entry_mac *mac);

/* mac (below): NULL for a keyless reader; else the key whose MAC the
 * reader's own entries must carry (see "Keyed readers" above). */

/* Reads and checks one entry's header. fingerprint and shape may be NULL to
 * accept any (for `cache ls`). On KVS_DISK_OK, *out is a new chunk without
 * payload (caller owns the reference), *payload_off its file offset, and
 * file_fp (if not NULL) the entry's fingerprint. Otherwise *out is untouched
 * and the status is KVS_ERR_FORMAT / KVS_ERR_CORRUPT / KVS_ERR_MODEL_MISMATCH
 * / KVS_ERR_IO / KVS_ERR_NOT_FOUND with a message naming the file. seen (may
 * be NULL), here and in the payload readers below: the file opened, on
 * success or failure (zeros if none was). */
int kvs_disk_read_header(const char *path, const kvs_key *fingerprint, const kvs_kv_shape *shape,
                         const kvs_entry_mac *mac, kvs_chunk **out, kvs_key *file_fp, kvs_disk_verdict *verdict,
                         kvs_disk_file_id *seen);

/* Loads and verifies the payload of c from dir (its file is found by
 * c->prefix_key; the header is re-read and must describe the same chunk).
 * On success *payload is a new 64-byte-aligned buffer of c->kv_bytes that the
 * caller owns (free()); the chunk itself is not modified. */
int kvs_disk_load_payload(const char *dir, const kvs_key *fingerprint, const kvs_entry_mac *mac, const kvs_chunk *c,
                          void **payload, kvs_disk_verdict *verdict, kvs_disk_file_id *seen);

/* Reads chunk tokens [off, off + n) of c's entry straight into slots
 * [slot, slot + n) of view (no payload buffer, no extra copy: one preadv
 * scatters the file into the KV buffer; the part of the payload outside
 * [off, off + n), if any, goes to a scratch buffer only to be checksummed).
 * Checks are those of kvs_disk_load_payload. On failure the view's slots
 * [slot, slot + n) hold undefined bytes; nothing else is written. */
int kvs_disk_read_into_kv(const char *dir, const kvs_key *fingerprint, const kvs_entry_mac *mac, const kvs_chunk *c,
                          int off, int n, const kvs_kv_buffer *kv, int slot, kvs_disk_verdict *verdict,
                          kvs_disk_file_id *seen);

/* Calls fn(user, chunk) for every valid entry of dir (chunk without payload;
 * fn takes ownership of the reference; a nonzero return stops the scan) and
 * counts every file by verdict. If known is not NULL, entries for which
 * known(user, key) returns nonzero are skipped unread. fingerprint/shape as
 * for kvs_disk_read_header. A missing dir is an empty cache (KVS_OK). */
int kvs_disk_scan(const char *dir, const kvs_key *fingerprint, const kvs_kv_shape *shape, const kvs_entry_mac *mac,
                  int (*known)(void *user, const kvs_key *prefix_key),
                  int (*fn)(void *user, kvs_chunk *chunk), void *user, kvs_disk_counts *counts);

/* kvs_disk_scan whose callback also gets the entry's model fingerprint
 * (for listing a directory of several models: pass fingerprint = NULL;
 * keyless: MACs are not required). */
typedef int (*kvs_disk_scan_fp_fn)(void *user, kvs_chunk *chunk, const kvs_key *fingerprint);
int kvs_disk_scan_fp(const char *dir, const kvs_key *fingerprint, const kvs_kv_shape *shape,
                     kvs_disk_scan_fp_fn fn, void *user, kvs_disk_counts *counts);

/* Removes one entry (KVS_ERR_NOT_FOUND if absent). With seen (a reader's,
 * not zeros), only if the file under the name is still that one: it is
 * moved aside, checked and put back if another (KVS_ERR_NOT_FOUND too). */
int kvs_disk_remove(const char *dir, const kvs_key *prefix_key, const kvs_disk_file_id *seen);

/* Removes every entry file (any model), writers' stale temporary files and
 * stale junk (disk_budget.h: a live writer's file and fresh junk stay),
 * only files whose names and headers are the cache's own. r (may be NULL)
 * counts each kind removed, filled on an error too. */
int kvs_disk_clear(const char *dir, kvs_cache_clear_report *r);

#endif
