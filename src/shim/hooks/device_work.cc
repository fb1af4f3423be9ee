// Hooks that tell the shim about the application's device work: cuInit (a fork child's
// endpoint starts there), and for the drain before save (lifecycle/drain.h) the stream
// captures it opens and closes and the contexts it creates and destroys. Each passes the gate,
// forwards, and notes the driver's answer; the result is exactly the driver's.
#include "shim/hooks/hooks.h"
#include "shim/driver/driver_api.h"
#include "shim/process.h"

namespace cusnap::shim::hook {
namespace {

// The real entry point's answer, or "not found" when the driver lacks it.
template <typename Real, typename... Args>
CUresult Forward(Real real, Args... args) {
  return real != nullptr ? real(args...) : CUDA_ERROR_NOT_FOUND;
}

template <typename Real, typename... Args>
CUresult BeginCapture(Real real, CUstream stream, Args... rest) {
  CUSNAP_QUIESCE_GATE();
  const CUresult result = Forward(real, stream, rest...);
  if (result == CUDA_SUCCESS) device_work().CaptureBegan(stream);
  return result;
}

// An end that failed may have ended the capture anyway (an invalidated capture): the
// driver's cuStreamIsCapturing decides.
template <typename Real>
CUresult EndCapture(Real real, CUstream stream, CUgraph* graph) {
  CUSNAP_QUIESCE_GATE();
  const CUresult result = Forward(real, stream, graph);
  const DriverApi& api = driver();
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  const bool still = api.cuStreamIsCapturing != nullptr &&
                     api.cuStreamIsCapturing(stream, &status) == CUDA_SUCCESS &&
                     status != CU_STREAM_CAPTURE_STATUS_NONE;
  device_work().CaptureEnded(stream, still);
  return result;
}

template <typename Real, typename... Args>
CUresult CreateContext(Real real, CUcontext* context, Args... rest) {
  CUSNAP_QUIESCE_GATE();
  const CUresult result = Forward(real, context, rest...);
  if (result == CUDA_SUCCESS && context != nullptr) device_work().ContextCreated(*context);
  return result;
}

template <typename Real>
CUresult DestroyContext(Real real, CUcontext context) {
  CUSNAP_QUIESCE_GATE();
  const CUresult result = Forward(real, context);
  if (result == CUDA_SUCCESS) device_work().ContextDestroyed(context);
  return result;
}

}  // namespace

// The first driver call of most programs: the gate starts a fork child's endpoint here
// (DESIGN.md, "Endpoint").
CUresult cuInit(unsigned int Flags) {
  CUSNAP_QUIESCE_GATE();
  return Forward(driver().cuInit, Flags);
}

CUresult cuStreamBeginCapture(CUstream hStream) {
  return BeginCapture(driver().cuStreamBeginCapture, hStream);
}
CUresult cuStreamBeginCapture_ptsz(CUstream hStream) {
  return BeginCapture(driver().cuStreamBeginCapture_ptsz, hStream);
}
CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode) {
  return BeginCapture(driver().cuStreamBeginCapture_v2, hStream, mode);
}
CUresult cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode) {
  return BeginCapture(driver().cuStreamBeginCapture_v2_ptsz, hStream, mode);
}
CUresult cuStreamBeginCaptureToGraph(CUstream hStream, CUgraph hGraph, const CUgraphNode* dependencies,
                                     const CUgraphEdgeData* dependencyData, size_t numDependencies,
                                     CUstreamCaptureMode mode) {
  return BeginCapture(driver().cuStreamBeginCaptureToGraph, hStream, hGraph, dependencies, dependencyData,
                      numDependencies, mode);
}
CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream hStream, CUgraph hGraph, const CUgraphNode* dependencies,
                                          const CUgraphEdgeData* dependencyData, size_t numDependencies,
                                          CUstreamCaptureMode mode) {
  return BeginCapture(driver().cuStreamBeginCaptureToGraph_ptsz, hStream, hGraph, dependencies,
                      dependencyData, numDependencies, mode);
}
CUresult cuStreamEndCapture(CUstream hStream, CUgraph* phGraph) {
  return EndCapture(driver().cuStreamEndCapture, hStream, phGraph);
}
CUresult cuStreamEndCapture_ptsz(CUstream hStream, CUgraph* phGraph) {
  return EndCapture(driver().cuStreamEndCapture_ptsz, hStream, phGraph);
}

CUresult cuCtxCreate(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  return CreateContext(driver().cuCtxCreate, pctx, flags, dev);
}
CUresult cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  return CreateContext(driver().cuCtxCreate_v2, pctx, flags, dev);
}
CUresult cuCtxCreate_v3(CUcontext* pctx, CUexecAffinityParam* paramsArray, int numParams, unsigned int flags,
                        CUdevice dev) {
  return CreateContext(driver().cuCtxCreate_v3, pctx, paramsArray, numParams, flags, dev);
}
CUresult cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* ctxCreateParams, unsigned int flags, CUdevice dev) {
  return CreateContext(driver().cuCtxCreate_v4, pctx, ctxCreateParams, flags, dev);
}
CUresult cuCtxDestroy(CUcontext ctx) { return DestroyContext(driver().cuCtxDestroy, ctx); }
CUresult cuCtxDestroy_v2(CUcontext ctx) { return DestroyContext(driver().cuCtxDestroy_v2, ctx); }

}  // namespace cusnap::shim::hook
