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

// Says once per process that an architecture or layer shape is not supported by the dispatch path.
void llama_xd_note_unsupported(const char * what);

// Replaces the routed-expert FFN of layer `il`:
//   cur      [n_embd, n_tokens]          normed rows
//   selected [n_used, n_tokens] i32      top-k expert ids (router authority: decided here, never by a worker)
//   probs    [1, n_used, n_tokens]       router probabilities of those experts, already normalised/scaled
//                                        (llama.cpp's build_moe_ffn calls them `weights`)
//   *_exps   [.., .., n_expert]          expert matrices (standard ggml layout, not repacked)
// Returns Σ_k probs[k] · down_k(silu(gate_k · x) ⊙ (up_k · x)) per token, [n_embd, n_tokens].
ggml_tensor * llama_xd_build_moe(
        ggml_context * ctx, llama_expert_dispatch * xd, int il,
        ggml_tensor * cur, ggml_tensor * selected, ggml_tensor * probs,
        ggml_tensor * gate_exps, ggml_tensor * up_exps, ggml_tensor * down_exps);
