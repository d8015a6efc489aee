/* gloo collectives over unbound buffers: each rank receives its slice's contributions and sums
 * them in rank order (zs_reduce_*), the results bitwise the shm backend's; all_reduce is that
 * reduce-scatter and an all-gather (docs/comm.md). */
#include "comm/gloo_internal.hh"

namespace zs_gloo {
namespace {

/* One posted operation stream: a buffer that talks to one peer only, so that the buffer
 * gloo raises an error on names the rank at fault. */
struct Op {
    UBuf *b;
    int peer, is_send, left;
};

/* The unbound-buffer operations of one collective, and their completion. */
struct Round {
    Ctx *g;
    std::vector<std::unique_ptr<UBuf>> owned;
    std::vector<Op> ops;
    int thrown_peer = -1; /* a post that threw: its pair had already failed */
    explicit Round(Ctx *c) : g(c) {}
    uint64_t slot(uint64_t k) const {
        return (g->nops << 24) | (k & 0xffffff);
    }
    UBuf *make(const void *p, size_t nbytes) {
        owned.push_back(g->ctx->createUnboundBuffer(const_cast<void *>(p), nbytes));
        return owned.back().get();
    }
    Op &find(UBuf *b, int peer, int is_send) {
        for (auto &o : ops)
            if (o.b == b) return o;
        ops.push_back(Op{b, peer, is_send, 0});
        return ops.back();
    }
    void post(UBuf *b, int peer, int is_send, uint64_t k, size_t off, size_t n) {
        if (!n) return;
        thrown_peer = peer;
        if (is_send)
            b->send(peer, slot(k), off, n);
        else
            b->recv(peer, slot(k), off, n);
        thrown_peer = -1;
        find(b, peer, is_send).left++;
    }
    /* Every outstanding completion on b, each wait bounded by the comm timeout (no progress
     * for that long fails; a long transfer that moves does not). */
    void wait(UBuf *b) {
        for (auto &o : ops) {
            if (o.b != b) continue;
            while (o.left > 0) {
                if (o.is_send)
                    o.b->waitSend(nullptr, ms(g->timeout_s));
                else
                    o.b->waitRecv(nullptr, ms(g->timeout_s));
                o.left--;
            }
        }
    }
    void wait_sends() {
        for (auto &o : ops)
            if (o.is_send) wait(o.b);
    }
    /* After an exception: which peers' connections failed on their own (not through our
     * timeout). Each buffer still owed completions is asked without waiting: those that came
     * are counted, gloo keeps a failed pair's first error in its buffers, and the healthy ones
     * report a timeout (ours, which closed every pair). */
    std::vector<int> failed_peers(const char *first, int first_peer) {
        std::vector<int> bad((size_t)g->world, 0), v;
        if (first_peer >= 0 && !strstr(first, "imeout")) bad[(size_t)first_peer] = 1;
        for (auto &o : ops) {
            try {
                while (o.left > 0) {
                    if (o.is_send)
                        o.b->waitSend(nullptr, std::chrono::milliseconds(0));
                    else
                        o.b->waitRecv(nullptr, std::chrono::milliseconds(0));
                    o.left--;
                }
            } catch (const std::exception &e) {
                if (!strstr(e.what(), "imeout")) bad[(size_t)o.peer] = 1;
            }
        }
        for (int p = 0; p < g->world; p++)
            if (bad[(size_t)p]) v.push_back(p);
        return v;
    }
    std::vector<int> owing() const {
        std::vector<int> has(g->world, 0), v;
        for (auto &o : ops)
            if (o.left > 0) has[o.peer] = 1;
        for (int p = 0; p < g->world; p++)
            if (has[p]) v.push_back(p);
        return v;
    }
};

std::string ranks_text(const Ctx *g, const std::vector<int> &v) {
    std::string s;
    for (int q : v)
        s += (s.empty() ? "" : ", ") + std::to_string(q) + " (" + g->peer_host[q] + ")";
    return s;
}

/* gloo's exception as zshard's error naming the rank at fault: a failed connection names its
 * peer; our own timeout names the peers that still owed data. */
zs_status gloo_error(Round &rd, const char *what, int where_peer) {
    const Ctx *g = rd.g;
    int timed_out = strstr(what, "Timed out") != nullptr;
    std::vector<int> bad = rd.failed_peers(what, timed_out ? -1 : where_peer);
    std::vector<int> owing = rd.owing();
    if (!bad.empty())
        return zs_error(
            ZS_ERR_COMM,
            "gloo: lost peer rank %s: the connection failed (the process died or its host "
            "left the network): %s",
            ranks_text(g, bad).c_str(), what);
    if (timed_out)
        return zs_error(
            ZS_ERR_TIMEOUT,
            "gloo: no progress within %.1f s: still waiting for peer rank %s (dead, stuck, "
            "not calling this collective, or its host left the network)",
            g->timeout_s, owing.empty() ? "?" : ranks_text(g, owing).c_str());
    return zs_error(ZS_ERR_COMM, "gloo: %s", what);
}

void reduce_into(zs_dtype dt, void *out, const void *const *in, int n, size_t count, int avg) {
    if (dt == ZS_DTYPE_F32)
        zs_reduce_f32((float *const *)&out, 1, (const float *const *)in, n, count, avg, n, 0);
    else
        zs_reduce_bf16((uint16_t *const *)&out, 1, (const uint16_t *const *)in, n, count, avg, n,
                       0);
}

/* Reduce-scatter over slices: rank q's slice of `send` is [off[q], off[q] + len[q]) elements;
 * my slice's sum over all ranks, in rank order, goes to `out`. Windows of `chunk` bytes per
 * peer, kDepth in flight; every send is posted at once (gloo writes each when its receiver has
 * asked for it), so both directions of every link carry data together. */
void rs_slices(Ctx *g, Round &rd, zs_dtype dt, int avg, const char *send,
               const std::vector<size_t> &off, const std::vector<size_t> &len, char *out) {
    const int n = g->world, r = g->rank;
    const size_t esz = zs_dtype_size(dt), w = g->chunk / esz;
    const size_t total = (off[n - 1] + len[n - 1]) * esz;
    for (int q = 0; q < n; q++) {
        if (q == r) continue;
        UBuf *sb = rd.make(send, total);
        for (size_t k = 0; k * w < len[q]; k++) {
            size_t m = len[q] - k * w < w ? len[q] - k * w : w;
            rd.post(sb, q, 1, k, (off[q] + k * w) * esz, m * esz);
        }
    }
    const size_t nwin = (len[r] + w - 1) / w;
    auto post = [&](size_t k) {
        size_t m = len[r] - k * w < w ? len[r] - k * w : w;
        for (int p = 0, i = 0; p < n; p++)
            if (p != r) rd.post(g->win[k % kDepth][(size_t)i++].get(), p, 0, k, 0, m * esz);
    };
    for (size_t k = 0; k < nwin && k < (size_t)kDepth; k++)
        post(k);
    std::vector<const void *> in((size_t)n);
    for (size_t k = 0; k < nwin; k++) {
        const size_t m = len[r] - k * w < w ? len[r] - k * w : w;
        for (int p = 0, i = 0; p < n; p++) {
            if (p == r) {
                in[(size_t)p] = send + (off[r] + k * w) * esz;
                continue;
            }
            UBuf *b = g->win[k % kDepth][(size_t)i++].get();
            rd.wait(b);
            in[(size_t)p] = b->ptr;
        }
        reduce_into(dt, out + k * w * esz, in.data(), n, m, avg);
        if (k + kDepth < nwin) post(k + kDepth);
    }
    rd.wait_sends();
}

/* All-gather over slices: my [off[r], +len[r]) of `recv` goes to every peer (from `mine`), and
 * each peer's slice lands in place. Every transfer is posted at once, both directions. */
void ag_slices(Ctx *g, Round &rd, size_t esz, const char *mine, const std::vector<size_t> &off,
               const std::vector<size_t> &len, char *recv) {
    const int n = g->world, r = g->rank;
    std::vector<UBuf *> rb((size_t)n, nullptr);
    for (int q = 0; q < n; q++)
        if (q != r && len[q]) {
            rb[(size_t)q] = rd.make(recv + off[q] * esz, len[q] * esz);
            rd.post(rb[(size_t)q], q, 0, 0, 0, len[q] * esz);
        }
    for (int q = 0; q < n && len[r]; q++)
        if (q != r) rd.post(rd.make(mine, len[r] * esz), q, 1, 0, 0, len[r] * esz);
    if (mine != recv + off[r] * esz && len[r]) memcpy(recv + off[r] * esz, mine, len[r] * esz);
    for (int q = 0; q < n; q++)
        if (rb[(size_t)q]) rd.wait(rb[(size_t)q]);
    rd.wait_sends();
}

/* Barrier (a byte to and from every peer) and broadcast (the root's buffer to every peer). */
void small_round(Ctx *g, Round &rd, const zs_coll *op) {
    const int n = g->world, r = g->rank, bar = op->kind == ZS_COLL_BARRIER;
    const size_t nb = bar ? 1 : op->count * zs_dtype_size(op->dt);
    char *recv = (char *)op->recv;
    if (!bar && r == op->root && op->send != op->recv && nb) memcpy(recv, op->send, nb);
    if (!nb) return;
    for (int q = 0; q < n; q++) {
        if (q == r) continue;
        if (bar || q == op->root)
            rd.post(rd.make(bar ? &g->token_in[(size_t)q] : recv, nb), q, 0, 0, 0, nb);
        if (bar || r == op->root) rd.post(rd.make(bar ? g->token_out : recv, nb), q, 1, 0, 0, nb);
    }
    for (auto &o : rd.ops)
        rd.wait(o.b);
}

} // namespace

zs_status run_op(Ctx *g, const zs_coll *op) {
    const int n = g->world, r = g->rank, avg = op->op == ZS_REDUCE_AVG;
    const size_t esz = zs_dtype_size(op->dt), count = op->count;
    const char *send = (const char *)op->send;
    char *recv = (char *)op->recv;
    Round rd(g), ag(g);
    Round *cur = &rd;
    g->nops++;
    try {
        std::vector<size_t> off((size_t)n), len((size_t)n, count);
        for (int q = 0; q < n; q++)
            off[(size_t)q] = (size_t)q * count;
        switch (op->kind) {
        case ZS_COLL_BARRIER:
        case ZS_COLL_BROADCAST:
            small_round(g, rd, op);
            return ZS_OK;
        case ZS_COLL_ALL_GATHER:
            ag_slices(g, rd, esz, send, off, len, recv);
            return ZS_OK;
        case ZS_COLL_REDUCE_SCATTER:
            rs_slices(g, rd, op->dt, avg, send, off, len, recv);
            return ZS_OK;
        case ZS_COLL_ALL_REDUCE: {
            /* Slices of about count/N on kAlign boundaries; the sums are elementwise in rank
             * order, so the cut changes no bit. The gather starts after every reduce-scatter
             * send completed: in place, it overwrites what those sends read. */
            size_t per = (count + (size_t)n - 1) / (size_t)n;
            per = (per + kAlign - 1) / kAlign * kAlign;
            for (int q = 0; q < n; q++) {
                size_t lo = (size_t)q * per < count ? (size_t)q * per : count;
                size_t hi = lo + per < count ? lo + per : count;
                off[(size_t)q] = lo, len[(size_t)q] = hi - lo;
            }
            rs_slices(g, rd, op->dt, avg, send, off, len, recv + off[(size_t)r] * esz);
            g->nops++;
            cur = &ag;
            ag_slices(g, ag, esz, recv + off[(size_t)r] * esz, off, len, recv);
            return ZS_OK;
        }
        default:
            return zs_error(ZS_ERR_INTERNAL, "gloo: unknown collective %d", (int)op->kind);
        }
    } catch (const ZsFailure &f) {
        return f.st;
    } catch (const std::exception &e) {
        return gloo_error(*cur, e.what(), cur->thrown_peer);
    }
}

} // namespace zs_gloo
