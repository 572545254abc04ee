/* Non-blocking open of regular files (file.h). */
#include "base/file.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

static int open_regular(const char *path, int extra, struct stat *st) {
    /* O_NOATIME: reading must not count as a use (the cache dir's LRU keeps
     * its own stamps in atime: disk_budget.h); only the owner (or root) may
     * ask for it, so without it on EPERM. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY | O_NOATIME | extra);
    if (fd < 0 && errno == EPERM) fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY | extra);
    if (fd < 0 && errno == ELOOP && (extra & O_NOFOLLOW)) return KVS_OPEN_NOT_REGULAR; /* a symlink */
    if (fd < 0) return -1;
    struct stat local;
    if (!st) st = &local;
    if (fstat(fd, st)) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    if (!S_ISREG(st->st_mode)) {
        close(fd);
        return KVS_OPEN_NOT_REGULAR;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    return fd;
}

int kvs_open_regular(const char *path, struct stat *st) { return open_regular(path, 0, st); }

int kvs_open_regular_nofollow(const char *path, struct stat *st) { return open_regular(path, O_NOFOLLOW, st); }

int kvs_read_regular_small(const char *path, void *buf, size_t cap, size_t *n, int *more) {
    const int fd = kvs_open_regular(path, NULL);
    if (fd < 0) return fd;
    unsigned char *p = buf;
    size_t got = 0;
    int e = 0;
    *more = 0;
    for (;;) {
        unsigned char extra;
        const ssize_t r = got < cap ? read(fd, p + got, cap - got) : read(fd, &extra, 1);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) e = errno;
        if (r <= 0) break;
        if (got == cap) {
            *more = 1;
            break;
        }
        got += (size_t)r;
    }
    close(fd);
    *n = got;
    if (e) {
        errno = e;
        return -1;
    }
    return 0;
}
