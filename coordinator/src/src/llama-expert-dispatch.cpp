// Expertswarm expert dispatch (see llama-expert-dispatch.h and docs/dispatch-protocol.md).
//
// Per dispatched MoE layer the graph holds custom ops and ggml's swiglu, in two local passes:
//   remote   (1 thread)    sends rows + top-k ids + router probs (REQUEST) and writes a flag per (token, k) pair:
//                          v1: waits for the RESPONSE (until the layer's deadline at most); flags served / local /
//                          local and audited, plus the served partial sums;
//                          v2: waits only for the CLAIM; flags claimed / local / local and audited, partial sums 0;
//   gate_up  (all threads) gate and up projections for the pairs that were neither served nor claimed;
//   swiglu   (ggml's op)   silu(gate) ⊙ up, the very op llama.cpp's stock MoE graph uses;
//   down     (all threads) down projection of those pairs, scaled by their probs and added to the partial sums;
//                          the audited ones are also summed on their own (a second plane of its output);
//   audit    (1 thread)    in place on that output: sends the audited pairs' sums (AUDIT frame) when the dispatcher
//                          asked for any, and waits for nothing;
//   collect  (1 thread)    v2 with pairs claimed: waits for the RESULT, adds its sums to the output and flags the
//                          claimed pairs that were not served (all of them when the RESULT fails) for the second pass;
//                          otherwise it passes the output on with nothing flagged;
//   gate_up, swiglu, down  the second pass: computes the flagged pairs and adds them (no audit plane); with nothing
//                          flagged it only copies the output.
// With nothing served or claimed the output is bit for bit the stock MoE graph's.
// The local ops use ggml's CPU type traits (activation conversion to the weight's vec_dot type, then vec_dot per
// weight row), as ggml's own mul_mat_id does, so any quant type the CPU backend handles works here, and the pairs
// computed here come out bit for bit as the stock graph (dispatch off) computes them. llama_xd_compute_pairs builds
// the same graph without the remote op; linkcpp-expert-ref (coordinator/src/tools/) runs it: the native reference a
// worker is judged against.
// Whatever goes wrong with the dispatcher (absent, slow, dead, garbage), the pairs are computed locally.

#include "llama-expert-dispatch.h"

#include "llama-impl.h"

#include "ggml-backend.h"
#include "ggml-cpu.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#endif

namespace {

// ---- protocol v1 to v3 (docs/dispatch-protocol.md); the hub's twin is protocol/dispatch.ts ----
constexpr uint32_t XD_MAGIC       = 0x50445845; // "EXDP" little-endian
constexpr uint16_t XD_VERSION_MAX = 3;          // the highest version spoken (offered in HELLO)
constexpr uint16_t XD_HELLO       = 1;
constexpr uint16_t XD_HELLO_ACK   = 2;
constexpr uint16_t XD_REQUEST     = 3;
constexpr uint16_t XD_RESPONSE    = 4; // v1 only
constexpr uint16_t XD_AUDIT       = 5;
constexpr uint16_t XD_CLAIM       = 6; // v2 only
constexpr uint16_t XD_RESULT      = 7; // v2 only
constexpr uint32_t XD_MODE_LOCAL  = 0;
constexpr uint32_t XD_MODE_SERVED = 1;

constexpr uint32_t XD_MAX_ROWS     = 8192;
constexpr uint32_t XD_MAX_EMBD     = 65536;
constexpr uint32_t XD_MAX_USED     = 64;
constexpr uint32_t XD_MAX_DESC     = 256;
constexpr uint32_t XD_MAX_PAYLOAD  = 256u << 20;
constexpr uint32_t XD_MAX_QUIET_MS = 60000;

constexpr size_t XD_HEADER_BYTES     = 16;
constexpr size_t XD_HELLO_FIXED      = 28;
constexpr size_t XD_HELLO_ACK_BYTES  = 8;
constexpr size_t XD_REQUEST_FIXED    = 24;
constexpr size_t XD_RESPONSE_FIXED   = 28;
constexpr size_t XD_AUDIT_FIXED      = 16;
constexpr size_t XD_CLAIM_FIXED      = 24;
constexpr size_t XD_RESULT_FIXED     = 16;
constexpr size_t XD_PRECLAIM_FIXED   = 4;  // v3: REQUEST's trailer {n_preclaimed u32}, then flags when > 0
constexpr size_t XD_OFFER_FIXED      = 16; // v3: RESULT's trailer {ttl_ms u32, max_pairs u32, a f32, b f32}
constexpr uint32_t XD_MAX_OFFER_TTL_MS = 1000;
constexpr float    XD_MAX_OFFER_B      = 1e6f;
// v3: the coordinator's own correction of an offer's line, per layer: after each pre-claimed exchange the RESULT wait
// (collect) is held against this target, and the pairs it pre-claims move the other way: by XD_ADJ_STEP_PAIRS·(1 − a)
// fewer after a wait past it, XD_ADJ_STEP_PAIRS·a more after none (a: the offer's slope). That settles where the
// coordinator waits in a share a of its exchanges — the split that minimises the layer's expected time when only the
// dispatcher's part is noisy: one pair more for it saves l (the local time per pair) whenever the coordinator would not
// wait and costs p (its time per pair) whenever it would, so P(wait)·p = (1 − P(wait))·l, P(wait) = l / (l + p) = a.
// Whatever the dispatcher's model of its own hops leaves out is so corrected, and one late RESULT moves the split by
// less than a pair. Bounded to [XD_ADJ_MIN, XD_ADJ_MAX] pairs. An evaluation the corrected line leaves local (no
// REQUEST) moves it back by a quarter step, so a layer whose correction once took every pair of a decode step tries a
// pair again after a few evaluations instead of never.
constexpr int64_t  XD_WAIT_TARGET_US   = 150;
constexpr float    XD_ADJ_STEP_PAIRS   = 0.25f;
constexpr float    XD_ADJ_MIN          = -16.0f;
constexpr float    XD_ADJ_MAX          = 4096.0f;

// A pair's flag in the remote op's output (after the partial sums): how the rest of the layer treats it.
constexpr float XD_PAIR_LOCAL   = 0.0f; // computed here
constexpr float XD_PAIR_SERVED  = 1.0f; // not computed by this pass: served (v1), claimed (v2, first pass) or already
                                        // computed (second pass)
constexpr float XD_PAIR_AUDITED = 2.0f; // computed here, and its sum reported back (AUDIT)

// A dispatcher that accepts but never acknowledges HELLO costs one such wait per attempt, then a backoff.
constexpr int64_t XD_CONNECT_TIMEOUT_US = 1000 * 1000;
// Between failed connection attempts (whatever failed: no socket, refused, hung up, mute): short at first so a
// dispatcher that starts late is found promptly, at most 2 s so that an absent one costs nothing while idle.
constexpr int64_t XD_BACKOFF_MIN_MS     = 100;
constexpr int64_t XD_BACKOFF_MAX_MS     = 2000;
// While connected the connector only waits for a drop; drops notify it, this bounds the wait all the same.
constexpr int64_t XD_CONNECTED_POLL_MS  = 1000;
// After a failed exchange no layer is dispatched for a cool-down that doubles per consecutive failure, so a stalled
// dispatcher costs at most one deadline per incident instead of one per layer and token.
constexpr int64_t XD_COOLDOWN_MIN_MS    = 1000;
constexpr int64_t XD_COOLDOWN_MAX_MS    = 30000;
// v2: once a RESULT's header is in, its payload may take this long past the deadline (or now, if later).
constexpr int64_t XD_RESULT_PAYLOAD_US  = 100 * 1000;

int64_t now_us() {
    return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

size_t pad4(size_t n) { return (n + 3) & ~size_t(3); }

void put_u32(std::vector<char> & b, uint32_t v) { const size_t o = b.size(); b.resize(o + 4); memcpy(b.data() + o, &v, 4); }
void put_u16(std::vector<char> & b, uint16_t v) { const size_t o = b.size(); b.resize(o + 2); memcpy(b.data() + o, &v, 2); }
uint32_t get_u32(const char * p) { uint32_t v; memcpy(&v, p, 4); return v; }
uint16_t get_u16(const char * p) { uint16_t v; memcpy(&v, p, 2); return v; }

void put_header(std::vector<char> & b, uint16_t version, uint16_t kind, uint32_t seq, uint32_t payload) {
    put_u32(b, XD_MAGIC);
    put_u16(b, version);
    put_u16(b, kind);
    put_u32(b, seq);
    put_u32(b, payload);
}

// Waits for `events` on fd until the absolute deadline; false on timeout or error (err says which).
bool wait_fd(int fd, short events, int64_t deadline_us, std::string & err) {
    for (;;) {
        const int64_t left = deadline_us - now_us();
        if (left <= 0) { err = "timed out"; return false; }
        pollfd p = { fd, events, 0 };
        const int r = ::poll(&p, 1, (int) ((left + 999) / 1000));
        if (r > 0) {
            if (p.revents & (POLLERR | POLLNVAL)) { err = "socket error"; return false; }
            return true;
        }
        if (r < 0 && errno != EINTR) { err = std::string("poll: ") + strerror(errno); return false; }
    }
}

bool write_all(int fd, const char * p, size_t n, int64_t deadline_us, std::string & err) {
    while (n > 0) {
        const ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
        if (k > 0) { p += k; n -= (size_t) k; continue; }
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (!wait_fd(fd, POLLOUT, deadline_us, err)) { err = "writing: " + err; return false; }
            continue;
        }
        err = std::string("writing: ") + strerror(errno);
        return false;
    }
    return true;
}

// `closed` (optional) is set when the peer closed the connection (end of stream or reset).
bool read_all(int fd, char * p, size_t n, int64_t deadline_us, std::string & err, bool * closed = nullptr) {
    while (n > 0) {
        const ssize_t k = ::recv(fd, p, n, 0);
        if (k > 0) { p += k; n -= (size_t) k; continue; }
        if (k == 0 || errno == ECONNRESET) {
            err = "dispatcher closed the connection";
            if (closed != nullptr) *closed = true;
            return false;
        }
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            if (!wait_fd(fd, POLLIN, deadline_us, err)) { err = "waiting for the dispatcher: " + err; return false; }
            continue;
        }
        err = std::string("reading: ") + strerror(errno);
        return false;
    }
    return true;
}

// Reads one frame header and checks what can be checked without the payload. The header's version must lie in
// [ver_lo, ver_hi] (the connection's version, or for HELLO_ACK 1 up to the version offered); *version gets it.
bool read_header(int fd, uint16_t ver_lo, uint16_t ver_hi, uint16_t * version, uint16_t want_kind, uint32_t want_seq,
                 uint32_t max_payload, uint32_t & payload, int64_t deadline_us, std::string & err, bool * closed = nullptr) {
    char h[XD_HEADER_BYTES];
    if (!read_all(fd, h, sizeof(h), deadline_us, err, closed)) return false;
    if (get_u32(h) != XD_MAGIC)            { err = "garbage frame (bad magic)"; return false; }
    const uint16_t v = get_u16(h + 4);
    if (v < ver_lo || v > ver_hi) {
        err = "protocol version " + std::to_string(v) + " (want " + std::to_string(ver_lo) +
              (ver_hi != ver_lo ? ".." + std::to_string(ver_hi) : std::string()) + ")";
        return false;
    }
    if (version != nullptr) *version = v;
    if (get_u16(h + 6) != want_kind)       { err = "unexpected frame kind " + std::to_string(get_u16(h + 6)); return false; }
    if (get_u32(h + 8) != want_seq)        { err = "response for another request (seq mismatch)"; return false; }
    payload = get_u32(h + 12);
    if (payload > max_payload)             { err = "frame too large (" + std::to_string(payload) + " bytes)"; return false; }
    return true;
}

bool read_header(int fd, uint16_t version, uint16_t want_kind, uint32_t want_seq, uint32_t max_payload, uint32_t & payload,
                 int64_t deadline_us, std::string & err) {
    return read_header(fd, version, version, nullptr, want_kind, want_seq, max_payload, payload, deadline_us, err);
}

std::once_flag g_unsupported_once;

} // namespace

