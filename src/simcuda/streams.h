// Streams and events. simcuda runs every copy and memset to completion before its call
// returns, so a stream is an ordering promise that always holds; streams and events exist to be
// validated, synchronized on and destroyed like CUDA's.
#pragma once

#include "cuda_api.h"

namespace simcuda::streams {

/// CUDA_SUCCESS if `stream` is a stream of the calling thread's current context or one of the
/// special streams (0, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD); CUDA_ERROR_INVALID_CONTEXT
/// without a current context; CUDA_ERROR_INVALID_HANDLE for an unknown stream.
CUresult check(CUstream stream);

}  // namespace simcuda::streams
