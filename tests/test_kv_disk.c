/* Persistence: entries survive the process, load lazily and exactly; damaged,
 * truncated, foreign, bad-magic and bad-version entries are detected,
 * counted and never served; concurrent processes on one directory (fork)
 * leave it consistent. */
#include "harness.h"

#include "base/sha256.h"
#include "kv/disk.h"
#include "kv/keys.h"
#include "kv/store.h"
#include "cache/fingerprint.h"
#include "kv/entry_mac.h"
#include "test_forge.h"
#include "test_kv_fake.h"
#include "test_kv_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static const kvs_kv_shape SHAPE = {2, 2, 16, KVS_KV_F16};
enum { N = 300 }; /* chunks [0,64) [64,128) [128,192) [192,256) [256,300) */

static int32_t toks[N];
static fake_kv *cold, *warm;

static kvs_key fingerprint(int which) {
    kvs_key k;
    for (int i = 0; i < 32; i++) k.b[i] = (uint8_t)(3 * i + 41 * which);
    return k;
}

static kvs_store *open_dir(const char *dir, int which_fp) {
    kvs_key fp = fingerprint(which_fp);
    kvs_store_params p = kvs_store_default_params();
    p.budget_bytes = 64u << 20;
    p.cache_dir = dir;
    kvs_store *s = NULL;
    int rc = kvs_store_open(&fp, &SHAPE, p, &s);
    CHECK_MSG(rc == KVS_OK, "open %s: %s", dir, kvs_last_error());
    return s;
}

/* A fresh cache dir holding the 5 chunks of toks. */
static char *populated_dir(void) {
    char *dir = new_dir();
    kvs_store *s = open_dir(dir, 1);
    fake_kv_fill(cold, toks, N);
    kvs_put_report r;
    CHECK_EQ_INT(kvs_store_put_prefix(s, toks, N, 64, NULL, 0, &cold->kv, &r), KVS_OK);
    CHECK_EQ_INT(r.n_new, 5);
    kvs_store_free(s);
    CHECK_EQ_INT(count_files(dir, ".kvc"), 5);
    return dir;
}

/* Path of the entry holding chunk i of toks (prefix-key chain) under
 * fingerprint fp. */
static void chain_path(const char *dir, kvs_key fp, int i, char *out, size_t cap) {
    kvs_key k = fp;
    for (int j = 0; j <= i; j++) {
        int a = 64 * j, b = a + 64 < N ? a + 64 : N;
        kvs_key next;
        kvs_key_prefix(&k, toks + a, b - a, &next);
        k = next;
    }
    kvs_disk_path(dir, &k, out, cap);
}

/* chain_path under the keyless fingerprint of the tests' model. */
static void entry_path(const char *dir, int i, char *out, size_t cap) { chain_path(dir, fingerprint(1), i, out, cap); }

/* Served tokens of toks after a fresh open; checks the bytes. */
static int serve(const char *dir, kvs_store_stats *st) {
    kvs_store *s = open_dir(dir, 1);
    if (!s) return -1;
    kvs_prefix_hit hit;
    int got = -1;
    if (kvs_store_lookup_prefix(s, toks, N, &hit) == KVS_OK) {
        fake_kv_fill(cold, toks, N);
        fake_kv_zero(warm);
        if (kvs_prefix_hit_copy_to_kv(&hit, &warm->kv) == KVS_OK && fake_kv_equal(cold, warm, 0, hit.n_cached) &&
            fake_kv_is_zero(warm, hit.n_cached, N))
            got = hit.n_cached;
        kvs_prefix_hit_release(&hit);
    }
    kvs_store_get_stats(s, st);
    kvs_store_free(s);
    return got;
}

TEST(persist_and_load_lazily) {
    char *dir = populated_dir();
    kvs_store *s = open_dir(dir, 1);
    kvs_store_stats st;
    kvs_store_get_stats(s, &st);
    CHECK_EQ_INT(st.entries, 5);
    CHECK_EQ_INT(st.resident, 0); /* headers only */
    CHECK_EQ_INT(st.prefix_reachable, 5);
    CHECK_EQ_INT(st.last_scan.n[KVS_DISK_OK], 5);
    kvs_store_free(s);
    CHECK_EQ_INT(serve(dir, &st), N);
    CHECK_EQ_INT(st.disk_loads, 5);
    CHECK_EQ_INT(st.disk_load_bytes, kvs_kv_payload_bytes(&SHAPE, N));
    CHECK_EQ_INT(st.disk_bad, 0);
    /* a prefix of the cached prompt loads only what it needs */
    s = open_dir(dir, 1);
    kvs_prefix_hit hit;
    CHECK_EQ_INT(kvs_store_lookup_prefix(s, toks, 70, &hit), KVS_OK);
    CHECK_EQ_INT(hit.n_cached, 70);
    kvs_prefix_hit_release(&hit);
    kvs_store_get_stats(s, &st);
    CHECK_EQ_INT(st.disk_loads, 2);
    /* evicting a disk-backed chunk drops only its payload */
    CHECK_EQ_INT(kvs_store_trim(s, 0), 2);
    kvs_store_get_stats(s, &st);
    CHECK(st.entries == 5 && st.resident == 0);
    CHECK_EQ_INT(kvs_store_lookup_prefix(s, toks, 70, &hit), KVS_OK);
    CHECK_EQ_INT(hit.n_cached, 70);
    kvs_prefix_hit_release(&hit);
    kvs_store_free(s);
    /* headers are readable without a model (cache ls) */
    char path[512];
    entry_path(dir, 0, path, sizeof path);
    kvs_chunk *c;
    kvs_key ffp;
    kvs_disk_verdict v;
    CHECK_EQ_INT(kvs_disk_read_header(path, NULL, NULL, NULL, &c, &ffp, &v, NULL), KVS_OK);
    kvs_key fp1 = fingerprint(1);
    CHECK(v == KVS_DISK_OK && c->n_tok == 64 && c->pos0 == 0 && kvs_key_equal(&ffp, &fp1));
    kvs_chunk_unref(c);
    rm_dir(dir);
    free(dir);
}