struct llama_xd_layer {
    llama_expert_dispatch * xd = nullptr;
    int il = 0;
    std::atomic<int64_t>  quiet_until_us{0};
    std::atomic<uint32_t> local_ns_per_pair{0}; // EMA of wall time per locally computed pair (0 = unknown)
    int64_t up_ns = 0;                          // written by the up op's thread 0, read by the down op's thread 0
    // The audit the dispatcher asked for in this evaluation of the layer: written by the remote op, read by the audit
    // op of the same graph (ggml's barrier between ops orders them). audit_pairs 0: nothing to report.
    uint32_t audit_pairs = 0;
    uint32_t audit_seq = 0;
    uint64_t audit_conn = 0; // the connection the request went out on: a seq means nothing on another one
    // v2: the RESULT owed for this evaluation's CLAIM (written by the remote op, read by the collect op of the same
    // graph). result_pending false: nothing claimed, or no v2 exchange.
    bool     result_pending = false;
    uint32_t result_seq = 0;
    uint64_t result_conn = 0;
    int64_t  result_deadline_us = 0; // t0 + the per-layer deadline
    uint32_t result_claimed = 0;     // the pairs it owes (claimed or pre-claimed)
    // v3: the standing offer for this layer's next REQUEST, from the last RESULT (guarded by io_mu). Used once, and only
    // on the connection that sent it, before offer_until_us.
    bool     offer_valid = false;
    uint64_t offer_conn = 0;
    int64_t  offer_until_us = 0;
    uint32_t offer_max = 0;
    float    offer_a = 0.0f, offer_b = 0.0f;
    std::vector<uint8_t> offer_experts; // bit e: expert e may be pre-claimed
    // v3: pairs taken off every offer's line (XD_WAIT_TARGET_US above), and whether this evaluation's RESULT answers a
    // pre-claim (written by the remote op, read by the collect op of the same graph)
    float    offer_adj = 0.0f;
    float    preclaim_a = 0.0f; // the slope of the offer this evaluation's pre-claim used
    bool     result_preclaimed = false;
};

struct llama_expert_dispatch {
    std::string path;
    int32_t deadline_ms = 250;
    llama_xd_model_info info;

    std::mutex io_mu; // one exchange at a time; guards fd, version, seq, conn_gen, awaiting_result, buffers
    int fd = -1;
    uint16_t version = 0;  // of the connection: what HELLO_ACK said
    uint32_t seq = 0;
    uint64_t conn_gen = 0; // counts connections, so an audit is never sent on a later one than its request
    bool awaiting_result = false; // v2: a RESULT is owed on this connection (a CLAIM with pairs was read)
    uint16_t forced_version = 0;  // LINKCPP_EXPERT_DISPATCH_VERSION: offer only this one (0: offer 3, step down on a close)
    std::vector<char> req;
    std::vector<char> resp;

    std::atomic<bool> connected{false};
    std::atomic<bool> stopping{false};
    std::atomic<int64_t> suspended_until_us{0};
    int64_t cooldown_ms = XD_COOLDOWN_MIN_MS; // guarded by io_mu
    std::mutex cv_mu;
    std::condition_variable cv;
    std::thread connector;

    std::mutex log_mu;
    bool degraded = false;
    bool fallback_noted = false;

    // Where a dispatched layer's time goes on the coordinator's side, summed since start (LINKCPP_EXPERT_DISPATCH_STATS_MS:
    // logged at most that often, when anything changed; unset or 0: never). Written by the ops' thread 0 only.
    struct {
        std::atomic<uint64_t> exchanges{0};     // REQUESTs written
        std::atomic<uint64_t> claimed{0};       // v2 exchanges whose CLAIM took pairs
        std::atomic<uint64_t> pairs{0};         // pairs in those exchanges' REQUESTs
        std::atomic<uint64_t> pairs_claimed{0};
        std::atomic<uint64_t> pairs_served{0};  // of the claimed, served in a RESULT read in time
        std::atomic<uint64_t> exchange_us{0};   // REQUEST built and written, its CLAIM (v1: RESPONSE) read
        std::atomic<uint64_t> local_us{0};      // the first pass (gate/up and down ops) of the claimed exchanges' layers
        std::atomic<uint64_t> wait_us{0};       // collect: first pass done → the RESULT read (or given up)
        std::atomic<uint64_t> preclaimed{0};    // v3: REQUESTs that pre-claimed pairs under an offer (no CLAIM read)
        std::atomic<uint64_t> offer_local{0};   // v3: layers computed here under an offer that took no pair (no REQUEST)
        // The waits' shape: those past XD_WAIT_TARGET_US (count, and their sum), and Σ max(0, wait − c), c the claimed
        // pairs' own local time at this layer's measured time per pair: what the coordinator would have saved at most
        // by computing the claimed pairs itself instead of waiting (bench:elastic prints it as a share of the round).
        std::atomic<uint64_t> waits_long{0};
        std::atomic<uint64_t> wait_long_us{0};
        std::atomic<uint64_t> wait_past_local_us{0};
    } stats;
    int64_t stats_every_us = 0;
    std::atomic<int64_t> stats_logged_us{0};
    uint64_t stats_logged_events = 0;

    // One line of the sums above, at most every stats_every_us (called by thread 0 of the collect op, and of the remote
    // op when an offer left the layer local).
    void maybe_log_stats() {
        if (stats_every_us <= 0) return;
        const int64_t now = now_us();
        if (now - stats_logged_us.load(std::memory_order_relaxed) < stats_every_us) return;
        const uint64_t ex = stats.exchanges.load();
        // anything new: an exchange, or a layer an offer left local
        const uint64_t events = ex + stats.offer_local.load();
        if (events == stats_logged_events) return;
        stats_logged_us = now;
        stats_logged_events = events;
        // at warning level: llama-server prints libllama's info lines only at trace verbosity (-lv 4), and whoever set
        // the variable asked for these
        LLAMA_LOG_WARN("expert-dispatch: stats t_us=%lld exchanges=%llu claimed=%llu pairs=%llu pairs_claimed=%llu "
                       "pairs_served=%llu exchange_us=%llu local_us=%llu wait_us=%llu preclaimed=%llu offer_local=%llu "
                       "waits_long=%llu wait_long_us=%llu wait_past_local_us=%llu\n",
                       (long long) now, (unsigned long long) ex, (unsigned long long) stats.claimed.load(),
                       (unsigned long long) stats.pairs.load(), (unsigned long long) stats.pairs_claimed.load(),
                       (unsigned long long) stats.pairs_served.load(), (unsigned long long) stats.exchange_us.load(),
                       (unsigned long long) stats.local_us.load(), (unsigned long long) stats.wait_us.load(),
                       (unsigned long long) stats.preclaimed.load(), (unsigned long long) stats.offer_local.load(),
                       (unsigned long long) stats.waits_long.load(), (unsigned long long) stats.wait_long_us.load(),
                       (unsigned long long) stats.wait_past_local_us.load());
    }

    std::unique_ptr<llama_xd_layer[]> layers;

    // Logs a fault once per incident: the first failure after a healthy period, not every token.
    void incident(const std::string & what) {
        std::lock_guard<std::mutex> lk(log_mu);
        if (!degraded) {
            LLAMA_LOG_WARN("expert-dispatch: %s (%s); computing experts locally until it recovers\n", what.c_str(), path.c_str());
            degraded = true;
        }
    }

    void healthy() {
        std::lock_guard<std::mutex> lk(log_mu);
        if (degraded) {
            LLAMA_LOG_INFO("expert-dispatch: dispatcher at %s answers again\n", path.c_str());
            degraded = false;
        }
    }

    // Drops the connection after a failed exchange; the connector thread reconnects in the background.
    void drop_locked(const std::string & why) {
        if (fd >= 0) { ::close(fd); fd = -1; }
        awaiting_result = false;
        connected = false;
        suspended_until_us = now_us() + cooldown_ms * 1000;
        cooldown_ms = std::min(cooldown_ms * 2, XD_COOLDOWN_MAX_MS);
        incident(why);
        wake_connector();
    }

    // Wakes the connector thread. Taking cv_mu first means the wake-up cannot fall between its check and its wait.
    void wake_connector() {
        { std::lock_guard<std::mutex> lk(cv_mu); }
        cv.notify_all();
    }

    // One connection attempt offering protocol `offer`; on success *agreed is the version HELLO_ACK set. `closed_early`
    // says the dispatcher closed before any HELLO_ACK (what a v1 dispatcher does with a version 2 HELLO).
    int try_connect(uint16_t offer, uint16_t * agreed, bool * closed_early, std::string & err) const {
        if (path.size() >= sizeof(sockaddr_un::sun_path)) { err = "socket path too long"; return -1; }
        const int s = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (s < 0) { err = std::string("socket: ") + strerror(errno); return -1; }
        sockaddr_un a = {};
        a.sun_family = AF_UNIX;
        memcpy(a.sun_path, path.c_str(), path.size());
        if (::connect(s, (sockaddr *) &a, sizeof(a)) != 0) {
            err = std::string("cannot connect: ") + strerror(errno);
            ::close(s);
            return -1;
        }
        const int64_t deadline = now_us() + XD_CONNECT_TIMEOUT_US;
        std::vector<char> hello;
        const uint32_t desc_len = (uint32_t) std::min<size_t>(info.desc.size(), XD_MAX_DESC);
        put_header(hello, offer, XD_HELLO, 0, (uint32_t) (XD_HELLO_FIXED + desc_len));
        put_u32(hello, (uint32_t) info.n_layer);
        put_u32(hello, (uint32_t) info.n_embd);
        put_u32(hello, (uint32_t) info.n_expert);
        put_u32(hello, (uint32_t) info.n_expert_used);
        put_u32(hello, (uint32_t) deadline_ms);
        put_u32(hello, LLAMA_XD_NUMERICS_LLAMA); // the local path rounds as ggml's CPU backend does
        put_u32(hello, desc_len);
        hello.insert(hello.end(), info.desc.data(), info.desc.data() + desc_len);
        uint32_t payload = 0;
        char ack[XD_HELLO_ACK_BYTES];
        if (!write_all(s, hello.data(), hello.size(), deadline, err)) {
            *closed_early = errno == EPIPE || errno == ECONNRESET;
            ::close(s);
            return -1;
        }
        // HELLO_ACK's version is the connection's: 1 up to what was offered
        if (!read_header(s, 1, offer, agreed, XD_HELLO_ACK, 0, XD_HELLO_ACK_BYTES, payload, deadline, err, closed_early)) {
            ::close(s);
            return -1;
        }
        if (payload != XD_HELLO_ACK_BYTES || !read_all(s, ack, sizeof(ack), deadline, err)) {
            if (err.empty()) err = "malformed hello acknowledgement";
            ::close(s);
            return -1;
        }
        if (get_u32(ack) != 1) {
            err = "dispatcher refused this model (code " + std::to_string(get_u32(ack + 4)) + ")";
            ::close(s);
            return -1;
        }
        return s;
    }

    // Keeps a connection up without ever spinning: every path through the loop either connects (bounded by the
    // connect timeout) or sleeps on the condition variable for a bounded time that only stop() cuts short, so an
    // absent, refusing or mute dispatcher costs a few wake-ups per second at most.
    void connector_loop() {
        int64_t backoff_ms = XD_BACKOFF_MIN_MS;
        // After a dispatcher closed on a HELLO of version v > 1 (an older one refuses it so), the next attempt offers
        // v − 1 at once; an attempt that fails otherwise, or connects, starts from the highest again.
        uint16_t step_down = 0; // the version the next attempt offers; 0: the highest
        std::unique_lock<std::mutex> lk(cv_mu);
        while (!stopping) {
            if (connected) {
                // a drop (drop_locked) wakes us; nothing else to do meanwhile
                cv.wait_for(lk, std::chrono::milliseconds(XD_CONNECTED_POLL_MS), [&] { return stopping.load() || !connected.load(); });
                continue;
            }
            const int64_t cool_us = suspended_until_us.load() - now_us();
            if (cool_us > 0) {
                // cooling down after a failed exchange: reconnecting now would only stall the next layer again
                cv.wait_for(lk, std::chrono::microseconds(cool_us), [&] { return stopping.load(); });
                continue;
            }
            lk.unlock(); // never hold cv_mu while taking io_mu: drop_locked takes them the other way round
            std::string err;
            const uint16_t offer = forced_version != 0 ? forced_version : step_down != 0 ? step_down : XD_VERSION_MAX;
            step_down = 0;
            uint16_t agreed = 0;
            bool closed_early = false;
            const int s = try_connect(offer, &agreed, &closed_early, err);
            bool retry_now = false;
            if (s >= 0) {
                {
                    std::lock_guard<std::mutex> io(io_mu);
                    fd = s;
                    version = agreed;
                    awaiting_result = false;
                    ++conn_gen;
                    connected = true;
                }
                backoff_ms = XD_BACKOFF_MIN_MS;
                LLAMA_LOG_INFO("expert-dispatch: connected to dispatcher at %s, protocol version %u\n", path.c_str(), (unsigned) agreed);
            } else if (closed_early && offer > 1 && forced_version == 0) {
                // maybe an older dispatcher: offer one version less at once (a close on that one steps down again;
                // any other failure backs off)
                step_down = (uint16_t) (offer - 1);
                retry_now = true;
                std::lock_guard<std::mutex> lg(log_mu);
                if (!fallback_noted) {
                    LLAMA_LOG_INFO("expert-dispatch: dispatcher at %s closed the connection on a version %u HELLO; offering version %u\n",
                                   path.c_str(), (unsigned) offer, (unsigned) step_down);
                    fallback_noted = true;
                }
            } else {
                incident(err);
            }
            lk.lock();
            if (s < 0 && !retry_now) {
                // The predicate is `stopping` alone: a disconnected state must not end the wait early (that was a
                // tight retry loop burning a core while the dispatcher was absent).
                cv.wait_for(lk, std::chrono::milliseconds(backoff_ms), [&] { return stopping.load(); });
                backoff_ms = std::min(backoff_ms * 2, XD_BACKOFF_MAX_MS);
            }
        }
    }

