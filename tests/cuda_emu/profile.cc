/* The emulated GPU as a profiler (docs/cuda.md, "The profiler"): what each launch's threads
 * really did to memory, counted as an H100 would see it, and a predicted time per launch from
 * the model in h100.cc.
 *
 * Grouping: while counting, the block's threads run in the LOCKSTEP order (fiber.cc): the
 * lanes of a warp take turns, each making its next CHUNK accesses, so the k-th accesses of the
 * lanes since the last synchronisation point (barrier, warp operation, end of the block) form
 * one round. The accesses of a round made at the same
 * instruction (return address), of the same kind (global or shared, load or store), are one
 * warp-level request; lanes at different instructions in one round (divergence) are separate
 * requests, as a GPU issues each side of a branch separately. Lanes that diverge and make
 * different numbers of accesses fall out of step until the next synchronisation point: their
 * accesses are then split into more requests than a GPU would issue (never fewer), and the
 * sector counts of those requests are upper bounds.
 *
 * Per request: global: the distinct 32-byte sectors the lanes' bytes touch, and the bytes they
 * asked for; shared: the wavefronts, the largest number of distinct 4-byte words any of the 32
 * banks must serve (one word read by many lanes is a broadcast), summed over the phases a wide
 * access is split into (8-byte accesses by half-warps, 16-byte by quarter-warps). Per launch:
 * the unique sectors read and written (what DRAM must move at least). Test infrastructure. */
#include "emu_internal.h"
#include "emu_profile.h"
#include "h100.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace zs_emu {