/* The one-shot path: disk chunks are read straight into the KV buffer. */
TEST(lookup_into_reads_straight_into_kv) {
    char *dir = populated_dir();
    kvs_store *s = open_dir(dir, 1);
    fake_kv_fill(cold, toks, N);
    int lens[] = {N, 70, 64, 1, 299};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        fake_kv_zero(warm);
        kvs_prefix_hit hit;
        CHECK_EQ_INT(kvs_store_lookup_into(s, toks, lens[i], &warm->kv, &hit), KVS_OK);
        CHECK_EQ_INT(hit.n_cached, lens[i]);
        CHECK(fake_kv_equal(cold, warm, 0, lens[i]));
        CHECK(fake_kv_is_zero(warm, lens[i], N)); /* partial chunks write only what is used */
        kvs_prefix_hit_release(&hit);
    }
    kvs_store_stats st;
    kvs_store_get_stats(s, &st);
    CHECK_EQ_INT(st.resident, 0);
    CHECK_EQ_INT(st.disk_loads, 5 + 2 + 1 + 1 + 5);
    /* resident chunks are copied from memory, the rest read from disk */
    kvs_prefix_hit hit;
    CHECK_EQ_INT(kvs_store_lookup_prefix(s, toks, 100, &hit), KVS_OK);
    kvs_prefix_hit_release(&hit);
    fake_kv_zero(warm);
    CHECK_EQ_INT(kvs_store_lookup_into(s, toks, N, &warm->kv, &hit), KVS_OK);
    CHECK_EQ_INT(hit.n_cached, N);
    CHECK(fake_kv_equal(cold, warm, 0, N));
    kvs_prefix_hit_release(&hit);
    kvs_store_get_stats(s, &st);
    CHECK_EQ_INT(st.resident, 2);
    CHECK_EQ_INT(st.disk_loads, 14 + 2 + 3);
    kvs_store_free(s);
    /* damage: the hit ends before the damaged chunk, which is dropped */
    char path[512];
    entry_path(dir, 3, path, sizeof path);
    struct stat sb;
    stat(path, &sb);
    flip(path, (long)sb.st_size - 1);
    s = open_dir(dir, 1);
    fake_kv_zero(warm);
    CHECK_EQ_INT(kvs_store_lookup_into(s, toks, N, &warm->kv, &hit), KVS_OK);
    CHECK_EQ_INT(hit.n_cached, 192);
    CHECK(fake_kv_equal(cold, warm, 0, 192));
    kvs_prefix_hit_release(&hit);
    kvs_store_get_stats(s, &st);
    CHECK_EQ_INT(st.disk_bad, 1);
    CHECK_EQ_INT(st.disk_bad_mac, 0); /* damage, not a MAC failure (a keyless store has none) */
    CHECK_EQ_INT(st.entries, 4);
    CHECK(access(path, F_OK) != 0);
    kvs_store_free(s);
    rm_dir(dir);
    free(dir);
}

TEST(damaged_payload_never_served) {
    char *dir = populated_dir();
    char path[512];
    entry_path(dir, 2, path, sizeof path);
    struct stat sb;
    stat(path, &sb);
    flip(path, (long)sb.st_size - 100); /* inside the payload */
    kvs_store_stats st;
    CHECK_EQ_INT(serve(dir, &st), 128); /* stops before the damaged chunk */
    CHECK_EQ_INT(st.disk_bad, 1);
    CHECK(access(path, F_OK) != 0);     /* dropped, so nobody tries it again */
    CHECK_EQ_INT(serve(dir, &st), 128);
    CHECK_EQ_INT(st.disk_bad, 0);
    CHECK_EQ_INT(st.disk_orphans, 2);   /* [192,256) and [256,300): content key only */
    rm_dir(dir);
    free(dir);
}

/* A header-damaged entry ends the hit before the index's path does (the
 * scan left it out: its children are indexed by key only); the damaged
 * payload of a chunk past it is still found by the same lookup and
 * dropped, so the request stores it again with the rest (it had stayed,
 * the put skipping a chunk the index held, until a later request reached
 * it). */
TEST(damage_past_a_header_damaged_entry_dropped_by_the_same_lookup) {
    char *dir = populated_dir();
    char p1[512], p2[512], p3[512];
    entry_path(dir, 1, p1, sizeof p1);
    entry_path(dir, 2, p2, sizeof p2);
    entry_path(dir, 3, p3, sizeof p3);
    flip(p1, 170); /* the creation time: the header digest fails */
    struct stat sb;
    stat(p3, &sb);
    flip(p3, (long)sb.st_size - 100); /* inside the payload */
    kvs_store_stats st;
    CHECK_EQ_INT(serve(dir, &st), 64);
    CHECK(access(p1, F_OK) != 0);
    CHECK(access(p3, F_OK) != 0); /* dropped at once */
    CHECK(access(p2, F_OK) == 0); /* a good one stays */
    CHECK_EQ_INT(st.disk_bad, 2);
    rm_dir(dir);
    free(dir);
}

/* A FIFO planted in an indexed entry's place while a store runs: the read
 * refuses it at once, the index lets the chunk go, and the next put stores
 * it again over the FIFO (it had stayed indexed as a transient failure,
 * never stored again: reuse capped there for the process's life). */
TEST(fifo_in_an_indexed_entrys_place_is_stored_over) {
    char *dir = populated_dir();
    char path[512];
    entry_path(dir, 2, path, sizeof path);
    kvs_store *s = open_dir(dir, 1); /* indexed from the scan, tier-held */
    CHECK_EQ_INT(unlink(path), 0);
    CHECK_EQ_INT(mkfifo(path, 0600), 0);
    kvs_prefix_hit hit;
    fake_kv_zero(warm);
    CHECK_EQ_INT(kvs_store_lookup_into(s, toks, N, &warm->kv, &hit), KVS_OK);
    CHECK_EQ_INT(hit.n_cached, 128);
    kvs_prefix_hit_release(&hit);
    fake_kv_fill(cold, toks, N);
    kvs_put_report r;
    CHECK_EQ_INT(kvs_store_put_prefix(s, toks, N, 64, NULL, 0, &cold->kv, &r), KVS_OK);
    CHECK_MSG(r.n_new >= 1, "%d new", r.n_new);
    struct stat sb;
    CHECK(lstat(path, &sb) == 0 && S_ISREG(sb.st_mode));
    kvs_store_free(s);
    kvs_store_stats st;
    CHECK_EQ_INT(serve(dir, &st), N);
    rm_dir(dir);
    free(dir);
}

/* A put writes no child of an entry the directory lost since the index
 * took it (another process's bound evicted it): such a child is an entry
 * nothing reaches, newer than its chain's head, which a bound then evicts
 * first (a server storing a prompt a step at a time on a small bound had
 * been left with tail entries only). */
TEST(put_writes_no_child_of_an_evicted_entry) {
    char *dir = new_dir();
    kvs_store *s = open_dir(dir, 1);
    fake_kv_fill(cold, toks, N);
    kvs_put_report r;
    CHECK_EQ_INT(kvs_store_put_prefix(s, toks, 128, 64, NULL, 0, &cold->kv, &r), KVS_OK);
    CHECK_EQ_INT(r.n_new, 2);
    char p1[512], p2[512];
    entry_path(dir, 1, p1, sizeof p1);
    entry_path(dir, 2, p2, sizeof p2);
    CHECK_EQ_INT(unlink(p1), 0); /* evicted by another process */
    CHECK_EQ_INT(kvs_store_put_prefix(s, toks, N, 64, NULL, 0, &cold->kv, &r), KVS_OK);
    CHECK_MSG(access(p2, F_OK) != 0, "chunk 2 written without its parent on disk");
    CHECK_EQ_INT(count_files(dir, ".kvc"), 1);
    kvs_store_free(s);
    rm_dir(dir);
    free(dir);
}

