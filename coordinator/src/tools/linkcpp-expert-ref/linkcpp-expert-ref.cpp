// Expertswarm: linkcpp-expert-ref computes routed-expert pairs of one MoE layer exactly as linkcpp-server computes the
// pairs a dispatcher did not serve: it calls llama_xd_compute_pairs (src/llama-expert-dispatch.cpp), which runs the
// dispatch path's own local graph. Tests judge workers against it. Not part of llama.cpp: an overlay file that
// coordinator/build.sh copies onto llama.cpp's tree. Usage and formats: coordinator/README.md.
//
//   linkcpp-expert-ref -m MODEL.gguf [-i IN] [-o OUT] [-t N]   # IN / OUT default to stdin / stdout ('-'); N threads (1)
//   linkcpp-expert-ref -m MODEL.gguf --info             # JSON: n_embd, ff, n_expert, the layers with routed experts
//   linkcpp-expert-ref -m MODEL.gguf --repeat R ...     # timing: each record computed once more, then R times timed
//   linkcpp-expert-ref -m MODEL.gguf --repeat R --cold  # timing: each record R times timed, the first one included
//                                                       # (no untimed compute first: its weights not in the caches)
//
// With --repeat, after each record's output a JSON line goes to stderr: {"timing":{"n_tokens":T,"n_used":K,
// "threads":N,"ms":[R wall times of llama_xd_compute_pairs, in ms],"cpu_ms":[the process's CPU time of each]}}
// (bench/fallback.ts reads it; pin the process with taskset to measure one core).
// Input: records until end of file, all little-endian:
//   u32 layer, u32 n_tokens, u32 n_used, f32 rows[n_tokens·n_embd], i32 ids[n_tokens·n_used], f32 probs[n_tokens·n_used]
// Output: per record, f32 sums[n_tokens·n_embd] with sums[t] = Σ_k probs[t,k] · expert_{ids[t,k]}(rows[t]), flushed.
// Only the three expert tensors of a layer are read from the file (on first use of that layer). The sums do not
// depend on the thread count.

#include "llama-expert-dispatch.h"

#include "ggml-cpu.h"
#include "ggml.h"
#include "gguf.h"

#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace {

constexpr uint32_t MAX_TOKENS = 1u << 16;
// llama_xd_activation's names, as the hub's gguf/expert-variant.ts spells them
constexpr const char * ACTIVATION_NAMES[] = { "silu", "swiglu_oai", "swiglu_clamp", "silu_limit", "gelu" };

[[noreturn]] void die(const std::string & msg) {
    fprintf(stderr, "linkcpp-expert-ref: %s\n", msg.c_str());
    exit(1);
}

struct layer_experts {
    ggml_tensor * gate = nullptr, * up = nullptr, * down = nullptr;
    llama_xd_variant variant; // the activation (from the architecture) and the biases the file has
    std::vector<std::unique_ptr<char, decltype(&free)>> data;
};

struct model_file {
    std::string path;
    gguf_context * gguf = nullptr;
    ggml_context * meta = nullptr;
    std::map<uint32_t, layer_experts> layers;
    // The gate and up views of fused gate_up_exps tensors (two per layer read; no data of their own).
    ggml_context * views = nullptr;

    explicit model_file(const std::string & p) : path(p) {
        gguf_init_params params = { /*no_alloc =*/ true, /*ctx =*/ &meta };
        gguf = gguf_init_from_file(p.c_str(), params);
        if (gguf == nullptr) die("cannot read GGUF " + p);
        ggml_init_params vp = { /*mem_size =*/ 2 * 4096 * ggml_tensor_overhead(), /*mem_buffer =*/ nullptr, /*no_alloc =*/ true };
        views = ggml_init(vp);
        if (views == nullptr) die("out of memory");
    }

    ~model_file() {
        if (views) ggml_free(views);
        if (meta) ggml_free(meta);
        if (gguf) gguf_free(gguf);
    }

