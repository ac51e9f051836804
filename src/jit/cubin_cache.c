/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The on-disk cubin cache (P2P_TRANSPORT_CACHE_DIR). A cold process's first
 * TMA copy is mostly NVRTC: opening its ~60 MB of libraries, then compiling
 * (bench/results/latency.md, cold first copy). A cubin that an earlier process
 * compiled for the same kernel source, compile options, p2pt version and GPU
 * architecture is read back instead, and NVRTC is never opened.
 *
 * A cubin is code the GPU will run, so:
 *  - the file name carries a 64-bit hash of everything that shaped the
 *    cubin: a changed kernel, option or p2pt version never meets an old file;
 *  - a file is written under a unique temporary name and renamed into place,
 *    so any number of processes see a whole file or none;
 *  - a file is used only from a directory owned by this user and writable by
 *    no one else, only if it is a regular file owned by this user and
 *    writable by no one else (opened without blocking: a FIFO put there
 *    would otherwise hang the first copy), only if its trailer, written
 *    last, holds its length and a hash of its bytes and of its name (a file
 *    damaged on disk, cut short, or copied in under another name fails
 *    it), and only if it is a complete CUDA ELF64 image (EM_CUDA, its header
 *    tables inside the file). The driver does not check code bytes: a
 *    cubin whose code was damaged loads and faults the GPU (one H200), so
 *    the hash is what keeps a damaged file from running. A cubin the
 *    driver refuses is compiled again and replaced (src/jit.c);
 *  - a file is flushed to disk before it is renamed into place.
 * Nothing here fails a copy: the callers log why the cache was skipped.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "cubin_cache.h"

#define CUBIN_MIN_BYTES 64                  /* an ELF64 header */
#define CUBIN_MAX_BYTES (64u * 1024u * 1024u) /* far above any p2pt kernel */
#define EM_CUDA 190

/* After the cubin: what the writer sealed, checked before anything runs. */
#define TRAILER_MAGIC "P2PTCUB2"
struct trailer {
    char magic[8];
    uint64_t bytes;     /* of the cubin before it */
    uint64_t hash;      /* FNV-1a of those bytes */
    uint64_t name_hash; /* FNV-1a of the file's name */
};

/* The trailer the writer puts after `n` bytes of cubin filed as `name`, and
 * the one a reader expects. */
static struct trailer sealed(const void *cubin, size_t n, const char *name)
{
    struct trailer t;
    memset(&t, 0, sizeof(t));
    memcpy(t.magic, TRAILER_MAGIC, sizeof(t.magic));
    t.bytes = n;
    t.hash = p2pt__fnv1a(P2PT_FNV1A_START, cubin, n);
    t.name_hash = p2pt__fnv1a(P2PT_FNV1A_START, name, strlen(name));
    return t;
}

void p2pt__cubin_cache_name(char *out, size_t len, const char *kernel, const char *source,
                            const char *options, int arch)
{
    /* FNV-1a need not be cryptographic: the directory's ownership is the
     * trust boundary; the hash only keeps versions apart. */
    uint64_t h = P2PT_FNV1A_START;
    h = p2pt__fnv1a(h, source, strlen(source) + 1);
    h = p2pt__fnv1a(h, options, strlen(options) + 1);
    h = p2pt__fnv1a(h, P2PT_VERSION_STRING, sizeof(P2PT_VERSION_STRING));
    h = p2pt__fnv1a(h, &arch, sizeof(arch));
    h = p2pt__fnv1a(h, TRAILER_MAGIC, sizeof(TRAILER_MAGIC)); /* the file's format */
    snprintf(out, len, "%s-sm_%d-%016llx.cubin", kernel, arch, (unsigned long long)h);
}

static uint64_t rd_u64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof(v));
    return v;
}

static unsigned rd_u16(const unsigned char *p)
{
    uint16_t v;
    memcpy(&v, p, sizeof(v));
    return v;
}

/* A whole little-endian CUDA ELF64 image: the magic, EM_CUDA, and both
 * header tables inside `size` bytes. (Hosts that run CUDA are
 * little-endian.) */