    // One request for a layer and its answer: v1 REQUEST/RESPONSE, v2 REQUEST/CLAIM (the RESULT is read later, by
    // collect). On return `dst` holds the partial sums (v1: served ones; v2: zeros) and a flag per pair (XD_PAIR_*:
    // served or claimed, local, local and audited; all zero = every pair local).
    void exchange(llama_xd_layer & L, const ggml_tensor * x, const ggml_tensor * ids, const ggml_tensor * probs, float * dst) {
        const uint32_t n_embd = (uint32_t) x->ne[0];
        const uint32_t n_tok  = (uint32_t) x->ne[1];
        const uint32_t n_used = (uint32_t) ids->ne[0];
        const size_t   stride = (size_t) n_embd + n_used;

        std::unique_lock<std::mutex> lk(io_mu);
        if (fd < 0 || now_us() < suspended_until_us.load()) return;
        if (awaiting_result) {
            // an evaluation that read a CLAIM never collected its RESULT (its graph was cut short): the stream holds a
            // frame nobody will match, so start over on a new connection
            drop_locked("a claimed layer's RESULT was never collected");
            return;
        }
        const int64_t deadline = now_us() + (int64_t) deadline_ms * 1000;
        const size_t n_pairs = (size_t) n_tok * n_used;

        // v3: the layer's standing offer, if one is good now, decides the split here (no CLAIM to wait for)
        size_t n_pre = 0;
        if (version >= 3 && L.offer_valid && (L.offer_conn != conn_gen || now_us() >= L.offer_until_us)) L.offer_valid = false;
        if (version >= 3 && L.offer_valid) {
            n_pre = preclaim_count(L, ids, n_tok, n_used);
            if (n_pre == 0) {
                // the offer takes nothing of a request this small: the layer is computed here, with no exchange
                stats.offer_local++;
                L.offer_adj = std::max(XD_ADJ_MIN, L.offer_adj - XD_ADJ_STEP_PAIRS / 4);
                return;
            }
            L.offer_valid = false; // used once
        }

        const size_t base = XD_REQUEST_FIXED + 4 * ((size_t) n_tok * n_embd + 2 * n_pairs);
        const size_t payload = base + (version >= 3 ? XD_PRECLAIM_FIXED + (n_pre > 0 ? pad4(n_pairs) : 0) : 0);
        if (payload > XD_MAX_PAYLOAD) return;
        const uint32_t my_seq = ++seq;
        req.clear();
        req.reserve(XD_HEADER_BYTES + payload);
        put_header(req, version, XD_REQUEST, my_seq, (uint32_t) payload);
        put_u32(req, (uint32_t) L.il);
        put_u32(req, n_tok);
        put_u32(req, n_embd);
        put_u32(req, n_used);
        put_u32(req, (uint32_t) deadline_ms * 1000);
        put_u32(req, L.local_ns_per_pair.load());
        const size_t o = req.size();
        req.resize(XD_HEADER_BYTES + payload);
        float   * rows = (float *) (req.data() + o);
        int32_t * idb  = (int32_t *) (rows + (size_t) n_tok * n_embd);
        float   * pb   = (float *) (idb + (size_t) n_tok * n_used);
        for (uint32_t t = 0; t < n_tok; ++t) {
            memcpy(rows + (size_t) t * n_embd, (const char *) x->data + t * x->nb[1], 4 * (size_t) n_embd);
            for (uint32_t k = 0; k < n_used; ++k) {
                idb[(size_t) t * n_used + k] = *(const int32_t *) ((const char *) ids->data + k * ids->nb[0] + t * ids->nb[1]);
                pb [(size_t) t * n_used + k] = *(const float   *) ((const char *) probs->data + k * probs->nb[1] + t * probs->nb[2]);
            }
        }
        uint8_t * pre = nullptr;
        if (version >= 3) {
            const uint32_t n = (uint32_t) n_pre;
            memcpy(req.data() + XD_HEADER_BYTES + base, &n, 4);
            if (n_pre > 0) {
                pre = (uint8_t *) (req.data() + XD_HEADER_BYTES + base + XD_PRECLAIM_FIXED);
                memset(pre, 0, pad4(n_pairs));
                mark_preclaimed(L, idb, n_pairs, n_pre, pre);
            }
        }

        std::string err;
        uint32_t rlen = 0;
        if (!write_all(fd, req.data(), req.size(), deadline, err)) {
            drop_locked(err);
            return;
        }
        stats.exchanges++;
        if (pre != nullptr) {
            // v3 pre-claim: the pairs are the dispatcher's until its RESULT; no CLAIM comes for this REQUEST
            for (size_t i = 0; i < n_pairs; ++i) {
                if (pre[i]) dst[(i / n_used) * stride + n_embd + i % n_used] = XD_PAIR_SERVED;
            }
            stats.preclaimed++;
            owe_result(L, my_seq, deadline, n_pairs, n_pre);
            L.result_preclaimed = true;
            L.preclaim_a        = L.offer_a;
            return;
        }
        if (version >= 2) {
            read_claim(L, my_seq, n_embd, n_tok, n_used, dst, lk);
            return;
        }
        if (!read_header(fd, version, XD_RESPONSE, my_seq, XD_MAX_PAYLOAD, rlen, deadline, err)) {
            drop_locked(err);
            return;
        }
        if (rlen < XD_RESPONSE_FIXED) { drop_locked("garbage frame (short response)"); return; }
        resp.resize(rlen);
        if (!read_all(fd, resp.data(), rlen, deadline, err)) { drop_locked(err); return; }

        const char * p = resp.data();
        const uint32_t r_layer = get_u32(p), r_tok = get_u32(p + 4), r_used = get_u32(p + 8);
        const uint32_t mode = get_u32(p + 12), quiet_ms = get_u32(p + 16), n_served = get_u32(p + 20);
        const uint32_t n_audit = get_u32(p + 24);
        if (r_layer != (uint32_t) L.il || r_tok != n_tok || r_used != n_used) {
            drop_locked("garbage frame (response does not match the request)");
            return;
        }
        if (quiet_ms > XD_MAX_QUIET_MS) { drop_locked("garbage frame (quiet_ms out of range)"); return; }
        if (mode != XD_MODE_LOCAL && mode != XD_MODE_SERVED) {
            drop_locked("garbage frame (unknown mode " + std::to_string(mode) + ")");
            return;
        }
        const bool   is_served = mode == XD_MODE_SERVED;
        if (!is_served && n_served != 0) { drop_locked("garbage frame (local answer with served pairs)"); return; }
        if (n_audit > n_pairs) { drop_locked("garbage frame (audit count out of range)"); return; }
        // fixed part | served u8[n_pairs] pad 4 (SERVED) | audit u8[n_pairs] pad 4 (n_audit > 0) | sums (SERVED)
        const size_t served_at = XD_RESPONSE_FIXED;
        const size_t audit_at  = served_at + (is_served ? pad4(n_pairs) : 0);
        const size_t sums_at   = audit_at + (n_audit > 0 ? pad4(n_pairs) : 0);
        if (rlen != sums_at + (is_served ? 4 * (size_t) n_tok * n_embd : 0)) {
            drop_locked(is_served ? "garbage frame (served answer of the wrong size)" : "garbage frame (local answer of the wrong size)");
            return;
        }
        const uint8_t * served = is_served   ? (const uint8_t *) (p + served_at) : nullptr;
        const uint8_t * audit  = n_audit > 0 ? (const uint8_t *) (p + audit_at)  : nullptr;
        const float   * sums   = is_served   ? (const float *)   (p + sums_at)   : nullptr;
        size_t count_served = 0, count_audit = 0;
        for (size_t i = 0; i < n_pairs; ++i) {
            const uint8_t s = served ? served[i] : 0, a = audit ? audit[i] : 0;
            if (s > 1) { drop_locked("garbage frame (served flag not 0 or 1)"); return; }
            if (a > 1) { drop_locked("garbage frame (audit flag not 0 or 1)"); return; }
            // an audit asks for the coordinator's own sum of a pair it computes; a served pair it does not compute
            if (s && a) { drop_locked("garbage frame (audited pair also served)"); return; }
            count_served += s;
            count_audit  += a;
        }
        if (count_served != n_served) { drop_locked("garbage frame (served count does not match the flags)"); return; }
        if (count_audit != n_audit) { drop_locked("garbage frame (audit count does not match the flags)"); return; }
        if (sums != nullptr) {
            for (size_t i = 0; i < (size_t) n_tok * n_embd; ++i) {
                float v;
                memcpy(&v, sums + i, 4);
                if (!std::isfinite(v)) { drop_locked("garbage frame (non-finite partial sum)"); return; }
            }
        }
        // dst holds zeros (remote_op cleared it): partial sums stay 0 and flags XD_PAIR_LOCAL unless said otherwise
        for (uint32_t t = 0; t < n_tok; ++t) {
            if (sums != nullptr) memcpy(dst + t * stride, (const char *) sums + 4 * (size_t) t * n_embd, 4 * (size_t) n_embd);
            for (uint32_t k = 0; k < n_used; ++k) {
                const size_t i = (size_t) t * n_used + k;
                dst[t * stride + n_embd + k] = served && served[i] ? XD_PAIR_SERVED : audit && audit[i] ? XD_PAIR_AUDITED : XD_PAIR_LOCAL;
            }
        }
        if (n_audit > 0) {
            L.audit_pairs = n_audit;
            L.audit_seq   = my_seq;
            L.audit_conn  = conn_gen;
        }
        if (quiet_ms > 0) L.quiet_until_us = now_us() + (int64_t) quiet_ms * 1000;
        cooldown_ms = XD_COOLDOWN_MIN_MS;
        lk.unlock();
        healthy();
    }

    // v2/v3: pairs were claimed (by a CLAIM, or pre-claimed): the layer's collect op reads their RESULT, due by `deadline`.
    void owe_result(llama_xd_layer & L, uint32_t my_seq, int64_t deadline, size_t n_pairs, size_t n_claimed) {
        stats.claimed++;
        stats.pairs += n_pairs;
        stats.pairs_claimed += n_claimed;
        L.result_pending     = true;
        L.result_seq         = my_seq;
        L.result_conn        = conn_gen;
        L.result_deadline_us = deadline;
        L.result_claimed     = (uint32_t) n_claimed;
        awaiting_result      = true;
    }

    // v3: how many pairs the layer's offer takes of this request: min(max, covered, ⌊a·N − b − adj⌋), 0 when ≤ 0.
    static size_t preclaim_count(const llama_xd_layer & L, const ggml_tensor * ids, uint32_t n_tok, uint32_t n_used) {
        const size_t n_pairs = (size_t) n_tok * n_used;
        size_t covered = 0;
        for (uint32_t t = 0; t < n_tok; ++t) {
            for (uint32_t k = 0; k < n_used; ++k) {
                const int32_t e = *(const int32_t *) ((const char *) ids->data + k * ids->nb[0] + t * ids->nb[1]);
                covered += offer_covers(L, e);
            }
        }
        const double line = std::floor((double) L.offer_a * (double) n_pairs - (double) L.offer_b - (double) L.offer_adj);
        if (!(line >= 1.0)) return 0;
        return std::min({ covered, (size_t) L.offer_max, (size_t) line });
    }

    static bool offer_covers(const llama_xd_layer & L, int32_t e) {
        return e >= 0 && (size_t) (e >> 3) < L.offer_experts.size() && ((L.offer_experts[(size_t) (e >> 3)] >> (e & 7)) & 1) != 0;
    }

    // v3: flags the first n_pre covered pairs in (t, k) order (ids: the REQUEST's, [n_pairs]).
    static void mark_preclaimed(const llama_xd_layer & L, const int32_t * ids, size_t n_pairs, size_t n_pre, uint8_t * pre) {
        size_t taken = 0;
        for (size_t i = 0; i < n_pairs && taken < n_pre; ++i) {
            if (offer_covers(L, ids[i])) {
                pre[i] = 1;
                ++taken;
            }
        }
    }

