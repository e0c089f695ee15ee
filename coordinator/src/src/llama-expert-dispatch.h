// Expertswarm expert dispatch: hands the routed-expert FFN of MoE layers to an external dispatcher over a local socket
// and computes whatever the dispatcher did not serve locally. Wire format: docs/dispatch-protocol.md (version 1).
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
    std::string name;
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
//   weights  [1, n_used, n_tokens]       router weights, already normalised/scaled
//   *_exps   [.., .., n_expert]          expert matrices (standard ggml layout, not repacked)
// Returns Σ_k weights[k] · down_k(silu(gate_k · x) ⊙ (up_k · x)) per token, [n_embd, n_tokens].
ggml_tensor * llama_xd_build_moe(
        ggml_context * ctx, llama_expert_dispatch * xd, int il,
        ggml_tensor * cur, ggml_tensor * selected, ggml_tensor * weights,
        ggml_tensor * gate_exps, ggml_tensor * up_exps, ggml_tensor * down_exps);
