/*
 * Opening files that are read as data (models, cache entries, memo files)
 * without ever blocking: open() of a FIFO blocks until a writer appears,
 * so a FIFO planted in a cache directory or given as a model would hang the
 * process. kvs_open_regular opens with O_NONBLOCK (a FIFO opens at once),
 * checks with fstat that it is a regular file, and only then returns it
 * (blocking mode restored). It opens with O_NOATIME where allowed, so
 * that reading is not a use for the cache directory's LRU (atime stamps).
 */
#ifndef KVS_BASE_FILE_H
#define KVS_BASE_FILE_H

#include <stddef.h>
#include <sys/stat.h>

#define KVS_OPEN_NOT_REGULAR (-2)

/* fd >= 0 (O_RDONLY | O_CLOEXEC; *st filled if st is not NULL), -1 with
 * errno when open or fstat fails, or KVS_OPEN_NOT_REGULAR when path is a
 * FIFO, device, directory or socket (nothing was read from it). */
int kvs_open_regular(const char *path, struct stat *st);
/* The same, but a symlink is KVS_OPEN_NOT_REGULAR too (cache entries: the
 * cache never makes links, and its listing, bound and prune treat a link
 * named like an entry as not its own; a reader following it had served
 * what the rest of the cache did not count). */
int kvs_open_regular_nofollow(const char *path, struct stat *st);

/* Reads at most cap bytes of regular file path into buf (*n = bytes read;
 * *more = 1 when the file holds more than cap bytes): 0, -1 with errno, or
 * KVS_OPEN_NOT_REGULAR (secret files: a Redis password, a cache key). */
int kvs_read_regular_small(const char *path, void *buf, size_t cap, size_t *n, int *more);

#endif
