/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Memory shared between real processes on GPUs: each test starts N ranks
 * of tests/ranks/p2pt-ranks (N = 2, and 4 where that many GPUs are
 * visible; rank r uses GPU r), is their bootstrap (an all-gather of blobs
 * over a socket per rank), and fails with a rank's message and its stderr
 * when a rank fails, dies, or does not answer in time: never a hang. Every
 * rank runs with NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and
 * NVSHMEM_DISABLE_NVLS=1. p2pt-ranks.c says what each scenario proves: put
 * and get between every pair through ce, tma and auto for cuMemAlloc, VMM
 * (one allocation, three side by side) and pool memory, every byte checked
 * with guards; bad blobs through real imports; a VMM import outliving its
 * exporter; a close waiting for a batch queued behind a gate; the
 * descriptor hand-off to a non-dumpable exporter (not pidfd_getfd); two
 * ranks signalling each other through semaphores in each other's memory,
 * 1,000 rounds and 200 graph replays of changing data. Suite ranks_one_gpu
 * runs every scenario with the ranks on GPU 0 (each its own process and
 * context), so that one GPU checks them too.
 * Without GPUs each test skips with the reason. The same ranks also run
 * over the fake driver (suite ranks_fake, any machine) with the copy
 * engine, whose copies it makes with memcpy: the bootstrap, the scenarios
 * and their checks, across real processes, minus the kernels.
 */
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "share_test.h"

#define MAX_RANKS 8
/* The most a rank may take to send its next message: NVRTC compiles and
 * 64 MiB checks included. */
#define ROUND_S 120

struct rank_proc {
    pid_t pid;
    int sock;
    char err[256];
    bool done;    /* reported */
    bool sent;    /* sent this round */
    char type;
    uint32_t len;
    unsigned char *data;
};

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec / 1e9;
}

/* The last lines of a rank's stderr, for a failure's message. */
static void tail_of(const char *path, char *out, size_t len)
{
    FILE *f = fopen(path, "r");
    out[0] = '\0';
    if (f == NULL)
        return;
    static char all[1 << 16];
    size_t n = fread(all, 1, sizeof(all) - 1, f);
    fclose(f);
    all[n] = '\0';
    size_t keep = n > len - 1 ? len - 1 : n;
    memcpy(out, all + n - keep, keep);
    out[keep] = '\0';
}

/* Kill what still runs, reap everything, remove the stderr files. */
static void reap(struct rank_proc *r, int n)
{
    for (int k = 0; k < n; k++) {
        if (r[k].pid > 0) {
            kill(r[k].pid, SIGKILL);
            waitpid(r[k].pid, NULL, 0);
            r[k].pid = 0;
        }
        if (r[k].sock >= 0)
            close(r[k].sock);
        r[k].sock = -1;
        free(r[k].data);
        r[k].data = NULL;
        unlink(r[k].err);
    }
}

/* Wait up to `secs` for `pid` to exit; its status, or -1. */
static int wait_exit(pid_t pid, double secs)
{
    double end = now_s() + secs;
    int status = 0;
    while (now_s() < end) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid)
            return status;
        usleep(10000);
    }
    return -1;
}

#define RANK_FAIL(fmt, ...)                                                    \
    do {                                                                       \
        snprintf(why, sizeof(why), fmt, __VA_ARGS__);                          \
        goto failed;                                                           \
    } while (0)

/* Run `scenario` on `n` ranks spread over `gpus` GPUs (rank r on GPU
 * r % gpus) with P2P_TRANSPORT=`transport`, each allowed `round_s` seconds
 * per message: true when every rank reported ok, else false with what
 * failed and the failing rank's stderr in why[]. */