    // v2, right after the REQUEST went out: reads its CLAIM (until t0 + deadline at most, t0 = now) into dst's flags.
    void read_claim(llama_xd_layer & L, uint32_t my_seq, uint32_t n_embd, uint32_t n_tok, uint32_t n_used, float * dst,
                    std::unique_lock<std::mutex> & lk) {
        const size_t  stride   = (size_t) n_embd + n_used;
        const int64_t deadline = now_us() + (int64_t) deadline_ms * 1000;
        std::string err;
        uint32_t rlen = 0;
        const size_t n_pairs = (size_t) n_tok * n_used;
        if (!read_header(fd, version, XD_CLAIM, my_seq, XD_MAX_PAYLOAD, rlen, deadline, err)) { drop_locked(err); return; }
        if (rlen < XD_CLAIM_FIXED) { drop_locked("garbage frame (short claim)"); return; }
        // the size is checked exactly below; bound it before anything is allocated for the payload
        if (rlen > XD_CLAIM_FIXED + 2 * pad4(n_pairs)) { drop_locked("garbage frame (claim of the wrong size)"); return; }
        resp.resize(rlen);
        if (!read_all(fd, resp.data(), rlen, deadline, err)) { drop_locked(err); return; }

        const char * p = resp.data();
        const uint32_t r_layer = get_u32(p), r_tok = get_u32(p + 4), r_used = get_u32(p + 8);
        const uint32_t quiet_ms = get_u32(p + 12), n_claimed = get_u32(p + 16), n_audit = get_u32(p + 20);
        if (r_layer != (uint32_t) L.il || r_tok != n_tok || r_used != n_used) {
            drop_locked("garbage frame (claim does not match the request)");
            return;
        }
        if (quiet_ms > XD_MAX_QUIET_MS) { drop_locked("garbage frame (quiet_ms out of range)"); return; }
        if (n_claimed > n_pairs) { drop_locked("garbage frame (claim count out of range)"); return; }
        if (n_audit > n_pairs) { drop_locked("garbage frame (audit count out of range)"); return; }
        // fixed part | claimed u8[n_pairs] pad 4 (n_claimed > 0) | audit u8[n_pairs] pad 4 (n_audit > 0)
        const size_t audit_at = XD_CLAIM_FIXED + (n_claimed > 0 ? pad4(n_pairs) : 0);
        if (rlen != audit_at + (n_audit > 0 ? pad4(n_pairs) : 0)) { drop_locked("garbage frame (claim of the wrong size)"); return; }
        const uint8_t * claimed = n_claimed > 0 ? (const uint8_t *) (p + XD_CLAIM_FIXED) : nullptr;
        const uint8_t * audit   = n_audit > 0   ? (const uint8_t *) (p + audit_at)       : nullptr;
        size_t count_claimed = 0, count_audit = 0;
        for (size_t i = 0; i < n_pairs; ++i) {
            const uint8_t c = claimed ? claimed[i] : 0, a = audit ? audit[i] : 0;
            if (c > 1) { drop_locked("garbage frame (claimed flag not 0 or 1)"); return; }
            if (a > 1) { drop_locked("garbage frame (audit flag not 0 or 1)"); return; }
            if (c && a) { drop_locked("garbage frame (audited pair also claimed)"); return; }
            count_claimed += c;
            count_audit   += a;
        }
        if (count_claimed != n_claimed) { drop_locked("garbage frame (claimed count does not match the flags)"); return; }
        if (count_audit != n_audit) { drop_locked("garbage frame (audit count does not match the flags)"); return; }
        // dst holds zeros (remote_op cleared it): partial sums stay 0; a claimed pair is skipped by the first pass
        for (uint32_t t = 0; t < n_tok; ++t) {
            for (uint32_t k = 0; k < n_used; ++k) {
                const size_t i = (size_t) t * n_used + k;
                dst[t * stride + n_embd + k] = claimed && claimed[i] ? XD_PAIR_SERVED : audit && audit[i] ? XD_PAIR_AUDITED : XD_PAIR_LOCAL;
            }
        }
        if (n_audit > 0) {
            L.audit_pairs = n_audit;
            L.audit_seq   = my_seq;
            L.audit_conn  = conn_gen;
        }
        if (quiet_ms > 0) L.quiet_until_us = now_us() + (int64_t) quiet_ms * 1000;
        if (n_claimed > 0) {
            owe_result(L, my_seq, deadline, n_pairs, n_claimed);
            return; // the exchange is complete (and healthy) once its RESULT is in
        }
        cooldown_ms = XD_COOLDOWN_MIN_MS;
        lk.unlock();
        healthy();
    }

    // v2: reads the RESULT owed for the layer's CLAIM. R: the remote op's output (flags: XD_PAIR_SERVED = claimed);
    // r2: [n_embd + n_used] per token, the partial sums (the first pass's output) and flags, all XD_PAIR_SERVED (done)
    // on entry. Adds the RESULT's sums to the partial sums and flags XD_PAIR_LOCAL every claimed pair that was not
    // served; when the RESULT fails (timeout, invalid, connection gone), every claimed pair, and drops the connection.
    void collect(llama_xd_layer & L, const ggml_tensor * R, uint32_t n_embd, uint32_t n_tok, uint32_t n_used, float * r2) {
        const size_t stride  = (size_t) n_embd + n_used;
        const size_t n_pairs = (size_t) n_tok * n_used;
        auto claimed = [&](size_t i) {
            const int64_t t = (int64_t) (i / n_used), k = (int64_t) (i % n_used);
            return *(const float *) ((const char *) R->data + t * R->nb[1] + (n_embd + k) * sizeof(float)) == XD_PAIR_SERVED;
        };
        auto compute_claimed_here = [&] {
            for (size_t i = 0; i < n_pairs; ++i) {
                if (claimed(i)) r2[(i / n_used) * stride + n_embd + i % n_used] = XD_PAIR_LOCAL;
            }
        };

        std::unique_lock<std::mutex> lk(io_mu);
        // the connection dropped since the CLAIM (e.g. the audit could not be written): the RESULT is lost
        if (fd < 0 || conn_gen != L.result_conn || !awaiting_result) { compute_claimed_here(); return; }
        std::string err;
        uint32_t rlen = 0;
        const int64_t head_deadline = std::max(L.result_deadline_us, now_us() + 1000);
        if (!read_header(fd, version, XD_RESULT, L.result_seq, XD_MAX_PAYLOAD, rlen, head_deadline, err)) {
            drop_locked(err);
            compute_claimed_here();
            return;
        }
        auto fail = [&](const std::string & why) {
            drop_locked(why);
            compute_claimed_here();
        };
        const size_t offer_at = XD_RESULT_FIXED + pad4(n_pairs) + 4 * (size_t) n_tok * n_embd;
        const size_t bitmap_bytes = ((size_t) info.n_expert + 7) / 8;
        // v3: the offer trailer, then its bitmap when there is an offer
        const bool sized = version >= 3 ? rlen == offer_at + XD_OFFER_FIXED || rlen == offer_at + XD_OFFER_FIXED + pad4(bitmap_bytes)
                                        : rlen == offer_at;
        if (!sized) { fail("garbage frame (result of the wrong size)"); return; }
        resp.resize(rlen);
        if (!read_all(fd, resp.data(), rlen, std::max(L.result_deadline_us, now_us()) + XD_RESULT_PAYLOAD_US, err)) { fail(err); return; }
        const char * p = resp.data();
        const uint32_t r_layer = get_u32(p), r_tok = get_u32(p + 4), r_used = get_u32(p + 8), n_served = get_u32(p + 12);
        if (r_layer != (uint32_t) L.il || r_tok != n_tok || r_used != n_used) { fail("garbage frame (result does not match the request)"); return; }
        const uint8_t * served = (const uint8_t *) (p + XD_RESULT_FIXED);
        const float   * sums   = (const float *) (p + XD_RESULT_FIXED + pad4(n_pairs));
        size_t count_served = 0;
        for (size_t i = 0; i < n_pairs; ++i) {
            if (served[i] > 1) { fail("garbage frame (served flag not 0 or 1)"); return; }
            if (served[i] && !claimed(i)) { fail("garbage frame (served pair that was not claimed)"); return; }
            count_served += served[i];
        }
        if (count_served != n_served) { fail("garbage frame (served count does not match the flags)"); return; }
        for (size_t i = 0; i < (size_t) n_tok * n_embd; ++i) {
            float v;
            memcpy(&v, sums + i, 4);
            if (!std::isfinite(v)) { fail("garbage frame (non-finite partial sum)"); return; }
        }
        if (version >= 3) {
            const char * o = p + offer_at;
            const uint32_t ttl_ms = get_u32(o), max_pairs = get_u32(o + 4);
            float a, b;
            memcpy(&a, o + 8, 4);
            memcpy(&b, o + 12, 4);
            const bool none = ttl_ms == 0 && max_pairs == 0 && a == 0.0f && b == 0.0f;
            if (none != (rlen == offer_at + XD_OFFER_FIXED)) { fail("garbage frame (offer of the wrong size)"); return; }
            if (!none) {
                if (ttl_ms < 1 || ttl_ms > XD_MAX_OFFER_TTL_MS || max_pairs < 1 || max_pairs > XD_MAX_ROWS * XD_MAX_USED ||
                    !std::isfinite(a) || a < 0.0f || a > 1.0f || !std::isfinite(b) || std::fabs(b) > XD_MAX_OFFER_B) {
                    fail("garbage frame (offer out of range)");
                    return;
                }
                L.offer_valid    = true;
                L.offer_conn     = conn_gen;
                L.offer_until_us = now_us() + (int64_t) ttl_ms * 1000;
                L.offer_max      = max_pairs;
                L.offer_a        = a;
                L.offer_b        = b;
                L.offer_experts.assign((const uint8_t *) o + XD_OFFER_FIXED, (const uint8_t *) o + XD_OFFER_FIXED + bitmap_bytes);
            } else {
                L.offer_valid = false;
            }
        }
        awaiting_result = false;
        cooldown_ms = XD_COOLDOWN_MIN_MS;
        stats.pairs_served += n_served;
        // out = first pass + RESULT sums (elementwise) + claimed-not-served pairs (second pass, k order)
        for (uint32_t t = 0; t < n_tok; ++t) {
            float * row = r2 + t * stride;
            if (n_served > 0) {
                for (uint32_t r = 0; r < n_embd; ++r) {
                    float v;
                    memcpy(&v, sums + (size_t) t * n_embd + r, 4);
                    row[r] += v;
                }
            }
            for (uint32_t k = 0; k < n_used; ++k) {
                const size_t i = (size_t) t * n_used + k;
                if (claimed(i) && !served[i]) row[n_embd + k] = XD_PAIR_LOCAL;
            }
        }
        lk.unlock();
        healthy();
    }

    // Sends the audited pairs' sums of the layer's last exchange (AUDIT, the request's seq), and waits for nothing:
    // no answer is expected; the write itself is bounded by the deadline like every other.
    void send_audit(const llama_xd_layer & L, uint32_t n_audit, const float * sums, uint32_t n_embd, uint32_t n_tok) {
        std::unique_lock<std::mutex> lk(io_mu);
        // the connection dropped (and maybe came back) since the request: the dispatcher holds no request to match
        if (fd < 0 || conn_gen != L.audit_conn) return;
        const size_t sums_bytes = 4 * (size_t) n_tok * n_embd;
        if (XD_AUDIT_FIXED + sums_bytes > XD_MAX_PAYLOAD) return; // cannot happen: its REQUEST was larger
        const int64_t deadline = now_us() + (int64_t) deadline_ms * 1000;
        std::vector<char> head;
        put_header(head, version, XD_AUDIT, L.audit_seq, (uint32_t) (XD_AUDIT_FIXED + sums_bytes));
        put_u32(head, (uint32_t) L.il);
        put_u32(head, n_tok);
        put_u32(head, n_audit);
        put_u32(head, 0); // reserved
        std::string err;
        if (!write_all(fd, head.data(), head.size(), deadline, err) ||
            !write_all(fd, (const char *) sums, sums_bytes, deadline, err)) {
            drop_locked("sending an audit: " + err);
        }
    }
};