typedef struct {
    int n;
    kvs_key prefix[16], parent[16];
    int pos0[16];
} entry_list;
static int list_entry(void *user, kvs_chunk *c) {
    entry_list *l = user;
    if (l->n < 16) {
        l->prefix[l->n] = c->prefix_key;
        l->parent[l->n] = c->parent_key;
        l->pos0[l->n++] = c->pos0;
    }
    kvs_chunk_unref(c);
    return 0;
}

/* A prompt stored a step at a time (a server's prefill: puts of 128, 192,
 * 256 and 300 tokens) on a RAM budget and a directory bound of about two
 * chunks each: what the directory keeps is a chain from its head, never an
 * entry whose parent is gone. The puts' second pass had written chunks it
 * made again (evicted from RAM between the passes) to every tier, past the
 * chunk the disk lacked: orphans newer than the head, which the bound then
 * evicted first (a server was left with two tail entries, reusing 0). */
TEST(step_stores_on_small_bounds_keep_the_head) {
    char *dir = new_dir();
    kvs_key fp = fingerprint(1);
    kvs_store_params p = kvs_store_default_params();
    const size_t chunk = kvs_kv_payload_bytes(&SHAPE, 64);
    p.budget_bytes = 2 * chunk + chunk / 2;
    p.cache_dir = dir;
    p.cache_max_bytes = 2 * (chunk + 1024) + chunk / 4;
    kvs_store *s = NULL;
    CHECK_EQ_INT(kvs_store_open(&fp, &SHAPE, p, &s), KVS_OK);
    fake_kv_fill(cold, toks, N);
    static const int steps[] = {128, 192, 256, 300, 300};
    for (size_t k = 0; k < sizeof steps / sizeof steps[0]; k++) {
        kvs_put_report r;
        CHECK_EQ_INT(kvs_store_put_prefix(s, toks, steps[k], 64, NULL, 0, &cold->kv, &r), KVS_OK);
    }
    kvs_store_free(s);
    entry_list l = {0};
    CHECK_EQ_INT(kvs_disk_scan(dir, &fp, &SHAPE, NULL, NULL, list_entry, &l, NULL), KVS_OK);
    CHECK(l.n >= 1);
    for (int i = 0; i < l.n; i++) {
        int has_parent = l.pos0[i] == 0;
        for (int j = 0; j < l.n && !has_parent; j++) has_parent = kvs_key_equal(&l.parent[i], &l.prefix[j]);
        CHECK_MSG(has_parent, "the entry at %d is an orphan (%d entries)", l.pos0[i], l.n);
    }
    kvs_store_stats st;
    CHECK_EQ_INT(serve(dir, &st), 64 * l.n); /* the head's chain serves */
    rm_dir(dir);
    free(dir);
}

/* The payload readers (kvs_disk_load_payload, kvs_disk_read_into_kv)
 * re-read the header: an entry that no longer describes the chunk the
 * index holds (another token, position or origin) is refused by both as
 * BAD_HEADER and left in place for the store's verdict; the chunk as
 * indexed reads its exact bytes both ways. */
TEST(payload_readers_check_the_entry_is_the_chunk) {
    char *dir = populated_dir();
    char path[512];
    entry_path(dir, 1, path, sizeof path); /* tokens [64, 128) */
    const kvs_key fp = fingerprint(1);
    kvs_chunk *c = NULL;
    kvs_disk_verdict v;
    CHECK_EQ_INT(kvs_disk_read_header(path, &fp, &SHAPE, NULL, &c, NULL, &v, NULL), KVS_OK);
    void *payload = NULL;
    CHECK_EQ_INT(kvs_disk_load_payload(dir, &fp, NULL, c, &payload, &v, NULL), KVS_OK);
    CHECK_EQ_INT(v, KVS_DISK_OK);
    free(payload);
    fake_kv_fill(cold, toks, N);
    fake_kv_zero(warm);
    CHECK_EQ_INT(kvs_disk_read_into_kv(dir, &fp, NULL, c, 0, 64, &warm->kv, 64, &v, NULL), KVS_OK);
    CHECK_EQ_INT(v, KVS_DISK_OK);
    CHECK(fake_kv_equal(cold, warm, 64, 128));
    for (int what = 0; what < 3; what++) {
        const int32_t tok = c->tokens[5], pos0 = c->pos0;
        const uint32_t origin = c->origin;
        if (what == 0) c->tokens[5] ^= 1;
        else if (what == 1) c->pos0 += 1;
        else c->origin ^= KVS_CHUNK_BAKED; /* a baked chunk is no exact history */
        payload = NULL;
        CHECK(kvs_disk_load_payload(dir, &fp, NULL, c, &payload, &v, NULL) != KVS_OK);
        CHECK_MSG(v == KVS_DISK_BAD_HEADER && payload == NULL, "change %d: verdict %d", what, (int)v);
        CHECK(strstr(kvs_last_error(), "no longer describes the indexed chunk") != NULL);
        CHECK(kvs_disk_read_into_kv(dir, &fp, NULL, c, 0, 64, &warm->kv, 64, &v, NULL) != KVS_OK);
        CHECK_MSG(v == KVS_DISK_BAD_HEADER, "change %d: verdict %d", what, (int)v);
        c->tokens[5] = tok;
        c->pos0 = pos0;
        c->origin = origin;
    }
    /* the document bit alone: a document computed right after its prefix is
     * that prefix's history under the same key (disk.c open_indexed_entry) */
    c->origin ^= KVS_CHUNK_DOC;
    CHECK_EQ_INT(kvs_disk_read_into_kv(dir, &fp, NULL, c, 0, 64, &warm->kv, 64, &v, NULL), KVS_OK);
    c->origin ^= KVS_CHUNK_DOC;
    CHECK(access(path, F_OK) == 0);
    kvs_chunk_unref(c);
    rm_dir(dir);
    free(dir);
}

/* A reader that finds an entry damaged removes it only while the file it
 * read is still under the name: a good copy another process renamed onto
 * the name meanwhile (same key, same bytes) stays and reads; the damaged
 * file itself goes, and nothing is left aside. */
