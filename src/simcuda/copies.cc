// Copies and memsets, synchronous and asynchronous: the async forms on a created stream run on
// its worker after the call returned (streams.h), checked when queued and again when they run
// (a range unmapped in between fails the stream with CUDA_ERROR_ILLEGAL_ADDRESS, where a GPU
// would fault). Device pointers are VAs mapped by this process; a device range
// that is not wholly mapped with the access the operation needs gives CUDA_ERROR_INVALID_VALUE
// (where a real GPU would fault). Every form needs a current context (CUDA_ERROR_INVALID_CONTEXT).
#include "api_call.h"
#include "contexts.h"
#include "device_copy.h"
#include "streams.h"
#include "vmm.h"

#include <cstring>

namespace simcuda {
namespace {

enum class Side { kHost, kDevice, kAny };

// Checks that [ptr, ptr+bytes) is usable as `side` memory for reading or writing.
CUresult check_side(CUdeviceptr ptr, size_t bytes, Side side, bool write) {
  if (ptr == 0) return CUDA_ERROR_INVALID_VALUE;
  bool device_memory = false;
  if (CUresult r = vmm::locate(ptr, bytes, write, &device_memory); r != CUDA_SUCCESS) return r;
  if (side == Side::kDevice && !device_memory) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

CUresult copy(CUdeviceptr dst, Side dst_side, CUdeviceptr src, Side src_side, size_t bytes, CUstream stream) {
  if (CUresult r = streams::check(stream); r != CUDA_SUCCESS) return r;
  if (bytes == 0) return CUDA_SUCCESS;
  if (CUresult r = check_side(dst, bytes, dst_side, true); r != CUDA_SUCCESS) return r;
  if (CUresult r = check_side(src, bytes, src_side, false); r != CUDA_SUCCESS) return r;
  return streams::submit(stream, [=] {
    if (check_side(dst, bytes, dst_side, true) != CUDA_SUCCESS ||
        check_side(src, bytes, src_side, false) != CUDA_SUCCESS) {
      return CUDA_ERROR_ILLEGAL_ADDRESS;
    }
    device_copy(reinterpret_cast<void *>(dst), reinterpret_cast<const void *>(src), bytes);
    return CUDA_SUCCESS;
  });
}

CUresult htod(CUdeviceptr dst, const void *src, size_t bytes, CUstream stream) {
  return copy(dst, Side::kDevice, reinterpret_cast<CUdeviceptr>(src), Side::kHost, bytes, stream);
}

CUresult dtoh(void *dst, CUdeviceptr src, size_t bytes, CUstream stream) {
  return copy(reinterpret_cast<CUdeviceptr>(dst), Side::kHost, src, Side::kDevice, bytes, stream);
}

template <typename T>
CUresult fill(CUdeviceptr dst, T value, size_t count, CUstream stream) {
  if (CUresult r = streams::check(stream); r != CUDA_SUCCESS) return r;
  if (count == 0) return CUDA_SUCCESS;
  if (dst % sizeof(T) != 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_side(dst, count * sizeof(T), Side::kDevice, true); r != CUDA_SUCCESS) return r;
  return streams::submit(stream, [=] {
    if (check_side(dst, count * sizeof(T), Side::kDevice, true) != CUDA_SUCCESS) return CUDA_ERROR_ILLEGAL_ADDRESS;
    T *p = reinterpret_cast<T *>(dst);
    for (size_t i = 0; i < count; ++i) p[i] = value;
    return CUDA_SUCCESS;
  });
}

}  // namespace
}  // namespace simcuda

using simcuda::Side;


extern "C" {

CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount) {
  SIMCUDA_CALL_INITIALIZED("cuMemcpy");
  return simcuda::copy(dst, Side::kAny, src, Side::kAny, ByteCount, nullptr);
}
CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount) {
  SIMCUDA_CALL_INITIALIZED("cuMemcpy");
  return simcuda::copy(dst, Side::kAny, src, Side::kAny, ByteCount, CU_STREAM_PER_THREAD);
}
CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream) {
  SIMCUDA_CALL_INITIALIZED("cuMemcpyAsync");
  return simcuda::copy(dst, Side::kAny, src, Side::kAny, ByteCount, hStream);
}
CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream) {
  SIMCUDA_CALL_INITIALIZED("cuMemcpyAsync");
  return simcuda::copy(dst, Side::kAny, src, Side::kAny, ByteCount, hStream);
}
CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount) {
  SIMCUDA_CALL_INITIALIZED("cuMemcpyHtoD");
  return simcuda::htod(dstDevice, srcHost, ByteCount, nullptr);
}
CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount) {
  SIMCUDA_CALL_INITIALIZED("cuMemcpyHtoD");
  return simcuda::htod(dstDevice, srcHost, ByteCount, CU_STREAM_PER_THREAD);
}
CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount) {
  SIMCUDA_CALL_INITIALIZED("cuMemcpyDtoH");
  return simcuda::dtoh(dstHost, srcDevice, ByteCount, nullptr);
}
CUresult cuMemcpyDtoH_v2_ptds(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount) {
  SIMCUDA_CALL_INITIALIZED("cuMemcpyDtoH");
  return simcuda::dtoh(dstHost, srcDevice, ByteCount, CU_STREAM_PER_THREAD);
}
CUresult cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount) {
  SIMCUDA_CALL_INITIALIZED("cuMemcpyDtoD");
  return simcuda::copy(dstDevice, Side::kDevice, srcDevice, Side::kDevice, ByteCount, nullptr);
}
CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount) {
  SIMCUDA_CALL_INITIALIZED("cuMemcpyDtoD");
  return simcuda::copy(dstDevice, Side::kDevice, srcDevice, Side::kDevice, ByteCount, CU_STREAM_PER_THREAD);
}
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream) {
  SIMCUDA_CALL_INITIALIZED("cuMemcpyHtoDAsync");
  return simcuda::htod(dstDevice, srcHost, ByteCount, hStream);
}
CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream) {
  SIMCUDA_CALL_INITIALIZED("cuMemcpyHtoDAsync");
  return simcuda::htod(dstDevice, srcHost, ByteCount, hStream);
}
CUresult cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream) {
  SIMCUDA_CALL_INITIALIZED("cuMemcpyDtoHAsync");
  return simcuda::dtoh(dstHost, srcDevice, ByteCount, hStream);
}
CUresult cuMemcpyDtoHAsync_v2_ptsz(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream) {
  SIMCUDA_CALL_INITIALIZED("cuMemcpyDtoHAsync");
  return simcuda::dtoh(dstHost, srcDevice, ByteCount, hStream);
}
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream) {
  SIMCUDA_CALL_INITIALIZED("cuMemcpyDtoDAsync");
  return simcuda::copy(dstDevice, Side::kDevice, srcDevice, Side::kDevice, ByteCount, hStream);
}
CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream) {
  SIMCUDA_CALL_INITIALIZED("cuMemcpyDtoDAsync");
  return simcuda::copy(dstDevice, Side::kDevice, srcDevice, Side::kDevice, ByteCount, hStream);
}
CUresult cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N) {
  SIMCUDA_CALL_INITIALIZED("cuMemsetD8");
  return simcuda::fill(dstDevice, uc, N, nullptr);
}
CUresult cuMemsetD8_v2_ptds(CUdeviceptr dstDevice, unsigned char uc, size_t N) {
  SIMCUDA_CALL_INITIALIZED("cuMemsetD8");
  return simcuda::fill(dstDevice, uc, N, CU_STREAM_PER_THREAD);
}
CUresult cuMemsetD32_v2(CUdeviceptr dstDevice, unsigned int ui, size_t N) {
  SIMCUDA_CALL_INITIALIZED("cuMemsetD32");
  return simcuda::fill(dstDevice, ui, N, nullptr);
}
CUresult cuMemsetD32_v2_ptds(CUdeviceptr dstDevice, unsigned int ui, size_t N) {
  SIMCUDA_CALL_INITIALIZED("cuMemsetD32");
  return simcuda::fill(dstDevice, ui, N, CU_STREAM_PER_THREAD);
}
CUresult cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream) {
  SIMCUDA_CALL_INITIALIZED("cuMemsetD8Async");
  return simcuda::fill(dstDevice, uc, N, hStream);
}
CUresult cuMemsetD8Async_ptsz(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream) {
  SIMCUDA_CALL_INITIALIZED("cuMemsetD8Async");
  return simcuda::fill(dstDevice, uc, N, hStream);
}
CUresult cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream) {
  SIMCUDA_CALL_INITIALIZED("cuMemsetD32Async");
  return simcuda::fill(dstDevice, ui, N, hStream);
}
CUresult cuMemsetD32Async_ptsz(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream) {
  SIMCUDA_CALL_INITIALIZED("cuMemsetD32Async");
  return simcuda::fill(dstDevice, ui, N, hStream);
}

}  // extern "C"