namespace {

#if defined(__GNUC__)
#define XD_NOINLINE __attribute__((noinline))
#else
#define XD_NOINLINE
#endif

// Tiles of the local ops, as ggml's mul_mat_id tiles: the local pairs are grouped by expert, and each weight row is
// dotted with the activations of up to XD_TILE_PAIRS pairs of its expert while it sits in L1, XD_TILE_ROWS rows per
// tile. Tokens are taken XD_TILE_TOKENS at a time, which bounds the scratch memory (linkcpp-expert-ref's records
// may be long). Every output element is still one vec_dot of one weight row and one converted activation row, so
// neither the tiling nor the thread split changes a bit of the results.
constexpr int64_t XD_TILE_ROWS   = 16;
constexpr int64_t XD_TILE_PAIRS  = 16;
constexpr int64_t XD_TILE_TOKENS = 256;
// The down op's row tile holds this many dot products at most (all local pairs × rows): with few pairs (decoding) a
// tile spans the thread's whole row range, so each expert's rows are read as one stream, as before the tiling.
constexpr int64_t XD_DOTS_BUDGET = 32768;

// ---- Q4_K weights: several activation columns per weight row, bit for bit ggml's vec_dot ----
//
// ggml_vec_dot_q4_K_q8_K (ggml-cpu/arch/x86/quants.c, its AVX2 branch, the one this build's ggml runs) redone for
// XD_Q4K_COLS activation columns at once: every column goes through the very instructions ggml's does, in the same
// order (the same integer lanes, the same FMAs into the same accumulators, the same horizontal sums), so each result is
// the float vec_dot returns; only the weight-side work (unpacking the 4-bit quants and the 6-bit scales) is shared by
// the columns. Used only when q4_K_cols_ok(): ggml built with AVX2, FMA and F16C, and a self-test against ggml's own
// vec_dot on random blocks agrees bit for bit (else the local ops keep calling vec_dot).
constexpr int XD_Q4K_COLS = 4;

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define XD_HAVE_Q4K_COLS 1

struct xd_block_q4_K { uint16_t d, dmin; uint8_t scales[12]; uint8_t qs[128]; }; // ggml's block_q4_K
struct xd_block_q8_K { float d; int8_t qs[256]; int16_t bsums[16]; };           // ggml's block_q8_K
static_assert(sizeof(xd_block_q4_K) == 144 && sizeof(xd_block_q8_K) == 292, "ggml's Q4_K / Q8_K block layout");

alignas(32) const uint8_t xd_k4_shuffle[256] = { // ggml's get_scale_shuffle_k4 table
     0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1,
     2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3,
     4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5,
     6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7,
     8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9,
    10,11,10,11,10,11,10,11,10,11,10,11,10,11,10,11,10,11,10,11,10,11,10,11,10,11,10,11,10,11,10,11,
    12,13,12,13,12,13,12,13,12,13,12,13,12,13,12,13,12,13,12,13,12,13,12,13,12,13,12,13,12,13,12,13,
    14,15,14,15,14,15,14,15,14,15,14,15,14,15,14,15,14,15,14,15,14,15,14,15,14,15,14,15,14,15,14,15,
};

// *s[c] = x · y[c] for c < XD_Q4K_COLS; x: n / 256 Q4_K blocks, y[c]: n / 256 Q8_K blocks.
__attribute__((target("avx2,fma,f16c"), noinline))
void q4_K_dot_cols(int n, const void * vx, const void * const * vy, float * const * s) {
    constexpr int NC = XD_Q4K_COLS;
    const auto * x = (const xd_block_q4_K *) vx;
    const xd_block_q8_K * y[NC];
    for (int c = 0; c < NC; ++c) y[c] = (const xd_block_q8_K *) vy[c];
    const int nb = n / 256;
    const uint32_t kmask1 = 0x3f3f3f3f, kmask2 = 0x0f0f0f0f, kmask3 = 0x03030303;
    uint32_t utmp[4];
    const __m256i m4 = _mm256_set1_epi8(0xF);
    __m256 acc[NC];
    __m128 acc_m[NC];
    for (int c = 0; c < NC; ++c) {
        acc[c] = _mm256_setzero_ps();
        acc_m[c] = _mm_setzero_ps();
    }
    for (int i = 0; i < nb; ++i) {
        const float xd = _cvtsh_ss(x[i].d), xdmin = _cvtsh_ss(x[i].dmin);
        memcpy(utmp, x[i].scales, 12);
        utmp[3] = ((utmp[2] >> 4) & kmask2) | (((utmp[1] >> 6) & kmask3) << 4);
        const uint32_t uaux = utmp[1] & kmask1;
        utmp[1] = (utmp[2] & kmask2) | (((utmp[0] >> 6) & kmask3) << 4);
        utmp[2] = uaux;
        utmp[0] &= kmask1;
        const __m256i mins_and_scales = _mm256_cvtepu8_epi16(_mm_set_epi32(utmp[3], utmp[2], utmp[1], utmp[0]));
        const __m128i mins = _mm256_extracti128_si256(mins_and_scales, 1);
        const __m128i sc128 = _mm256_extracti128_si256(mins_and_scales, 0);
        const __m256i scales = _mm256_insertf128_si256(_mm256_castsi128_si256(sc128), sc128, 1);
        __m256i sumi[NC];
        for (int c = 0; c < NC; ++c) {
            const float dmin = -y[c][i].d * xdmin;
            const __m256i q8sums = _mm256_loadu_si256((const __m256i *) y[c][i].bsums);
            const __m128i q8s = _mm_hadd_epi16(_mm256_extracti128_si256(q8sums, 0), _mm256_extracti128_si256(q8sums, 1));
            const __m128i prod = _mm_madd_epi16(mins, q8s);
            acc_m[c] = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(prod), acc_m[c]);
            sumi[c] = _mm256_setzero_si256();
        }
        for (int j = 0; j < 4; ++j) {
            const __m256i scale_l = _mm256_shuffle_epi8(scales, _mm256_load_si256((const __m256i *) xd_k4_shuffle + 2 * j + 0));
            const __m256i scale_h = _mm256_shuffle_epi8(scales, _mm256_load_si256((const __m256i *) xd_k4_shuffle + 2 * j + 1));
            const __m256i q4bits = _mm256_loadu_si256((const __m256i *) (x[i].qs + 32 * j));
            const __m256i q4l = _mm256_and_si256(q4bits, m4);
            const __m256i q4h = _mm256_and_si256(_mm256_srli_epi16(q4bits, 4), m4);
            for (int c = 0; c < NC; ++c) {
                const int8_t * q8 = y[c][i].qs + 64 * j;
                __m256i p16l = _mm256_maddubs_epi16(q4l, _mm256_loadu_si256((const __m256i *) q8));
                p16l = _mm256_madd_epi16(scale_l, p16l);
                __m256i p16h = _mm256_maddubs_epi16(q4h, _mm256_loadu_si256((const __m256i *) (q8 + 32)));
                p16h = _mm256_madd_epi16(scale_h, p16h);
                sumi[c] = _mm256_add_epi32(sumi[c], _mm256_add_epi32(p16l, p16h));
            }
        }
        for (int c = 0; c < NC; ++c) {
            const float d = y[c][i].d * xd;
            acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi[c]), acc[c]);
        }
    }
    for (int c = 0; c < NC; ++c) {
        __m128 am = acc_m[c];
        am = _mm_add_ps(am, _mm_movehl_ps(am, am));
        am = _mm_add_ss(am, _mm_movehdup_ps(am));
        __m128 res = _mm256_extractf128_ps(acc[c], 1); // ggml's hsum_float_8
        res = _mm_add_ps(res, _mm256_castps256_ps128(acc[c]));
        res = _mm_add_ps(res, _mm_movehl_ps(res, res));
        res = _mm_add_ss(res, _mm_movehdup_ps(res));
        *s[c] = _mm_cvtss_f32(res) + _mm_cvtss_f32(am);
    }
}
#endif

// Whether q4_K_dot_cols may stand in for ggml's Q4_K vec_dot: decided once, by a self-test on random blocks (three
// scales of activations, some zeros) that must agree bit for bit with ggml's own vec_dot.
bool q4_K_cols_ok() {
#if defined(XD_HAVE_Q4K_COLS)
    static const bool ok = [] {
        if (!ggml_cpu_has_avx2() || !ggml_cpu_has_fma() || !ggml_cpu_has_f16c()) return false;
        const ggml_type_traits_cpu * tw = ggml_get_type_traits_cpu(GGML_TYPE_Q4_K);
        const ggml_type_traits_cpu * ta = ggml_get_type_traits_cpu(GGML_TYPE_Q8_K);
        if (tw == nullptr || tw->vec_dot == nullptr || tw->vec_dot_type != GGML_TYPE_Q8_K || tw->from_float == nullptr ||
            ta == nullptr || ta->from_float == nullptr) {
            return false;
        }
        const int n = 4 * 256, rows = 16;
        std::vector<float> f(n);
        uint32_t state = 12345;
        auto rnd = [&state] { // xorshift: a fixed, portable sequence
            state ^= state << 13; state ^= state >> 17; state ^= state << 5;
            return (float) ((double) state / 4294967296.0 - 0.5);
        };
        std::vector<char> w(rows * ggml_row_size(GGML_TYPE_Q4_K, n)), a(XD_Q4K_COLS * ggml_row_size(GGML_TYPE_Q8_K, n));
        const size_t wr = ggml_row_size(GGML_TYPE_Q4_K, n), ar = ggml_row_size(GGML_TYPE_Q8_K, n);
        for (int r = 0; r < rows; ++r) {
            for (int i = 0; i < n; ++i) f[i] = rnd() * (r % 3 == 0 ? 0.02f : 3.0f) + (r % 4 == 1 ? 0.5f : 0.0f);
            tw->from_float(f.data(), w.data() + r * wr, n);
        }
        const float scale[XD_Q4K_COLS] = { 1.0f, 300.0f, 1e-3f, 7.0f };
        const void * cols[XD_Q4K_COLS];
        for (int c = 0; c < XD_Q4K_COLS; ++c) {
            for (int i = 0; i < n; ++i) f[i] = (c == 3 && i % 5 == 0) ? 0.0f : rnd() * scale[c];
            ta->from_float(f.data(), a.data() + c * ar, n);
            cols[c] = a.data() + c * ar;
        }
        for (int r = 0; r < rows; ++r) {
            float got[XD_Q4K_COLS], want;
            float * outs[XD_Q4K_COLS];
            for (int c = 0; c < XD_Q4K_COLS; ++c) outs[c] = &got[c];
            q4_K_dot_cols(n, w.data() + r * wr, cols, outs);
            for (int c = 0; c < XD_Q4K_COLS; ++c) {
                tw->vec_dot(n, &want, 0, w.data() + r * wr, 0, cols[c], 0, 1);
                if (memcmp(&want, &got[c], sizeof(float)) != 0) {
                    LLAMA_LOG_WARN("expert-dispatch: the Q4_K multi-column kernel does not match ggml's vec_dot here; using vec_dot\n");
                    return false;
                }
            }
        }
        return true;
    }();
    return ok;
#else
    return false;
#endif
}

// Per-thread scratch of the local ops (a thread runs one op at a time; kept between evaluations).
struct local_scratch {
    std::vector<int32_t>      start;  // expert e's local pairs are order[start[e] .. start[e + 1])
    std::vector<int32_t>      fill;
    std::vector<int32_t>      order;  // local pairs as (t - t0) * n_used + k, grouped by expert, in (t, k) order within
    std::vector<char>         act;    // converted activations: one row per token (gate/up) or per local pair (down)
    std::vector<char>         act2;   // gate/up: the up matrix's, when its vec_dot type differs from the gate's
    std::vector<uint8_t>      have;   // gate/up: token converted yet (bit 0 gate, bit 1 up)
    std::vector<const void *> rows;   // down: each local pair's converted h
    std::vector<float>        dots;   // down: a tile's dot products, [pair][row]
};
thread_local local_scratch xd_scratch;

// The two kernels of the local ops (not inlined: every caller runs the same machine code).

// out[q][r - r_base] = w[r] · act[q] for rows r in [r0, r1) and the np pairs q of a tile; w: rows of w_stride bytes
// of one expert; act[q]: that pair's activation row in the weight's vec_dot type. q4k_cols: w is Q4_K and
// q4_K_cols_ok(), so whole groups of XD_Q4K_COLS pairs go through q4_K_dot_cols (the same floats as vec_dot).
XD_NOINLINE void dot_tile(const ggml_type_traits_cpu * tr, int n, const char * w, size_t w_stride, int64_t r0, int64_t r1,
                          int64_t r_base, const void * const * act, float * const * out, int64_t np, bool q4k_cols) {
    for (int64_t r = r0; r < r1; ++r) {
        const char * row = w + r * w_stride;
        int64_t q = 0;
#if defined(XD_HAVE_Q4K_COLS)
        if (q4k_cols) {
            for (; q + XD_Q4K_COLS <= np; q += XD_Q4K_COLS) {
                float * o[XD_Q4K_COLS];
                for (int c = 0; c < XD_Q4K_COLS; ++c) o[c] = out[q + c] + (r - r_base);
                q4_K_dot_cols(n, row, act + q, o);
            }
        }
#else
        GGML_UNUSED(q4k_cols);
#endif
        for (; q < np; ++q) {
            tr->vec_dot(n, out[q] + (r - r_base), 0, row, 0, act[q], 0, 1);
        }
    }
}

// out[r] += prob · d[r - r0] for r in [r0, r1), and the same term added to audit[r] when audit is not null. The
// product is rounded once and that float added to both, so an audited pair contributes to the audit sum exactly what
// it contributes to the layer's output.
XD_NOINLINE void add_terms(const float * d, float prob, int64_t r0, int64_t r1, float * out, float * audit) {
    for (int64_t r = r0; r < r1; ++r) {
        const float term = d[r - r0] * prob;
        out[r] += term;
        if (audit != nullptr) audit[r] += term;
    }
}

inline float pair_flag(const ggml_tensor * R, int64_t n_embd, int64_t t, int64_t k) {
    return *(const float *) ((const char *) R->data + t * R->nb[1] + (n_embd + k) * sizeof(float));
}