    // A layer's gate and up matrices: its ffn_gate_exps and ffn_up_exps, or views of its fused ffn_gate_up_exps (each
    // expert's gate rows, then its up rows) once `gu` is loaded. False when it has neither.
    bool gate_up(uint32_t il, ggml_tensor ** g, ggml_tensor ** u, ggml_tensor ** gu) const {
        *g = tensor(il, "gate");
        *u = tensor(il, "up");
        *gu = nullptr;
        if (*g != nullptr && *u != nullptr) return true;
        *gu = tensor(il, "gate_up");
        if (*gu == nullptr || (*gu)->ne[1] % 2 != 0) return false;
        const int64_t ff = (*gu)->ne[1] / 2;
        *g = ggml_view_3d(views, *gu, (*gu)->ne[0], ff, (*gu)->ne[2], (*gu)->nb[1], (*gu)->nb[2], 0);
        *u = ggml_view_3d(views, *gu, (*gu)->ne[0], ff, (*gu)->ne[2], (*gu)->nb[1], (*gu)->nb[2], ff * (*gu)->nb[1]);
        return true;
    }

    ggml_tensor * tensor(uint32_t il, const char * what, const char * suffix = "weight") const {
        const std::string name = "blk." + std::to_string(il) + ".ffn_" + what + "_exps." + suffix;
        return ggml_get_tensor(meta, name.c_str());
    }

    // The layer's gated unit from the architecture and its hyperparameters, as llama.cpp's build_moe_ffn picks it:
    // gpt-oss and minimax-m3 SwiGLU-OAI (alpha 1.702, limit 7, fixed there); grok and gemma4 GELU; a swiglu_clamp_exp
    // limit (a scalar or one per layer) clamps DeepSeek-V4's SwiGLU (ggml_swiglu_clamp) and every other architecture's
    // SiLU (silu_limit); the rest SiLU. Biases and scales: whatever ffn_*_exps.{bias,scale} tensors the layer has.
    llama_xd_variant variant(uint32_t il) const {
        llama_xd_variant v;
        const int64_t k = gguf_find_key(gguf, "general.architecture");
        const std::string arch = k >= 0 && gguf_get_kv_type(gguf, k) == GGUF_TYPE_STRING ? gguf_get_val_str(gguf, k) : "";
        if (arch == "gpt-oss" || arch == "minimax-m3") {
            v.activation = LLAMA_XD_ACT_SWIGLU_OAI;
            v.alpha = 1.702f;
            v.limit = 7.0f;
        } else if (arch == "grok" || arch == "gemma4") {
            v.activation = LLAMA_XD_ACT_GELU;
        } else if (const float limit = clamp_limit(arch, il); limit > 1e-6f && tensor(il, "gate") != nullptr) {
            v.activation = arch == "deepseek4" ? LLAMA_XD_ACT_SWIGLU_CLAMP : LLAMA_XD_ACT_SILU_LIMIT;
            v.limit = limit;
        }
        v.gate_b = tensor(il, "gate", "bias");
        v.up_b = tensor(il, "up", "bias");
        v.down_b = tensor(il, "down", "bias");
        v.gate_s = tensor(il, "gate", "scale");
        v.up_s = tensor(il, "up", "scale");
        v.down_s = tensor(il, "down", "scale");
        return v;
    }

    // <arch>.swiglu_clamp_exp for layer il: a float for every layer, or an array of one per layer; 0 when absent.
    float clamp_limit(const std::string & arch, uint32_t il) const {
        const int64_t k = gguf_find_key(gguf, (arch + ".swiglu_clamp_exp").c_str());
        if (k < 0) return 0.0f;
        if (gguf_get_kv_type(gguf, k) == GGUF_TYPE_FLOAT32) return gguf_get_val_f32(gguf, k);
        if (gguf_get_kv_type(gguf, k) == GGUF_TYPE_ARRAY && gguf_get_arr_type(gguf, k) == GGUF_TYPE_FLOAT32 &&
            il < gguf_get_arr_n(gguf, k)) {
            return ((const float *) gguf_get_arr_data(gguf, k))[il];
        }
        return 0.0f;
    }

    // Reads a tensor's bytes from the file into memory owned by `into`.
    void load(ggml_tensor * t, layer_experts & into) const {
        const int64_t id = gguf_find_tensor(gguf, t->name);
        if (id < 0) die(std::string("tensor ") + t->name + " not in the file");
        const size_t n = ggml_nbytes(t);
        char * buf = (char *) aligned_alloc(64, (n + 63) & ~size_t(63));
        if (buf == nullptr) die("out of memory");
        into.data.emplace_back(buf, &free);
        FILE * f = fopen(path.c_str(), "rb");
        if (f == nullptr) die("cannot open " + path);
        const long long off = (long long) (gguf_get_data_offset(gguf) + gguf_get_tensor_offset(gguf, id));
        const bool ok = fseeko(f, (off_t) off, SEEK_SET) == 0 && fread(buf, 1, n, f) == n;
        fclose(f);
        if (!ok) die(std::string("cannot read tensor ") + t->name);
        t->data = buf;
    }