TEST(damaged_entry_removed_only_if_still_the_file_read) {
    char *dir = populated_dir();
    char path[512], good[600];
    entry_path(dir, 1, path, sizeof path);
    snprintf(good, sizeof good, "%s/good.copy", dir);
    const kvs_key fp = fingerprint(1);
    kvs_chunk *c = NULL;
    kvs_disk_verdict v;
    kvs_disk_file_id seen;
    CHECK_EQ_INT(kvs_disk_read_header(path, &fp, &SHAPE, NULL, &c, NULL, &v, &seen), KVS_OK);
    struct stat sb;
    CHECK_EQ_INT(stat(path, &sb), 0);
    CHECK(seen.dev == (uint64_t)sb.st_dev && seen.ino == (uint64_t)sb.st_ino);
    CHECK_EQ_INT(link(path, good), 0);
    char copy[600];
    snprintf(copy, sizeof copy, "%s.rw", path);
    /* round 0: a writer renames a good copy onto the name after the read;
     * round 1: the damaged file is still there; round 2: a good file under
     * the damaged one's inode number (freed and given again; here the same
     * inode, written anew) stays too (the check had compared device and
     * inode alone) */
    for (int round = 0; round < 3; round++) {
        /* damage a copy of its own (the good one keeps its inode) */
        char cmd[4096];
        snprintf(cmd, sizeof cmd, "cp '%s' '%s' && mv '%s' '%s'", good, copy, copy, path);
        CHECK_EQ_INT(system(cmd), 0);
        CHECK_EQ_INT(stat(path, &sb), 0);
        flip(path, (long)sb.st_size - 100);
        void *payload = NULL;
        CHECK(kvs_disk_load_payload(dir, &fp, NULL, c, &payload, &v, &seen) != KVS_OK);
        CHECK_EQ_INT(v, KVS_DISK_BAD_PAYLOAD);
        CHECK(seen.ino == (uint64_t)sb.st_ino);
        if (round == 1) {
            CHECK_EQ_INT(kvs_disk_remove(dir, &c->prefix_key, &seen), KVS_OK);
            CHECK(access(path, F_OK) != 0);
            continue;
        }
        if (round == 0) {
            snprintf(cmd, sizeof cmd, "cp '%s' '%s' && mv '%s' '%s'", good, copy, copy, path); /* a writer's rename */
        } else {
            usleep(30 * 1000); /* past the file clock's tick: the rewrite's mtime is another */
            snprintf(cmd, sizeof cmd, "cat '%s' > '%s'", good, path); /* in place: the inode stays */
        }
        CHECK_EQ_INT(system(cmd), 0);
        CHECK_EQ_INT(kvs_disk_remove(dir, &c->prefix_key, &seen), KVS_ERR_NOT_FOUND);
        CHECK_EQ_INT(kvs_disk_load_payload(dir, &fp, NULL, c, &payload, &v, NULL), KVS_OK); /* it stayed */
        free(payload);
    }
    DIR *d = opendir(dir);
    struct dirent *de;
    int aside = 0;
    while ((de = readdir(d)))
        if (de->d_name[0] == '.' && strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) aside++;
    closedir(d);
    CHECK_EQ_INT(aside, 0);
    unlink(good);
    kvs_chunk_unref(c);
    rm_dir(dir);
    free(dir);
}

TEST(truncated_entry) {
    char *dir = populated_dir();
    char path[512];
    entry_path(dir, 1, path, sizeof path);
    struct stat sb;
    stat(path, &sb);
    char copy[600];
    snprintf(copy, sizeof copy, "%s.copy", path);
    CHECK_EQ_INT(link(path, copy), 0); /* same inode: truncated too, restored below */
    CHECK_EQ_INT(truncate(path, sb.st_size - 1), 0);
    kvs_store_stats st;
    CHECK_EQ_INT(serve(dir, &st), 64);
    CHECK_EQ_INT(st.last_scan.n[KVS_DISK_TRUNCATED], 1);
    CHECK_EQ_INT(st.disk_bad, 1);
    CHECK_EQ_INT(st.entries, 4);
    CHECK_EQ_INT(st.disk_orphans, 3);
    CHECK(access(path, F_OK) != 0); /* met by key on the prompt's path: removed */
    /* truncated inside the header too */
    CHECK_EQ_INT(rename(copy, path), 0);
    CHECK_EQ_INT(truncate(path, 100), 0);
    CHECK_EQ_INT(serve(dir, &st), 64);
    CHECK_EQ_INT(st.last_scan.n[KVS_DISK_TRUNCATED], 1);
    rm_dir(dir);
    free(dir);
}

TEST(foreign_model) {
    char *dir = populated_dir();
    kvs_store *s = open_dir(dir, 2);
    kvs_store_stats st;
    kvs_store_get_stats(s, &st);
    CHECK_EQ_INT(st.entries, 0);
    CHECK_EQ_INT(st.disk_foreign, 5);
    kvs_prefix_hit hit;
    CHECK_EQ_INT(kvs_store_lookup_prefix(s, toks, N, &hit), KVS_OK);
    CHECK_EQ_INT(hit.n_cached, 0);
    kvs_prefix_hit_release(&hit);
    kvs_store_free(s);
    /* another KV shape under the same fingerprint is foreign too */
    kvs_key fp = fingerprint(1);
    kvs_kv_shape f32 = SHAPE;
    f32.dtype = KVS_KV_F32;
    kvs_store_params p = kvs_store_default_params();
    p.cache_dir = dir;
    p.budget_bytes = 1 << 20;
    CHECK_EQ_INT(kvs_store_open(&fp, &f32, p, &s), KVS_OK);
    kvs_store_get_stats(s, &st);
    CHECK(st.entries == 0 && st.disk_foreign == 5);
    kvs_store_free(s);
    /* foreign entries are left alone */
    CHECK_EQ_INT(count_files(dir, ".kvc"), 5);
    CHECK_EQ_INT(serve(dir, &st), N);
    rm_dir(dir);
    free(dir);
}

