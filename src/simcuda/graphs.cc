// Stream capture and graphs (CUDA Driver API, "Stream Management": capture; "Graph
// Management"): a capturing stream records its work (streams.h) instead of running it;
// cuStreamEndCapture makes a graph of it, cuGraphInstantiate an executable graph, and
// cuGraphLaunch replays the recorded work, in order, on a stream.
#include "api_call.h"
#include "streams.h"

#include <mutex>
#include <set>

struct CUgraph_st {
  simcuda::streams::Captured work;
};
struct CUgraphExec_st {
  simcuda::streams::Captured work;
};

namespace simcuda::graphs {
namespace {

struct Registry {
  std::mutex mutex;
  std::set<CUgraph> graphs;
  std::set<CUgraphExec> execs;
};

Registry &registry() {
  static Registry *r = new Registry;  // never destroyed
  return *r;
}

CUresult begin(CUstream stream, CUstreamCaptureMode mode) {
  if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
      mode != CU_STREAM_CAPTURE_MODE_RELAXED) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return streams::begin_capture(stream);
}

CUresult end(CUstream stream, CUgraph *graph) {
  if (graph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  streams::Captured work;
  if (CUresult r = streams::end_capture(stream, &work); r != CUDA_SUCCESS) return r;
  auto *made = new CUgraph_st{std::move(work)};
  Registry &r = registry();
  std::lock_guard lock(r.mutex);
  r.graphs.insert(made);
  *graph = made;
  return CUDA_SUCCESS;
}

CUresult instantiate(CUgraphExec *exec, CUgraph graph) {
  if (exec == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Registry &r = registry();
  std::lock_guard lock(r.mutex);
  if (r.graphs.count(graph) == 0) return CUDA_ERROR_INVALID_VALUE;
  auto *made = new CUgraphExec_st{graph->work};
  r.execs.insert(made);
  *exec = made;
  return CUDA_SUCCESS;
}

CUresult launch(CUgraphExec exec, CUstream stream) {
  streams::Captured work;
  {
    Registry &r = registry();
    std::lock_guard lock(r.mutex);
    if (r.execs.count(exec) == 0) return CUDA_ERROR_INVALID_VALUE;
    work = exec->work;
  }
  return streams::submit(stream, [work = std::move(work)] {
    for (const streams::Work &step : work) {
      if (CUresult r = step(); r != CUDA_SUCCESS) return r;
    }
    return CUDA_SUCCESS;
  });
}

template <typename Object>
CUresult destroy(std::set<Object *> Registry::*objects, Object *object) {
  Registry &r = registry();
  std::lock_guard lock(r.mutex);
  if ((r.*objects).erase(object) == 0) return CUDA_ERROR_INVALID_VALUE;
  delete object;
  return CUDA_SUCCESS;
}

}  // namespace
}  // namespace simcuda::graphs

using namespace simcuda::graphs;  // NOLINT: entry points below are the module's exports

extern "C" {

SIMCUDA_BOTH_FORMS(CUresult, cuStreamBeginCapture, "cuStreamBeginCapture", (CUstream hStream),
                   { return begin(hStream, CU_STREAM_CAPTURE_MODE_GLOBAL); })
SIMCUDA_BOTH_FORMS(CUresult, cuStreamBeginCapture_v2, "cuStreamBeginCapture",
                   (CUstream hStream, CUstreamCaptureMode mode), { return begin(hStream, mode); })
// Capture into an existing graph: simcuda's graphs are built only by capture.
SIMCUDA_BOTH_FORMS(CUresult, cuStreamBeginCaptureToGraph, "cuStreamBeginCaptureToGraph",
                   (CUstream, CUgraph, const CUgraphNode *, const CUgraphEdgeData *, size_t, CUstreamCaptureMode),
                   { return CUDA_ERROR_NOT_SUPPORTED; })
SIMCUDA_BOTH_FORMS(CUresult, cuStreamEndCapture, "cuStreamEndCapture", (CUstream hStream, CUgraph *phGraph),
                   { return end(hStream, phGraph); })

CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags) {
  SIMCUDA_CALL_INITIALIZED("cuGraphInstantiate");
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  return instantiate(phGraphExec, hGraph);
}
// The CUDA 10.0 and 11.0 ABIs (error node and log buffer, left untouched: nothing fails late).
CUresult cuGraphInstantiate(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *, char *, size_t) {
  SIMCUDA_CALL_INITIALIZED("cuGraphInstantiate");
  return instantiate(phGraphExec, hGraph);
}
CUresult cuGraphInstantiate_v2(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *, char *, size_t) {
  SIMCUDA_CALL_INITIALIZED("cuGraphInstantiate");
  return instantiate(phGraphExec, hGraph);
}

SIMCUDA_BOTH_FORMS(CUresult, cuGraphLaunch, "cuGraphLaunch", (CUgraphExec hGraphExec, CUstream hStream),
                   { return launch(hGraphExec, hStream); })

CUresult cuGraphDestroy(CUgraph hGraph) {
  SIMCUDA_CALL_INITIALIZED("cuGraphDestroy");
  return destroy(&Registry::graphs, hGraph);
}
CUresult cuGraphExecDestroy(CUgraphExec hGraphExec) {
  SIMCUDA_CALL_INITIALIZED("cuGraphExecDestroy");
  return destroy(&Registry::execs, hGraphExec);
}

}  // extern "C"
