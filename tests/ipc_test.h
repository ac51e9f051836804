/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the tests in two processes share (test_memory.c,
 * test_imported_memory.c): a message of any fixed size over a Unix socket,
 * with a file descriptor beside it (SCM_RIGHTS) when there is one, and the
 * parent's start and end of a child that owns GPU 1's memory. Messages
 * begin with a kind byte: 'R' ready (a descriptor beside it), 'S' skip,
 * 'D' done, 'K' ok, 'F' failed. Static inline so each test file stays
 * self-contained.
 */
#ifndef P2PT_IPC_TEST_H
#define P2PT_IPC_TEST_H

#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gpu_test.h"

/* Send `len` bytes of `m`, and `fd` when it is not -1; 0 on success. */
static inline int it_send(int sock, const void *m, size_t len, int fd)
{
    struct iovec iov = {(void *)m, len};
    char ctrl[CMSG_SPACE(sizeof(int))];
    struct msghdr h;
    memset(&h, 0, sizeof(h));
    h.msg_iov = &iov;
    h.msg_iovlen = 1;
    if (fd >= 0) {
        memset(ctrl, 0, sizeof(ctrl));
        h.msg_control = ctrl;
        h.msg_controllen = sizeof(ctrl);
        struct cmsghdr *c = CMSG_FIRSTHDR(&h);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &fd, sizeof(int));
    }
    return sendmsg(sock, &h, 0) == (ssize_t)len ? 0 : -1;
}

/* Receive `len` bytes into `m`, and a descriptor into *fd (-1: none) when
 * fd is not NULL; 0 on success. */
static inline int it_recv(int sock, void *m, size_t len, int *fd)
{
    struct iovec iov = {m, len};
    char ctrl[CMSG_SPACE(sizeof(int))];
    struct msghdr h;
    memset(&h, 0, sizeof(h));
    h.msg_iov = &iov;
    h.msg_iovlen = 1;
    h.msg_control = ctrl;
    h.msg_controllen = sizeof(ctrl);
    if (recvmsg(sock, &h, MSG_WAITALL) != (ssize_t)len)
        return -1;
    if (fd != NULL) {
        *fd = -1;
        struct cmsghdr *c = CMSG_FIRSTHDR(&h);
        if (c != NULL && c->cmsg_type == SCM_RIGHTS)
            memcpy(fd, CMSG_DATA(c), sizeof(int));
    }
    return 0;
}

/*
 * Fork a child that runs child(sock) and exits with its result, before this
 * process touches CUDA (a child of an initialised CUDA process cannot use
 * CUDA), and take its first message: `len` bytes into `m`, its descriptor
 * into *fd. A child that answers 'S', or dies before answering, could not
 * set up GPU 1's memory: the test skips, naming a missing GPU when that is
 * why. Otherwise the answer must be 'R' with a descriptor. Returns the
 * parent's end of the socket; `who` names the child in messages.
 */
static inline int it_start_child(int (*child)(int sock), const char *who, void *m, size_t len,
                                 int *fd, pid_t *pid)
{
    GT_SKIP_NO_GPU_ASKED();
    int sv[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    *pid = fork();
    cr_assert(*pid >= 0);
    if (*pid == 0) {
        close(sv[0]);
        _exit(child(sv[1]));
    }
    close(sv[1]);
    *fd = -1;
    const int got = it_recv(sv[0], m, len, fd);
    if (got != 0 || *(const char *)m == 'S') {
        int status = 0;
        waitpid(*pid, &status, 0);
        cr_assert_eq(got, 0, "%s died before answering (exit %d)", who,
                     WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        gt_require_gpus(2); /* skips with the reason */
        cr_skip_test("needs 2 CUDA devices: %s could not set up GPU 1 memory", who);
    }
    cr_assert_eq(*(const char *)m, 'R');
    cr_assert(*fd >= 0, "no descriptor arrived from %s", who);
    gt_require_gpus(2);
    return sv[0];
}

/*
 * Send the child `done` ('D', `len` bytes) and take its verdict into
 * `verdict` (`len` bytes, its reason at `why`), then its exit: both must
 * say it found what it expected.
 */
static inline void it_finish_child(int sock, pid_t pid, const void *done, void *verdict,
                                   size_t len, const char *why, const char *who)
{
    cr_assert_eq(it_send(sock, done, len, -1), 0);
    cr_assert_eq(it_recv(sock, verdict, len, NULL), 0, "%s gave no verdict", who);
    int status = 0;
    waitpid(pid, &status, 0);
    cr_assert_eq(*(const char *)verdict, 'K', "%s", why);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s's exit status %d", who,
              WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

#endif