inline bool pair_is_local(const ggml_tensor * R, int64_t n_embd, int64_t t, int64_t k) {
    return pair_flag(R, n_embd, t, k) != XD_PAIR_SERVED;
}

inline int32_t pair_expert(const ggml_tensor * ids, int64_t t, int64_t k) {
    return *(const int32_t *) ((const char *) ids->data + k * ids->nb[0] + t * ids->nb[1]);
}

// Groups the pairs of tokens [t0, t1) that R marks not served by expert (a counting sort; every thread builds the same
// lists). Returns their number.
int64_t group_local_pairs(const ggml_tensor * ids, const ggml_tensor * R, int64_t n_embd, int64_t n_expert, int64_t t0, int64_t t1,
                          local_scratch & s) {
    const int64_t n_used = ids->ne[0];
    s.start.assign(n_expert + 1, 0);
    int64_t n_local = 0;
    for (int64_t t = t0; t < t1; ++t) {
        for (int64_t k = 0; k < n_used; ++k) {
            if (!pair_is_local(R, n_embd, t, k)) continue;
            const int32_t e = pair_expert(ids, t, k);
            GGML_ASSERT(e >= 0 && e < n_expert);
            ++s.start[e + 1];
            ++n_local;
        }
    }
    for (int64_t e = 0; e < n_expert; ++e) s.start[e + 1] += s.start[e];
    s.fill.assign(s.start.begin(), s.start.end() - 1);
    s.order.resize(n_local);
    for (int64_t t = t0; t < t1; ++t) {
        for (int64_t k = 0; k < n_used; ++k) {
            if (!pair_is_local(R, n_embd, t, k)) continue;
            s.order[s.fill[pair_expert(ids, t, k)]++] = (int32_t) ((t - t0) * n_used + k);
        }
    }
    return n_local;
}

void remote_op(ggml_tensor * dst, int ith, int nth, void * ud) {
    GGML_UNUSED(nth);
    if (ith != 0) return;
    auto * L = (llama_xd_layer *) ud;
    const ggml_tensor * x = dst->src[0], * ids = dst->src[1], * probs = dst->src[2];
    L->audit_pairs = 0; // an audit (and a RESULT) belongs to this evaluation's exchange only
    L->result_pending = false;
    L->result_preclaimed = false;
    memset(dst->data, 0, ggml_nbytes(dst));
    if (x->ne[1] > XD_MAX_ROWS || x->ne[0] > XD_MAX_EMBD || ids->ne[0] > XD_MAX_USED) return;
    if (!L->xd->connected) return;
    const int64_t t0 = now_us();
    const uint64_t before = L->xd->stats.exchanges.load(std::memory_order_relaxed);
    const uint64_t local_before = L->xd->stats.offer_local.load(std::memory_order_relaxed);
    L->xd->exchange(*L, x, ids, probs, (float *) dst->data);
    if (L->xd->stats.exchanges.load(std::memory_order_relaxed) != before) L->xd->stats.exchange_us += (uint64_t) (now_us() - t0);
    // an evaluation the offer left local has no collect op work to report it; say so here
    if (L->xd->stats.offer_local.load(std::memory_order_relaxed) != local_before) L->xd->maybe_log_stats();
}

// GU[:, k, t] = [gate_e · x_t | up_e · x_t] (two halves of ff) for every pair (t, k) that was not served; zeros for
// the served ones (the swiglu op after this one runs over every pair; the down op reads only the local ones).
// Per block of tokens the local pairs are grouped by expert; the work, units of (expert, XD_TILE_ROWS of its 2·ff
// gate/up rows), is split between the threads by cost (rows × pairs). x_t is converted to each weight's vec_dot type
// once per thread that needs it, with ggml's from_float as mul_mat_id converts it.
void local_gate_up_op(ggml_tensor * dst, int ith, int nth, void * ud) {
    auto * L = (llama_xd_layer *) ud;
    const int64_t t_start = ith == 0 ? now_us() : 0;
    const ggml_tensor * x = dst->src[0], * ids = dst->src[1], * R = dst->src[2], * gate = dst->src[3], * up = dst->src[4];
    const int64_t n_embd = x->ne[0], n_tok = x->ne[1], n_used = ids->ne[0], ff = gate->ne[1], n_expert = gate->ne[2];

    int64_t n_pairs = 0;
    for (int64_t t = 0; t < n_tok; ++t) {
        for (int64_t k = 0; k < n_used; ++k, ++n_pairs) {
            if (!pair_is_local(R, n_embd, t, k) && n_pairs % nth == ith) {
                memset((char *) dst->data + k * dst->nb[1] + t * dst->nb[2], 0, 2 * ff * sizeof(float));
            }
        }
    }

    const ggml_type_traits_cpu * tg = ggml_get_type_traits_cpu(gate->type), * tu = ggml_get_type_traits_cpu(up->type);
    const ggml_type vg = tg->vec_dot_type, vu = tu->vec_dot_type;
    const size_t rs_g = ggml_row_size(vg, n_embd), rs_u = ggml_row_size(vu, n_embd);
    const bool cols_g = gate->type == GGML_TYPE_Q4_K && q4_K_cols_ok(), cols_u = up->type == GGML_TYPE_Q4_K && q4_K_cols_ok();
    local_scratch & s = xd_scratch;
    // x_t in the gate's (is_up false) or the up's vec_dot type, converted on first use in this token block
    auto activation = [&](int64_t t0, int64_t t, bool is_up) -> const void * {
        const ggml_type vt = is_up ? vu : vg;
        const float * xr = (const float *) ((const char *) x->data + t * x->nb[1]);
        if (vt == GGML_TYPE_F32) return xr;
        if (is_up && vu == vg) is_up = false; // the same conversion: share it
        std::vector<char> & buf = is_up ? s.act2 : s.act;
        char * row = buf.data() + (t - t0) * (is_up ? rs_u : rs_g);
        const uint8_t bit = is_up ? 2 : 1;
        if (!(s.have[t - t0] & bit)) {
            ggml_get_type_traits_cpu(vt)->from_float(xr, row, n_embd);
            s.have[t - t0] |= bit;
        }
        return row;
    };

    const void * act[XD_TILE_PAIRS];
    float * out_g[XD_TILE_PAIRS];
    float * out_u[XD_TILE_PAIRS];
    for (int64_t t0 = 0; t0 < n_tok; t0 += XD_TILE_TOKENS) {
        const int64_t t1 = std::min(n_tok, t0 + XD_TILE_TOKENS);
        const int64_t n_local = group_local_pairs(ids, R, n_embd, n_expert, t0, t1, s);
        if (n_local == 0) continue;
        if (vg != GGML_TYPE_F32) s.act.resize((size_t) (t1 - t0) * rs_g);
        if (vu != vg && vu != GGML_TYPE_F32) s.act2.resize((size_t) (t1 - t0) * rs_u);
        s.have.assign(t1 - t0, 0);
        // this thread's units: those whose cumulative cost starts in [a, b)
        const int64_t total = n_local * 2 * ff;
        const int64_t a = total * ith / nth, b = total * (ith + 1) / nth;
        for (int64_t e = 0; e < n_expert; ++e) {
            const int64_t np = s.start[e + 1] - s.start[e];
            const int64_t base = (int64_t) s.start[e] * 2 * ff;
            if (np == 0 || base + 2 * ff * np <= a) continue;
            if (base >= b) break;
            const int32_t * pairs = s.order.data() + s.start[e];
            const char * g_base = (const char *) gate->data + e * gate->nb[2];
            const char * u_base = (const char *) up->data + e * up->nb[2];
            for (int64_t j0 = 0; j0 < 2 * ff; j0 += XD_TILE_ROWS) {
                const int64_t c = base + j0 * np;
                if (c < a) continue;
                if (c >= b) break;
                const int64_t j1 = std::min(2 * ff, j0 + XD_TILE_ROWS);
                for (int64_t q0 = 0; q0 < np; q0 += XD_TILE_PAIRS) {
                    const int64_t nq = std::min<int64_t>(XD_TILE_PAIRS, np - q0);
                    for (int64_t q = 0; q < nq; ++q) {
                        const int64_t t = t0 + pairs[q0 + q] / n_used, k = pairs[q0 + q] % n_used;
                        out_g[q] = (float *) ((char *) dst->data + k * dst->nb[1] + t * dst->nb[2]);
                        out_u[q] = out_g[q] + ff;
                    }
                    if (j0 < ff) {
                        for (int64_t q = 0; q < nq; ++q) act[q] = activation(t0, t0 + pairs[q0 + q] / n_used, false);
                        dot_tile(tg, (int) n_embd, g_base, gate->nb[1], j0, std::min(j1, ff), 0, act, out_g, nq, cols_g);
                    }
                    if (j1 > ff) {
                        for (int64_t q = 0; q < nq; ++q) act[q] = activation(t0, t0 + pairs[q0 + q] / n_used, true);
                        dot_tile(tu, (int) n_embd, u_base, up->nb[1], std::max(j0, ff) - ff, j1 - ff, 0, act, out_u, nq, cols_u);
                    }
                }
            }
        }
    }
    if (ith == 0 && L != nullptr) L->up_ns = (now_us() - t_start) * 1000;
}

// out[:, t] = served partial sum + Σ over local pairs of prob · (down_e · H[:, k, t]); threads split output rows.
// With a second plane (dst->ne[2] == 2, dispatched layers): plane 1 [:, t] = Σ over the audited pairs alone, in k order
// from zero, each term the very float added to plane 0.
// Per block of tokens and tile of rows (XD_TILE_ROWS, or more when there are few pairs), the dot products are computed
// expert by expert (each h converted to the down matrix's vec_dot type once per thread), then each token's terms are
// added in k order, as before.
void local_down_op(ggml_tensor * dst, int ith, int nth, void * ud) {
    auto * L = (llama_xd_layer *) ud;
    const int64_t t_start = ith == 0 ? now_us() : 0;
    const ggml_tensor * H = dst->src[0], * ids = dst->src[1], * R = dst->src[2], * probs = dst->src[3], * down = dst->src[4];
    const ggml_tensor * down_b = dst->src[5]; // [n_embd, n_expert] f32, or null: no down bias
    const ggml_tensor * down_s = dst->src[6]; // [n_expert] f32, or null: no per-expert down scale
    const int64_t ff = down->ne[0], n_embd = down->ne[1], n_expert = down->ne[2], n_used = ids->ne[0], n_tok = ids->ne[1];
    const int64_t per = (n_embd + nth - 1) / nth;
    const int64_t r0 = std::min(n_embd, per * ith), r1 = std::min(n_embd, r0 + per);
    const bool audit_plane = dst->ne[2] == 2;
    auto out_row = [&](int64_t t) { return (float *) ((char *) dst->data + t * dst->nb[1]); };
    auto audit_row = [&](int64_t t) { return audit_plane ? (float *) ((char *) dst->data + dst->nb[2] + t * dst->nb[1]) : nullptr; };

    for (int64_t t = 0; t < n_tok; ++t) {
        float * out = out_row(t), * audit = audit_row(t);
        const float * partial = (const float *) ((const char *) R->data + t * R->nb[1]);
        for (int64_t r = r0; r < r1; ++r) out[r] = partial[r];
        if (audit != nullptr) for (int64_t r = r0; r < r1; ++r) audit[r] = 0.0f;
    }

    const ggml_type_traits_cpu * td = ggml_get_type_traits_cpu(down->type);
    const ggml_type vd = td->vec_dot_type;
    const size_t rs = ggml_row_size(vd, ff);
    const bool cols_d = down->type == GGML_TYPE_Q4_K && q4_K_cols_ok();
    local_scratch & s = xd_scratch;
    int64_t n_local_all = 0;
    const void * act[XD_TILE_PAIRS];
    float * dots[XD_TILE_PAIRS];
    for (int64_t t0 = 0; t0 < n_tok; t0 += XD_TILE_TOKENS) {
        const int64_t t1 = std::min(n_tok, t0 + XD_TILE_TOKENS);
        const int64_t n_local = group_local_pairs(ids, R, n_embd, n_expert, t0, t1, s);
        n_local_all += n_local;
        if (n_local == 0 || r0 >= r1) continue;
        // h of every local pair of the block in the vec_dot type; rows[p], p = (t - t0) * n_used + k
        s.rows.assign((size_t) (t1 - t0) * n_used, nullptr);
        s.act.resize(vd == GGML_TYPE_F32 ? 0 : (size_t) n_local * rs);
        for (int64_t i = 0; i < n_local; ++i) {
            const int32_t p = s.order[i];
            const int64_t t = t0 + p / n_used, k = p % n_used;
            const float * h = (const float *) ((const char *) H->data + k * H->nb[1] + t * H->nb[2]);
            if (vd == GGML_TYPE_F32) {
                s.rows[p] = h;
            } else {
                char * q = s.act.data() + i * rs;
                ggml_get_type_traits_cpu(vd)->from_float(h, q, ff);
                s.rows[p] = q;
            }
        }
        const int64_t tile = std::min(r1 - r0, std::max(XD_TILE_ROWS, XD_DOTS_BUDGET / n_local));
        s.dots.resize((size_t) (t1 - t0) * n_used * tile);
        for (int64_t rb0 = r0; rb0 < r1; rb0 += tile) {
            const int64_t rb1 = std::min(r1, rb0 + tile);
            for (int64_t e = 0; e < n_expert; ++e) {
                const int64_t np = s.start[e + 1] - s.start[e];
                if (np == 0) continue;
                const int32_t * pairs = s.order.data() + s.start[e];
                const char * d_base = (const char *) down->data + e * down->nb[2];
                for (int64_t q0 = 0; q0 < np; q0 += XD_TILE_PAIRS) {
                    const int64_t nq = std::min<int64_t>(XD_TILE_PAIRS, np - q0);
                    for (int64_t q = 0; q < nq; ++q) {
                        act[q] = s.rows[pairs[q0 + q]];
                        dots[q] = s.dots.data() + (size_t) pairs[q0 + q] * tile;
                    }
                    dot_tile(td, (int) ff, d_base, down->nb[1], rb0, rb1, rb0, act, dots, nq, cols_d);
                }
            }
            for (int64_t t = t0; t < t1; ++t) {
                float * out = out_row(t), * audit = audit_row(t);
                for (int64_t k = 0; k < n_used; ++k) {
                    const float flag = pair_flag(R, n_embd, t, k);
                    if (flag == XD_PAIR_SERVED) continue;
                    const float pk = *(const float *) ((const char *) probs->data + k * probs->nb[1] + t * probs->nb[2]);
                    float * d = s.dots.data() + (size_t) ((t - t0) * n_used + k) * tile;
                    if (down_s != nullptr) {
                        // build_lora_mm_id's ggml_mul by the expert's scale, before the bias: one float multiply per row
                        const float sc = ((const float *) down_s->data)[pair_expert(ids, t, k)];
                        for (int64_t r = rb0; r < rb1; ++r) d[r - rb0] *= sc;
                    }
                    if (down_b != nullptr) {
                        // the stock graph's ggml_add_id before the product with the weight: one float add per row
                        const float * b = (const float *) ((const char *) down_b->data + pair_expert(ids, t, k) * down_b->nb[1]);
                        for (int64_t r = rb0; r < rb1; ++r) d[r - rb0] += b[r];
                    }
                    add_terms(d, pk, rb0, rb1, out, flag == XD_PAIR_AUDITED ? audit : nullptr);
                }
            }
        }
    }
    if (ith == 0 && L != nullptr && L->result_pending) L->xd->stats.local_us += (uint64_t) (L->up_ns / 1000 + now_us() - t_start);
    if (ith == 0 && n_local_all > 0 && L != nullptr) {
        const int64_t ns = L->up_ns + (now_us() - t_start) * 1000;
        const uint32_t cur = (uint32_t) std::min<int64_t>(ns / n_local_all, UINT32_MAX);
        const uint32_t old = L->local_ns_per_pair.load();
        L->local_ns_per_pair = old == 0 ? cur : (uint32_t) (((uint64_t) old * 7 + cur) / 8);
    }
}

