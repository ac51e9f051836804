/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Scattered rows across NVLink: the batch kernel (kernels/batch_copy.cu,
 * included as it is, so run.sh can build it with other -D settings)
 * against a plain warp-per-row kernel and one contiguous copy-engine copy
 * of the same bytes, on two GPUs, in one process:
 *
 *   push   GPU 0's kernel reads its own rows and writes them to GPU 1
 *   pull   GPU 0's kernel reads GPU 1's rows and writes them to itself
 *   both   GPU 0 pushes to GPU 1 and GPU 1 to GPU 0 at once (an
 *          alltoall of two), timed from a common start to the later end
 *
 * Each GPU holds `rows` rows of `bytes` bytes and sends `rows / 2` of them,
 * picked at random (four sets of picks, rotated), to a packed buffer on
 * the other GPU. Every kernel reads the same device descriptors. Times are
 * CUDA events around 20 back-to-back batches, the median of 9 rounds; the
 * contiguous copy (cudaMemcpyAsync of rows / 2 * bytes on the same
 * stream) is timed in the same run. Every 97th row of set 0 is checked
 * against its source after a run into a poisoned buffer. One line per
 * case:
 *   peer dir= bytes= way= ctas= threads= us= gbps= vs_ce= check=
 *
 *   peer_batch            every case
 *   peer_batch ncu BYTES  one push batch of each kernel, for ncu
 *   peer_batch split      one 512 MiB copy split between the copy engine and
 *                         the kernel (split_case)
 */
#include "../../kernels/batch_copy.cu"
#include "check.cuh"
#include "plain_rows.cuh"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#ifndef VARIANT
#define VARIANT "default"
#endif

struct gpu {
    int dev;
    char *pool = nullptr, *recv = nullptr; /* rows here; what the peer sends here */
    p2pt_batch_desc *descs = nullptr;     /* 4 sets, this GPU's kernel's */
    unsigned *count = nullptr;
    void *ws = nullptr;
    cudaStream_t s;
    cudaEvent_t e0, e1, done;
    std::vector<p2pt_batch_desc> h;
};

static const int SETS = 4;
static size_t ROWS = 16384;

static void layout(gpu &g, gpu &other, size_t bytes, bool push)
{
    /* push: g's kernel reads g's rows, writes other's recv; pull: reads
     * other's rows, writes g's recv. */
    const size_t n = ROWS / 2;
    char *from = push ? g.pool : other.pool, *to = push ? other.recv : g.recv;
    g.h.resize(SETS * n);
    srand(11 + g.dev + 3 * push);
    for (int k = 0; k < SETS; k++) {
        std::vector<size_t> pick(ROWS);
        for (size_t i = 0; i < ROWS; i++)
            pick[i] = i;
        for (size_t i = ROWS; i > 1; i--)
            std::swap(pick[i - 1], pick[rand() % i]);
        for (size_t i = 0; i < n; i++)
            g.h[k * n + i] = {(unsigned long long)(to + i * bytes),
                              (unsigned long long)(from + pick[i] * bytes),
                              (unsigned long long)bytes};
    }
    CK(cudaSetDevice(g.dev));
    CK(cudaMemcpy(g.descs, g.h.data(), g.h.size() * sizeof(g.h[0]), cudaMemcpyHostToDevice));
    unsigned c = (unsigned)n;
    CK(cudaMemcpy(g.count, &c, 4, cudaMemcpyHostToDevice));
}

static p2pt_batch_dev_params params(const gpu &g, const gpu &other, int set, size_t bytes)
{
    p2pt_batch_dev_params p;
    memset(&p, 0, sizeof(p));
    p.descs = (unsigned long long)(g.descs + (size_t)set * (ROWS / 2));
    p.count = (unsigned long long)g.count;
    p.workspace = (unsigned long long)g.ws;
    p.max_count = (unsigned)(ROWS / 2);
    p.n_windows = 4;
    const size_t pool = ROWS * bytes, recv = ROWS / 2 * bytes;
    p.window[0] = {(unsigned long long)g.pool, (unsigned long long)(g.pool + pool)};
    p.window[1] = {(unsigned long long)g.recv, (unsigned long long)(g.recv + recv)};
    p.window[2] = {(unsigned long long)other.pool, (unsigned long long)(other.pool + pool)};
    p.window[3] = {(unsigned long long)other.recv, (unsigned long long)(other.recv + recv)};
    std::sort(p.window, p.window + 4,
              [](const p2pt_batch_window &a, const p2pt_batch_window &b) { return a.base < b.base; });
    return p;
}

struct way {
    std::string name;
    int ctas, threads; /* 0 ctas: the copy engine */
    int unroll;
};

