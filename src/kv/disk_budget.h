/*
 * The cache directory's byte bound, kept by every process that writes to it
 * without a global lock:
 *
 *   access stamp   an entry's atime, set explicitly on every verified read
 *                  (disk.c) and by the write that creates it
 *   bound          after its writes a process lists the directory (names +
 *                  stat, no reads) and, when the entries' bytes exceed the
 *                  bound, unlinks the least recently accessed ones down to
 *                  a low-water mark, whole chains from their tails (the
 *                  headers' parent keys, read then: an entry counts as
 *                  recent as its newest descendant); concurrent evictors
 *                  may unlink the same file (ENOENT is fine)
 *   readers        a removed entry is a miss (open fails) or, when already
 *                  open, still complete (unlink keeps the inode): never a
 *                  half entry (writes are tmp + rename, disk.h)
 *
 * Ownership: only files whose names AND first bytes are the cache's own are
 * ever removed (kvs_disk_classify): "<64 hex>.kvc" starting with the magic,
 * or a writer's ".<64 hex>.<pid>.<n>.tmp" that is empty or starts with the
 * magic; and junk, a regular file with an entry's name that does not start
 * with the magic (empty, or other bytes: a crash's leftover, a foreign
 * writer's), once stale (kvs_disk_is_stale). Writers here never write under
 * an entry's name (tmp + rename, disk.h), so only a foreign writer can be
 * filling junk right now, and one that is keeps its mtime fresh. Anything
 * else in the directory (FIFOs, directories, symlinks under an entry's name
 * included: never followed) is left alone.
 *
 *   junk           never served (a reader checks the magic). Once stale it
 *                  counts toward the bound and goes first when the bound
 *                  needs room: all of it, before any entry is evicted (bytes
 *                  that can never serve before bytes that may). Fresh, it
 *                  is neither counted nor removed. `cache prune` and
 *                  `cache clear` remove stale junk as stale temp files.
 *
 * Default bound (kvs_disk_default_max_bytes): half of the space free for the
 * cache when it is opened, i.e. (its own bytes + the file system's available
 * bytes) / 2.
 */
#ifndef KVS_KV_DISK_BUDGET_H
#define KVS_KV_DISK_BUDGET_H

#include <stdint.h>
#include <sys/stat.h>

typedef enum kvs_disk_file_kind {
    KVS_DISK_FILE_OTHER = 0, /* not the cache's: never touched */
    KVS_DISK_FILE_ENTRY,
    KVS_DISK_FILE_TMP,
    KVS_DISK_FILE_JUNK,      /* an entry's name, not the magic (only with check_header) */
} kvs_disk_file_kind;

/* Classifies DIR/name by its name, its type (regular file, lstat) and, when
 * check_header, its first bytes (non-blocking open, symlinks not followed).
 * st (optional) filled. */
kvs_disk_file_kind kvs_disk_classify(const char *dir, const char *name, int check_header, struct stat *st);

/* The cache's own files beside its entries: the model's weights digest
 * remembered per model file (cache/fingerprint.c), DIR/.weights-<16 hex>.memo.
 * Neither entries nor "other" files: listings leave them out. */
#define KVS_DISK_MEMO_PREFIX ".weights-"
#define KVS_DISK_MEMO_SUFFIX ".memo"
int kvs_disk_is_memo(const char *name);

/* A leftover (k: a writer's temp file, or junk) is stale, and may go, when
 * no writer can be at it any more: untouched (mtime) for an hour, or, a
 * temp file, its process is gone (same host: the pid in its name answers
 * no signal). An entry is never stale: 0. */
int kvs_disk_is_stale(kvs_disk_file_kind k, const char *name, const struct stat *st);

/* 1 if a and b are one file in one state: device, inode, size and mtime
 * (an inode number alone may have been freed and given to a new file). */
int kvs_disk_same_file(const struct stat *a, const struct stat *b);

/* Removes DIR/name, of kind k as kvs_disk_classify found it with *st: an
 * unlink, but junk is moved aside first and removed only if it is still
 * the file checked (an entry renamed onto its name since is put back).
 * 0, else -1 with errno (ENOENT: gone; EAGAIN: not the file checked, left
 * in place). */
int kvs_disk_unlink_checked(const char *dir, const char *name, kvs_disk_file_kind k, const struct stat *st);

typedef struct kvs_disk_usage {
    uint64_t entries, bytes;     /* entry files (by name and type) and their bytes */
    uint64_t tmp, tmp_bytes;     /* writers' temp files */
    uint64_t stale_tmp;          /* of which stale */
    uint64_t other;              /* files that are not the cache's (an entry's name on something
                                  * that is not a regular file is not counted here: below) */
    uint64_t not_regular;        /* entry names on FIFOs, directories, symlinks...: neither entries
                                  * nor other (a scan counts them KVS_DISK_NOT_REGULAR) */
    int list_errno;              /* opendir's errno where the directory could not be listed, else 0 */
} kvs_disk_usage;

/* Lists dir (names + lstat; no file is opened). A missing dir is empty; *u
 * is all zeros when the listing fails (KVS_ERR_IO: opendir failed). */
int kvs_disk_usage_get(const char *dir, kvs_disk_usage *u);

/* (bytes of the cache's entries + available bytes of dir's file system) / 2. */
uint64_t kvs_disk_default_max_bytes(const char *dir, uint64_t cache_bytes);

typedef struct kvs_disk_prune_params {
    uint64_t max_bytes;     /* evict least recently accessed entries down to this; 0 = no bound */
    int64_t older_than_s;   /* remove entries not accessed for this long; 0 = none */
    int leftovers;          /* 1: remove stale temp files and stale junk whatever the bound
                             * (`cache prune`); 0: stale junk only when over the bound */
    const char *keep;       /* an entry's file name not removed (the one a writer just wrote:
                             * its own bound check must not evict it), or NULL; unless its
                             * parent is in the directory: then it is its chain's tail, and
                             * goes before its chain's earlier entries (kept, the tail alone
                             * had left them unreachable): keep_removed says so */
    uint64_t keep_bound;    /* with keep: its chain (entries as recent as it) is evicted only
                             * down to this, not max_bytes (a low-water mark would take its
                             * head too); 0 = max_bytes */
} kvs_disk_prune_params;

typedef struct kvs_disk_prune_report {
    uint64_t removed, removed_bytes; /* entries */
    uint64_t junk_removed, junk_bytes; /* stale junk (disk_budget.h above) */
    uint64_t tmp_removed;
    uint64_t entries, bytes;         /* what remains (stale junk that stayed included) */
    /* files whose unlink failed other than with ENOENT (a directory not
     * writable by this process, a read-only file system): still there, in
     * entries and bytes; failed_bytes = the entries' and junk's among
     * them, which the bound then leaves out (no room this process can
     * make). The first one's name and errno. The prune itself still
     * returns KVS_OK. */
    uint64_t failed, failed_bytes;
    int failed_errno;
    char failed_name[80];
    int keep_removed;                /* params' keep was removed (see there) */
} kvs_disk_prune_report;

int kvs_disk_prune(const char *dir, const kvs_disk_prune_params *p, kvs_disk_prune_report *r);

#endif