// In place on the layer's output (a view of the down op's plane 0), so it runs after the down op and before anything
// that reads the output: sends the audited pairs' sums (plane 1) when this evaluation's exchange asked for an audit.
void audit_op(ggml_tensor * dst, int ith, int nth, void * ud) {
    GGML_UNUSED(nth);
    if (ith != 0) return;
    auto * L = (llama_xd_layer *) ud;
    if (L->audit_pairs == 0) return;
    const uint32_t n_audit = L->audit_pairs;
    L->audit_pairs = 0;
    const ggml_tensor * D = dst->src[1];
    L->xd->send_audit(*L, n_audit, (const float *) ((const char *) D->data + D->nb[2]), (uint32_t) D->ne[0], (uint32_t) D->ne[1]);
}

// After the audit op (src[0]: the layer's output so far, a view of the first pass's plane 0; src[1]: the remote op's
// output R). dst [n_embd + n_used, n_tok] is R's format for the second pass: the output so far (+ the RESULT's sums)
// and a flag per pair, XD_PAIR_LOCAL for the claimed pairs the dispatcher did not serve, XD_PAIR_SERVED (skip) for
// the rest. Without a RESULT owed (v1, nothing claimed, no exchange) it only copies the output, nothing flagged.
void collect_op(ggml_tensor * dst, int ith, int nth, void * ud) {
    GGML_UNUSED(nth);
    if (ith != 0) return;
    auto * L = (llama_xd_layer *) ud;
    const ggml_tensor * O = dst->src[0], * R = dst->src[1];
    const int64_t n_embd = O->ne[0], n_tok = O->ne[1], n_used = dst->ne[0] - n_embd;
    for (int64_t t = 0; t < n_tok; ++t) {
        float * row = (float *) ((char *) dst->data + t * dst->nb[1]);
        memcpy(row, (const char *) O->data + t * O->nb[1], n_embd * sizeof(float));
        for (int64_t k = 0; k < n_used; ++k) row[n_embd + k] = XD_PAIR_SERVED;
    }
    if (L->result_pending) {
        L->result_pending = false;
        const int64_t t0 = now_us();
        L->xd->collect(*L, R, (uint32_t) n_embd, (uint32_t) n_tok, (uint32_t) n_used, (float *) dst->data);
        const int64_t waited = now_us() - t0;
        L->xd->stats.wait_us += (uint64_t) waited;
        if (waited > XD_WAIT_TARGET_US) {
            L->xd->stats.waits_long++;
            L->xd->stats.wait_long_us += (uint64_t) waited;
        }
        const int64_t own_us = (int64_t) ((uint64_t) L->result_claimed * L->local_ns_per_pair.load() / 1000);
        if (waited > own_us) L->xd->stats.wait_past_local_us += (uint64_t) (waited - own_us);
        if (L->result_preclaimed) {
            // the split was this side's: a wait past the target means the dispatcher's part ends later than ours, so
            // give it fewer pairs next time; no wait, more (only this thread touches offer_adj)
            const float a = std::min(1.0f, std::max(0.0f, L->preclaim_a));
            const float step = waited > XD_WAIT_TARGET_US ? XD_ADJ_STEP_PAIRS * (1.0f - a) : -XD_ADJ_STEP_PAIRS * a;
            L->offer_adj = std::min(XD_ADJ_MAX, std::max(XD_ADJ_MIN, L->offer_adj + step));
        }
    }
    L->xd->maybe_log_stats();
}

bool standard_layout(const ggml_tensor * t) {
    if (t == nullptr || t->data == nullptr || t->buffer == nullptr) return false;
    ggml_backend_buffer_type_t buft = ggml_backend_buffer_get_type(t->buffer);
    if (!ggml_backend_buft_is_host(buft)) return false;
    const char * name = ggml_backend_buft_name(buft);
    return strstr(name, "REPACK") == nullptr && strstr(name, "AMX") == nullptr;
}

bool cpu_dot_supported(ggml_type type) {
    const ggml_type_traits_cpu * tr = ggml_get_type_traits_cpu(type);
    if (tr == nullptr || tr->vec_dot == nullptr) return false;
    return tr->vec_dot_type == GGML_TYPE_F32 || ggml_get_type_traits_cpu(tr->vec_dot_type)->from_float != nullptr;
}

// The local part of a dispatched layer: gate/up for the pairs R marks not served, the variant's biases and gated unit
// (ggml's own ops: add_id, swiglu or swiglu_oai), down (+ its bias) + served partial sums. R: [n_embd + n_used, n_tok],
// the served partial sums then a flag per pair (XD_PAIR_*; all zero: every pair local). L: the layer whose cost per
// pair is measured (null: not measured). Returns [n_embd, n_tok, 1], or with `audit_plane` [n_embd, n_tok, 2]: plane 0
// the output, plane 1 the audited pairs' sums.
ggml_tensor * build_local(ggml_context * ctx, llama_xd_layer * L, int il, ggml_tensor * cur, ggml_tensor * selected,
                          ggml_tensor * probs, ggml_tensor * R, ggml_tensor * gate_exps, ggml_tensor * up_exps,
                          ggml_tensor * down_exps, const llama_xd_variant & v, bool audit_plane, const char * pass = "") {
    const int64_t n_embd = cur->ne[0], n_tok = cur->ne[1], n_used = selected->ne[0], ff = gate_exps->ne[1];

    ggml_tensor * a_gu[5] = { cur, selected, R, gate_exps, up_exps };
    ggml_tensor * GU = ggml_custom_4d(ctx, GGML_TYPE_F32, 2 * ff, n_used, n_tok, 1, a_gu, 5, local_gate_up_op, GGML_N_TASKS_MAX, L);
    ggml_format_name(GU, "xd_local%s_gate_up-%d", pass, il);

    // the same split views and ops as llama.cpp's stock MoE graph: the biases by ggml_add_id (up's first, as the stock
    // graph adds them), then the gated unit (the served pairs' rows are zeros and never read by the down op)
    ggml_tensor * G = ggml_view_3d(ctx, GU, ff, n_used, n_tok, GU->nb[1], GU->nb[2], 0);
    ggml_tensor * U = ggml_view_3d(ctx, GU, ff, n_used, n_tok, GU->nb[1], GU->nb[2], ff * GU->nb[0]);
    // per-expert scales as build_lora_mm_id applies them: the scale of each pair's expert, gathered, then ggml_mul
    auto scaled = [&](ggml_tensor * x, ggml_tensor * w_s) {
        const int64_t n_expert = w_s->ne[0];
        ggml_tensor * sc = ggml_repeat_4d(ctx, ggml_reshape_3d(ctx, w_s, 1, n_expert, 1), 1, n_expert, n_tok, 1);
        return ggml_mul(ctx, ggml_cont(ctx, x), ggml_get_rows(ctx, sc, selected));
    };
    if (v.up_s != nullptr) U = scaled(U, v.up_s);
    if (v.up_b != nullptr) U = ggml_add_id(ctx, U, v.up_b, selected);
    if (v.gate_s != nullptr) G = scaled(G, v.gate_s);
    if (v.gate_b != nullptr) G = ggml_add_id(ctx, G, v.gate_b, selected);
    ggml_tensor * H = nullptr;
    switch (v.activation) {
        case LLAMA_XD_ACT_SILU:         H = ggml_swiglu_split(ctx, G, U); break;
        case LLAMA_XD_ACT_SWIGLU_OAI:   H = ggml_swiglu_oai(ctx, G, U, v.alpha, v.limit); break;
        case LLAMA_XD_ACT_SWIGLU_CLAMP: H = ggml_swiglu_clamp(ctx, G, U, v.limit); break;
        case LLAMA_XD_ACT_GELU:         H = ggml_geglu_split(ctx, G, U); break;
        case LLAMA_XD_ACT_SILU_LIMIT:
            // the stock graph's ops for a swiglu_clamp_exp limit outside DeepSeek-V4: clamp up, silu, clamp, multiply
            H = ggml_mul(ctx, ggml_clamp(ctx, ggml_silu(ctx, ggml_cont(ctx, G)), -INFINITY, v.limit),
                         ggml_clamp(ctx, ggml_cont(ctx, U), -v.limit, v.limit));
            break;
    }
    ggml_format_name(H, "xd_local%s_glu-%d", pass, il);

    ggml_tensor * a_down[7] = { H, selected, R, probs, down_exps, v.down_b, v.down_s };
    ggml_tensor * out = ggml_custom_4d(ctx, GGML_TYPE_F32, n_embd, n_tok, audit_plane ? 2 : 1, 1, a_down, 7,
                                       local_down_op, GGML_N_TASKS_MAX, L);
    ggml_format_name(out, "xd_local%s_down-%d", pass, il);
    return out;
}

} // namespace

bool llama_xd_experts_supported(const ggml_tensor * gate, const ggml_tensor * up, const ggml_tensor * down, std::string * why) {
    auto fail = [why](const char * what) {
        if (why != nullptr) *why = what;
        return false;
    };
    if (gate == nullptr || up == nullptr || down == nullptr || gate->data == nullptr || up->data == nullptr || down->data == nullptr) {
        return fail("expert matrices missing");
    }
    if (!cpu_dot_supported(gate->type) || !cpu_dot_supported(up->type) || !cpu_dot_supported(down->type)) {
        return fail("expert weight type has no CPU dot product");
    }
    const int64_t n_embd = gate->ne[0], ff = gate->ne[1], n_expert = gate->ne[2];
    // Rows whole and packed within an expert; experts may be further apart than their rows (the gate and up views of
    // a fused gate_up_exps tensor: each expert's gate rows, then its up rows).
    auto rows_packed = [](const ggml_tensor * t) {
        return t->nb[0] == ggml_type_size(t->type) && t->nb[1] == ggml_row_size(t->type, t->ne[0]) &&
               t->nb[2] >= t->nb[1] * t->ne[1];
    };
    const bool shapes_ok =
        up->ne[0] == n_embd && up->ne[1] == ff && up->ne[2] == n_expert &&
        down->ne[0] == ff && down->ne[1] == n_embd && down->ne[2] == n_expert &&
        gate->ne[3] == 1 && up->ne[3] == 1 && down->ne[3] == 1 &&
        rows_packed(gate) && rows_packed(up) && rows_packed(down);
    if (!shapes_ok) return fail("unexpected MoE tensor shapes");
    return true;
}

