/* SPDX-License-Identifier: Apache-2.0 */
/*
 * An alltoall of scattered rows between every visible GPU of one process
 * (2 to 8), each way launched raw, to find which pattern and grid reach
 * the links: every GPU holds `ROWS` rows of `bytes` bytes and sends
 * ROWS / 2 of them, picked at random, to each peer, packed into the peer's
 * receive buffer (a region per source). Ways:
 *
 *   ce          one cudaMemcpyAsync per (source, destination) pair of the
 *               rows already packed, on the source GPU, a stream per pair
 *   batch_push  the batch kernel (kernels/batch_copy.cu, as it is) on each
 *               source GPU, one device batch of the pieces for every peer;
 *               order `seq` (peer by peer) or `mix` (piece i to peer i % (N-1))
 *   plain_push  a warp per row (plain_rows.cuh), 512 threads a CTA
 *   batch_pull, plain_pull  the same pieces read by each destination GPU
 *   batch_half, plain_half  half of each pair's pieces pushed by the source,
 *               half pulled by the destination: GPU g's batch holds its even
 *               rows to every peer and the odd rows every peer sends it, in
 *               turns of G - 1 pieces (whether an SM's NVLink reads add to
 *               what its writes move)
 *
 * One round is timed from a common start (GPU 0's stream records an event
 * every other stream waits on) to the last stream's end (GPU 0 waits on an
 * event of each); 10 rounds back to back per timing, the median of 7. A
 * round's sampled rows are checked into poisoned buffers first. One line a
 * case: a2a gpus= bytes= way= order= ctas= us= gbps_per_gpu= vs_ce= check=
 */
#include "../../kernels/batch_copy.cu"
#include "check.cuh"
#include "plain_rows.cuh"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

static const size_t ROWS = 16384, N_PER = ROWS / 2;
static const int SETS = 2;
static int G = 0;

struct rank {
    int dev;
    char *rows = nullptr, *recv = nullptr;
    p2pt_batch_desc *push = nullptr, *pull = nullptr, *half = nullptr; /* SETS x (G - 1) x N_PER each */
    unsigned *count = nullptr;
    void *ws = nullptr;
    cudaStream_t s;
    std::vector<cudaStream_t> pair; /* the copy engine's, one per peer */
    cudaEvent_t start, end, done;
    std::vector<cudaEvent_t> pair_done;
    std::vector<p2pt_batch_desc> hpush, hpull, hhalf;
};

static std::vector<rank> R;

/* Where source g's rows land on p: the region of g among p's peers. */
static size_t slot(int g, int p)
{
    return (size_t)(g < p ? g : g - 1);
}

static void layouts(size_t bytes, bool mix)
{
    const size_t per = (size_t)(G - 1) * N_PER;
    for (rank &r : R) {
        r.hpush.assign(SETS * per, {0, 0, 0});
        r.hpull.assign(SETS * per, {0, 0, 0});
    }
    srand(5);
    for (int k = 0; k < SETS; k++)
        for (int g = 0; g < G; g++)
            for (int j = 1; j < G; j++) {
                const int p = (g + j) % G;
                std::vector<size_t> pick(ROWS);
                for (size_t i = 0; i < ROWS; i++)
                    pick[i] = i;
                for (size_t i = ROWS; i > 1; i--)
                    std::swap(pick[i - 1], pick[rand() % i]);
                for (size_t i = 0; i < N_PER; i++) {
                    const p2pt_batch_desc d = {
                        (unsigned long long)(R[p].recv + (slot(g, p) * N_PER + i) * bytes),
                        (unsigned long long)(R[g].rows + pick[i] * bytes),
                        (unsigned long long)bytes};
                    /* push: g's batch; pull: p's batch, pieces by source. */
                    const size_t at = mix ? i * (G - 1) + (j - 1) : (j - 1) * N_PER + i;
                    R[g].hpush[k * per + at] = d;
                    const int jp = (g - p + G) % G; /* g as p's (p + jp)-th peer */
                    const size_t atp = mix ? i * (G - 1) + (jp - 1) : (jp - 1) * N_PER + i;
                    R[p].hpull[k * per + atp] = d;
                }
            }
    /* Piece i of a pair: pushed by its source where i is even, pulled by
     * its destination where odd; index x of either layout is piece
     * x / (G - 1) of a pair (mixed order), so each piece is taken once. */
    for (rank &r : R) {
        r.hhalf = r.hpush; /* only the mixed order has halves */
        for (size_t x = 0; mix && x < r.hpush.size(); x++)
            if ((x % per) / (G - 1) % 2 != 0)
                r.hhalf[x] = r.hpull[x];
    }
    for (rank &r : R) {
        CK(cudaSetDevice(r.dev));
        CK(cudaMemcpy(r.half, r.hhalf.data(), r.hhalf.size() * sizeof(p2pt_batch_desc),
                      cudaMemcpyHostToDevice));
        CK(cudaMemcpy(r.push, r.hpush.data(), r.hpush.size() * sizeof(p2pt_batch_desc),
                      cudaMemcpyHostToDevice));
        CK(cudaMemcpy(r.pull, r.hpull.data(), r.hpull.size() * sizeof(p2pt_batch_desc),
                      cudaMemcpyHostToDevice));
        unsigned c = (unsigned)per;
        CK(cudaMemcpy(r.count, &c, 4, cudaMemcpyHostToDevice));
    }
}

