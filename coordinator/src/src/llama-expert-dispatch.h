// Expertswarm expert dispatch: hands the routed-expert FFN of MoE layers to an external dispatcher over a local socket
// and computes whatever the dispatcher did not serve locally. Wire format: docs/dispatch-protocol.md (version 1).
// Not part of llama.cpp: coordinator/src/ is an overlay that coordinator/build.sh copies onto llama.cpp's tree
// (coordinator/README.md); llama.cpp's own files are changed only by coordinator/patches/.
#pragma once

#include "ggml.h"

#include <bitset>
#include <cstdint>
#include <string>

#define LLAMA_XD_MAX_LAYERS 512

// What the HELLO frame's `numerics` field says about how this coordinator computes experts (docs/dispatch-protocol.md):
// 1 = llama.cpp CPU backend rounding (activations converted to each weight type's vec_dot type before the dot products,
// llama_xd_compute_pairs below). 0 would mean unknown / exact float math; this coordinator never sends it.
#define LLAMA_XD_NUMERICS_EXACT 0
#define LLAMA_XD_NUMERICS_LLAMA 1

// Layers whose next graph should take the dispatch path. Part of the graph parameters, so a change rebuilds the graph.
typedef std::bitset<LLAMA_XD_MAX_LAYERS> llama_xd_mask;

struct llama_expert_dispatch;

struct llama_xd_model_info {
    std::string desc; // llama_model_desc(), e.g. "qwen3moe 30B.A3B Q4_K - Medium"
    int32_t n_layer       = 0;
    int32_t n_embd        = 0;
    int32_t n_expert      = 0;
    int32_t n_expert_used = 0;
};

// Starts the client: a background thread keeps (re)connecting to `path` with bounded waits. Never blocks the caller.
llama_expert_dispatch * llama_xd_init(const char * path, int32_t deadline_ms, const llama_xd_model_info & info);
void llama_xd_free(llama_expert_dispatch * xd);

// Which layers should build the dispatch path now: connected, and the dispatcher has not asked for quiet on the layer.
llama_xd_mask llama_xd_plan(llama_expert_dispatch * xd);

// The expert FFN variant of a layer beyond its three matrices (the hub's gguf/expert-variant.ts): its gated unit —
// SiLU-gated (the default); gpt-oss's SwiGLU-OAI, min(g, limit) · σ(alpha · min(g, limit)) · (clamp(u, ±limit) + 1);
// DeepSeek-V4's clamped SwiGLU, silu(min(g, limit)) · clamp(u, ±limit); the limited SiLU of Step-3.5 and Ling 3,
// min(silu(g), limit) · clamp(u, ±limit); GELU-gated (tanh approximation) — and optional per-expert float32 scales
// [n_expert] (each matrix's products multiplied by its expert's, ggml_mul as build_lora_mm_id) and biases [ff or
// n_embd, n_expert] (added after the scales, ggml_add_id).
enum llama_xd_activation {
    LLAMA_XD_ACT_SILU         = 0,
    LLAMA_XD_ACT_SWIGLU_OAI   = 1,
    LLAMA_XD_ACT_SWIGLU_CLAMP = 2,
    LLAMA_XD_ACT_SILU_LIMIT   = 3,
    LLAMA_XD_ACT_GELU         = 4,
};

struct llama_xd_variant {
    llama_xd_activation activation = LLAMA_XD_ACT_SILU;
    float alpha = 0.0f; // SwiGLU-OAI only
    float limit = 0.0f; // SwiGLU-OAI, clamped SwiGLU, limited SiLU
    ggml_tensor * gate_b = nullptr;
    ggml_tensor * up_b   = nullptr;
    ggml_tensor * down_b = nullptr;
    ggml_tensor * gate_s = nullptr;
    ggml_tensor * up_s   = nullptr;
    ggml_tensor * down_s = nullptr;
};

// Says once per process that an architecture or layer shape is not supported by the dispatch path.
void llama_xd_note_unsupported(const char * what);

// Replaces the routed-expert FFN of layer `il`:
//   cur      [n_embd, n_tokens]          normed rows
//   selected [n_used, n_tokens] i32      top-k expert ids (router authority: decided here, never by a worker)
//   probs    [1, n_used, n_tokens]       router probabilities of those experts, already normalised/scaled
//                                        (llama.cpp's build_moe_ffn calls them `weights`)
//   *_exps   [.., .., n_expert]          expert matrices (standard ggml layout, not repacked)
//   variant                              the activation and biases (default: SiLU-gated, no biases)
// Returns Σ_k probs[k] · (down_k(act(gate_k · x + bg_k, up_k · x + bu_k)) + bd_k) per token, [n_embd, n_tokens].
ggml_tensor * llama_xd_build_moe(
        ggml_context * ctx, llama_expert_dispatch * xd, int il,
        ggml_tensor * cur, ggml_tensor * selected, ggml_tensor * probs,
        ggml_tensor * gate_exps, ggml_tensor * up_exps, ggml_tensor * down_exps,
        const llama_xd_variant & variant = llama_xd_variant());

// Whether the dispatch path's local computation covers these expert matrices: CPU dot products for their types, gate and
// up [n_embd, ff, n_expert], down [ff, n_embd, n_expert], contiguous rows. On false, `why` says what is wrong.
bool llama_xd_experts_supported(const ggml_tensor * gate_exps, const ggml_tensor * up_exps, const ggml_tensor * down_exps,
                                std::string * why);

// The coordinator's local computation of routed-expert pairs, on its own:
//   sums[t] = Σ_k probs[t·n_used + k] · down_e(silu(gate_e · x_t) ⊙ (up_e · x_t)),  e = ids[t·n_used + k], x_t = rows[t]
// rows [n_tokens × n_embd] f32, ids/probs [n_tokens × n_used], sums [n_tokens × n_embd] f32 (overwritten).
// It builds and runs (with ggml's CPU backend, n_threads threads) the very graph llama_xd_build_moe builds for a
// dispatched layer, less the remote op: nothing served, every pair computed locally. The values do not depend on the
// thread count. The local ops reproduce llama.cpp's stock MoE graph bit for bit (vec_dot per weight row after
// from_float to the vec_dot type, ggml's swiglu op, the product with the probs, the adds in k order), so these are
// also the sums the coordinator computes with dispatch off. linkcpp-expert-ref calls this. False if ggml fails.
// Preconditions: llama_xd_experts_supported(...) and every id in [0, n_expert).
// With `variant`: its activation and biases, as llama_xd_build_moe computes them.
bool llama_xd_compute_pairs(const ggml_tensor * gate_exps, const ggml_tensor * up_exps, const ggml_tensor * down_exps,
                            const float * rows, const int32_t * ids, const float * probs, int64_t n_tokens, int64_t n_used,
                            float * sums, int n_threads = 1, const llama_xd_variant & variant = llama_xd_variant());
// Whether a variant's biases have the shapes its matrices need (f32, [ff or n_embd, n_expert], contiguous); `why` on false.
bool llama_xd_variant_supported(const llama_xd_variant & variant, int64_t n_embd, int64_t ff, int64_t n_expert, std::string * why);