bool p2pt__cubin_complete(const void *buf, size_t size)
{
    const unsigned char *b = buf;
    if (buf == NULL || size < CUBIN_MIN_BYTES || size > CUBIN_MAX_BYTES)
        return false;
    if (memcmp(b, "\177ELF", 4) != 0 || b[4] != 2 /* ELFCLASS64 */ || b[5] != 1 /* LSB */ ||
        rd_u16(b + 0x12) != EM_CUDA)
        return false;
    uint64_t phoff = rd_u64(b + 0x20), shoff = rd_u64(b + 0x28);
    unsigned phentsize = rd_u16(b + 0x36), phnum = rd_u16(b + 0x38);
    unsigned shentsize = rd_u16(b + 0x3A), shnum = rd_u16(b + 0x3C);
    if (shnum == 0 || shentsize != 64 || shoff < CUBIN_MIN_BYTES || shoff > size ||
        (uint64_t)shnum * shentsize > size - shoff)
        return false;
    if (phnum != 0 && (phentsize != 56 || phoff < CUBIN_MIN_BYTES || phoff > size ||
                       (uint64_t)phnum * phentsize > size - phoff))
        return false;
    return true;
}

/* `dir` may hold code this process will run: it must be a directory owned by
 * this user that no one else can write. `*missing` (when given) says whether
 * it failed only because `dir` does not exist. */
static bool dir_trusted(const char *dir, bool *missing, char *why, size_t why_len)
{
    struct stat sb;
    if (missing != NULL)
        *missing = false;
    if (stat(dir, &sb) != 0) {
        if (errno == ENOENT && missing != NULL) {
            *missing = true;
            snprintf(why, why_len, "cache directory %s does not exist yet", dir);
            return false;
        }
        snprintf(why, why_len, "cannot use cache directory %s: %s", dir, strerror(errno));
        return false;
    }
    if (!S_ISDIR(sb.st_mode)) {
        snprintf(why, why_len, "cache directory %s is not a directory", dir);
        return false;
    }
    if (sb.st_uid != geteuid() || (sb.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
        snprintf(why, why_len,
                 "cache directory %s is not used: it must be owned by uid %u and not "
                 "writable by group or others (owner %u, mode %03o)",
                 dir, (unsigned)geteuid(), (unsigned)sb.st_uid, (unsigned)(sb.st_mode & 0777));
        return false;
    }
    return true;
}

enum p2pt_cache_result p2pt__cubin_cache_read(const char *dir, const char *name,
                                              void **cubin, size_t *size, char *why,
                                              size_t why_len)
{
    char path[P2PT_PATH_MAX + 128];
    struct stat sb;
    unsigned char *buf = NULL;
    int fd = -1;
    enum p2pt_cache_result res = P2PT_CACHE_UNUSABLE;

    *cubin = NULL;
    *size = 0;
    why[0] = '\0';
    if (dir[0] == '\0') {
        snprintf(why, why_len, "the cubin cache is off");
        return P2PT_CACHE_MISS;
    }
    bool missing;
    if (!dir_trusted(dir, &missing, why, why_len))
        return missing ? P2PT_CACHE_MISS : P2PT_CACHE_UNUSABLE;
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    /* Non-blocking: opening a FIFO for reading would wait for a writer. */
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) {
        snprintf(why, why_len, "%s: %s", path, strerror(errno));
        return errno == ENOENT ? P2PT_CACHE_MISS : P2PT_CACHE_UNUSABLE;
    }
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_uid != geteuid() ||
        (sb.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
        snprintf(why, why_len,
                 "%s is not a regular file owned by uid %u and writable by no one else", path,
                 (unsigned)geteuid());
        goto out;
    }
    if (sb.st_size < CUBIN_MIN_BYTES + (off_t)sizeof(struct trailer) ||
        (unsigned long long)sb.st_size > CUBIN_MAX_BYTES + sizeof(struct trailer)) {
        snprintf(why, why_len, "%s has %lld bytes, not a cubin's %zu to %zu", path,
                 (long long)sb.st_size, CUBIN_MIN_BYTES + sizeof(struct trailer),
                 CUBIN_MAX_BYTES + sizeof(struct trailer));
        goto out;
    }
    size_t n = (size_t)sb.st_size, got = 0;
    buf = malloc(n);
    if (buf == NULL) {
        snprintf(why, why_len, "out of host memory for %s (%zu bytes)", path, n);
        goto out;
    }
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            snprintf(why, why_len, "%s: read %zu of %zu bytes: %s", path, got, n,
                     r < 0 ? strerror(errno) : "file shrank");
            goto out;
        }
        got += (size_t)r;
    }
    struct trailer t;
    n -= sizeof(t);
    memcpy(&t, buf + n, sizeof(t));
    const struct trailer want = sealed(buf, n, name);
    const char *bad = NULL;
    if (memcmp(t.magic, want.magic, sizeof(t.magic)) != 0)
        bad = "no trailer";
    else if (t.bytes != want.bytes)
        bad = "its trailer gives another length";
    else if (t.name_hash != want.name_hash)
        bad = "its trailer is another file's";
    else if (t.hash != want.hash)
        bad = "its bytes changed since it was written";
    else if (!p2pt__cubin_complete(buf, n))
        bad = "no CUDA ELF64 image";
    if (bad != NULL) {
        snprintf(why, why_len, "%s is not a complete cubin (%zu bytes): %s", path,
                 n + sizeof(t), bad);
        goto out;
    }
    *cubin = buf;
    *size = n;
    buf = NULL;
    snprintf(why, why_len, "%s", path);
    res = P2PT_CACHE_HIT;
