/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The hand-off of a VMM export's file descriptors between two real
 * processes (fork), without pidfd_getfd and without a daemon: the
 * exporting process serves them from a thread on an abstract Unix socket,
 * and the importer receives them by SCM_RIGHTS. A memfd stands in for the
 * VMM descriptor: the bytes one process writes the other reads through the
 * descriptor it received. Proven here: several pieces cross on one
 * connection; a wrong token is status 5 and a piece the export lacks
 * status 4; a process of another uid is refused (status 2; run as root,
 * which can become another uid); a server that is gone, a server that
 * never answers (timeout) and a name served by another process than the
 * blob says are status 2 naming what failed, never a hang; a server out of
 * descriptors naps rather than spins; the library has no pidfd_getfd or
 * pidfd_open symbol.
 */
#include <errno.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>

#include "share_test.h"

#define PIECES 3

/* What the child tells the parent: its pid and server name. */
struct served_at {
    uint32_t pid;
    uint64_t name;
    uint8_t token[P2PT_SHARE_TOKEN_BYTES];
};

/* The child: serve PIECES memfds (piece i holds "piece i") under a random
 * token, tell the parent, and wait until it closes `in`. No Criterion
 * assertions here: a forked child reports by its exit status. */
static int serve_child(int out, int in, bool exit_at_once)
{
    struct p2pt_share_server *s = NULL;
    struct served_at at;
    int fds[PIECES];
    memset(&at, 0, sizeof(at));
    at.pid = (uint32_t)getpid();
    if (p2pt__share_random(at.token, sizeof(at.token)) != P2PT_SUCCESS ||
        p2pt__share_server_start(&s, &at.name) != P2PT_SUCCESS)
        return 3;
    for (int i = 0; i < PIECES; i++) {
        char text[32];
        int n = snprintf(text, sizeof(text), "piece %d", i);
        fds[i] = memfd_create("share-test", MFD_CLOEXEC);
        if (fds[i] < 0 || ftruncate(fds[i], 4096) != 0 || write(fds[i], text, (size_t)n) != n)
            return 4;
    }
    if (p2pt__share_server_add(s, at.token, fds, PIECES) != P2PT_SUCCESS)
        return 5;
    if (!st_write(out, &at, sizeof(at)))
        return 6;
    if (exit_at_once) {
        p2pt__share_server_stop(s);
        return 0;
    }
    char c;
    while (read(in, &c, 1) > 0)
        ;
    p2pt__share_server_stop(s);
    return 0;
}

struct child {
    pid_t pid;
    int done; /* closing it ends the child */
    struct served_at at;
};

static struct child start_server(bool exit_at_once)
{
    int up[2], down[2];
    cr_assert_eq(pipe(up), 0);
    cr_assert_eq(pipe(down), 0);
    struct child c;
    c.pid = fork();
    cr_assert(c.pid >= 0);
    if (c.pid == 0) {
        close(up[0]);
        close(down[1]);
        _exit(serve_child(up[1], down[0], exit_at_once));
    }
    close(up[1]);
    close(down[0]);
    cr_assert(st_read(up[0], &c.at, sizeof(c.at)), "the serving child did not start");
    close(up[0]);
    c.done = down[1];
    return c;
}