TEST(bad_magic_version_header_name) {
    char *dir = populated_dir();
    char p0[512], p1[512], p2[512], p3[512], p4[512];
    entry_path(dir, 0, p0, sizeof p0);
    entry_path(dir, 1, p1, sizeof p1);
    entry_path(dir, 2, p2, sizeof p2);
    entry_path(dir, 3, p3, sizeof p3);
    entry_path(dir, 4, p4, sizeof p4);
    uint8_t v2[4] = {2, 0, 0, 0};
    patch(p3, 4, v2, 4);                   /* version 2 */
    patch(p2, 0, "KVSX", 4);               /* magic */
    flip(p1, KVS_DISK_FIXED_BYTES + 8);    /* a token id: digest, and keys no longer match */
    flip(p4, 170);                         /* the creation time: only the digest sees it */
    kvs_store_stats st;
    CHECK_EQ_INT(serve(dir, &st), 64);
    CHECK_EQ_INT(st.last_scan.n[KVS_DISK_BAD_VERSION], 1);
    CHECK_EQ_INT(st.last_scan.n[KVS_DISK_BAD_MAGIC], 1);
    CHECK_EQ_INT(st.last_scan.n[KVS_DISK_BAD_HEADER], 2);
    CHECK_EQ_INT(st.last_scan.n[KVS_DISK_OK], 1);
    CHECK_EQ_INT(st.disk_bad, 4);
    CHECK(access(p1, F_OK) != 0); /* met by key on the prompt's path: removed */
    /* an intact entry under another entry's name is not trusted */
    char renamed[512];
    snprintf(renamed, sizeof renamed, "%s/%064d.kvc", dir, 7);
    CHECK_EQ_INT(rename(p0, renamed), 0);
    CHECK_EQ_INT(serve(dir, &st), 0);
    CHECK_EQ_INT(st.last_scan.n[KVS_DISK_BAD_HEADER], 2);
    /* writers' temporary files are ignored; clear removes entries */
    char tmp[512];
    snprintf(tmp, sizeof tmp, "%s/.abc.1.2.tmp", dir);
    int fd = open(tmp, O_CREAT | O_WRONLY, 0644);
    close(fd);
    CHECK_EQ_INT(serve(dir, &st), 0);
    CHECK_EQ_INT(st.last_scan.tmp, 1);
    kvs_cache_clear_report cr;
    CHECK_EQ_INT(kvs_disk_clear(dir, &cr), KVS_OK);
    CHECK_EQ_INT(cr.removed, 3);                  /* renamed p0, p3 (version 2), p4: the cache's own */
    CHECK_EQ_INT(count_files(dir, ".kvc"), 1); /* p2 does not start with the magic: not ours */
    CHECK_EQ_INT(count_files(dir, ".tmp"), 1); /* not a writer's name: not ours */
    rm_dir(dir);
    free(dir);
}

/* Rewrites the 32-bit word at byte `at` of an entry's header and signs the
 * header again, so only the field's own check can object. */
static void set_word_resigned(const char *path, size_t at, uint32_t word, int n_tok) {
    size_t covered = KVS_DISK_FIXED_BYTES + 4 * (size_t)n_tok;
    uint8_t *h = malloc(covered + 32);
    FILE *f = fopen(path, "r+b");
    CHECK(f && fread(h, 1, covered, f) == covered);
    for (int i = 0; i < 4; i++) h[at + i] = (uint8_t)(word >> (8 * i));
    kvs_sha256_digest(h, covered, h + covered);
    CHECK(f && fseek(f, 0, SEEK_SET) == 0 && fwrite(h, 1, covered + 32, f) == covered + 32);
    if (f) fclose(f);
    free(h);
}

static void set_flags_resigned(const char *path, uint32_t flags, int n_tok) { set_word_resigned(path, 12, flags, n_tok); }

/* The flags word is the chunk's origin: kept through a write and a read;
 * bits this build does not know, or "baked" without "doc", are damage even
 * under a valid header digest. */
/* A write that fails under a long directory keeps its reason: the path is
 * shown by its tail (a ~1,000-character directory had filled the 1 KiB
 * message and cut "No space left on device" off). The rename fails here: a
 * directory stands where the entry goes. */
TEST(write_failure_under_a_long_dir_keeps_its_reason) {
    char *dir = new_dir();
    char deep[2048];
    snprintf(deep, sizeof deep, "%s", dir);
    for (int i = 0; i < 6; i++) { /* 6 x 201 characters below it */
        size_t l = strlen(deep);
        deep[l] = '/';
        memset(deep + l + 1, 'd', 200);
        deep[l + 201] = 0;
        CHECK(mkdir(deep, 0755) == 0);
    }
    kvs_key fp = fingerprint(1);
    kvs_chunk *c = NULL;
    CHECK_EQ_INT(kvs_chunk_new(&SHAPE, 8, 1, &c), KVS_OK);
    memset(c->kv, 0, c->kv_bytes);
    for (int i = 0; i < 8; i++) c->tokens[i] = 100 + i;
    c->parent_key = fp;
    kvs_key_prefix(&fp, c->tokens, 8, &c->prefix_key);
    kvs_key_content(&fp, c->tokens, 8, &c->content_key);
    char path[4096];
    CHECK_EQ_INT(kvs_disk_path(deep, &c->prefix_key, path, sizeof path), KVS_OK);
    CHECK(plant_full_dir(path) == 0);
    CHECK(kvs_disk_write(deep, &fp, c, 0, NULL) != KVS_OK);
    CHECK_MSG(strstr(kvs_last_error(), "write failed: Is a directory") && strstr(kvs_last_error(), ".kvc"), "%s",
              kvs_last_error());
    unplant_full_dir(path);
    /* an empty directory there holds nothing: it goes, and the entry is
     * written in its place (it had blocked the chain's storage for good) */
    CHECK(mkdir(path, 0755) == 0);
    CHECK_EQ_INT(kvs_disk_write(deep, &fp, c, 0, NULL), KVS_OK);
    kvs_chunk *back = NULL;
    kvs_disk_verdict v;
    CHECK_EQ_INT(kvs_disk_read_header(path, &fp, &SHAPE, NULL, &back, NULL, &v, NULL), KVS_OK);
    if (back) kvs_chunk_unref(back);
    unlink(path);
    kvs_chunk_unref(c);
    for (int i = 0; i < 6; i++) {
        rmdir(deep);
        *strrchr(deep, '/') = 0;
    }
    rm_dir(dir);
    free(dir);
}