out:
    free(buf);
    close(fd);
    return res;
}

/* mkdir -p, new directories private to this user. */
static bool make_dirs(const char *dir, char *why, size_t why_len)
{
    char tmp[P2PT_PATH_MAX];
    size_t len = strlen(dir);
    if (len == 0 || len >= sizeof(tmp)) {
        snprintf(why, why_len, "cache directory path of %zu characters is not usable", len);
        return false;
    }
    memcpy(tmp, dir, len + 1);
    for (size_t i = 1; i <= len; i++) {
        if (tmp[i] != '/' && tmp[i] != '\0')
            continue;
        char c = tmp[i];
        tmp[i] = '\0';
        if (mkdir(tmp, 0700) != 0 && errno != EEXIST) {
            snprintf(why, why_len, "cannot create cache directory %s: %s", tmp,
                     strerror(errno));
            return false;
        }
        tmp[i] = c;
    }
    return true;
}

bool p2pt__cubin_cache_write(const char *dir, const char *name, const void *cubin,
                             size_t size, char *why, size_t why_len)
{
    static _Atomic unsigned serial;
    char path[P2PT_PATH_MAX + 128], tmp[P2PT_PATH_MAX + 192];
    const unsigned char *p = cubin;
    size_t done = 0;
    int fd;

    why[0] = '\0';
    if (dir[0] == '\0') {
        snprintf(why, why_len, "the cubin cache is off");
        return false;
    }
    if (!p2pt__cubin_complete(cubin, size)) {
        snprintf(why, why_len, "refusing to cache an incomplete cubin of %zu bytes", size);
        return false;
    }
    if (!make_dirs(dir, why, why_len) || !dir_trusted(dir, NULL, why, why_len))
        return false;
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    snprintf(tmp, sizeof(tmp), "%s.tmp.%ld.%u", path, (long)getpid(),
             atomic_fetch_add(&serial, 1));
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        snprintf(why, why_len, "cannot create %s: %s", tmp, strerror(errno));
        return false;
    }
    const struct trailer t = sealed(cubin, size, name);
    const size_t total = size + sizeof(t);
    while (done < total) {
        const unsigned char *from =
            done < size ? p + done : (const unsigned char *)&t + (done - size);
        const size_t part = done < size ? size - done : total - done;
        ssize_t w = write(fd, from, part);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            snprintf(why, why_len, "writing %s: %s", tmp, w < 0 ? strerror(errno) : "no progress");
            break;
        }
        done += (size_t)w;
    }
    /* On disk before the name is: a crash never leaves a named file whose
     * pages were not written. */
    if (done == total && fsync(fd) != 0) {
        snprintf(why, why_len, "flushing %s: %s", tmp, strerror(errno));
        done = 0;
    }
    if (close(fd) != 0 && done == total) {
        snprintf(why, why_len, "closing %s: %s", tmp, strerror(errno));
        done = 0;
    }
    if (done != total || rename(tmp, path) != 0) {
        if (done == total)
            snprintf(why, why_len, "renaming %s to %s: %s", tmp, path, strerror(errno));
        unlink(tmp);
        return false;
    }
    snprintf(why, why_len, "%s", path);
    return true;
}