static void end_server(struct child *c)
{
    int status = 0;
    close(c->done);
    cr_assert_eq(waitpid(c->pid, &status, 0), c->pid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the serving child failed: %d",
              WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

Test(share_fd, descriptors_cross_to_another_process_on_one_connection)
{
    /* The default path, and the only one: no pidfd_getfd, which needs
     * ptrace permission over the exporter. */
    struct child c = start_server(false);
    int fds[PIECES];
    cr_assert_eq(p2pt__share_fetch(c.at.pid, c.at.name, c.at.token, PIECES, fds), P2PT_SUCCESS,
                 "%s", p2pt__last_error_text());
    for (int i = 0; i < PIECES; i++) {
        char got[16] = "", want[16];
        snprintf(want, sizeof(want), "piece %d", i);
        cr_assert(fds[i] >= 0);
        cr_assert_eq(pread(fds[i], got, strlen(want), 0), (ssize_t)strlen(want));
        cr_expect_str_eq(got, want, "descriptor %d reads \"%s\"", i, got);
        close(fds[i]);
    }
    end_server(&c);
}

Test(share_fd, what_one_process_writes_the_other_reads_through_the_descriptor)
{
    struct child c = start_server(false);
    int fd = -1;
    cr_assert_eq(p2pt__share_fetch(c.at.pid, c.at.name, c.at.token, 1, &fd), P2PT_SUCCESS, "%s",
                 p2pt__last_error_text());
    char *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    cr_assert(p != MAP_FAILED);
    cr_expect_eq(memcmp(p, "piece 0", 7), 0);
    memcpy(p + 100, "from the importer", 18);
    munmap(p, 4096);
    /* A second fetch of the same piece is the same memory. */
    int again = -1;
    cr_assert_eq(p2pt__share_fetch(c.at.pid, c.at.name, c.at.token, 1, &again), P2PT_SUCCESS);
    char got[18] = "";
    cr_assert_eq(pread(again, got, 18, 100), 18);
    cr_expect_str_eq(got, "from the importer");
    close(fd);
    close(again);
    end_server(&c);
}

Test(share_fd, a_wrong_token_is_status_5_and_a_missing_piece_status_4)
{
    struct child c = start_server(false);
    int fds[PIECES + 1];
    uint8_t wrong[P2PT_SHARE_TOKEN_BYTES];
    memcpy(wrong, c.at.token, sizeof(wrong));
    wrong[7] ^= 1;
    cr_assert_eq(p2pt__share_fetch(c.at.pid, c.at.name, wrong, 1, fds), P2PT_INVALID_USAGE);
    st_expect_text("has no such export");
    cr_expect_eq(fds[0], -1);
    cr_assert_eq(p2pt__share_fetch(c.at.pid, c.at.name, c.at.token, PIECES + 1, fds),
                 P2PT_INVALID_ARGUMENT);
    st_expect_text("serves 3 pieces of the export, not piece 3");
    for (int i = 0; i < PIECES + 1; i++)
        cr_expect_eq(fds[i], -1, "a failed fetch leaves no descriptor open");
    end_server(&c);
}

Test(share_fd, a_process_of_another_uid_is_refused_with_status_2)
{
    if (geteuid() != 0)
        cr_skip_test("needs root: only root can become another uid, to be refused");
    struct child c = start_server(false);
    pid_t p = fork();
    cr_assert(p >= 0);
    if (p == 0) {
        /* Another uid: the server answers only its own. */
        if (setgid(65534) != 0 || setuid(65534) != 0)
            _exit(10);
        int fd = -1;
        p2pt_status st = p2pt__share_fetch(c.at.pid, c.at.name, c.at.token, 1, &fd);
        _exit(st == P2PT_SYSTEM_ERROR && fd == -1 &&
                      strstr(p2pt__last_error_text(), "refused its descriptors") != NULL
                  ? 0
                  : 11);
    }
    int status = 0;
    cr_assert_eq(waitpid(p, &status, 0), p);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "the process of uid 65534 was not refused (exit %d)",
              WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    end_server(&c);
}

Test(share_fd, a_server_that_is_gone_is_status_2)
{
    struct child c = start_server(true);
    int status = 0;
    cr_assert_eq(waitpid(c.pid, &status, 0), c.pid);
    close(c.done);
    int fd = -1;
    cr_assert_eq(p2pt__share_fetch(c.at.pid, c.at.name, c.at.token, 1, &fd), P2PT_SYSTEM_ERROR);
    st_expect_text("no descriptor server answers");
    st_expect_text("the exporter has exited");
    cr_expect_eq(fd, -1);
}

/* The abstract address of `pid`'s server `name`, its length in *len. */
static struct sockaddr_un server_address(uint32_t pid, uint64_t name, socklen_t *len)
{
    struct sockaddr_un a;
    memset(&a, 0, sizeof(a));
    a.sun_family = AF_UNIX;
    p2pt__share_socket_name(pid, name, a.sun_path + 1, sizeof(a.sun_path) - 1);
    *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(a.sun_path + 1));
    return a;
}

/* A socket at the name of `pid`'s server `name` that listens and never
 * accepts: connects succeed, answers never come. */
static int silent_server(uint32_t pid, uint64_t name)
{
    socklen_t len;
    struct sockaddr_un a = server_address(pid, name, &len);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert(fd >= 0);
    cr_assert_eq(bind(fd, (struct sockaddr *)&a, len), 0, "bind: %s", strerror(errno));
    cr_assert_eq(listen(fd, 8), 0);
    return fd;
}

Test(share_fd, a_server_that_never_answers_times_out_with_status_2)
{
    p2pt__share_set_timeout_ms(300);
    uint64_t name = 0x51e7;
    int s = silent_server((uint32_t)getpid(), name);
    uint8_t token[P2PT_SHARE_TOKEN_BYTES] = {1};
    int fd = -1;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    cr_assert_eq(p2pt__share_fetch((uint32_t)getpid(), name, token, 1, &fd), P2PT_SYSTEM_ERROR);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    st_expect_text("timed out after 300 ms waiting for the descriptor of piece 0");
    double s_taken = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
    cr_expect(s_taken < 5.0, "the fetch took %.1f s with a 300 ms timeout", s_taken);
    close(s);
}

Test(share_fd, a_name_served_by_another_process_is_refused_with_status_2)
{
    /* A child listens at the name of this process's server: the client
     * asks the kernel who serves it and refuses what it would get. */
    int up[2], down[2];
    cr_assert_eq(pipe(up), 0);
    cr_assert_eq(pipe(down), 0);
    uint32_t me = (uint32_t)getpid();
    uint64_t name = 0xbad;
    pid_t p = fork();
    cr_assert(p >= 0);
    if (p == 0) {
        close(up[0]);
        close(down[1]);
        socklen_t len;
        struct sockaddr_un a = server_address(me, name, &len);
        int fd = socket(AF_UNIX, SOCK_STREAM, 0);
        if (fd < 0 || bind(fd, (struct sockaddr *)&a, len) != 0 || listen(fd, 8) != 0)
            _exit(3);
        if (write(up[1], "k", 1) != 1)
            _exit(4);
        char c;
        while (read(down[0], &c, 1) > 0)
            ;
        _exit(0);
    }
    close(up[1]);
    close(down[0]);
    char c;
    cr_assert_eq(read(up[0], &c, 1), 1, "the child did not listen");
    uint8_t token[P2PT_SHARE_TOKEN_BYTES] = {2};
    int fd = -1;
    cr_assert_eq(p2pt__share_fetch(me, name, token, 1, &fd), P2PT_SYSTEM_ERROR);
    st_expect_text("not by the exporter the blobs name");
    cr_expect_eq(fd, -1);
    close(down[1]);
    close(up[0]);
    waitpid(p, NULL, 0);
}

Test(share_fd, the_library_has_no_pidfd_symbol)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "nm -D '%s' | grep -c pidfd", P2PT_SO_PATH);
    FILE *f = popen(cmd, "r");
    cr_assert_not_null(f);
    char out[64] = "";
    cr_assert_not_null(fgets(out, sizeof(out), f));
    pclose(f);
    cr_expect_eq(atoi(out), 0, "libp2pt.so refers to pidfd_* (%s times)", out);
}