TEST(origin_flags) {
    char *dir = new_dir();
    kvs_key fp = fingerprint(1), parent = fingerprint(2);
    kvs_chunk *c = NULL;
    const int n = 8;
    CHECK_EQ_INT(kvs_chunk_new(&SHAPE, n, 1, &c), KVS_OK);
    memset(c->kv, 0, c->kv_bytes);
    for (int i = 0; i < n; i++) c->tokens[i] = 100 + i;
    c->pos0 = 40;
    c->parent_key = parent;
    c->origin = KVS_CHUNK_DOC | KVS_CHUNK_BAKED | 3u << KVS_CHUNK_NEIGHBOURS_SHIFT;
    kvs_key_prefix(&parent, c->tokens, n, &c->prefix_key);
    kvs_key_content(&fp, c->tokens, n, &c->content_key);
    CHECK_EQ_INT(kvs_disk_write(dir, &fp, c, 0, NULL), KVS_OK);
    char path[512];
    kvs_disk_path(dir, &c->prefix_key, path, sizeof path);
    kvs_chunk *r = NULL;
    kvs_disk_verdict v;
    CHECK_EQ_INT(kvs_disk_read_header(path, &fp, &SHAPE, NULL, &r, NULL, &v, NULL), KVS_OK);
    CHECK(r && r->origin == c->origin && kvs_chunk_neighbours(r->origin) == 3);
    kvs_chunk_unref(r);
    static const uint32_t bad[] = {1u << 20, KVS_CHUNK_BAKED, 4u, 2u << KVS_CHUNK_NEIGHBOURS_SHIFT};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        set_flags_resigned(path, bad[i], n);
        r = NULL;
        CHECK(kvs_disk_read_header(path, &fp, &SHAPE, NULL, &r, NULL, &v, NULL) != KVS_OK);
        CHECK_MSG(v == KVS_DISK_BAD_HEADER, "flags 0x%x: verdict %d", bad[i], (int)v);
        CHECK(r == NULL);
    }
    set_flags_resigned(path, KVS_CHUNK_DOC, n); /* a plain doc chunk is fine */
    CHECK_EQ_INT(kvs_disk_read_header(path, &fp, &SHAPE, NULL, &r, NULL, &v, NULL), KVS_OK);
    CHECK(r && r->origin == KVS_CHUNK_DOC);
    kvs_chunk_unref(r);
    /* pos0 (byte 164) whose end, pos0 + n_tok, passes INT32_MAX: damage
     * (forged, it had overflowed the int sums of the index), while an end
     * of exactly INT32_MAX is a possible chunk */
    set_word_resigned(path, 164, (uint32_t)(INT32_MAX - n + 1), n);
    r = NULL;
    CHECK(kvs_disk_read_header(path, &fp, &SHAPE, NULL, &r, NULL, &v, NULL) != KVS_OK);
    CHECK_MSG(v == KVS_DISK_BAD_HEADER, "pos0 %d: verdict %d", INT32_MAX - n + 1, (int)v);
    CHECK(r == NULL);
    set_word_resigned(path, 164, (uint32_t)(INT32_MAX - n), n);
    CHECK_EQ_INT(kvs_disk_read_header(path, &fp, &SHAPE, NULL, &r, NULL, &v, NULL), KVS_OK);
    CHECK(r && r->pos0 == INT32_MAX - n);
    kvs_chunk_unref(r);
    kvs_chunk_unref(c);
    rm_dir(dir);
    free(dir);
}

/* --- cache keys (entry_mac.h) --------------------------------------------------- */

static kvs_entry_mac *test_key(char which) {
    char key[24];
    memset(key, which, sizeof key);
    kvs_entry_mac *m = NULL;
    CHECK_EQ_INT(kvs_entry_mac_new(key, sizeof key, "test key", &m), KVS_OK);
    return m;
}

/* The fingerprint a cache of fingerprint(1) uses with key m (NULL: none). */
static kvs_key keyed_fp(const kvs_entry_mac *m) {
    kvs_key fp = fingerprint(1);
    if (m) kvs_fingerprint_keyed(&fp, kvs_entry_mac_key_id(m), &fp);
    return fp;
}

static kvs_store *open_keyed(const char *dir, const kvs_entry_mac *m) {
    kvs_key fp = keyed_fp(m);
    kvs_store_params p = kvs_store_default_params();
    p.budget_bytes = 64u << 20;
    p.cache_dir = dir;
    p.mac = m;
    kvs_store *s = NULL;
    CHECK_EQ_INT(kvs_store_open(&fp, &SHAPE, p, &s), KVS_OK);
    return s;
}

/* Stores toks' 5 chunks under key m (NULL: keyless): n_new of them new. */
static void put_keyed(const char *dir, const kvs_entry_mac *m, int n_new) {
    kvs_store *s = open_keyed(dir, m);
    fake_kv_fill(cold, toks, N);
    kvs_put_report r;
    CHECK_EQ_INT(kvs_store_put_prefix(s, toks, N, 64, NULL, 0, &cold->kv, &r), KVS_OK);
    CHECK_EQ_INT(r.n_new, n_new);
    kvs_store_free(s);
}

/* Tokens served from dir to a fresh store with key m, every byte checked
 * against the cold KV (as serve()). */
static int serve_keyed(const char *dir, const kvs_entry_mac *m, kvs_store_stats *st) {
    kvs_store *s = open_keyed(dir, m);
    fake_kv *w = fake_kv_new(SHAPE, N);
    fake_kv_fill(cold, toks, N);
    kvs_prefix_hit hit;
    CHECK_EQ_INT(kvs_store_lookup_into(s, toks, N, &w->kv, &hit), KVS_OK);
    int got = hit.n_cached;
    CHECK_MSG(fake_kv_equal(cold, w, 0, got), "served KV differs from cold in [0, %d)", got);
    kvs_prefix_hit_release(&hit);
    fake_kv_free(w);
    kvs_store_get_stats(s, st);
    kvs_store_free(s);
    return got;
}

/* Path of chunk i of toks under key m. */
static void keyed_path(const char *dir, const kvs_entry_mac *m, int i, char *out, size_t cap) {
    chain_path(dir, keyed_fp(m), i, out, cap);
}

/* Rewrites chunk i's payload as a forger without the key can: other KV
 * bytes, the payload checksum and the header digest recomputed, the name,
 * header fields (MAC flag and the old MAC included) kept. */
static void forge_payload(const char *path) {
    int fd = open(path, O_RDWR);
    CHECK(fd >= 0);
    struct stat sb;
    fstat(fd, &sb);
    uint8_t *f = malloc((size_t)sb.st_size);
    CHECK(pread(fd, f, (size_t)sb.st_size, 0) == sb.st_size);
    const size_t hb = kvs_get_le32(f + 8);
    for (size_t i = hb; i < (size_t)sb.st_size; i += 7) f[i] ^= 0x21; /* the attacker's KV */
    forge_resign(f, f + hb, (size_t)sb.st_size - hb);
    CHECK(pwrite(fd, f, (size_t)sb.st_size, 0) == sb.st_size);
    close(fd);
    free(f);
}

/* A keyed cache round-trips exactly; its entries carry the MAC flag; an
 * entry forged as an attacker can (payload changed, checksum and header
 * digest recomputed, name kept), or written without the key under the
 * keyed fingerprint, is refused as "bad MAC", never served, and dropped as
 * damage (disk_bad, and disk_bad_mac of it); the request recomputes from
 * there. Without the MAC check both forgeries had been served. */