namespace {

std::atomic<bool> g_profiling{false}, g_predict{false};
std::mutex g_lock;
std::vector<zs_emu_record> g_records;
/* cost-only mode: the price of each distinct launch (kernel, geometry, declared cost) */
std::map<std::string, zs_emu_record> g_priced;
/* the predicted seconds of the records the stream task running on this thread made: its
 * length on the timeline (runtime_streams.cc) */
thread_local double t_task_cost;
double g_timeline; /* the last recording's timeline, in seconds */

/* Keep r (g_lock held), made by the stream task running on this thread. */
void keep_record(const zs_emu_record &r) {
    g_records.push_back(r);
    t_task_cost += r.predicted;
}

/* the blocks a sampled grid runs at most, and the accesses after which it stops sampling
 * (having run at least two blocks) */
#define SAMPLE_BLOCKS 16u
#define SAMPLE_ACCESSES 20000000ull

struct Access {
    uintptr_t addr;
    const void *pc;
    unsigned size;
    uint8_t lane;
    bool write, shared;
};

struct Round {
    uint32_t lanes = 0;
    std::vector<Access> acc;
};

/* A warp's accesses not yet grouped: each lane's next CHUNK, in order. A lane that has made
 * CHUNK accesses yields; when it comes back, every other lane that can run has made its CHUNK
 * too (the LOCKSTEP order is round robin), and the k-th entries of the lanes form round k. So a
 * thread switches once per CHUNK accesses, not at each. */
#define CHUNK 32u
struct Warp {
    std::vector<Access> lane[32];
    Round round;
};

/* The unique 32-byte sectors of a launch: a bitmap per 4 KiB page. */
struct SectorSet {
    std::unordered_map<uint64_t, std::array<uint64_t, 2>> pages;
    uint64_t count = 0;
    void add(uint64_t sector) {
        auto &bits = pages[sector >> 7];
        uint64_t bit = 1ull << (sector & 63), &word = bits[(sector >> 6) & 1];
        if (!(word & bit)) {
            word |= bit;
            count++;
        }
    }
    void clear() {
        pages.clear();
        count = 0;
    }
};

struct Launch {
    bool active;
    LaunchInfo info;
    Cost cost;
    zs_emu_record rec;
    SectorSet rd, wr;
    std::vector<Warp> warps; /* of the running block */
    uint64_t accesses;
};
thread_local Launch t_l;

void close_round(Round &r) {
    if (r.acc.empty()) {
        r.lanes = 0;
        return;
    }
    /* requests: same instruction, same kind (sorted only when a round mixes them: divergence) */
    bool mixed = false;
    for (size_t k = 1; k < r.acc.size() && !mixed; k++)
        mixed = r.acc[k].pc != r.acc[0].pc || r.acc[k].shared != r.acc[0].shared ||
                r.acc[k].write != r.acc[0].write;
    if (mixed)
        std::stable_sort(r.acc.begin(), r.acc.end(), [](const Access &a, const Access &b) {
            if (a.pc != b.pc) return a.pc < b.pc;
            if (a.shared != b.shared) return a.shared < b.shared;
            return a.write < b.write;
        });
    zs_emu_record &s = t_l.rec;
    static thread_local std::vector<uint64_t> sec;
    for (size_t i = 0; i < r.acc.size();) {
        size_t j = i;
        while (j < r.acc.size() && r.acc[j].pc == r.acc[i].pc &&
               r.acc[j].shared == r.acc[i].shared && r.acc[j].write == r.acc[i].write)
            j++;
        if (r.acc[i].shared) {
            unsigned width = 4;
            double bytes = 0;
            for (size_t k = i; k < j; k++) {
                width = std::max(width, std::min(16u, r.acc[k].size));
                bytes += r.acc[k].size;
            }
            unsigned per_phase = 128 / width; /* lanes served per wavefront at best */
            double waves = 0;
            for (unsigned p = 0; p < 32 / per_phase; p++) {
                /* the distinct words each bank must serve in this phase */
                uint64_t words[32][32]; /* at most 32 words a phase */
                unsigned count[32] = {0}, most = 0;
                bool any = false;
                for (size_t k = i; k < j; k++) {
                    if (r.acc[k].lane / per_phase != p) continue;
                    any = true;
                    for (uintptr_t w = r.acc[k].addr / 4;
                         w <= (r.acc[k].addr + r.acc[k].size - 1) / 4; w++) {
                        unsigned b = (unsigned)(w % 32), c = count[b];
                        bool dup = false;
                        for (unsigned q = 0; q < c && !dup; q++)
                            dup = words[b][q] == w;
                        if (dup) continue;
                        if (c < 32) words[b][c] = w;
                        count[b] = c + 1;
                        most = std::max(most, c + 1);
                    }
                }
                if (any) waves += (double)most;
            }
            s.smem_requests += 1;
            s.smem_wavefronts += waves;
            s.smem_ideal += ceil(bytes / 128.0);
        } else {
            sec.clear();
            double bytes = 0, distinct = 0;
            for (size_t k = i; k < j; k++) {
                for (uintptr_t q = r.acc[k].addr / 32;
                     q <= (r.acc[k].addr + r.acc[k].size - 1) / 32; q++)
                    sec.push_back(q);
                bytes += r.acc[k].size;
                /* lanes reading one address share its bytes (a broadcast) */
                bool seen = false;
                for (size_t q = i; q < k && !seen; q++)
                    seen = r.acc[q].addr == r.acc[k].addr;
                if (!seen) distinct += r.acc[k].size;
            }
            s.distinct_bytes += distinct;
            std::sort(sec.begin(), sec.end());
            sec.erase(std::unique(sec.begin(), sec.end()), sec.end());
            SectorSet &set = r.acc[i].write ? t_l.wr : t_l.rd;
            for (uint64_t q : sec)
                set.add(q);
            if (r.acc[i].write) {
                s.st_requests += 1;
                s.st_sectors += (double)sec.size();
                s.st_bytes += bytes;
            } else {
                s.ld_requests += 1;
                s.ld_sectors += (double)sec.size();
                s.ld_bytes += bytes;
            }
        }
        i = j;
    }
    r.acc.clear();
    r.lanes = 0;
}

std::string launch_key(const LaunchInfo &l) {
    char k[256];
    snprintf(k, sizeof k, "%s|%u,%u,%u|%u,%u,%u|%zu|%.17g|%.17g|%.17g", l.name, l.grid.x, l.grid.y,
             l.grid.z, l.block.x, l.block.y, l.block.z, l.shmem, l.cost.flops, l.cost.mma_flops,
             l.cost.bytes);
    return k;
}

} // namespace

bool profiling() {
    return g_profiling.load(std::memory_order_relaxed);
}
bool predicting() {
    return g_predict.load(std::memory_order_relaxed);
}
bool counting() {
    return profiling() || predicting();
}

/* Group the buffered accesses of a warp: the k-th of every lane, round by round. */
void flush_warp(Warp &w) {
    size_t most = 0;
    for (auto &l : w.lane)
        most = std::max(most, l.size());
    for (size_t k = 0; k < most; k++) {
        for (auto &l : w.lane)
            if (k < l.size()) w.round.acc.push_back(l[k]);
        close_round(w.round);
    }
    for (auto &l : w.lane)
        l.clear();
}