static void launch(const way &w, gpu &g, gpu &other, int set, size_t bytes, bool push)
{
    CK(cudaSetDevice(g.dev));
    if (w.ctas == 0) {
        const size_t n = ROWS / 2 * bytes;
        char *to = push ? other.recv : g.recv;
        char *from = push ? g.pool + (size_t)set * (ROWS / 8) * bytes
                          : other.pool + (size_t)set * (ROWS / 8) * bytes;
        CK(cudaMemcpyAsync(to, from, n, cudaMemcpyDefault, g.s));
        return;
    }
    if (w.name == "batch") {
        p2pt_batch_dev_params p = params(g, other, set, bytes);
        p2pt_batch_copy_dev<<<w.ctas + 1, P2PT_BATCH_THREADS, 0, g.s>>>(p);
    } else if (w.unroll == 1) {
        plain_rows<1><<<w.ctas, w.threads, 0, g.s>>>(g.descs + (size_t)set * (ROWS / 2), g.count);
    } else if (w.unroll == 4) {
        plain_rows<4><<<w.ctas, w.threads, 0, g.s>>>(g.descs + (size_t)set * (ROWS / 2), g.count);
    } else {
        plain_rows<8><<<w.ctas, w.threads, 0, g.s>>>(g.descs + (size_t)set * (ROWS / 2), g.count);
    }
    CK(cudaGetLastError());
}

/* The rows set 0 must have delivered, compared with their sources. */
static bool check(gpu &g, gpu &other, size_t bytes, bool push)
{
    const size_t n = ROWS / 2;
    char *to = push ? other.recv : g.recv;
    std::vector<unsigned char> got(bytes), want(bytes);
    for (size_t i = 0; i < n; i += 97) {
        CK(cudaMemcpy(got.data(), to + i * bytes, bytes, cudaMemcpyDefault));
        CK(cudaMemcpy(want.data(), (void *)g.h[i].src, bytes, cudaMemcpyDefault));
        if (memcmp(got.data(), want.data(), bytes) != 0)
            return false;
    }
    return true;
}

/* The median over 9 rounds of 20 back-to-back launches of `w`, in us a
 * launch: from GPU 0's start to the later GPU's end for dir 2. */
static float time_rounds(const way &w, gpu &a, gpu &b, size_t bytes, int dir)
{
    const bool push = dir != 1;
    const int per = 20, reps = 9;
    std::vector<float> t;
    for (int r = 0; r < reps + 1; r++) {
        CK(cudaSetDevice(a.dev));
        CK(cudaEventRecord(a.e0, a.s));
        if (dir == 2) {
            CK(cudaSetDevice(b.dev));
            CK(cudaStreamWaitEvent(b.s, a.e0, 0));
        }
        for (int i = 0; i < per; i++) {
            launch(w, a, b, (r * per + i) % SETS, bytes, push);
            if (dir == 2)
                launch(w, b, a, (r * per + i) % SETS, bytes, true);
        }
        if (dir == 2) {
            CK(cudaSetDevice(b.dev));
            CK(cudaEventRecord(b.done, b.s));
            CK(cudaSetDevice(a.dev));
            CK(cudaStreamWaitEvent(a.s, b.done, 0));
        }
        CK(cudaSetDevice(a.dev));
        CK(cudaEventRecord(a.e1, a.s));
        CK(cudaEventSynchronize(a.e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, a.e0, a.e1));
        if (r)
            t.push_back(ms * 1000 / per);
    }
    std::sort(t.begin(), t.end());
    return t[reps / 2];
}

/* dir 0 push, 1 pull, 2 both (g pushes to other and other to g). */
static void run_case(const way &w, gpu &a, gpu &b, size_t bytes, int dir, float ce_us)
{
    const bool push = dir != 1;
    /* Correctness on poisoned destinations first. */
    CK(cudaSetDevice(a.dev));
    CK(cudaMemset(push ? b.recv : a.recv, 0xA5, ROWS / 2 * bytes));
    if (dir == 2) {
        CK(cudaSetDevice(b.dev));
        CK(cudaMemset(a.recv, 0xA5, ROWS / 2 * bytes));
    }
    CK(cudaDeviceSynchronize());
    launch(w, a, b, 0, bytes, push);
    if (dir == 2)
        launch(w, b, a, 0, bytes, true);
    CK(cudaSetDevice(a.dev));
    CK(cudaStreamSynchronize(a.s));
    CK(cudaSetDevice(b.dev));
    CK(cudaStreamSynchronize(b.s));
    bool ok = w.ctas == 0 || (check(a, b, bytes, push) && (dir != 2 || check(b, a, bytes, true)));
    const float us = time_rounds(w, a, b, bytes, dir);
    const double sent = (double)(ROWS / 2) * bytes; /* per GPU */
    static const char *dirs[] = {"push", "pull", "both"};
    printf("peer variant=%s dir=%s bytes=%zu way=%s ctas=%d threads=%d unroll=%d us=%.1f "
           "gbps=%.1f vs_ce=%.3f check=%s\n",
           VARIANT, dirs[dir], bytes, w.name.c_str(), w.ctas, w.threads, w.unroll, us,
           sent / us / 1e3, ce_us > 0 ? ce_us / us : 1.0, ok ? "ok" : "FAILED");
    fflush(stdout);
}