    const layer_experts & experts(uint32_t il) {
        auto it = layers.find(il);
        if (it != layers.end()) return it->second;
        layer_experts & L = layers[il];
        ggml_tensor * gu = nullptr;
        const bool has_gate_up = gate_up(il, &L.gate, &L.up, &gu);
        L.down = tensor(il, "down");
        if (!has_gate_up || !L.down) {
            die("layer " + std::to_string(il) + " has no routed experts (blk.N.ffn_{gate,up,down}_exps or ffn_gate_up_exps)");
        }
        if (gu != nullptr) {
            load(gu, L);
            // the views were made before their source had data: point them into it now
            L.gate->data = (char *) gu->data + L.gate->view_offs;
            L.up->data = (char *) gu->data + L.up->view_offs;
        } else {
            load(L.gate, L);
            load(L.up, L);
        }
        load(L.down, L);
        L.variant = variant(il);
        for (ggml_tensor * b : { L.variant.gate_b, L.variant.up_b, L.variant.down_b, L.variant.gate_s, L.variant.up_s, L.variant.down_s }) {
            if (b != nullptr) load(b, L);
        }
        std::string why;
        if (!llama_xd_experts_supported(L.gate, L.up, L.down, &why) ||
            !llama_xd_variant_supported(L.variant, L.gate->ne[0], L.gate->ne[1], L.gate->ne[2], &why)) {
            die("layer " + std::to_string(il) + ": " + why);
        }
        return L;
    }
};

void info(model_file & m) {
    std::string layers;
    int64_t n_embd = 0, ff = 0, n_expert = 0;
    for (uint32_t il = 0; il < 4096; ++il) {
        ggml_tensor * g = nullptr, * u = nullptr, * gu = nullptr;
        const ggml_tensor * d = m.tensor(il, "down");
        if (!m.gate_up(il, &g, &u, &gu) || !d) continue;
        n_embd = g->ne[0], ff = g->ne[1], n_expert = g->ne[2];
        char buf[256];
        const llama_xd_variant v = m.variant(il);
        snprintf(buf, sizeof(buf),
                 "%s{\"layer\":%u,\"gate\":\"%s\",\"up\":\"%s\",\"down\":\"%s\",\"activation\":\"%s\",\"biases\":%s}",
                 layers.empty() ? "" : ",", il, ggml_type_name(g->type), ggml_type_name(u->type), ggml_type_name(d->type),
                 ACTIVATION_NAMES[v.activation], v.gate_b || v.up_b || v.down_b ? "true" : "false");
        layers += buf;
    }
    printf("{\"n_embd\":%lld,\"ff\":%lld,\"n_expert\":%lld,\"numerics\":%d,\"layers\":[%s]}\n", (long long) n_embd, (long long) ff,
           (long long) n_expert, LLAMA_XD_NUMERICS_LLAMA, layers.c_str());
}

// Reads exactly n bytes; false at a clean end of input (nothing read), dies on a partial read.
bool read_exact(FILE * f, void * p, size_t n, bool eof_ok) {
    const size_t got = fread(p, 1, n, f);
    if (got == n) return true;
    if (got == 0 && eof_ok && feof(f)) return false;
    die("input ends inside a record");
}