void profile_access(const KernelCtx &c, uintptr_t addr, unsigned size, bool write, bool atomic,
                    bool shared, const void *pc) {
    if (!t_l.active) return;
    Warp &w = t_l.warps[(size_t)c.warp];
    std::vector<Access> &mine = w.lane[c.lane];
    if (mine.size() >= CHUNK) flush_warp(w); /* back after its turn: the others are done too */
    mine.push_back(Access{addr, pc, size, (uint8_t)c.lane, write, shared});
    if (atomic) t_l.rec.atomics += 1;
    t_l.accesses++;
    if (mine.size() >= CHUNK && c.sched == SCHED_LOCKSTEP) kernel_yield();
}

void profile_mma(double flops) {
    if (t_l.active) t_l.rec.mma_counted += flops;
}

void profile_sync(int warp) {
    if (!t_l.active) return;
    if (warp >= 0)
        flush_warp(t_l.warps[(size_t)warp]);
    else
        for (auto &w : t_l.warps)
            flush_warp(w);
}

/* The k-th of a spread sequence of positions in [0, n): the first, the last, then the middle,
 * the quarters, the eighths, ... (k >= 2: odd numerators over powers of two, rounded down), so
 * that any prefix is spread. */
static uint64_t spread_index(uint64_t k, uint64_t n) {
    if (k < 2) return k * (n - 1);
    uint64_t den = 2, num = 1;
    for (uint64_t i = 2; i < k; i++) {
        num += 2;
        if (num >= den) {
            den *= 2;
            num = 1;
        }
    }
    return num * (n - 1) / den;
}

/* The k-th of a symmetric spread sequence of positions in [0, n): the first and the last, then
 * the middle, then the quarters, the eighths, ... each level's in mirrored pairs (1/8, 7/8, 3/8,
 * 5/8), each rounded to the nearest position with a pair's two mirrored exactly: a prefix that
 * ends a pair samples a linear ramp of work at its mean (2 blocks: the first and the last). */
static uint64_t mirror_index(uint64_t k, uint64_t n) {
    if (k < 2) return k * (n - 1);
    uint64_t den = 2, i = k - 2; /* i: the place in the levels 1/2; 1/4, 3/4; 1/8, 7/8, ... */
    while (i >= den / 2) {
        i -= den / 2;
        den *= 2;
    }
    uint64_t num = 2 * (i / 2) + 1; /* pairs (num, den - num), num odd, increasing */
    bool mirrored = i % 2 == 1;
    uint64_t x = (uint64_t)floor((double)num * (double)(n - 1) / (double)den + 0.5);
    return mirrored ? n - 1 - x : x;
}

/* The radical inverse of k in base 3, in [0, 1): 0, 1/3, 2/3, 1/9, ... (van der Corput). */
static double radical3(uint64_t k) {
    double f = 1.0, r = 0.0;
    for (; k; k /= 3) {
        f /= 3.0;
        r += f * (double)(k % 3);
    }
    return r;
}

/* SAMPLE_BLOCKS distinct blocks of a grid of nblocks whose first dimension is gx (blocks
 * numbered x fastest). A one-dimensional grid: spread_index's positions. Else x at
 * mirror_index's positions of its range and the rest (y, z) at the base-3 points of its own,
 * so that x's values are sampled evenly whatever the other dimensions: a causal kernel's work
 * depends on x (the query or key block), and positions spread over the linear numbering fall
 * on a few x columns when the number of blocks is a multiple of gx's power of two (gpt2-124m's
 * attention at 16 x 1024, grids of 4 x 192: dk's and dv's sampled blocks counted 38% of their
 * products, the forward's and dq's 162%; test_emu_sampling.c). */
static void spread_blocks(uint64_t gx, uint64_t nblocks, std::vector<uint64_t> *blocks) {
    uint64_t rest = nblocks / gx;
    blocks->clear();
    for (uint64_t k = 0; blocks->size() < SAMPLE_BLOCKS && k < 64 * SAMPLE_BLOCKS; k++) {
        uint64_t y = (uint64_t)(radical3(k) * (double)rest);
        uint64_t id = rest > 1 ? (y < rest ? y : rest - 1) * gx + mirror_index(k, gx)
                               : spread_index(k, nblocks);
        if (std::find(blocks->begin(), blocks->end(), id) == blocks->end()) blocks->push_back(id);
    }
}

