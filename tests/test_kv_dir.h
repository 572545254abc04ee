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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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
    char p[4400];
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") &&
            snprintf(p, sizeof p, "%.4096s/%s", dir, de->d_name) < (int)sizeof p && unlink(p))
            rm_dir(p); /* a directory planted in an entry's place */
    closedir(d);
    rmdir(dir);
}

/* A directory with a file in it at path, in an entry's place: a write
 * there fails (an empty one the writer removes). 0 on success. */
#define PLANTED_FILE "someones-file"
static inline int plant_full_dir(const char *path) {
    char p[4200];
    if (mkdir(path, 0755)) return -1;
    snprintf(p, sizeof p, "%s/" PLANTED_FILE, path);
    FILE *fp = fopen(p, "w");
    if (!fp) return -1;
    fputs("not the cache's\n", fp);
    return fclose(fp);
}

static inline void unplant_full_dir(const char *path) {
    char p[4200];
    snprintf(p, sizeof p, "%s/" PLANTED_FILE, path);
    unlink(p);
    rmdir(path);
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
