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

#ifdef __cplusplus
}
#endif
