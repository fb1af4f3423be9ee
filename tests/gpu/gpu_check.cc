// Checked driver calls and role-prefixed logging (gpu_check.h).
#include "gpu/gpu_check.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <ctime>

namespace gpu {
namespace {

std::string& RoleName() {
  static std::string role = "main";
  return role;
}

void VLine(const char* prefix, const char* fmt, va_list args) {
  char body[2048];
  vsnprintf(body, sizeof body, fmt, args);
  std::printf("[%s %d] %s%s\n", RoleName().c_str(), static_cast<int>(getpid()), prefix, body);
  std::fflush(stdout);
}

}  // namespace

void SetRole(const std::string& role) { RoleName() = role; }

void Log(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  VLine("", fmt, args);
  va_end(args);
}

void Fail(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  VLine("FAIL: ", fmt, args);
  va_end(args);
  std::fflush(stderr);
  std::_Exit(1);
}

void CheckCu(CUresult result, const char* expr, const char* file, int line) {
  if (result == CUDA_SUCCESS) return;
  const char* name = nullptr;
  if (cuGetErrorName(result, &name) != CUDA_SUCCESS || name == nullptr) name = "unknown";
  Fail("%s returned %d (%s) at %s:%d", expr, static_cast<int>(result), name, file, line);
}

bool ShimLoaded() { return dlsym(RTLD_DEFAULT, "cusnap_build_info") != nullptr; }

int DeviceCount() {
  CU(cuInit(0));  // idempotent; lets callers ask before choosing a device
  int count = 0;
  CU(cuDeviceGetCount(&count));
  return count;
}

CUcontext UsePrimaryContext(int ordinal) {
  CU(cuInit(0));
  if (ordinal >= DeviceCount()) Fail("device %d requested but only %d present", ordinal, DeviceCount());
  CUdevice device = 0;
  CU(cuDeviceGet(&device, ordinal));
  CUcontext context = nullptr;
  CU(cuDevicePrimaryCtxRetain(&context, device));
  CU(cuCtxSetCurrent(context));
  return context;
}

double NowSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

unsigned long long ParseSize(const char* text) {
  char* end = nullptr;
  unsigned long long value = std::strtoull(text, &end, 0);
  if (end == text) Fail("not a size: '%s'", text);
  switch (*end) {
    case 'K': case 'k': value <<= 10; ++end; break;
    case 'M': case 'm': value <<= 20; ++end; break;
    case 'G': case 'g': value <<= 30; ++end; break;
    default: break;
  }
  if (*end != '\0') Fail("not a size: '%s'", text);
  return value;
}

}  // namespace gpu