/* Sampling (cost-only mode): blocks at spread positions (spread_blocks), so that any prefix is
 * spread too; the grid stops early once it has made SAMPLE_ACCESSES accesses
 * (profile_block_budget). */
bool profile_sampling(const LaunchInfo &l, uint64_t nblocks, std::vector<uint64_t> *blocks) {
    /* counted when recording, and always in the cost-only mode (its prices are cached) */
    t_l.active = counting();
    if (!t_l.active) return false;
    t_l.info = l;
    t_l.cost = l.cost;
    memset(&t_l.rec, 0, sizeof t_l.rec);
    snprintf(t_l.rec.name, sizeof t_l.rec.name, "%s", l.name);
    t_l.rec.blocks = nblocks;
    t_l.rec.threads = (int)(l.block.x * l.block.y * l.block.z);
    t_l.rec.flops = l.cost.flops;
    t_l.rec.mma_flops = l.cost.mma_flops;
    t_l.rec.ideal_bytes = l.cost.bytes;
    t_l.rec.declared = l.cost.declared;
    t_l.rd.clear();
    t_l.wr.clear();
    t_l.warps.resize((size_t)(t_l.rec.threads + 31) / 32);
    for (auto &w : t_l.warps)
        for (auto &l : w.lane)
            l.clear();
    t_l.accesses = 0;
    if (!predicting()) return false;
    {
        std::lock_guard<std::mutex> lk(g_lock);
        auto it = g_priced.find(launch_key(l));
        if (it != g_priced.end()) { /* priced as the identical launch before it */
            zs_emu_record r = it->second;
            r.reused = 1;
            if (profiling()) keep_record(r);
            t_l.active = false;
            blocks->clear();
            return true;
        }
    }
    if (nblocks <= SAMPLE_BLOCKS) return false;
    spread_blocks(l.grid.x, nblocks, blocks);
    return true;
}

bool profile_block_budget(uint64_t blocks_run) {
    return !(t_l.active && predicting() && blocks_run >= 2 && t_l.accesses >= SAMPLE_ACCESSES);
}

void profile_block_done() {
    if (t_l.active) t_l.rec.blocks_run++;
}

void profile_launch_end(bool ok) {
    if (!t_l.active) return;
    t_l.active = false;
    if (!ok) return;
    zs_emu_record &r = t_l.rec;
    r.dram_read = (double)t_l.rd.count * 32;
    r.dram_write = (double)t_l.wr.count * 32;
    if (r.blocks_run && r.blocks_run < r.blocks) { /* sampled: scale to the whole grid */
        double f = (double)r.blocks / (double)r.blocks_run;
        for (double *v :
             {&r.ld_requests, &r.st_requests, &r.ld_sectors, &r.st_sectors, &r.ld_bytes,
              &r.st_bytes, &r.dram_read, &r.dram_write, &r.smem_requests, &r.smem_wavefronts,
              &r.smem_ideal, &r.atomics, &r.distinct_bytes, &r.mma_counted})
            *v *= f;
    }
    h100_predict(&r);
    std::lock_guard<std::mutex> lk(g_lock);
    if (profiling()) keep_record(r);
    if (predicting()) g_priced[launch_key(t_l.info)] = r;
}

void profile_record(const zs_emu_record &r) {
    if (!profiling()) return;
    std::lock_guard<std::mutex> lk(g_lock);
    keep_record(r);
}

double profile_task_take() {
    double c = t_task_cost;
    t_task_cost = 0;
    return c;
}

void profile_host_record(const zs_emu_record &r) {
    if (!profiling()) return;
    std::lock_guard<std::mutex> lk(g_lock);
    g_records.push_back(r);
}

} // namespace zs_emu

using namespace zs_emu;

extern "C" int zs_emu_predict_enable(void) {
    size_t used = 0, total = 0;
    mem_info(&used, &total);
    if (used) return -1;
    g_predict = true;
    if (!getenv("ZS_EMU_DEVICE_MEM")) set_device_mem(80ull << 30); /* an H100's */
    return 0;
}

extern "C" int zs_emu_predicting(void) {
    return predicting();
}

extern "C" void zs_emu_profile_start(void) {
    cudaDeviceSynchronize();
    timeline_reset();
    std::lock_guard<std::mutex> lk(g_lock);
    g_records.clear();
    g_timeline = 0;
    g_profiling = true;
}

