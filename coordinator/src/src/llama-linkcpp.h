#pragma once

// Expertswarm (linkcpp-server): loader settings of our own, kept out of llama.h and llama-model.h so that adding one
// recompiles only the files that use it (llama-model.cpp and common/arg.cpp), not every file that includes llama.h.
// Process-wide: they apply to the models loaded after they are set (linkcpp-server sets them while parsing arguments).

#include "llama.h"

#ifdef __cplusplus
extern "C" {
#endif

// Keep the routed-expert weights (blk.N.ffn_{gate,up,down,gate_up}_exps) in ggml's standard layout, in plain CPU
// buffers (mmap-able), while every other weight may still be repacked into the CPU backend's extra buffer types.
// The expert-dispatch hook's local path reads that layout (--no-repack-exps; --expert-dispatch implies it).
LLAMA_API void llama_linkcpp_set_no_repack_exps(bool value);
LLAMA_API bool llama_linkcpp_no_repack_exps(void);

// Read the routed-expert weights on demand (--experts-on-demand): they are created as lazy tensors whatever their size
// and the --lazy-mode (mapped from the model file without prefetch, advised random access), so only the pages of the
// experts computed here are ever read in. Implies --no-repack-exps (llama_linkcpp_no_repack_exps() answers true).
LLAMA_API void llama_linkcpp_set_experts_on_demand(bool value);
LLAMA_API bool llama_linkcpp_experts_on_demand(void);

#ifdef __cplusplus
}
#endif
