/*
 * File helpers for the cache-directory tests (test_kv_disk.c, test_tiers.c):
 * a fresh directory under /tmp, removing it, counting files, patching bytes.
 */
#ifndef KVS_TEST_KV_DIR_H
#define KVS_TEST_KV_DIR_H

#include "harness.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static inline char *new_dir(void) {
    static char buf[64];
    strcpy(buf, "/tmp/kvs_test_disk_XXXXXX");
    return strdup(mkdtemp(buf));
}

static inline void rm_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *de;
    char p[512];
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
            snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
            if (unlink(p)) rmdir(p); /* a directory planted in an entry's place */
        }
    closedir(d);
    rmdir(dir);
}

static inline int count_files(const char *dir, const char *suffix) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    struct dirent *de;
    int n = 0;
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name), ls = strlen(suffix);
        if (l >= ls && !strcmp(de->d_name + l - ls, suffix)) n++;
    }
    closedir(d);
    return n;
}

static inline void patch(const char *path, long off, const void *bytes, size_t n) {
    int fd = open(path, O_WRONLY);
    CHECK(fd >= 0 && pwrite(fd, bytes, n, off) == (ssize_t)n);
    close(fd);
}

static inline void flip(const char *path, long off) {
    int fd = open(path, O_RDWR);
    uint8_t b = 0;
    CHECK(fd >= 0 && pread(fd, &b, 1, off) == 1);
    b ^= 0x10;
    CHECK(pwrite(fd, &b, 1, off) == 1);
    close(fd);
}

#endif