static float ce_time(gpu &a, gpu &b, size_t bytes, int dir)
{
    return time_rounds({"ce_contig", 0, 0, 0}, a, b, bytes, dir);
}

static void setup(gpu &g, size_t max_bytes)
{
    CK(cudaSetDevice(g.dev));
    CK(cudaMalloc(&g.pool, ROWS * max_bytes));
    CK(cudaMalloc(&g.recv, ROWS / 2 * max_bytes));
    CK(cudaMalloc(&g.descs, SETS * (ROWS / 2) * sizeof(p2pt_batch_desc)));
    CK(cudaMalloc(&g.count, 4));
    CK(cudaMalloc(&g.ws, 64));
    CK(cudaStreamCreateWithFlags(&g.s, cudaStreamNonBlocking));
    CK(cudaEventCreate(&g.e0));
    CK(cudaEventCreate(&g.e1));
    CK(cudaEventCreateWithFlags(&g.done, cudaEventDisableTiming));
    /* Random bytes, different on each GPU. */
    std::vector<unsigned> h(ROWS * max_bytes / 4 / 64);
    for (size_t i = 0; i < h.size(); i++)
        h[i] = (unsigned)(i * 2654435761u) ^ (unsigned)(g.dev * 0x9e3779b9u) ^ (unsigned)rand();
    for (size_t off = 0; off < ROWS * max_bytes; off += h.size() * 4)
        CK(cudaMemcpy(g.pool + off, h.data(), h.size() * 4, cudaMemcpyHostToDevice));
}

/*
 * One large copy split between the copy engine and the batch kernel at
 * once (the kernel's share as 64 KiB pieces on the stream, the copy
 * engine's on a second stream forked from it by an event and joined back):
 * whether the two engines together move more across NVLink than the copy
 * engine alone. dir 0 push, 1 pull, 2 bidir (each GPU pushes its half).
 */