static bool ranks_ok(const char *scenario, int n, int gpus, const char *transport, int round_s,
                     char *out, size_t out_len)
{
    struct rank_proc r[MAX_RANKS];
    char why[4096] = "", tail[2048];
    int failing = -1;
    memset(r, 0, sizeof(r));
    for (int k = 0; k < n; k++) {
        int sv[2];
        r[k].sock = -1;
        snprintf(r[k].err, sizeof(r[k].err), "/tmp/p2pt-ranks-%d-%s-%d.err", (int)getpid(),
                 scenario, k);
        cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        /* Only the rank's own end crosses its exec. */
        fcntl(sv[1], F_SETFD, 0);
        fflush(NULL);
        r[k].pid = fork();
        cr_assert(r[k].pid >= 0);
        if (r[k].pid == 0) {
            for (int j = 0; j < k; j++)
                close(r[j].sock);
            close(sv[0]);
            FILE *e = freopen(r[k].err, "w", stderr);
            if (e == NULL)
                _exit(126);
            setenv("NCCL_NVLS_ENABLE", "0", 1);
            setenv("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1", 1);
            setenv("NVSHMEM_DISABLE_NVLS", "1", 1);
            setenv("P2P_TRANSPORT", transport, 1);
            char rk[16], nr[16], fd[16], ng[16];
            snprintf(rk, sizeof(rk), "%d", k);
            snprintf(nr, sizeof(nr), "%d", n);
            snprintf(fd, sizeof(fd), "%d", sv[1]);
            snprintf(ng, sizeof(ng), "%d", gpus);
            execl(P2PT_RANKS_PATH, "p2pt-ranks", scenario, rk, nr, fd, ng, (char *)NULL);
            fprintf(stderr, "cannot run %s\n", P2PT_RANKS_PATH);
            _exit(127);
        }
        close(sv[1]);
        r[k].sock = sv[0];
    }
    for (;;) {
        int live = 0;
        for (int k = 0; k < n; k++) {
            r[k].sent = false;
            live += !r[k].done;
        }
        if (live == 0)
            break;
        /* One message from every rank still running. */
        double end = now_s() + round_s;
        for (;;) {
            int waiting = 0;
            struct pollfd p[MAX_RANKS];
            int who[MAX_RANKS];
            for (int k = 0; k < n; k++)
                if (!r[k].done && !r[k].sent) {
                    p[waiting].fd = r[k].sock;
                    p[waiting].events = POLLIN;
                    who[waiting++] = k;
                }
            if (waiting == 0)
                break;
            int left = (int)((end - now_s()) * 1000);
            if (left <= 0) {
                failing = who[0];
                RANK_FAIL("rank %d sent nothing for %d s (%s on %d ranks, %s)", who[0], round_s,
                          scenario, n, transport);
            }
            if (poll(p, (nfds_t)waiting, left) <= 0)
                continue;
            for (int i = 0; i < waiting; i++) {
                if (p[i].revents == 0)
                    continue;
                struct rank_proc *q = &r[who[i]];
                char head[5];
                if (!st_read(q->sock, head, 5)) {
                    int st = wait_exit(q->pid, 5);
                    q->pid = st >= 0 ? 0 : q->pid;
                    failing = who[i];
                    RANK_FAIL("rank %d ended before reporting (%s %d)", who[i],
                              st >= 0 && WIFSIGNALED(st) ? "signal" : "exit status",
                              st < 0 ? -1 : WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
                }
                q->type = head[0];
                memcpy(&q->len, head + 1, 4);
                free(q->data);
                q->data = malloc(q->len + 1);
                cr_assert_not_null(q->data);
                if (q->len > 0 && !st_read(q->sock, q->data, q->len)) {
                    failing = who[i];
                    RANK_FAIL("rank %d's message was cut short", who[i]);
                }
                q->data[q->len] = '\0';
                q->sent = true;
                if (q->type == 'R') {
                    if (strcmp((char *)q->data, "ok") != 0) {
                        failing = who[i];
                        RANK_FAIL("%s", (char *)q->data);
                    }
                    /* Reaped before the others go on: a scenario may need the
                     * process gone. */
                    int st = wait_exit(q->pid, 60);
                    if (st < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                        failing = who[i];
                        RANK_FAIL("rank %d reported ok but did not exit cleanly (%d)", who[i],
                                  st);
                    }
                    q->pid = 0;
                    q->done = true;
                } else if (q->type != 'G') {
                    failing = who[i];
                    RANK_FAIL("rank %d sent a message of type %d", who[i], q->type);
                }
            }
        }
        /* Answer the gathers: every contribution in rank order. */
        for (int k = 0; k < n; k++) {
            if (r[k].done || r[k].type != 'G')
                continue;
            char t = 'G';
            bool ok = write(r[k].sock, &t, 1) == 1;
            for (int j = 0; j < n && ok; j++) {
                uint32_t len = r[j].sent && r[j].type == 'G' ? r[j].len : 0;
                ok = write(r[k].sock, &len, 4) == 4 &&
                     (len == 0 || write(r[k].sock, r[j].data, len) == (ssize_t)len);
            }
            if (!ok) {
                failing = k;
                RANK_FAIL("cannot answer rank %d", k);
            }
        }
    }
    reap(r, n);
    return true;
failed:
    tail_of(r[failing].err, tail, sizeof(tail));
    reap(r, n);
    snprintf(out, out_len, "%s\n--- rank %d's stderr (end):\n%s", why, failing, tail);
    return false;
}

static void run_ranks_on(const char *scenario, int n, int gpus, const char *transport)
{
    static char why[8192];
    if (!ranks_ok(scenario, n, gpus, transport, ROUND_S, why, sizeof(why)))
        cr_assert_fail("%s", why);
}

/* A rank a GPU. */
static void run_ranks(const char *scenario, int n, const char *transport)
{
    run_ranks_on(scenario, n, n, transport);
}

/* The ranks to run: 2, or 4 where 4 GPUs are visible; every pair must
 * reach each other. */
static int ranks_here(void)
{
    gt_require_gpus(2);
    int count = 0;
    GT_CHECK(tcu.cuDeviceGetCount(&count));
    int n = count >= 4 ? 4 : 2;
    for (int a = 0; a < n; a++)
        for (int b = 0; b < n; b++) {
            CUdevice da, db;
            int can = 1;
            GT_CHECK(tcu.cuDeviceGet(&da, a));
            GT_CHECK(tcu.cuDeviceGet(&db, b));
            if (a != b)
                GT_CHECK(tcu.cuDeviceCanAccessPeer(&can, da, db));
            if (!can)
                cr_skip_test("needs GPUs that reach each other: GPU %d cannot access GPU %d", a,
                             b);
        }
    return n;
}

static void put_get_everywhere(const char *kind)
{
    int n = ranks_here();
    static const char *const transports[] = {"ce", "tma", "auto"};
    for (size_t t = 0; t < 3; t++)
        run_ranks(kind, n, transports[t]);
}

Test(ranks, cuMemAlloc_memory_at_an_offset_in_its_segment_put_and_got_by_every_peer)
{
    put_get_everywhere("legacy");
}

Test(ranks, one_vmm_allocation_put_and_got_by_every_peer) { put_get_everywhere("vmm1"); }

Test(ranks, vmm_allocations_side_by_side_put_and_got_by_every_peer) { put_get_everywhere("vmm3"); }

Test(ranks, pool_memory_put_and_got_by_every_peer) { put_get_everywhere("pool"); }

Test(ranks, every_bad_blob_is_refused_by_a_real_import_that_maps_nothing)
{
    run_ranks("bad_blobs", ranks_here(), "auto");
}

Test(ranks, a_vmm_import_keeps_the_memory_after_the_exporter_exits)
{
    (void)ranks_here();
    run_ranks("exporter_exits", 2, "auto");
}

Test(ranks, a_close_waits_for_a_batch_queued_behind_a_gate)
{
    (void)ranks_here();
    run_ranks("close_waits", 2, "tma");
    run_ranks("close_waits", 2, "ce");
}

Test(ranks, vmm_descriptors_reach_a_non_dumpable_exporter_s_peers_without_pidfd_getfd)
{
    (void)ranks_here();
    run_ranks("handoff", 2, "auto");
}

Test(ranks, semaphores_in_each_other_s_memory_order_a_thousand_rounds_and_graph_replays)
{
    (void)ranks_here();
    run_ranks("signals", 2, "tma");
    run_ranks("signals", 2, "auto");
}

/* ------------------------------------------- processes sharing one GPU */

/* Every scenario again with every rank on GPU 0, each its own process and
 * context: what a machine of one GPU can check of sharing between
 * processes. Imports are then local memory (explain says "local", no
 * link's grid); CUDA IPC, VMM descriptors, pool imports, the signals and
 * the closes are the same calls as between GPUs. */
#define SHARED_RANKS 3

static void put_get_on_one_gpu(const char *kind)
{
    gt_require_gpus(1);
    static const char *const transports[] = {"ce", "tma", "auto"};
    for (size_t t = 0; t < 3; t++)
        run_ranks_on(kind, SHARED_RANKS, 1, transports[t]);
}

Test(ranks_one_gpu, cuMemAlloc_memory_at_an_offset_put_and_got_by_processes_on_its_gpu)
{
    put_get_on_one_gpu("legacy");
}

Test(ranks_one_gpu, one_vmm_allocation_put_and_got_by_processes_on_its_gpu)
{
    put_get_on_one_gpu("vmm1");
}

Test(ranks_one_gpu, vmm_allocations_side_by_side_put_and_got_by_processes_on_its_gpu)
{
    put_get_on_one_gpu("vmm3");
}

Test(ranks_one_gpu, pool_memory_put_and_got_by_processes_on_its_gpu) { put_get_on_one_gpu("pool"); }

Test(ranks_one_gpu, bad_blobs_an_exporter_that_exits_a_waiting_close_and_the_handoff)
{
    gt_require_gpus(1);
    run_ranks_on("bad_blobs", SHARED_RANKS, 1, "auto");
    run_ranks_on("exporter_exits", 2, 1, "auto");
    run_ranks_on("close_waits", 2, 1, "tma");
    run_ranks_on("close_waits", 2, 1, "ce");
    run_ranks_on("handoff", 2, 1, "auto");
}

Test(ranks_one_gpu, semaphores_in_each_other_s_memory_order_a_thousand_rounds_and_graph_replays)
{
    gt_require_gpus(1);
    run_ranks_on("signals", 2, 1, "tma");
    run_ranks_on("signals", 2, 1, "auto");
}

/* ------------------------------------------------ over the fake driver */

Test(ranks_fake, every_kind_of_memory_put_and_got_between_two_processes)
{
    gt_use_fake_driver();
    static const char *const kinds[] = {"legacy", "vmm1", "vmm3", "pool"};
    for (size_t k = 0; k < P2PT_ARRAY_LEN(kinds); k++) {
        run_ranks(kinds[k], 2, "ce");
        run_ranks_on(kinds[k], 3, 1, "ce"); /* every rank on GPU 0 */
    }
}

Test(ranks_fake, bad_blobs_an_exporter_that_exits_and_the_handoff)
{
    gt_use_fake_driver();
    run_ranks("bad_blobs", 2, "ce");
    run_ranks("exporter_exits", 2, "ce");
    run_ranks("handoff", 2, "ce");
}

Test(ranks_fake, a_rank_that_fails_or_stalls_ends_the_run_with_its_message)
{
    /* The harness itself: a rank that reports a failure, or sends nothing
     * in time, ends the run with its message and stderr; the others are
     * killed, not waited for. */
    gt_use_fake_driver();
    char why[8192];
    cr_assert_not(ranks_ok("no-such-scenario", 2, 2, "ce", 30, why, sizeof(why)));
    cr_expect(strstr(why, "no scenario \"no-such-scenario\"") != NULL, "%s", why);
    double t0 = now_s();
    cr_assert_not(ranks_ok("stall", 2, 2, "ce", 2, why, sizeof(why)));
    cr_expect(strstr(why, "sent nothing for 2 s") != NULL, "%s", why);
    cr_expect(now_s() - t0 < 30, "the stalled run took %.0f s", now_s() - t0);
}
