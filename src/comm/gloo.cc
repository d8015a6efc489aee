/* gloo backend: CPU ranks across hosts over libgloo's TCP transport, met through zshard's
 * rendezvous store on MASTER_ADDR/MASTER_PORT. Only gloo's pairs and unbound buffers are used:
 * each rank owns a slice, receives the N contributions to it and sums them in rank order with
 * the shm backend's reduction (zs_reduce_*), so results equal shm's bit for bit; all_reduce is
 * that reduce-scatter followed by an all-gather (gloo_coll.cc). This file sets up the mesh
 * (store, addresses, connections) and gives the C table; C++ behind it. */
#include "comm/gloo_internal.hh"

using namespace zs_gloo;

namespace {

/* gloo's rendezvous store over zshard's TCP store, keys under "gloo/". */
class ZsStore : public gloo::rendezvous::Store {
  public:
    explicit ZsStore(zs_store *s) : s_(s) {}
    void set(const std::string &key, const std::vector<char> &data) override {
        zs_status st = zs_store_set(s_, ("gloo/" + key).c_str(), data.data(), data.size());
        if (st != ZS_OK) throw ZsFailure(st);
    }
    std::vector<char> get(const std::string &key) override {
        std::vector<char> v(65536);
        size_t len = 0;
        zs_status st = zs_store_get(s_, ("gloo/" + key).c_str(), v.data(), v.size(), &len);
        if (st != ZS_OK) throw ZsFailure(st);
        v.resize(len);
        return v;
    }
    void wait(const std::vector<std::string> &keys) override {
        for (const auto &k : keys)
            get(k);
    }
    void wait(const std::vector<std::string> &keys, const std::chrono::milliseconds &) override {
        wait(keys);
    }

