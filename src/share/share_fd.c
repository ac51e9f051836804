/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The file descriptors of VMM and pool exports, handed from the exporting
 * process to an importer of the same host. Not pidfd_getfd: it needs
 * ptrace permission over the exporter, which Yama's default ptrace_scope=1
 * refuses between sibling ranks and container seccomp profiles often
 * block. Not a daemon: the exporting handle serves its own descriptors,
 * from one thread, on an abstract-namespace Unix socket named by its pid
 * and a random part (both in the blob). An importer connects, names the
 * export by its 128-bit token and a piece, and receives the descriptor by
 * SCM_RIGHTS.
 *
 * Abstract sockets have no file permissions, so the server checks who
 * connects (SO_PEERCRED: the exporter's own uid only) and the token; the
 * client checks that the process serving the name is the one the blob
 * names. Every step on either side waits at most the timeout: a server
 * that is gone or stuck is a status 2 naming the step, never a hang.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <fcntl.h>
#include <unistd.h>

#include "share.h"

#define REQUEST_MAGIC 0x44463250u /* "P2FD" */

enum answer { ANSWER_OK, ANSWER_UNKNOWN, ANSWER_NO_PIECE, ANSWER_REFUSED };

struct request {
    uint32_t magic;
    uint32_t piece;
    uint8_t token[P2PT_SHARE_TOKEN_BYTES];
};

struct reply {
    uint32_t magic;
    uint32_t answer;
    uint32_t uid;    /* the server's */
    uint32_t pieces; /* the export's */
};

static _Atomic int timeout_ms = 5000;

void p2pt__share_set_timeout_ms(int ms) { atomic_store(&timeout_ms, ms > 0 ? ms : 5000); }

void p2pt__share_socket_name(uint32_t pid, uint64_t name, char *out, size_t len)
{
    snprintf(out, len, "p2pt-share-%u-%016llx", pid, (unsigned long long)name);
}

/* The abstract address of `pid`'s server `name`; its length in *len. */
static struct sockaddr_un address(uint32_t pid, uint64_t name, socklen_t *len)
{
    struct sockaddr_un a;
    memset(&a, 0, sizeof(a));
    a.sun_family = AF_UNIX;
    p2pt__share_socket_name(pid, name, a.sun_path + 1, sizeof(a.sun_path) - 1);
    *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(a.sun_path + 1));
    return a;
}

static void set_timeouts(int fd)
{
    int ms = atomic_load(&timeout_ms);
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

/* ---------------------------------------------------------------- server */

struct served {
    struct served *next;
    uint8_t token[P2PT_SHARE_TOKEN_BYTES];
    size_t n;
    int *fds;
};

struct p2pt_share_server {
    int listen_fd;
    int wake[2]; /* written once: the thread ends */
    pthread_t thread;
    pid_t owner; /* the process whose thread serves (a forked child has none) */
    pthread_mutex_t lock;
    struct served *served;
};

static void close_served(struct served *e)
{
    for (size_t i = 0; i < e->n; i++)
        if (e->fds[i] >= 0)
            close(e->fds[i]);
    free(e->fds);
    free(e);
}

/* A duplicate of piece `piece` of export `token` (the caller closes it), or
 * -1 with *answer saying why. */
static int lookup(struct p2pt_share_server *s, const struct request *q, enum answer *answer,
                  uint32_t *pieces)
{
    int fd = -1;
    *answer = ANSWER_UNKNOWN;
    *pieces = 0;
    pthread_mutex_lock(&s->lock);
    for (struct served *e = s->served; e != NULL; e = e->next) {
        if (memcmp(e->token, q->token, P2PT_SHARE_TOKEN_BYTES) != 0)
            continue;
        *pieces = (uint32_t)e->n;
        *answer = ANSWER_NO_PIECE;
        if (q->piece < e->n) {
            fd = fcntl(e->fds[q->piece], F_DUPFD_CLOEXEC, 0);
            *answer = fd >= 0 ? ANSWER_OK : ANSWER_UNKNOWN;
        }
        break;
    }
    pthread_mutex_unlock(&s->lock);
    return fd;
}

static bool send_reply(int c, const struct reply *r, int fd)
{
    struct iovec iov = {(void *)r, sizeof(*r)};
    char ctrl[CMSG_SPACE(sizeof(int))];
    struct msghdr m;
    memset(&m, 0, sizeof(m));
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    if (fd >= 0) {
        memset(ctrl, 0, sizeof(ctrl));
        m.msg_control = ctrl;
        m.msg_controllen = sizeof(ctrl);
        struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(cm), &fd, sizeof(int));
    }
    return sendmsg(c, &m, MSG_NOSIGNAL) == (ssize_t)sizeof(*r);
}

