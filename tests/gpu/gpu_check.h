// Checked CUDA driver calls and logging for the real-GPU test programs (tests/gpu). Every
// line a program prints starts with its role and pid so that the interleaved output of two
// processes in run_all.sh's log stays readable; a failed check prints the call, its
// CUresult name and where it happened, then exits 1 (a test program stops at the first error).
#pragma once

#include <cuda.h>

#include <string>

namespace gpu {

/// Sets the prefix of every log line ("A", "B", "main", ...); the pid is added.
void SetRole(const std::string& role);

/// printf-style line on stdout, prefixed "[role pid] ", flushed at once.
void Log(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

/// Logs "FAIL: ..." and exits with status 1.
[[noreturn]] void Fail(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

/// Fails naming `expr`, `file`:`line` and the CUresult's name when `result` is not success.
void CheckCu(CUresult result, const char* expr, const char* file, int line);

/// True when libcusnap.so is loaded into this process (it exports cusnap_build_info).
bool ShimLoaded();

/// Number of CUDA devices (calls cuInit first).
int DeviceCount();

/// cuInit, then retains device `ordinal`'s primary context and makes it current on this
/// thread. Returns the context.
CUcontext UsePrimaryContext(int ordinal);

/// CLOCK_MONOTONIC in seconds.
double NowSeconds();

/// Parses "--name value" style unsigned numbers with an optional K/M/G suffix (binary units).
unsigned long long ParseSize(const char* text);

}  // namespace gpu

/// Checks a driver call: CU(cuMemCreate(...)).
#define CU(expr) ::gpu::CheckCu((expr), #expr, __FILE__, __LINE__)