TEST(keyed_entries_verified_forgeries_refused) {
    kvs_entry_mac *a = test_key('a');
    char *dir = new_dir();
    put_keyed(dir, a, 5);
    char path[512];
    keyed_path(dir, a, 0, path, sizeof path);
    uint8_t fixed[KVS_DISK_FIXED_BYTES];
    int fd = open(path, O_RDONLY);
    CHECK(fd >= 0 && pread(fd, fixed, sizeof fixed, 0) == (ssize_t)sizeof fixed);
    close(fd);
    CHECK(kvs_get_le32(fixed + 12) & KVS_DISK_FLAG_MAC);
    CHECK_EQ_INT((int)kvs_get_le32(fixed + 8), (int)kvs_disk_header_bytes(64, 1));
    kvs_store_stats st;
    CHECK_EQ_INT(serve_keyed(dir, a, &st), N); /* bit-identical to cold (serve_keyed checks) */
    CHECK_EQ_INT(st.disk_bad, 0);
    CHECK_EQ_INT(st.disk_bad_mac, 0);

    /* a forged payload under the valid name: the readers say "bad MAC" */
    keyed_path(dir, a, 2, path, sizeof path);
    forge_payload(path);
    kvs_key fp = keyed_fp(a);
    kvs_chunk *c = NULL;
    kvs_disk_verdict v;
    CHECK_EQ_INT(kvs_disk_read_header(path, &fp, &SHAPE, a, &c, NULL, &v, NULL), KVS_OK); /* the flag is there */
    void *payload = NULL;
    CHECK(kvs_disk_load_payload(dir, &fp, a, c, &payload, &v, NULL) == KVS_ERR_CORRUPT && v == KVS_DISK_BAD_MAC);
    CHECK(strstr(kvs_last_error(), "MAC"));
    fake_kv *w = fake_kv_new(SHAPE, N);
    CHECK(kvs_disk_read_into_kv(dir, &fp, a, c, 0, 64, &w->kv, 0, &v, NULL) == KVS_ERR_CORRUPT && v == KVS_DISK_BAD_MAC);
    fake_kv_free(w);
    kvs_chunk_unref(c);
    CHECK_EQ_INT(serve_keyed(dir, a, &st), 128); /* stops before it, recomputes the rest */
    CHECK_EQ_INT(st.disk_bad, 1);
    CHECK_EQ_INT(st.disk_bad_mac, 1); /* of disk_bad: told apart from other damage */
    CHECK(access(path, F_OK) != 0); /* dropped as damage */

    /* written without the key under the keyed fingerprint and name (no MAC
     * flag): refused at the header */
    put_keyed(dir, a, 1); /* chunk 2 again (exact), then replace it by a keyless write */
    keyed_path(dir, a, 2, path, sizeof path);
    CHECK_EQ_INT(kvs_disk_read_header(path, &fp, &SHAPE, a, &c, NULL, &v, NULL), KVS_OK);
    kvs_chunk *x = NULL;
    CHECK_EQ_INT(kvs_chunk_new(&SHAPE, c->n_tok, 1, &x), KVS_OK);
    x->prefix_key = c->prefix_key;
    x->content_key = c->content_key;
    x->parent_key = c->parent_key;
    x->pos0 = c->pos0;
    memcpy(x->tokens, c->tokens, (size_t)c->n_tok * sizeof(int32_t));
    memset(x->kv, 0x3c, x->kv_bytes); /* the attacker's KV */
    CHECK_EQ_INT(kvs_disk_write(dir, &fp, x, 0, NULL), KVS_OK);
    kvs_chunk_unref(x);
    kvs_chunk *r = NULL;
    CHECK(kvs_disk_read_header(path, &fp, &SHAPE, a, &r, NULL, &v, NULL) == KVS_ERR_CORRUPT && v == KVS_DISK_BAD_MAC);
    CHECK(r == NULL);
    CHECK(kvs_disk_load_payload(dir, &fp, a, c, &payload, &v, NULL) == KVS_ERR_CORRUPT && v == KVS_DISK_BAD_MAC);
    kvs_chunk_unref(c);
    CHECK_EQ_INT(serve_keyed(dir, a, &st), 128);
    CHECK_EQ_INT(st.disk_bad, 1);
    CHECK_EQ_INT(st.disk_bad_mac, 1); /* refused at its header (no MAC flag) */
    CHECK(access(path, F_OK) != 0);
    rm_dir(dir);
    free(dir);
    kvs_entry_mac_free(a);
}

/* One directory, three caches of one model: keyless, key A, key B. Each
 * stores and then reuses its own entries only (the others' are foreign:
 * counted, never served, never removed), so all 15 files stay. Without the
 * key folded into the fingerprint the three had shared (and a keyed reader
 * dropped as bad MAC) the keyless entries. */
TEST(keyed_and_keyless_caches_share_a_dir) {
    kvs_entry_mac *a = test_key('a'), *b = test_key('b');
    const kvs_entry_mac *keys[3] = {NULL, a, b};
    char *dir = new_dir();
    for (int k = 0; k < 3; k++) put_keyed(dir, keys[k], 5);
    CHECK_EQ_INT(count_files(dir, ".kvc"), 15);
    for (int k = 0; k < 3; k++) {
        kvs_store_stats st;
        CHECK_MSG(serve_keyed(dir, keys[k], &st) == N, "cache %d", k);
        CHECK_EQ_INT(st.disk_bad, 0);
        CHECK_EQ_INT(st.disk_foreign, 10);
    }
    CHECK_EQ_INT(count_files(dir, ".kvc"), 15);
    rm_dir(dir);
    free(dir);
    kvs_entry_mac_free(a);
    kvs_entry_mac_free(b);
}

/* The key's checks: too short a key is refused; a key file's bytes are
 * trimmed of surrounding whitespace (the same key, the same id); a missing,
 * empty or short file is refused naming the file. */
TEST(cache_key_files) {
    char *dir = new_dir(), path[512];
    kvs_entry_mac *m = NULL, *f = NULL;
    CHECK_EQ_INT(kvs_entry_mac_new("0123456789abcde", 15, "k", &m), KVS_ERR_INVALID_ARG);
    CHECK_EQ_INT(kvs_entry_mac_new(NULL, 32, "k", &m), KVS_ERR_INVALID_ARG);
    CHECK_MSG(strstr(kvs_last_error(), "the cache key is NULL"), "%s", kvs_last_error()); /* (it had said "0 bytes") */
    CHECK_EQ_INT(kvs_entry_mac_new("0123456789abcdef", 16, "k", &m), KVS_OK);
    snprintf(path, sizeof path, "%s/key", dir);
    FILE *fp = fopen(path, "w");
    fputs("  0123456789abcdef\n\n", fp);
    fclose(fp);
    CHECK_EQ_INT(kvs_entry_mac_from_file(path, &f), KVS_OK);
    CHECK(!memcmp(kvs_entry_mac_key_id(m), kvs_entry_mac_key_id(f), 32));
    kvs_entry_mac_free(f);
    static const char *bad[] = {"", " \n", "0123456789abcde\n"};
    for (int i = 0; i < 3; i++) {
        fp = fopen(path, "w");
        fputs(bad[i], fp);
        fclose(fp);
        f = NULL;
        CHECK(kvs_entry_mac_from_file(path, &f) == KVS_ERR_INVALID_ARG && !f);
        CHECK_MSG(strstr(kvs_last_error(), path), "%s", kvs_last_error());
    }
    unlink(path);
    CHECK(kvs_entry_mac_from_file(path, &f) == KVS_ERR_IO && strstr(kvs_last_error(), path));
    kvs_entry_mac_free(m);
    rm_dir(dir);
    free(dir);
}