int run(model_file & m, FILE * in, FILE * out, int n_threads, int repeat, bool cold) {
    std::vector<float> rows, probs, sums;
    std::vector<int32_t> ids;
    for (;;) {
        uint32_t head[3];
        if (!read_exact(in, head, sizeof(head), true)) return 0;
        const uint32_t il = head[0], n_tok = head[1], n_used = head[2];
        const layer_experts & L = m.experts(il);
        const int64_t n_embd = L.gate->ne[0], n_expert = L.gate->ne[2];
        if (n_tok < 1 || n_tok > MAX_TOKENS) die("n_tokens " + std::to_string(n_tok) + " outside [1, " + std::to_string(MAX_TOKENS) + "]");
        if (n_used < 1 || n_used > n_expert) die("n_used " + std::to_string(n_used) + " outside [1, n_expert]");
        rows.resize((size_t) n_tok * n_embd);
        ids.resize((size_t) n_tok * n_used);
        probs.resize((size_t) n_tok * n_used);
        sums.resize((size_t) n_tok * n_embd);
        read_exact(in, rows.data(), rows.size() * sizeof(float), false);
        read_exact(in, ids.data(), ids.size() * sizeof(int32_t), false);
        read_exact(in, probs.data(), probs.size() * sizeof(float), false);
        for (int32_t e : ids) {
            if (e < 0 || e >= n_expert) die("expert id " + std::to_string(e) + " outside [0, " + std::to_string(n_expert) + ")");
        }
        // (--cold: the first timed compute is the record's first, so its experts come from memory, as when serving)
        if ((!cold || repeat == 0) &&
            !llama_xd_compute_pairs(L.gate, L.up, L.down, rows.data(), ids.data(), probs.data(), n_tok, n_used, sums.data(), n_threads, L.variant)) {
            die("ggml could not compute the graph");
        }
        if (repeat > 0) {
            std::string ms, cpu_ms;
            for (int r = 0; r < repeat; ++r) {
                const std::clock_t c0 = std::clock();
                const auto t0 = std::chrono::steady_clock::now();
                if (!llama_xd_compute_pairs(L.gate, L.up, L.down, rows.data(), ids.data(), probs.data(), n_tok, n_used, sums.data(),
                                            n_threads, L.variant)) {
                    die("ggml could not compute the graph");
                }
                const double dt = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
                const double dc = 1000.0 * double(std::clock() - c0) / CLOCKS_PER_SEC;
                char buf[32];
                snprintf(buf, sizeof(buf), "%s%.4f", r ? "," : "", dt);
                ms += buf;
                snprintf(buf, sizeof(buf), "%s%.4f", r ? "," : "", dc);
                cpu_ms += buf;
            }
            fprintf(stderr, "{\"timing\":{\"n_tokens\":%u,\"n_used\":%u,\"threads\":%d,\"ms\":[%s],\"cpu_ms\":[%s]}}\n", n_tok, n_used,
                    n_threads, ms.c_str(), cpu_ms.c_str());
            fflush(stderr);
        }
        if (fwrite(sums.data(), sizeof(float), sums.size(), out) != sums.size() || fflush(out) != 0) die("cannot write the output");
    }
}

void usage() {
    fprintf(stderr,
            "usage: linkcpp-expert-ref -m MODEL.gguf [-i IN] [-o OUT] [-t THREADS]   (IN / OUT: files, '-' = stdin / stdout,\n"
            "       the default; THREADS: 1 by default, the sums do not depend on it)\n"
            "       [--repeat R]: time each record R more times, one JSON line per record on stderr\n"
            "       [--cold]: with --repeat, no untimed compute first (the first timed one meets its weights cold)\n"
            "       linkcpp-expert-ref -m MODEL.gguf --info\n"
            "input records: u32 layer, u32 n_tokens, u32 n_used, f32 rows[n_tokens*n_embd], i32 ids[n_tokens*n_used],\n"
            "               f32 probs[n_tokens*n_used]; output per record: f32 sums[n_tokens*n_embd]\n");
}

} // namespace

int main(int argc, char ** argv) {
    std::string model, in_path = "-", out_path = "-";
    bool want_info = false;
    int n_threads = 1;
    int repeat = 0;
    bool cold = false;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) { usage(); die(a + " needs a value"); }
            return argv[++i];
        };
        if (a == "-m" || a == "--model") model = value();
        else if (a == "-i" || a == "--input") in_path = value();
        else if (a == "-o" || a == "--output") out_path = value();
        else if (a == "-t" || a == "--threads") n_threads = std::max(1, std::min(256, atoi(value().c_str())));
        else if (a == "--repeat") repeat = std::max(0, std::min(100000, atoi(value().c_str())));
        else if (a == "--cold") cold = true;
        else if (a == "--info") want_info = true;
        else if (a == "-h" || a == "--help") { usage(); return 0; }
        else { usage(); die("unknown argument " + a); }
    }
    if (model.empty()) { usage(); die("-m MODEL.gguf is required"); }
    ggml_cpu_init();
    model_file m(model);
    if (want_info) { info(m); return 0; }
    FILE * in = in_path == "-" ? stdin : fopen(in_path.c_str(), "rb");
    if (in == nullptr) die("cannot open " + in_path);
    FILE * out = out_path == "-" ? stdout : fopen(out_path.c_str(), "wb");
    if (out == nullptr) die("cannot create " + out_path);
    const int rc = run(m, in, out, n_threads, repeat, cold);
    if (out != stdout && fclose(out) != 0) die("cannot write " + out_path);
    return rc;
}
