/* The gloo backend's shared pieces, private to gloo.cc (the mesh: store, addresses, init and
 * teardown) and gloo_coll.cc (the collectives): the context of one communicator, its constants
 * and the failure that carries a zshard status through gloo's callbacks. */
#ifndef ZS_COMM_GLOO_INTERNAL_HH
#define ZS_COMM_GLOO_INTERNAL_HH

extern "C" {
#include "comm/comm_internal.h"
#include "comm/store.h"
#include "core/alloc.h"
#include "core/log.h"
#include "core/status.h"
#include "core/timer.h"
}

#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <chrono>
#include <cstdio>
#include <future>
#include <thread>
#include <cstdlib>
#include <cerrno>
#include <cstring>
#include <exception>
#include <memory>
#include <csignal>
#include <netdb.h>
#include <string>
#include <sys/socket.h>
#include <unistd.h>
#include <vector>

namespace zs_gloo {

using UBuf = gloo::transport::UnboundBuffer;

constexpr size_t kMaxChunk = 4u << 20; /* bytes per peer and window of a reduce-scatter */
constexpr size_t kMinChunk = 256u << 10;
constexpr size_t kStagingBudget = 16u << 20; /* all windows of a rank, where the chunk allows */
constexpr int kDepth = 2;                    /* reduce-scatter windows in flight */
constexpr size_t kAlign = 32;                /* slice boundaries, elements (as shm's) */

/* A zshard failure raised through gloo's callbacks (the store), carrying the status. */
struct ZsFailure : std::exception {
    zs_status st;
    explicit ZsFailure(zs_status s) : st(s) {}
};

struct Ctx {
    int rank = 0, world = 1;
    double timeout_s = 300;
    std::shared_ptr<gloo::transport::Device> dev;
    std::shared_ptr<gloo::rendezvous::Context> ctx;
    std::vector<std::string> peer_host; /* the interface address each rank bound */
    size_t chunk = kMaxChunk;
    char *staging = nullptr; /* kDepth windows x (world-1) peers x chunk bytes */
    size_t staging_bytes = 0;
    /* receive buffers: [window slot][peer index], each one peer's part of one window */
    std::vector<std::vector<std::unique_ptr<UBuf>>> win;
    uint64_t nops = 0; /* collectives run: the same count on every rank */
    char token_out[1] = {1};
    std::vector<char> token_in;
};

/* The default window per peer: 4 MiB (long TCP transfers) while the windows of all peers fit
 * in 16 MiB, smaller for large worlds, never under 256 KiB. */
inline size_t default_chunk(int world) {
    size_t c = world > 1 ? kStagingBudget / ((size_t)kDepth * (size_t)(world - 1)) : kMaxChunk;
    c = c > kMaxChunk ? kMaxChunk : c < kMinChunk ? kMinChunk : c;
    return c / 4096 * 4096;
}

inline std::chrono::milliseconds ms(double s) {
    return std::chrono::milliseconds((long long)(s * 1000.0) + 1);
}

/* One collective over the mesh (world > 1): reduce-scatter, all-gather, all-reduce,
 * broadcast or barrier, sums in rank order; a failed peer is named in the status. */
zs_status run_op(Ctx *g, const zs_coll *op);

} // namespace zs_gloo

#endif