TEST(sync_sees_other_writers) {
    char *dir = new_dir();
    kvs_store *a = open_dir(dir, 1), *b = open_dir(dir, 1);
    fake_kv_fill(cold, toks, N);
    CHECK_EQ_INT(kvs_store_put_prefix(b, toks, 128, 64, NULL, 0, &cold->kv, NULL), KVS_OK);
    kvs_prefix_hit hit;
    /* found by key without a scan (and indexed on the way) */
    CHECK_EQ_INT(kvs_store_lookup_prefix(a, toks, N, &hit), KVS_OK);
    CHECK_EQ_INT(hit.n_cached, 128);
    kvs_prefix_hit_release(&hit);
    int added;
    CHECK_EQ_INT(kvs_store_sync_disk(a, &added), KVS_OK);
    CHECK_EQ_INT(added, 0);
    CHECK_EQ_INT(kvs_store_lookup_prefix(a, toks, N, &hit), KVS_OK);
    CHECK_EQ_INT(hit.n_cached, 128);
    kvs_prefix_hit_release(&hit);
    /* b clears the directory: a notices when it tries to load */
    CHECK_EQ_INT(kvs_store_trim(a, 0), 2);
    CHECK_EQ_INT(kvs_store_clear(b, 1), KVS_OK);
    CHECK_EQ_INT(kvs_store_lookup_prefix(a, toks, N, &hit), KVS_OK);
    CHECK_EQ_INT(hit.n_cached, 0);
    kvs_prefix_hit_release(&hit);
    kvs_store_stats st;
    kvs_store_get_stats(a, &st);
    CHECK_EQ_INT(st.disk_missing, 2); /* the first, and the rest of the path verified */
    CHECK_EQ_INT(st.disk_bad, 0);
    kvs_store_free(a);
    kvs_store_free(b);
    rm_dir(dir);
    free(dir);
}

/* Four processes write overlapping prompts (the same keys at the same time)
 * into one directory while reopening it; afterwards every entry is valid and
 * every prompt is served exactly. */
TEST(concurrent_processes) {
    enum { NPROC = 4, NP = 6, PL = 200 };
    static int32_t pr[NP][PL];
    for (int p = 0; p < NP; p++) {
        memcpy(pr[p], toks, 100 * sizeof(int32_t)); /* all share 100 tokens */
        for (int i = 100; i < PL; i++) pr[p][i] = (int32_t)(fake_mix((uint64_t)(p * 1000 + i)) % 49152);
    }
    char *dir = new_dir();
    fflush(stdout);
    fflush(stderr);
    int gate[2];
    CHECK_EQ_INT(pipe(gate), 0);
    pid_t kids[NPROC];
    for (int k = 0; k < NPROC; k++) {
        kids[k] = fork();
        if (kids[k] == 0) {
            /* start together: wait until the parent closes the gate */
            char ch;
            close(gate[1]);
            if (read(gate[0], &ch, 1) < 0) _exit(3);
            int bad = 0;
            fake_kv *f = fake_kv_new(SHAPE, PL);
            for (int round = 0; round < 10; round++) {
                kvs_store *s = open_dir(dir, 1);
                if (!s) _exit(2);
                for (int j = 0; j < NP; j++) {
                    int p = (j + k + round) % NP;
                    fake_kv_fill(f, pr[p], PL);
                    if (kvs_store_put_prefix(s, pr[p], PL, 64, NULL, 0, &f->kv, NULL) != KVS_OK) bad++;
                }
                kvs_store_stats st;
                kvs_store_get_stats(s, &st);
                if (st.disk_bad || st.disk_write_errors) bad++;
                kvs_store_free(s);
            }
            fake_kv_free(f);
            _exit(bad ? 1 : 0);
        }
    }
    close(gate[0]);
    close(gate[1]); /* every child's read returns 0 now */
    int failed = 0;
    for (int k = 0; k < NPROC; k++) {
        int status;
        waitpid(kids[k], &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status)) failed++;
    }
    CHECK_EQ_INT(failed, 0);
    /* 1 shared chunk [0,64) + per prompt [64,128) [128,192) [192,200) */
    CHECK_EQ_INT(count_files(dir, ".kvc"), 1 + NP * 3);
    CHECK_EQ_INT(count_files(dir, ".tmp"), 0);
    kvs_store *s = open_dir(dir, 1);
    kvs_store_stats st;
    kvs_store_get_stats(s, &st);
    CHECK_EQ_INT(st.entries, 1 + NP * 3);
    CHECK_EQ_INT(st.disk_bad, 0);
    fake_kv *c2 = fake_kv_new(SHAPE, PL), *w2 = fake_kv_new(SHAPE, PL);
    for (int p = 0; p < NP; p++) {
        kvs_prefix_hit hit;
        CHECK_EQ_INT(kvs_store_lookup_prefix(s, pr[p], PL, &hit), KVS_OK);
        CHECK_EQ_INT(hit.n_cached, PL);
        fake_kv_fill(c2, pr[p], PL);
        fake_kv_zero(w2);
        CHECK_EQ_INT(kvs_prefix_hit_copy_to_kv(&hit, &w2->kv), KVS_OK);
        CHECK(fake_kv_equal(c2, w2, 0, PL));
        kvs_prefix_hit_release(&hit);
    }
    kvs_store_get_stats(s, &st);
    CHECK_EQ_INT(st.disk_bad, 0);
    kvs_store_free(s);
    fake_kv_free(c2);
    fake_kv_free(w2);
    rm_dir(dir);
    free(dir);
}

int main(void) {
    for (int i = 0; i < N; i++) toks[i] = (int32_t)(fake_mix((uint64_t)i + 99) % 49152);
    cold = fake_kv_new(SHAPE, N);
    warm = fake_kv_new(SHAPE, N);
    RUN(persist_and_load_lazily);
    RUN(lookup_into_reads_straight_into_kv);
    RUN(damaged_payload_never_served);
    RUN(damage_past_a_header_damaged_entry_dropped_by_the_same_lookup);
    RUN(fifo_in_an_indexed_entrys_place_is_stored_over);
    RUN(put_writes_no_child_of_an_evicted_entry);
    RUN(step_stores_on_small_bounds_keep_the_head);
    RUN(payload_readers_check_the_entry_is_the_chunk);
    RUN(damaged_entry_removed_only_if_still_the_file_read);
    RUN(truncated_entry);
    RUN(foreign_model);
    RUN(bad_magic_version_header_name);
    RUN(write_failure_under_a_long_dir_keeps_its_reason);
    RUN(origin_flags);
    RUN(keyed_entries_verified_forgeries_refused);
    RUN(keyed_and_keyless_caches_share_a_dir);
    RUN(cache_key_files);
    RUN(sync_sees_other_writers);
    RUN(concurrent_processes);
    fake_kv_free(cold);
    fake_kv_free(warm);
    return kt_summary();
}
