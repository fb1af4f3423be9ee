// The zero-chunk scan kernel and its loading (zero_scan.h).
#include "shim/carrier/zero_scan.h"

#include "common/log.h"

namespace cusnap::shim {
namespace {

// chunk_nonzero_u64(src, bytes, chunk, flags), grid (chunks, parts), any block size: block
// (c, p) ORs part p of chunk c's 8-byte words together, thread-strided, and sets flags[c]
// to 1 when the result is non-zero. Several blocks may store 1 to the same flag: the same
// value, so no atomics. Written by hand (sm_70 PTX; later GPUs JIT it at load).
constexpr const char kPtx[] = R"(.version 7.0
.target sm_70
.address_size 64

.visible .entry chunk_nonzero_u64(
  .param .u64 p_src, .param .u64 p_bytes, .param .u64 p_chunk, .param .u64 p_flags)
{
  .reg .pred %p<3>;
  .reg .b32 %r<8>;
  .reg .b64 %rd<24>;

  ld.param.u64 %rd1, [p_src];
  ld.param.u64 %rd2, [p_bytes];
  ld.param.u64 %rd3, [p_chunk];
  ld.param.u64 %rd4, [p_flags];
  cvta.to.global.u64 %rd1, %rd1;
  cvta.to.global.u64 %rd4, %rd4;
  mov.u32 %r1, %ctaid.x;
  mov.u32 %r2, %ctaid.y;
  mov.u32 %r3, %nctaid.y;
  mov.u32 %r4, %tid.x;
  mov.u32 %r5, %ntid.x;
  cvt.u64.u32 %rd5, %r1;
  mul.lo.u64 %rd6, %rd5, %rd3;
  add.u64 %rd7, %rd6, %rd3;
  min.u64 %rd7, %rd7, %rd2;
  sub.u64 %rd8, %rd7, %rd6;
  shr.u64 %rd8, %rd8, 3;
  cvt.u64.u32 %rd9, %r3;
  cvt.u64.u32 %rd10, %r2;
  add.u64 %rd11, %rd8, %rd9;
  sub.u64 %rd11, %rd11, 1;
  div.u64 %rd11, %rd11, %rd9;
  mul.lo.u64 %rd12, %rd11, %rd10;
  add.u64 %rd13, %rd12, %rd11;
  min.u64 %rd13, %rd13, %rd8;
  cvt.u64.u32 %rd14, %r4;
  add.u64 %rd14, %rd12, %rd14;
  cvt.u64.u32 %rd15, %r5;
  shr.u64 %rd16, %rd6, 3;
  mov.u64 %rd17, 0;
WORDS:
  setp.ge.u64 %p1, %rd14, %rd13;
  @%p1 bra FOLDED;
  add.u64 %rd18, %rd16, %rd14;
  shl.b64 %rd18, %rd18, 3;
  add.u64 %rd18, %rd1, %rd18;
  ld.global.nc.u64 %rd19, [%rd18];
  or.b64 %rd17, %rd17, %rd19;
  add.u64 %rd14, %rd14, %rd15;
  bra WORDS;
FOLDED:
  setp.eq.u64 %p2, %rd17, 0;
  @%p2 bra DONE;
  shl.b64 %rd20, %rd5, 2;
  add.u64 %rd20, %rd4, %rd20;
  mov.u32 %r6, 1;
  st.global.u32 [%rd20], %r6;
DONE:
  ret;
}
)";

// Blocks per chunk, and threads per block: enough blocks to keep every SM reading.
constexpr unsigned kPartsPerChunk = 16;
constexpr unsigned kThreads = 256;

}  // namespace

const char* ZeroScanPtx() { return kPtx; }

CUfunction ZeroScanner::FunctionFor(CUcontext context) {
  for (const Loaded& loaded : loaded_) {
    if (loaded.context == context) return loaded.function;
  }
  Loaded& loaded = loaded_.emplace_back(Loaded{context, nullptr});
  CUmodule module = nullptr;
  if (api_.cuModuleLoadData == nullptr || api_.cuModuleGetFunction == nullptr) return nullptr;
  if (CUresult r = api_.cuModuleLoadData(&module, kPtx); r != CUDA_SUCCESS) {
    CUSNAP_LOG_WARN("host carrier: the zero-chunk scan kernel does not load (%s); every chunk "
                    "is copied", ResultText(api_, r).c_str());
    return nullptr;
  }
  if (CUresult r = api_.cuModuleGetFunction(&loaded.function, module, "chunk_nonzero_u64");
      r != CUDA_SUCCESS) {
    CUSNAP_LOG_WARN("host carrier: the zero-chunk scan kernel has no entry (%s); every chunk is "
                    "copied", ResultText(api_, r).c_str());
    loaded.function = nullptr;
  }
  return loaded.function;
}

CUresult ZeroScanner::Enqueue(CUcontext context, CUstream stream, CUdeviceptr src, size_t bytes,
                              size_t chunk, CUdeviceptr flags) {
  CUfunction function = FunctionFor(context);
  if (function == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  const size_t chunks = (bytes + chunk - 1) / chunk;
  void* params[] = {&src, &bytes, &chunk, &flags};
  return api_.cuLaunchKernel(function, static_cast<unsigned>(chunks), kPartsPerChunk, 1, kThreads,
                             1, 1, 0, stream, params, nullptr);
}

}  // namespace cusnap::shim