static void split_case(gpu &a, gpu &b, size_t total, int dir, double ce_share, int ctas,
                       cudaStream_t *side)
{
    const size_t piece = 65536;
    const size_t ce_bytes = (size_t)(total * ce_share) / piece * piece;
    const size_t k_pieces = (total - ce_bytes) / piece;
    gpu *gs[2] = {&a, &b};
    const int n_gpus = dir == 2 ? 2 : 1;
    for (int k = 0; k < n_gpus; k++) {
        gpu &g = *gs[k], &o = *gs[1 - k];
        const bool push = dir != 1;
        char *to = push ? o.recv : g.recv, *from = push ? g.pool : o.pool;
        std::vector<p2pt_batch_desc> d(k_pieces);
        for (size_t i = 0; i < k_pieces; i++)
            d[i] = {(unsigned long long)(to + ce_bytes + i * piece),
                    (unsigned long long)(from + ce_bytes + i * piece), piece};
        CK(cudaSetDevice(g.dev));
        if (k_pieces)
            CK(cudaMemcpy(g.descs, d.data(), d.size() * sizeof(d[0]), cudaMemcpyHostToDevice));
        unsigned c = (unsigned)k_pieces;
        CK(cudaMemcpy(g.count, &c, 4, cudaMemcpyHostToDevice));
    }
    const int per = 10, reps = 7;
    std::vector<float> t;
    for (int r = 0; r < reps + 1; r++) {
        CK(cudaSetDevice(a.dev));
        CK(cudaEventRecord(a.e0, a.s));
        if (dir == 2) {
            CK(cudaSetDevice(b.dev));
            CK(cudaStreamWaitEvent(b.s, a.e0, 0));
        }
        for (int i = 0; i < per; i++)
            for (int k = 0; k < n_gpus; k++) {
                gpu &g = *gs[k], &o = *gs[1 - k];
                const bool push = dir != 1;
                char *to = push ? o.recv : g.recv, *from = push ? g.pool : o.pool;
                CK(cudaSetDevice(g.dev));
                if (ce_bytes) {
                    CK(cudaEventRecord(g.done, g.s));
                    CK(cudaStreamWaitEvent(side[k], g.done, 0));
                    CK(cudaMemcpyAsync(to, from, ce_bytes, cudaMemcpyDefault, side[k]));
                }
                if (k_pieces) {
                    p2pt_batch_dev_params p = params(g, o, 0, piece);
                    p.descs = (unsigned long long)g.descs;
                    p.max_count = (unsigned)k_pieces;
                    p2pt_batch_copy_dev<<<ctas + 1, P2PT_BATCH_THREADS, 0, g.s>>>(p);
                    CK(cudaGetLastError());
                }
                if (ce_bytes) {
                    CK(cudaEventRecord(g.done, side[k]));
                    CK(cudaStreamWaitEvent(g.s, g.done, 0));
                }
            }
        if (dir == 2) {
            CK(cudaSetDevice(b.dev));
            CK(cudaEventRecord(b.done, b.s));
            CK(cudaSetDevice(a.dev));
            CK(cudaStreamWaitEvent(a.s, b.done, 0));
        }
        CK(cudaSetDevice(a.dev));
        CK(cudaEventRecord(a.e1, a.s));
        CK(cudaEventSynchronize(a.e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, a.e0, a.e1));
        if (r)
            t.push_back(ms * 1000 / per);
    }
    std::sort(t.begin(), t.end());
    static const char *dirs[] = {"push", "pull", "bidir"};
    const float us = t[reps / 2];
    printf("split dir=%s bytes=%zu ce_share=%.2f ctas=%d us=%.1f gbps=%.1f\n", dirs[dir], total,
           ce_share, ctas, us, (double)total * n_gpus / us / 1e3);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    int n = 0;
    CK(cudaGetDeviceCount(&n));
    if (n < 2) {
        printf("peer_batch: needs 2 GPUs, found %d\n", n);
        return 1;
    }
    const bool ncu = argc > 1 && strcmp(argv[1], "ncu") == 0;
    const bool split = argc > 1 && strcmp(argv[1], "split") == 0;
    std::vector<size_t> sizes = {4096, 14336, 65536};
    if (ncu)
        sizes = {argc > 2 ? (size_t)atol(argv[2]) : 14336};
    gpu a, b;
    a.dev = 0;
    b.dev = 1;
    for (gpu *g : {&a, &b}) {
        CK(cudaSetDevice(g->dev));
        CK(cudaDeviceEnablePeerAccess(1 - g->dev, 0));
    }
    const size_t max_bytes = *std::max_element(sizes.begin(), sizes.end());
    setup(a, max_bytes);
    setup(b, max_bytes);
    if (split) {
        cudaStream_t side[2];
        for (gpu *g : {&a, &b}) {
            CK(cudaSetDevice(g->dev));
            CK(cudaStreamCreateWithFlags(&side[g->dev], cudaStreamNonBlocking));
        }
        /* The whole receive buffer: rows / 2 of 64 KiB rows, 512 MiB. */
        const size_t total = ROWS / 2 * max_bytes;
        for (int dir = 0; dir < 3; dir++)
            for (double f : {1.0, 0.0, 0.5, 0.6, 0.7, 0.8})
                for (int c : {32, 132}) {
                    if (f == 1.0 && c != 32)
                        continue;
                    split_case(a, b, total, dir, f, c, side);
                }
        return 0;
    }
    if (ncu) {
        layout(a, b, sizes[0], true);
        way ws[] = {{"batch", 264, 256, 0}, {"batch", 32, 256, 0}, {"plain", 32, 512, 1},
                    {"plain", 32, 512, 4}};
        for (const way &w : ws) {
            launch(w, a, b, 0, sizes[0], true);
            CK(cudaStreamSynchronize(a.s));
        }
        printf("peer_batch: ncu launches done\n");
        return 0;
    }
    std::vector<way> ways;
    for (int c : {16, 32, 132, 264})
        ways.push_back({"batch", c, 256, 0});
    for (int c : {16, 32, 132})
        for (int u : {1, 4})
            ways.push_back({"plain", c, 512, u});
    ways.push_back({"plain", 32, 256, 8});
    for (size_t bytes : sizes) {
        for (int dir = 0; dir < 3; dir++) {
            layout(a, b, bytes, dir != 1);
            if (dir == 2)
                layout(b, a, bytes, true);
            const float ce = ce_time(a, b, bytes, dir);
            run_case({"ce_contig", 0, 0, 0}, a, b, bytes, dir, ce);
            for (const way &w : ways)
                run_case(w, a, b, bytes, dir, ce);
        }
    }
    return 0;
}