struct way {
    std::string name;
    int ctas;
};

static p2pt_batch_dev_params params(const rank &r, const p2pt_batch_desc *descs, size_t bytes)
{
    p2pt_batch_dev_params p;
    memset(&p, 0, sizeof(p));
    const size_t per = (size_t)(G - 1) * N_PER;
    p.descs = (unsigned long long)descs;
    p.count = (unsigned long long)r.count;
    p.workspace = (unsigned long long)r.ws;
    p.max_count = (unsigned)per;
    /* Every GPU's rows and receive buffer, sorted. */
    std::vector<p2pt_batch_window> w;
    for (const rank &o : R) {
        w.push_back({(unsigned long long)o.rows, (unsigned long long)(o.rows + ROWS * bytes)});
        w.push_back({(unsigned long long)o.recv, (unsigned long long)(o.recv + per * bytes)});
    }
    std::sort(w.begin(), w.end(), [](const p2pt_batch_window &a, const p2pt_batch_window &b) {
        return a.base < b.base;
    });
    p.n_windows = (unsigned)w.size();
    for (size_t i = 0; i < w.size(); i++)
        p.window[i] = w[i];
    return p;
}

static void round_of(const way &w, int set, size_t bytes)
{
    const size_t per = (size_t)(G - 1) * N_PER;
    for (int g = 0; g < G; g++) {
        rank &r = R[g];
        CK(cudaSetDevice(r.dev));
        if (w.name == "ce") {
            for (int j = 1; j < G; j++) {
                const int p = (g + j) % G;
                CK(cudaMemcpyAsync(R[p].recv + slot(g, p) * N_PER * bytes,
                                   r.rows + (size_t)((3 * set + j) % 5) * (ROWS / 8) * bytes, N_PER * bytes,
                                   cudaMemcpyDefault, r.pair[p]));
            }
            continue;
        }
        const bool pull = w.name.find("pull") != std::string::npos;
        const bool half = w.name.find("half") != std::string::npos;
        const p2pt_batch_desc *d = (half ? r.half : pull ? r.pull : r.push) + (size_t)set * per;
        if (w.name.rfind("batch", 0) == 0) {
            p2pt_batch_dev_params p = params(r, d, bytes);
            p2pt_batch_copy_dev<<<w.ctas + 1, P2PT_BATCH_THREADS, 0, r.s>>>(p);
        } else {
            plain_rows<4><<<w.ctas, 512, 0, r.s>>>(d, r.count);
        }
        CK(cudaGetLastError());
    }
}

/* Every stream waits for GPU 0's start; GPU 0's stream waits for them all. */
static void fence_start()
{
    CK(cudaSetDevice(R[0].dev));
    CK(cudaEventRecord(R[0].start, R[0].s));
    for (rank &r : R) {
        CK(cudaSetDevice(r.dev));
        if (r.dev != R[0].dev)
            CK(cudaStreamWaitEvent(r.s, R[0].start, 0));
        for (int p = 0; p < G; p++)
            if (p != r.dev)
                CK(cudaStreamWaitEvent(r.pair[p], R[0].start, 0));
    }
}

static void fence_end()
{
    for (rank &r : R) {
        CK(cudaSetDevice(r.dev));
        CK(cudaEventRecord(r.done, r.s));
        for (int p = 0; p < G; p++)
            if (p != r.dev)
                CK(cudaEventRecord(r.pair_done[p], r.pair[p]));
    }
    CK(cudaSetDevice(R[0].dev));
    for (rank &r : R) {
        if (r.dev != R[0].dev)
            CK(cudaStreamWaitEvent(R[0].s, r.done, 0));
        for (int p = 0; p < G; p++)
            if (p != r.dev)
                CK(cudaStreamWaitEvent(R[0].s, r.pair_done[p], 0));
    }
    CK(cudaEventRecord(R[0].end, R[0].s));
}

static bool check(size_t bytes)
{
    const size_t per = (size_t)(G - 1) * N_PER;
    std::vector<unsigned char> got(bytes), want(bytes);
    for (int g = 0; g < G; g++)
        for (size_t i = 0; i < per; i += 331) {
            const p2pt_batch_desc &d = R[g].hpush[i];
            CK(cudaMemcpy(got.data(), (void *)d.dst, bytes, cudaMemcpyDefault));
            CK(cudaMemcpy(want.data(), (void *)d.src, bytes, cudaMemcpyDefault));
            if (memcmp(got.data(), want.data(), bytes) != 0)
                return false;
        }
    return true;
}