extern "C" void zs_emu_profile_stop(void) {
    cudaDeviceSynchronize();
    double end = timeline_end();
    std::lock_guard<std::mutex> lk(g_lock);
    if (g_profiling) g_timeline = end;
    g_profiling = false;
}

extern "C" double zs_emu_profile_timeline(void) {
    std::lock_guard<std::mutex> lk(g_lock);
    return g_timeline;
}

extern "C" size_t zs_emu_profile_count(void) {
    std::lock_guard<std::mutex> lk(g_lock);
    return g_records.size();
}

extern "C" int zs_emu_profile_get(size_t i, zs_emu_record *out) {
    std::lock_guard<std::mutex> lk(g_lock);
    if (i >= g_records.size()) return -1;
    *out = g_records[i];
    return 0;
}

extern "C" double zs_emu_profile_total(void) {
    std::lock_guard<std::mutex> lk(g_lock);
    double t = 0;
    for (auto &r : g_records)
        t += r.predicted;
    return t;
}

extern "C" char *zs_emu_profile_table(void) {
    struct Row {
        std::string name;
        double n = 0, reused = 0, sampled = 0, t = 0, dram = 0, l2 = 0, req = 0, waves = 0,
               ideal = 0, flops = 0, mma = 0;
        std::map<std::string, double> bound;
    };
    std::map<std::string, Row> rows;
    double total = 0;
    {
        std::lock_guard<std::mutex> lk(g_lock);
        for (auto &r : g_records) {
            Row &w = rows[r.name];
            w.name = r.name;
            w.n += 1;
            w.reused += r.reused;
            w.sampled += r.blocks_run && r.blocks_run < r.blocks ? 1 : 0;
            w.t += r.predicted;
            /* the DRAM bytes the model used: measured, or declared for a sampled launch or a
             * library call */
            bool sampled = r.blocks_run && r.blocks_run < r.blocks;
            w.dram += (sampled && r.declared) || !strcmp(r.bound ? r.bound : "", "library") ||
                              (r.dram_read + r.dram_write == 0 && r.declared)
                          ? r.ideal_bytes
                          : r.dram_read + r.dram_write;
            w.l2 += (r.ld_sectors + r.st_sectors) * 32;
            w.req += r.distinct_bytes;
            w.waves += r.smem_wavefronts;
            w.ideal += r.smem_ideal;
            w.flops += r.flops;
            w.mma += r.mma_counted > r.mma_flops ? r.mma_counted : r.mma_flops;
            w.bound[r.bound ? r.bound : "?"] += r.predicted;
            total += r.predicted;
        }
    }
    std::vector<Row> v;
    for (auto &kv : rows)
        v.push_back(kv.second);
    std::sort(v.begin(), v.end(), [](const Row &a, const Row &b) { return a.t > b.t; });
    std::string out = "| kernel or call | launches | predicted ms | share | bound | DRAM MB | "
                      "sector use | smem waves/ideal | GFLOP (tensor) |\n"
                      "|---|---|---|---|---|---|---|---|---|\n";
    char line[512];
    for (auto &w : v) {
        std::string bound = "?";
        double best = -1;
        for (auto &b : w.bound)
            if (b.second > best) {
                best = b.second;
                bound = b.first;
            }
        char launches[64], use[32], waves[32];
        snprintf(launches, sizeof launches, "%.0f%s%s", w.n, w.reused ? " priced once" : "",
                 w.sampled ? (w.reused ? ", sampled" : " sampled") : "");
        if (w.l2 > 0)
            snprintf(use, sizeof use, "%.0f%%", 100.0 * w.req / w.l2);
        else
            snprintf(use, sizeof use, "-");
        if (w.ideal > 0)
            snprintf(waves, sizeof waves, "%.2f", w.waves / w.ideal);
        else
            snprintf(waves, sizeof waves, "-");
        snprintf(line, sizeof line,
                 "| %s | %s | %.3f | %.1f%% | %s | %.1f | %s | %s | %.2f (%.2f) |\n",
                 w.name.c_str(), launches, w.t * 1e3, total > 0 ? 100.0 * w.t / total : 0.0,
                 bound.c_str(), w.dram / 1e6, use, waves, (w.flops + w.mma) / 1e9, w.mma / 1e9);
        out += line;
    }
    snprintf(line, sizeof line, "| **all** | | **%.3f** | 100%% | | | | | |\n", total * 1e3);
    out += line;
    return strdup(out.c_str());
}