bool llama_xd_variant_supported(const llama_xd_variant & v, int64_t n_embd, int64_t ff, int64_t n_expert, std::string * why) {
    auto bias_ok = [&](const ggml_tensor * b, int64_t n) {
        return b == nullptr || (b->type == GGML_TYPE_F32 && b->data != nullptr && b->ne[0] == n && b->ne[1] == n_expert &&
                                b->ne[2] == 1 && b->ne[3] == 1 && b->nb[0] == sizeof(float) && b->nb[1] == n * sizeof(float) &&
                                (b->buffer == nullptr || ggml_backend_buft_is_host(ggml_backend_buffer_get_type(b->buffer))));
    };
    if (!bias_ok(v.gate_b, ff) || !bias_ok(v.up_b, ff) || !bias_ok(v.down_b, n_embd)) {
        if (why != nullptr) *why = "expert biases not f32 [ff or n_embd, n_expert] in host memory";
        return false;
    }
    auto scale_ok = [&](const ggml_tensor * sc) {
        return sc == nullptr || (sc->type == GGML_TYPE_F32 && sc->data != nullptr && sc->ne[0] == n_expert && ggml_nelements(sc) == n_expert &&
                                 (sc->buffer == nullptr || ggml_backend_buft_is_host(ggml_backend_buffer_get_type(sc->buffer))));
    };
    if (!scale_ok(v.gate_s) || !scale_ok(v.up_s) || !scale_ok(v.down_s)) {
        if (why != nullptr) *why = "per-expert scales not f32 [n_expert] in host memory";
        return false;
    }
    if (v.activation == LLAMA_XD_ACT_SWIGLU_OAI && !(v.alpha > 0.0f)) {
        if (why != nullptr) *why = "a SwiGLU-OAI without a positive alpha";
        return false;
    }
    const bool limited = v.activation == LLAMA_XD_ACT_SWIGLU_OAI || v.activation == LLAMA_XD_ACT_SWIGLU_CLAMP ||
                         v.activation == LLAMA_XD_ACT_SILU_LIMIT;
    if (limited && !(v.limit > 0.0f)) {
        if (why != nullptr) *why = "a clamped activation without a positive limit";
        return false;
    }
    return true;
}

bool llama_xd_compute_pairs(const ggml_tensor * gate, const ggml_tensor * up, const ggml_tensor * down,
                            const float * rows, const int32_t * ids, const float * probs, int64_t n_tokens, int64_t n_used,
                            float * sums, int n_threads, const llama_xd_variant & variant) {
    const int64_t n_embd = gate->ne[0], ff = gate->ne[1];
    const size_t data = sizeof(float) * (size_t) (n_embd * n_tokens * 2 + (n_embd + n_used) * n_tokens + 9 * ff * n_used * n_tokens) + 3 * sizeof(float) * (size_t) (n_used * n_tokens) +
                        2 * sizeof(float) * (size_t) (n_used * n_tokens);
    ggml_init_params params = { /*mem_size =*/ data + 16 * ggml_tensor_overhead() + ggml_graph_overhead() + (1u << 20),
                                /*mem_buffer =*/ nullptr, /*no_alloc =*/ false };
    ggml_context * ctx = ggml_init(params);
    if (ctx == nullptr) return false;
    ggml_tensor * x = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, n_embd, n_tokens);
    ggml_tensor * sel = ggml_new_tensor_2d(ctx, GGML_TYPE_I32, n_used, n_tokens);
    ggml_tensor * pr = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, 1, n_used, n_tokens);
    ggml_tensor * R = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, n_embd + n_used, n_tokens);
    memcpy(x->data, rows, ggml_nbytes(x));
    memcpy(sel->data, ids, ggml_nbytes(sel));
    memcpy(pr->data, probs, ggml_nbytes(pr));
    memset(R->data, 0, ggml_nbytes(R)); // nothing served: every pair computed here
    // the graph only reads the weights; the casts let them be graph sources
    ggml_tensor * out = build_local(ctx, nullptr, -1, x, sel, pr, R, const_cast<ggml_tensor *>(gate), const_cast<ggml_tensor *>(up),
                                    const_cast<ggml_tensor *>(down), variant, /*audit_plane =*/ false);
    ggml_cgraph * gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, out);
    const bool ok = ggml_graph_compute_with_ctx(ctx, gf, std::max(1, n_threads)) == GGML_STATUS_SUCCESS;
    if (ok) memcpy(sums, out->data, ggml_nbytes(out));
    ggml_free(ctx);
    return ok;
}

// LINKCPP_EXIT_WITH_PARENT=<pid> (the hub's supervisor sets it to its own pid): a managed coordinator is part of the
// hub that started it and must not outlive it — a SIGKILLed hub would leave it serving on its port, unsupervised, and
// the next hub would start another. The kernel sends SIGKILL when the parent dies. Not SIGTERM: the server's SIGTERM
// handler takes its task-queue lock on whichever thread the signal lands, so a signal that lands on a thread holding
// that lock never returns (a CI run saw an orphan still alive 15 s after its hub was killed), and a graceful stop has
// nothing to save for a hub that is gone. A parent that died before this call (the model loads first) is seen by the
// pid it no longer has.
static void exit_with_parent() {
    const char * v = getenv("LINKCPP_EXIT_WITH_PARENT");
    if (v == nullptr || v[0] == '\0') return;
#ifdef __linux__
    const long parent = strtol(v, nullptr, 10);
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) {
        LLAMA_LOG_WARN("expert-dispatch: LINKCPP_EXIT_WITH_PARENT: prctl failed (errno %d); this server may outlive its hub\n", errno);
        return;
    }
    if (parent > 0 && (long) getppid() != parent) {
        LLAMA_LOG_WARN("expert-dispatch: the hub (pid %ld) is gone; exiting\n", parent);
        _exit(1);
    }
#else
    LLAMA_LOG_WARN("expert-dispatch: LINKCPP_EXIT_WITH_PARENT is only supported on Linux\n");
#endif
}

llama_expert_dispatch * llama_xd_init(const char * path, int32_t deadline_ms, const llama_xd_model_info & info) {
    auto * xd = new llama_expert_dispatch();
    xd->path = path;
    xd->deadline_ms = std::max(1, std::min(deadline_ms, 10000));
    xd->info = info;
    xd->layers.reset(new llama_xd_layer[LLAMA_XD_MAX_LAYERS]);
    for (int i = 0; i < LLAMA_XD_MAX_LAYERS; ++i) {
        xd->layers[i].xd = xd;
        xd->layers[i].il = i;
    }
    // LINKCPP_EXPERT_DISPATCH_VERSION=1 or 2: offer that version only (tests of those paths, side-by-side benches);
    // unset or 3: offer 3 and step down when a dispatcher closes on it
    if (const char * v = getenv("LINKCPP_EXPERT_DISPATCH_VERSION"); v != nullptr && v[0] != '\0') {
        if (strcmp(v, "1") == 0 || strcmp(v, "2") == 0) {
            xd->forced_version = (uint16_t) (v[0] - '0');
        } else if (strcmp(v, "3") != 0) {
            LLAMA_LOG_WARN("expert-dispatch: LINKCPP_EXPERT_DISPATCH_VERSION=%s is not 1, 2 or 3; offering version 3\n", v);
        }
    }
    if (const char * v = getenv("LINKCPP_EXPERT_DISPATCH_STATS_MS"); v != nullptr && v[0] != '\0') {
        xd->stats_every_us = std::max(0, std::min(atoi(v), 3600 * 1000)) * (int64_t) 1000;
    }
    exit_with_parent();
    LLAMA_LOG_INFO("expert-dispatch: dispatcher socket %s, per-layer deadline %d ms, offering protocol version %d\n",
                   xd->path.c_str(), xd->deadline_ms, xd->forced_version != 0 ? xd->forced_version : XD_VERSION_MAX);
    xd->connector = std::thread([xd] { xd->connector_loop(); });
    return xd;
}

void llama_xd_free(llama_expert_dispatch * xd) {
    if (xd == nullptr) return;
    xd->stopping = true;
    xd->wake_connector();
    if (xd->connector.joinable()) xd->connector.join();
    if (xd->fd >= 0) ::close(xd->fd);
    delete xd;
}

llama_xd_mask llama_xd_plan(llama_expert_dispatch * xd) {
    llama_xd_mask mask;
    if (xd == nullptr || !xd->connected) return mask;
    const int64_t now = now_us();
    if (now < xd->suspended_until_us.load(std::memory_order_relaxed)) return mask;
    for (int i = 0; i < LLAMA_XD_MAX_LAYERS; ++i) {
        if (now >= xd->layers[i].quiet_until_us.load(std::memory_order_relaxed)) mask.set(i);
    }
    return mask;
}

void llama_xd_note_unsupported(const char * what) {
    std::call_once(g_unsupported_once, [what] {
        LLAMA_LOG_WARN("expert-dispatch: %s; those layers run the stock path\n", what);
    });
}

ggml_tensor * llama_xd_build_moe(
        ggml_context * ctx, llama_expert_dispatch * xd, int il,
        ggml_tensor * cur, ggml_tensor * selected, ggml_tensor * probs,
        ggml_tensor * gate_exps, ggml_tensor * up_exps, ggml_tensor * down_exps, const llama_xd_variant & variant) {
    if (xd == nullptr || il < 0 || il >= LLAMA_XD_MAX_LAYERS) return nullptr;
    // (a view of a fused gate_up_exps tensor is judged by the tensor it views)
    auto base = [](const ggml_tensor * t) { return t != nullptr && t->view_src != nullptr ? t->view_src : t; };
    if (!standard_layout(base(gate_exps)) || !standard_layout(base(up_exps)) || !standard_layout(base(down_exps))) {
        llama_xd_note_unsupported("expert weights are repacked or not in host memory");
        return nullptr;
    }
    std::string why;
    if (!llama_xd_experts_supported(gate_exps, up_exps, down_exps, &why)) {
        llama_xd_note_unsupported(why.c_str());
        return nullptr;
    }
    if (!llama_xd_variant_supported(variant, gate_exps->ne[0], gate_exps->ne[1], gate_exps->ne[2], &why)) {
        llama_xd_note_unsupported(why.c_str());
        return nullptr;
    }
    if (cur->type != GGML_TYPE_F32 || probs->type != GGML_TYPE_F32 || selected->type != GGML_TYPE_I32 ||
        cur->nb[0] != sizeof(float) || cur->ne[0] != gate_exps->ne[0]) {
        llama_xd_note_unsupported("unexpected MoE tensor shapes");
        return nullptr;
    }
    llama_xd_layer * L = &xd->layers[il];
    const int64_t n_embd = cur->ne[0], n_tok = cur->ne[1], n_used = selected->ne[0];

    ggml_tensor * a_remote[3] = { cur, selected, probs };
    ggml_tensor * R = ggml_custom_4d(ctx, GGML_TYPE_F32, n_embd + n_used, n_tok, 1, 1, a_remote, 3, remote_op, 1, L);
    ggml_format_name(R, "xd_remote-%d", il);
    ggml_tensor * D = build_local(ctx, L, il, cur, selected, probs, R, gate_exps, up_exps, down_exps, variant, /*audit_plane =*/ true);
    // The output is plane 0 of D; the audit op runs in place on it, so the layer's output depends on the audit op and
    // every graph that dispatches the layer sends its audits, at no copy.
    ggml_tensor * out = ggml_view_2d(ctx, D, n_embd, n_tok, D->nb[1], 0);
    ggml_tensor * a_audit[1] = { D };
    ggml_tensor * res = ggml_custom_inplace(ctx, out, a_audit, 1, audit_op, 1, L);
    ggml_format_name(res, "xd_audit-%d", il);
    // v2: after the audit went out, the RESULT (if pairs were claimed), then the second local pass for the claimed
    // pairs that did not come back. On a v1 connection or with nothing claimed the second pass computes nothing and
    // its output is the first pass's, copied.
    ggml_tensor * a_collect[2] = { res, R };
    ggml_tensor * R2 = ggml_custom_4d(ctx, GGML_TYPE_F32, n_embd + n_used, n_tok, 1, 1, a_collect, 2, collect_op, 1, L);
    ggml_format_name(R2, "xd_collect-%d", il);
    return build_local(ctx, L, il, cur, selected, probs, R2, gate_exps, up_exps, down_exps, variant, /*audit_plane =*/ false, "2");
}