static float run(const way &w, size_t bytes, const char *order, float ce_us)
{
    const size_t per = (size_t)(G - 1) * N_PER;
    bool ok = true;
    if (w.name != "ce") {
        for (rank &r : R) {
            CK(cudaSetDevice(r.dev));
            CK(cudaMemset(r.recv, 0xA5, per * bytes));
            CK(cudaDeviceSynchronize());
        }
        fence_start();
        round_of(w, 0, bytes);
        fence_end();
        CK(cudaEventSynchronize(R[0].end));
        ok = check(bytes);
    }
    const int reps = 7, rounds = 10;
    std::vector<float> t;
    for (int k = 0; k < reps + 1; k++) {
        fence_start();
        for (int i = 0; i < rounds; i++)
            round_of(w, i % SETS, bytes);
        fence_end();
        CK(cudaEventSynchronize(R[0].end));
        float ms;
        CK(cudaEventElapsedTime(&ms, R[0].start, R[0].end));
        if (k)
            t.push_back(ms * 1000 / rounds);
    }
    std::sort(t.begin(), t.end());
    const float us = t[reps / 2];
    printf("a2a gpus=%d bytes=%zu way=%s order=%s ctas=%d us=%.1f gbps_per_gpu=%.1f vs_ce=%.3f "
           "check=%s\n",
           G, bytes, w.name.c_str(), w.name == "ce" ? "-" : order, w.ctas, us,
           (double)per * bytes / us / 1e3, ce_us > 0 ? ce_us / us : 1.0, ok ? "ok" : "FAILED");
    fflush(stdout);
    return us;
}

int main(int argc, char **argv)
{
    CK(cudaGetDeviceCount(&G));
    if (argc > 1)
        G = std::min(G, atoi(argv[1]));
    if (G < 2) {
        printf("peer_alltoall: needs 2 GPUs, found %d\n", G);
        return 1;
    }
    const size_t max_bytes = 65536, per = (size_t)(G - 1) * N_PER;
    R.resize(G);
    for (int g = 0; g < G; g++) {
        rank &r = R[g];
        r.dev = g;
        CK(cudaSetDevice(g));
        for (int p = 0; p < G; p++)
            if (p != g)
                CK(cudaDeviceEnablePeerAccess(p, 0));
        CK(cudaMalloc(&r.rows, ROWS * max_bytes));
        CK(cudaMalloc(&r.recv, per * max_bytes));
        CK(cudaMalloc(&r.push, SETS * per * sizeof(p2pt_batch_desc)));
        CK(cudaMalloc(&r.pull, SETS * per * sizeof(p2pt_batch_desc)));
        CK(cudaMalloc(&r.half, SETS * per * sizeof(p2pt_batch_desc)));
        CK(cudaMalloc(&r.count, 4));
        CK(cudaMalloc(&r.ws, 64));
        CK(cudaStreamCreateWithFlags(&r.s, cudaStreamNonBlocking));
        r.pair.resize(G);
        r.pair_done.resize(G);
        for (int p = 0; p < G; p++) {
            CK(cudaStreamCreateWithFlags(&r.pair[p], cudaStreamNonBlocking));
            CK(cudaEventCreateWithFlags(&r.pair_done[p], cudaEventDisableTiming));
        }
        CK(cudaEventCreate(&r.start));
        CK(cudaEventCreate(&r.end));
        CK(cudaEventCreateWithFlags(&r.done, cudaEventDisableTiming));
        std::vector<unsigned> h(ROWS * max_bytes / 4 / 64);
        for (size_t i = 0; i < h.size(); i++)
            h[i] = (unsigned)(i * 2654435761u) ^ (unsigned)(g * 0x9e3779b9u) ^ (unsigned)rand();
        for (size_t off = 0; off < ROWS * max_bytes; off += h.size() * 4)
            CK(cudaMemcpy(r.rows + off, h.data(), h.size() * 4, cudaMemcpyHostToDevice));
    }
    for (size_t bytes : {4096ul, 14336ul, 65536ul}) {
        layouts(bytes, true);
        const float ce = run({"ce", 0}, bytes, "-", 0);
        for (int c : {16, 32, 66, 132, 264})
            run({"batch_push", c}, bytes, "mix", ce);
        for (int c : {16, 32, 132})
            run({"plain_push", c}, bytes, "mix", ce);
        for (int c : {16, 32, 132})
            run({"batch_pull", c}, bytes, "mix", ce);
        run({"plain_pull", 32}, bytes, "mix", ce);
        for (int c : {16, 32, 64, 132})
            run({"batch_half", c}, bytes, "mix", ce);
        for (int c : {16, 32})
            run({"plain_half", c}, bytes, "mix", ce);
        layouts(bytes, false);
        for (int c : {32, 132})
            run({"batch_push", c}, bytes, "seq", ce);
    }
    return 0;
}