/* One connection: requests until the client hangs up, stays silent past
 * the timeout, or the server is stopped. */
static void serve(struct p2pt_share_server *s, int c)
{
    struct ucred cred;
    socklen_t len = sizeof(cred);
    bool allowed = getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 &&
                   cred.uid == geteuid();
    set_timeouts(c);
    for (;;) {
        struct pollfd p[2] = {{c, POLLIN, 0}, {s->wake[0], POLLIN, 0}};
        int r = poll(p, 2, atomic_load(&timeout_ms));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0 || p[1].revents != 0 || (p[0].revents & POLLIN) == 0)
            return;
        struct request q;
        if (recv(c, &q, sizeof(q), MSG_WAITALL) != (ssize_t)sizeof(q) || q.magic != REQUEST_MAGIC)
            return;
        struct reply a = {REQUEST_MAGIC, ANSWER_REFUSED, (uint32_t)geteuid(), 0};
        int fd = -1;
        if (allowed) {
            enum answer ans;
            fd = lookup(s, &q, &ans, &a.pieces);
            a.answer = ans;
        }
        bool sent = send_reply(c, &a, fd);
        if (fd >= 0)
            close(fd);
        if (!sent || !allowed)
            return;
    }
}

static void *server_main(void *arg)
{
    struct p2pt_share_server *s = arg;
    for (;;) {
        struct pollfd p[2] = {{s->listen_fd, POLLIN, 0}, {s->wake[0], POLLIN, 0}};
        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (p[1].revents != 0)
            break;
        if ((p[0].revents & POLLIN) == 0)
            continue;
        int c = accept4(s->listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0) {
            /* Out of descriptors or memory, the connection stays pending and
             * poll says so at once: wait a little (or for the stop) rather
             * than spin a core until a descriptor frees. */
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
                poll(&p[1], 1, 10);
            continue;
        }
        serve(s, c);
        close(c);
    }
    return NULL;
}

