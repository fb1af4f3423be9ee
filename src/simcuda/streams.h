// Streams, events and stream capture. Work on a stream made with cuStreamCreate runs later,
// in order, on a worker thread of its own (as a GPU runs a stream's work after the call that
// queued it returned); work on the null, legacy and per-thread streams runs before its call
// returns, as it always did here. A capturing stream records its work into a graph instead
// (graphs.cc replays it). cuCheckpointProcessLock waits for every stream to go idle, like the
// real driver (checkpoint_service.cc).
#pragma once

#include "cuda_api.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace simcuda::streams {

/// One piece of stream work, run on the stream's worker (or at once on the special streams).
/// A result other than CUDA_SUCCESS becomes the stream's error, returned by its next
/// synchronisation.
using Work = std::function<CUresult()>;

/// Captured work, in order: what cuStreamEndCapture puts in a graph.
using Captured = std::vector<Work>;

/// CUDA_SUCCESS if `stream` is a stream of the calling thread's current context or one of the
/// special streams (0, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD); CUDA_ERROR_INVALID_CONTEXT
/// without a current context; CUDA_ERROR_INVALID_HANDLE for an unknown stream.
CUresult check(CUstream stream);

/// Validates `stream` (check()) and runs `work` in its order: appended to its capture while it
/// captures, queued on its worker for a created stream, run at once (its result returned) on
/// a special stream.
CUresult submit(CUstream stream, Work work);

/// Starts capturing `stream` (a created stream; CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED for the
/// special streams, CUDA_ERROR_ILLEGAL_STATE when it already captures).
CUresult begin_capture(CUstream stream);
/// Ends the capture of `stream` and hands out what it recorded
/// (CUDA_ERROR_ILLEGAL_STATE when it was not capturing).
CUresult end_capture(CUstream stream, Captured *work);
/// Whether `stream` captures now, and the id of that capture (0 when not capturing).
CUresult capture_status(CUstream stream, CUstreamCaptureStatus *status, cuuint64_t *id);

/// Waits until `stream` has run everything queued; returns (and clears) its error.
/// CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED while it captures.
CUresult synchronize(CUstream stream);
/// CUDA_SUCCESS when `stream` is idle, CUDA_ERROR_NOT_READY while work is queued or running.
CUresult query(CUstream stream);
/// Waits until every stream of `device` is idle; returns the first stream error seen.
CUresult synchronize_device(int device);

/// Waits until every stream of the process is idle, at most `timeout_ms` (0: no limit).
/// False when work was still queued or running at the deadline.
bool wait_idle(unsigned timeout_ms);

}  // namespace simcuda::streams