static double cpu_seconds(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
           (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

/* A process out of descriptors: the server cannot accept a connection
 * that waits, and poll reports it at once each time. It naps between
 * tries rather than spin a core, and serves again once a descriptor
 * frees. */
Test(share_fd, a_server_out_of_descriptors_naps_and_serves_again_once_one_frees)
{
    struct p2pt_share_server *s = NULL;
    uint64_t name;
    uint8_t token[P2PT_SHARE_TOKEN_BYTES] = {7};
    cr_assert_eq(p2pt__share_server_start(&s, &name), P2PT_SUCCESS, "%s", p2pt__last_error_text());
    int fd = memfd_create("share-test", MFD_CLOEXEC);
    cr_assert(fd >= 0);
    cr_assert_eq(p2pt__share_server_add(s, token, &fd, 1), P2PT_SUCCESS);
    socklen_t len;
    struct sockaddr_un a = server_address((uint32_t)getpid(), name, &len);
    int c = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert(c >= 0);
    /* No descriptor left from here: the lowest free one is the limit. */
    int probe = dup(0);
    cr_assert(probe >= 0);
    close(probe);
    struct rlimit was, none = {(rlim_t)probe, 0};
    cr_assert_eq(getrlimit(RLIMIT_NOFILE, &was), 0);
    none.rlim_max = was.rlim_max;
    cr_assert_eq(setrlimit(RLIMIT_NOFILE, &none), 0, "%s", strerror(errno));
    cr_assert_eq(connect(c, (struct sockaddr *)&a, len), 0, "%s", strerror(errno));
    double cpu0 = cpu_seconds();
    struct timespec nap = {0, 400 * 1000 * 1000};
    nanosleep(&nap, NULL);
    double cpu = cpu_seconds() - cpu0;
    cr_assert_eq(setrlimit(RLIMIT_NOFILE, &was), 0);
    close(c);
    cr_expect(cpu < 0.2, "the server thread used %.3f s of CPU in 0.4 s waiting for a descriptor",
              cpu);
    int got = -1;
    cr_assert_eq(p2pt__share_fetch((uint32_t)getpid(), name, token, 1, &got), P2PT_SUCCESS, "%s",
                 p2pt__last_error_text());
    close(got);
    p2pt__share_server_stop(s);
}

Test(share_fd, a_forked_child_that_ends_its_copy_leaves_the_parents_server_serving)
{
    /* A framework's worker processes fork from a rank that exports: their
     * copy of the handle has no server thread, and finalizing it must not
     * stop the parent's. */
    struct p2pt_share_server *s = NULL;
    uint64_t name;
    uint8_t token[P2PT_SHARE_TOKEN_BYTES] = {9};
    cr_assert_eq(p2pt__share_server_start(&s, &name), P2PT_SUCCESS, "%s", p2pt__last_error_text());
    int fd = memfd_create("share-test", MFD_CLOEXEC);
    cr_assert(fd >= 0);
    cr_assert_eq(p2pt__share_server_add(s, token, &fd, 1), P2PT_SUCCESS);
    pid_t p = fork();
    cr_assert(p >= 0);
    if (p == 0) {
        p2pt__share_server_stop(s);
        _exit(0);
    }
    int status = 0;
    cr_assert_eq(waitpid(p, &status, 0), p);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    int got = -1;
    cr_assert_eq(p2pt__share_fetch((uint32_t)getpid(), name, token, 1, &got), P2PT_SUCCESS,
                 "the parent's server stopped with the child's copy: %s", p2pt__last_error_text());
    close(got);
    p2pt__share_server_stop(s);
}