p2pt_status p2pt__share_server_start(struct p2pt_share_server **out, uint64_t *name)
{
    p2pt_status st = P2PT_SUCCESS;
    struct p2pt_share_server *s = calloc(1, sizeof(*s));
    const char *step = "socket";
    if (s == NULL)
        return p2pt__fail(P2PT_SYSTEM_ERROR, "out of host memory");
    s->listen_fd = s->wake[0] = s->wake[1] = -1;
    pthread_mutex_init(&s->lock, NULL);
    /* Non-blocking: an accept after poll never waits, so the thread always
     * comes back to see the wake pipe. */
    s->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s->listen_fd < 0)
        goto sys;
    /* A random name: another process cannot guess it, nor a later server of
     * this process collide with it. */
    for (int tries = 0;; tries++) {
        P2PT_TRY(p2pt__share_random(name, sizeof(*name)));
        socklen_t len;
        struct sockaddr_un a = address((uint32_t)getpid(), *name, &len);
        step = "bind";
        if (bind(s->listen_fd, (struct sockaddr *)&a, len) == 0)
            break;
        if (errno != EADDRINUSE || tries == 3)
            goto sys;
    }
    step = "listen";
    if (listen(s->listen_fd, 64) != 0)
        goto sys;
    step = "pipe2";
    if (pipe2(s->wake, O_CLOEXEC) != 0)
        goto sys;
    /* The thread takes no signal: they belong to the application's threads. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int r = pthread_create(&s->thread, NULL, server_main, s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (r != 0) {
        errno = r;
        step = "pthread_create";
        goto sys;
    }
    s->owner = getpid();
    *out = s;
    return P2PT_SUCCESS;
sys:
    st = p2pt__fail(P2PT_SYSTEM_ERROR,
                    "p2pt_share_export: cannot start the descriptor server: %s failed: %s",
                    step, strerror(errno));
out:
    if (s->listen_fd >= 0)
        close(s->listen_fd);
    for (int i = 0; i < 2; i++)
        if (s->wake[i] >= 0)
            close(s->wake[i]);
    pthread_mutex_destroy(&s->lock);
    free(s);
    return st;
}

p2pt_status p2pt__share_server_add(struct p2pt_share_server *s, const uint8_t *token, int *fds,
                                   size_t n)
{
    struct served *e = calloc(1, sizeof(*e));
    int *own = malloc(n * sizeof(*own));
    if (e == NULL || own == NULL) {
        free(e);
        free(own);
        for (size_t i = 0; i < n; i++)
            if (fds[i] >= 0)
                close(fds[i]);
        return p2pt__fail(P2PT_SYSTEM_ERROR, "out of host memory");
    }
    memcpy(own, fds, n * sizeof(*own));
    memcpy(e->token, token, P2PT_SHARE_TOKEN_BYTES);
    e->n = n;
    e->fds = own;
    pthread_mutex_lock(&s->lock);
    e->next = s->served;
    s->served = e;
    pthread_mutex_unlock(&s->lock);
    return P2PT_SUCCESS;
}

void p2pt__share_server_remove(struct p2pt_share_server *s, const uint8_t *token)
{
    struct served *gone = NULL;
    pthread_mutex_lock(&s->lock);
    for (struct served **at = &s->served; *at != NULL; at = &(*at)->next) {
        if (memcmp((*at)->token, token, P2PT_SHARE_TOKEN_BYTES) == 0) {
            gone = *at;
            *at = gone->next;
            break;
        }
    }
    pthread_mutex_unlock(&s->lock);
    if (gone != NULL)
        close_served(gone);
}

bool p2pt__share_server_idle(struct p2pt_share_server *s)
{
    pthread_mutex_lock(&s->lock);
    bool idle = s->served == NULL;
    pthread_mutex_unlock(&s->lock);
    return idle;
}

void p2pt__share_server_stop(struct p2pt_share_server *s)
{
    if (s == NULL)
        return;
    /* In a child forked after the server started there is no thread to
     * stop, and the wake pipe is the parent's too: only the copies of the
     * descriptors are closed. */
    if (s->owner == getpid()) {
        ssize_t w;
        do
            w = write(s->wake[1], "x", 1);
        while (w < 0 && errno == EINTR);
        pthread_join(s->thread, NULL);
    }
    close(s->listen_fd);
    close(s->wake[0]);
    close(s->wake[1]);
    while (s->served != NULL) {
        struct served *e = s->served;
        s->served = e->next;
        close_served(e);
    }
    pthread_mutex_destroy(&s->lock);
    free(s);
}

/* ---------------------------------------------------------------- client */

static bool timed_out(int err) { return err == EAGAIN || err == EWOULDBLOCK || err == ETIMEDOUT; }