  private:
    zs_store *s_;
};

/* The address this rank's pairs listen on: ZS_SOCKET_IFNAME (or GLOO_SOCKET_IFNAME, as torch
 * reads it) names an interface; otherwise the local address of the route to the master, which
 * is the interface the other hosts reach this one by in the common single-network case. */
zs_status pick_address(const zs_comm_env *env, gloo::transport::tcp::attr *a, std::string *shown) {
    const char *ifn = getenv("ZS_SOCKET_IFNAME");
    if (!ifn || !*ifn) ifn = getenv("GLOO_SOCKET_IFNAME");
    if (ifn && *ifn) {
        /* the interface's address, for the messages; gloo binds by the name */
        struct ifaddrs *all = nullptr;
        char host[INET6_ADDRSTRLEN] = "";
        if (getifaddrs(&all) == 0) {
            for (struct ifaddrs *i = all; i && !host[0]; i = i->ifa_next)
                if (i->ifa_addr && !strcmp(i->ifa_name, ifn) &&
                    (i->ifa_addr->sa_family == AF_INET || i->ifa_addr->sa_family == AF_INET6))
                    getnameinfo(i->ifa_addr,
                                i->ifa_addr->sa_family == AF_INET ? sizeof(struct sockaddr_in)
                                                                  : sizeof(struct sockaddr_in6),
                                host, sizeof host, nullptr, 0, NI_NUMERICHOST);
            freeifaddrs(all);
        }
        if (!host[0])
            return zs_error(ZS_ERR_INVALID,
                            "gloo: %s=%s: no interface of that name with an address on this host",
                            getenv("ZS_SOCKET_IFNAME") && *getenv("ZS_SOCKET_IFNAME")
                                ? "ZS_SOCKET_IFNAME"
                                : "GLOO_SOCKET_IFNAME",
                            ifn);
        a->iface = ifn;
        *shown = host;
        return ZS_OK;
    }
    struct addrinfo hints, *res = nullptr;
    memset(&hints, 0, sizeof hints);
    hints.ai_socktype = SOCK_DGRAM;
    char port[16];
    snprintf(port, sizeof port, "%d", env->master_port);
    int rc = getaddrinfo(env->master_addr, port, &hints, &res);
    if (rc != 0)
        return zs_error(ZS_ERR_INVALID, "gloo: MASTER_ADDR '%s' does not resolve (%s)",
                        env->master_addr, gai_strerror(rc));
    zs_status st = ZS_OK;
    int fd = socket(res->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_storage me;
    socklen_t mlen = sizeof me;
    char host[INET6_ADDRSTRLEN] = "";
    if (fd < 0 || connect(fd, res->ai_addr, res->ai_addrlen) != 0 ||
        getsockname(fd, (struct sockaddr *)&me, &mlen) != 0 ||
        getnameinfo((struct sockaddr *)&me, mlen, host, sizeof host, nullptr, 0, NI_NUMERICHOST))
        st = zs_error(ZS_ERR_COMM,
                      "gloo: no route from this host to MASTER_ADDR %s (%s); set "
                      "ZS_SOCKET_IFNAME to the interface the other hosts reach",
                      env->master_addr, strerror(errno));
    if (fd >= 0) close(fd);
    freeaddrinfo(res);
    if (st == ZS_OK) {
        a->hostname = host;
        *shown = host;
    }
    return st;
}

/* Every rank states its world size and claims its rank in the store before gloo meets, so
 * that mismatched WORLD_SIZEs or a rank started twice fail at once with one clear line. */
zs_status check_world(zs_store *s, const Ctx *g) {
    zs_status st = ZS_OK;
    char key[64];
    int64_t claims = 0;
    int32_t mine = g->world, theirs = 0;
    snprintf(key, sizeof key, "zs/claim/%d", g->rank);
    ZS_CHECK(zs_store_add(s, key, 1, &claims));
    ZS_REQUIRE(claims == 1, ZS_ERR_INVALID,
               "gloo: rank %d joined the job at the master twice (two processes with RANK=%d, "
               "or a stale job on the same MASTER_PORT)",
               g->rank, g->rank);
    snprintf(key, sizeof key, "zs/world/%d", g->rank);
    ZS_CHECK(zs_store_set(s, key, &mine, sizeof mine));
    for (int p = 0; p < g->world; p++) {
        if (p == g->rank) continue;
        snprintf(key, sizeof key, "zs/world/%d", p);
        ZS_CHECK(zs_store_get(s, key, &theirs, sizeof theirs, nullptr));
        ZS_REQUIRE(theirs == mine, ZS_ERR_INVALID,
                   "gloo: mismatched world sizes: rank %d has WORLD_SIZE=%d but rank %d has %d; "
                   "start every rank with the same WORLD_SIZE (zshard run: the same --nnodes "
                   "and -n on every host)",
                   p, (int)theirs, g->rank, (int)mine);
    }
fail:
    return st;
}

/* gloo's connectFullMesh, bounded. libgloo's pair connect can wait about 100 s for a peer
 * that is gone (a rank that failed, or a stranger that took its listening port: docs/comm.md),
 * whatever the context's timeout. It runs on a thread of its own; after the comm timeout + 5 s
 * the rank gives up with a named error, and the abandoned thread keeps alive what it uses: the
 * shared pointers it holds, and the store, which is then never freed (*abandoned = 1). */
struct MeshJob {
    std::shared_ptr<gloo::rendezvous::Context> ctx;
    std::shared_ptr<gloo::transport::Device> dev;
    ZsStore gs;
    std::promise<void> done;
    std::string why; /* a zshard failure's message: zs_last_error is per thread */
    explicit MeshJob(zs_store *s) : gs(s) {}
};

void connect_mesh(const Ctx *g, zs_store *store, int *abandoned) {
    auto job = std::make_shared<MeshJob>(store);
    job->ctx = g->ctx;
    job->dev = g->dev;
    std::future<void> fut = job->done.get_future();
    std::thread th([job] {
        try {
            job->ctx->connectFullMesh(job->gs, job->dev);
            job->done.set_value();
        } catch (const ZsFailure &f) {
            job->why = zs_last_error();
            job->done.set_exception(std::current_exception());
        } catch (...) {
            job->done.set_exception(std::current_exception());
        }
    });
    if (fut.wait_for(ms(g->timeout_s + 5.0)) != std::future_status::ready) {
        th.detach();
        *abandoned = 1;
        throw ZsFailure(zs_error(ZS_ERR_TIMEOUT,
                                 "gloo: connecting the %d ranks did not finish within %.0f s: a "
                                 "rank is gone, or something else took a gloo listening port",
                                 g->world, g->timeout_s + 5.0));
    }
    th.join();
    try {
        fut.get();
    } catch (const ZsFailure &f) {
        throw ZsFailure(zs_error(f.st, "%s", job->why.c_str()));
    }
}

/* Test hook (tests/test_strangers.sh): ZS_FAULT_GLOO_DELAY=RANK:MS holds that rank back for
 * MS milliseconds before gloo connects its pairs, so that the others' gloo listening ports
 * stay open long enough for a stranger to find them. */
void fault_delay(int rank) {
    const char *v = getenv("ZS_FAULT_GLOO_DELAY");
    int r = -1, ms = 0;
    if (v && sscanf(v, "%d:%d", &r, &ms) == 2 && r == rank && ms > 0 && ms <= 60000)
        usleep((useconds_t)ms * 1000);
}

zs_status gloo_init(zs_comm_t *c) {
    zs_status st = ZS_OK;
    zs_store *store = nullptr;
    int store_owned = 0, abandoned = 0;
    Ctx *g = new (std::nothrow) Ctx;
    std::string shown;
    if (!g) return zs_error(ZS_ERR_OOM, "gloo: out of memory");
    c->impl = g;
    g->rank = c->env.rank;
    g->world = c->env.world_size;
    g->timeout_s = c->timeout_s;
    /* ZS_SHM_CHUNK (chunk_bytes) sizes these windows too: small ones test the windowing. */
    g->chunk = default_chunk(g->world);
    if (c->chunk_bytes) g->chunk = c->chunk_bytes < 256 ? 256 : c->chunk_bytes / 256 * 256;
    g->token_in.assign((size_t)g->world, 0);
    g->peer_host.assign((size_t)g->world, "?");
    if (g->world == 1) return ZS_OK;
    {
        /* libgloo writes to its sockets without MSG_NOSIGNAL: a peer that died would kill this
         * process with SIGPIPE before its error could be reported. Ignore it, as Python (and so
         * torch) does, unless the program installed a handler of its own. */
        struct sigaction old;
        if (sigaction(SIGPIPE, nullptr, &old) == 0 && old.sa_handler == SIG_DFL)
            signal(SIGPIPE, SIG_IGN);
    }
    ZS_REQUIRE(c->env.master_port > 0, ZS_ERR_INVALID,
               "gloo: %d ranks need MASTER_ADDR and MASTER_PORT to meet (zshard run --nnodes, "
               "torchrun and srun set them; by hand: the same on every rank)",
               g->world);
    {
        gloo::transport::tcp::attr attr;
        ZS_CHECK(pick_address(&c->env, &attr, &shown));
        ZS_CHECK(zs_comm_store_open(c, &store, &store_owned));
        ZS_CHECK(check_world(store, g));
        try {
            g->dev = gloo::transport::tcp::CreateDevice(attr);
        } catch (const std::exception &e) {
            st = zs_error(ZS_ERR_INVALID, "gloo: cannot use %s%s for this rank's connections: %s",
                          attr.iface.empty() ? "address " : "interface ", shown.c_str(), e.what());
            goto fail;
        }
        /* Each rank's address, for the messages that name peers. */
        char key[64];
        snprintf(key, sizeof key, "zs/host/%d", g->rank);
        ZS_CHECK(zs_store_set(store, key, shown.data(), shown.size()));
        try {
            g->ctx = std::make_shared<gloo::rendezvous::Context>(g->rank, g->world);
            g->ctx->setTimeout(ms(c->timeout_s));
            fault_delay(g->rank);
            connect_mesh(g, store, &abandoned);
            for (int p = 0; p < g->world; p++) {
                char hb[256];
                size_t hl = 0;
                snprintf(key, sizeof key, "zs/host/%d", p);
                if (p != g->rank && zs_store_get(store, key, hb, sizeof hb - 1, &hl) == ZS_OK) {
                    hb[hl < sizeof hb ? hl : sizeof hb - 1] = '\0';
                    g->peer_host[(size_t)p] = hb;
                }
            }
        } catch (const ZsFailure &f) {
            st = f.st;
            goto fail;
        } catch (const std::exception &e) {
            st = zs_error(ZS_ERR_COMM, "gloo: connecting the %d ranks failed: %s", g->world,
                          e.what());
            goto fail;
        }
        ZS_CHECK(zs_store_barrier(store, "gloo/connected", g->world));
        zs_comm_store_close(store, store_owned);
        store = nullptr;
        g->peer_host[g->rank] = shown;
    }
    g->staging_bytes = (size_t)kDepth * (size_t)(g->world - 1) * g->chunk;
    ZS_CHECK(zs_alloc(ZS_MEM_COMM, g->staging_bytes, "gloo staging", (void **)&g->staging));
    g->win.resize(kDepth);
    for (int k = 0; k < kDepth; k++)
        for (int i = 0; i < g->world - 1; i++)
            g->win[(size_t)k].push_back(g->ctx->createUnboundBuffer(
                g->staging + ((size_t)k * (size_t)(g->world - 1) + (size_t)i) * g->chunk,
                g->chunk));
    ZS_LOG_D("gloo: rank %d of %d on %s (%s)", g->rank, g->world, shown.c_str(),
             g->dev->str().c_str());
    return ZS_OK;
fail:
    if (abandoned) /* a thread still uses the store: keep it, the communicator's too */
        c->store_pinned = 1;
    else if (store)
        zs_comm_store_close(store, store_owned);
    return st;
}

void gloo_fini(zs_comm_t *c) {
    Ctx *g = (Ctx *)c->impl;
    if (!g) return;
    try {
        g->win.clear();
        g->ctx.reset();
        g->dev.reset();
    } catch (...) {
        /* teardown after a failure: the process is leaving the job either way */
    }
    zs_free(g->staging);
    delete g;
    c->impl = nullptr;
}

zs_status gloo_run(zs_comm_t *c, const zs_coll *op) {
    Ctx *g = (Ctx *)c->impl;
    if (g->world == 1) {
        if (op->kind != ZS_COLL_BARRIER && op->count && op->send != op->recv)
            memcpy(op->recv, op->send, op->count * zs_dtype_size(op->dt));
        return ZS_OK;
    }
    if (op->kind == ZS_COLL_CHECK || op->kind == ZS_COLL_MEM_ALLOC)
        return zs_error(ZS_ERR_INTERNAL, "gloo: unexpected internal collective %d", (int)op->kind);
    return run_op(g, op);
}

/* C++ has no designated initializers before C++20: the fields in the table's order. */
const zs_comm_backend_ops g_gloo_ops = {
    "gloo",    /* name */
    gloo_init, /* init */
    gloo_fini, /* fini */
    gloo_run,  /* run */
    nullptr,   /* mark_failed: a failed rank's pairs close, which its peers see at once */
    nullptr,   /* sync */
    nullptr,   /* query */
    nullptr,   /* mem_free: no registered buffers, zs_comm_mem_alloc is zs_alloc */
    nullptr,   /* health */
    1,         /* needs_thread */
    nullptr,   /* split: the group meets through the split's store */
    nullptr,   /* split_free */
};

} // namespace

extern "C" const zs_comm_backend_ops *zs_comm_gloo_ops(void) {
    return &g_gloo_ops;
}

extern "C" size_t zs_comm_gloo_staging_bytes(int world_size) {
    return world_size > 1 ? (size_t)kDepth * (size_t)(world_size - 1) * default_chunk(world_size)
                          : 0;
}
