/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the tests in two processes share (test_memory.c,
 * test_imported_memory.c): a message of any fixed size over a Unix socket,
 * with a file descriptor beside it (SCM_RIGHTS) when there is one. Static
 * inline so each test file stays self-contained.
 */
#ifndef P2PT_IPC_TEST_H
#define P2PT_IPC_TEST_H

#include <string.h>
#include <sys/socket.h>

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

#endif