p2pt_status p2pt__share_fetch(uint32_t pid, uint64_t name, const uint8_t *token, size_t n,
                              int *fds)
{
    p2pt_status st = P2PT_SUCCESS;
    char sock[96];
    int ms = atomic_load(&timeout_ms);
    p2pt__share_socket_name(pid, name, sock, sizeof(sock));
    for (size_t i = 0; i < n; i++)
        fds[i] = -1;
    int c = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c < 0)
        return p2pt__fail(P2PT_SYSTEM_ERROR, "p2pt_share_import: socket failed: %s",
                          strerror(errno));
    set_timeouts(c);
    socklen_t len;
    struct sockaddr_un a = address(pid, name, &len);
    if (connect(c, (struct sockaddr *)&a, len) != 0) {
        int e = errno;
        st = p2pt__fail(P2PT_SYSTEM_ERROR,
                        timed_out(e) || e == EINPROGRESS
                            ? "p2pt_share_import: connecting to the descriptor server @%s of "
                              "process %u timed out after %d ms (%s): the exporter does not "
                              "accept"
                            : "p2pt_share_import: no descriptor server answers at @%s of "
                              "process %u (after at most %d ms: %s): the exporter has exited, "
                              "or ended the export (p2pt_share_unexport, p2pt_finalize)",
                        sock, pid, ms, strerror(e));
        goto out;
    }
    struct ucred cred;
    socklen_t cl = sizeof(cred);
    if (getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cred, &cl) != 0) {
        st = p2pt__fail(P2PT_SYSTEM_ERROR, "p2pt_share_import: SO_PEERCRED on @%s failed: %s",
                        sock, strerror(errno));
        goto out;
    }
    if ((uint32_t)cred.pid != pid) {
        st = p2pt__fail(P2PT_SYSTEM_ERROR,
                        "p2pt_share_import: @%s is served by process %d, not by the exporter "
                        "the blobs name (process %u): its descriptors are refused",
                        sock, (int)cred.pid, pid);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        struct request q;
        memset(&q, 0, sizeof(q));
        q.magic = REQUEST_MAGIC;
        q.piece = (uint32_t)i;
        memcpy(q.token, token, P2PT_SHARE_TOKEN_BYTES);
        if (send(c, &q, sizeof(q), MSG_NOSIGNAL) != (ssize_t)sizeof(q)) {
            int e = errno;
            st = p2pt__fail(P2PT_SYSTEM_ERROR,
                            "p2pt_share_import: asking process %u for the descriptor of piece "
                            "%zu %s: %s",
                            pid, i, timed_out(e) ? "timed out" : "failed", strerror(e));
            goto out;
        }
        struct reply r;
        struct iovec iov = {&r, sizeof(r)};
        char ctrl[CMSG_SPACE(sizeof(int))];
        struct msghdr m;
        memset(&m, 0, sizeof(m));
        memset(ctrl, 0, sizeof(ctrl));
        m.msg_iov = &iov;
        m.msg_iovlen = 1;
        m.msg_control = ctrl;
        m.msg_controllen = sizeof(ctrl);
        ssize_t got = recvmsg(c, &m, MSG_WAITALL | MSG_CMSG_CLOEXEC);
        int fd = -1;
        struct cmsghdr *cm = got > 0 ? CMSG_FIRSTHDR(&m) : NULL;
        if (cm != NULL && cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS)
            memcpy(&fd, CMSG_DATA(cm), sizeof(int));
        if (got != (ssize_t)sizeof(r) || r.magic != REQUEST_MAGIC) {
            int e = errno;
            if (fd >= 0)
                close(fd);
            st = p2pt__fail(P2PT_SYSTEM_ERROR,
                            got < 0 && timed_out(e)
                                ? "p2pt_share_import: timed out after %d ms waiting for the "
                                  "descriptor of piece %zu from process %u (%s)"
                                : "p2pt_share_import: no answer (after at most %d ms) for the "
                                  "descriptor of piece %zu from process %u: %s",
                            ms, i, pid,
                            got < 0 ? strerror(e)
                                    : "the connection closed or the answer is malformed");
            goto out;
        }
        if (r.answer != ANSWER_OK || fd < 0) {
            if (fd >= 0)
                close(fd);
            if (r.answer == ANSWER_REFUSED)
                st = p2pt__fail(P2PT_SYSTEM_ERROR,
                                "p2pt_share_import: process %u refused its descriptors: it "
                                "serves processes of its own uid (%u) only, and this one runs "
                                "as uid %u",
                                pid, r.uid, (unsigned)geteuid());
            else if (r.answer == ANSWER_UNKNOWN)
                st = p2pt__fail(P2PT_INVALID_USAGE,
                                "p2pt_share_import: process %u has no such export any more "
                                "(it was unexported, or its handle finalized)",
                                pid);
            else if (r.answer == ANSWER_NO_PIECE)
                st = p2pt__fail(P2PT_INVALID_ARGUMENT,
                                "p2pt_share_import: process %u serves %u pieces of the export, "
                                "not piece %zu: the blobs do not match the export",
                                pid, r.pieces, i);
            else
                st = p2pt__fail(P2PT_SYSTEM_ERROR,
                                "p2pt_share_import: process %u answered piece %zu without a "
                                "descriptor",
                                pid, i);
            goto out;
        }
        fds[i] = fd;
    }
out:
    close(c);
    if (st != P2PT_SUCCESS)
        for (size_t i = 0; i < n; i++) {
            if (fds[i] >= 0)
                close(fds[i]);
            fds[i] = -1;
        }
    return st;
}
