// How messages name things, the same way on both sides (DESIGN.md, "Errors"): a process, a
// CUresult, a VA range. The shim and the coordinator each look the CUresult's name up in
// their own driver table and pass it here.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace cusnap {

/// "pid 4121": how every message names a process. `pid` is as this process's /proc numbers
/// it; where that is not how the user's PID namespace numbers it (a command working inside a
/// job's PID namespace of its own, SetCallerPidLookup), the user's pid comes first and the
/// job's beside it: "pid 15572 (pid 14764 in the job's PID namespace)".
std::string ProcessText(int pid);

/// The pid the user's PID namespace (where they ran the command) gives the process this
/// process calls `pid`, for every pid a message offers to act on ("kill -CONT N", "--pid N");
/// `pid` itself when no lookup is set or the lookup finds none.
int CallerPid(int pid);

/// "--pid N", N being CallerPid(pid): how a message names the option a command takes.
std::string PidOption(int pid);

/// Makes CallerPid ask `lookup` (returning 0 when it finds none): set once by a command that
/// works inside a job's PID namespace; nullptr (the default) keeps every pid as it is.
void SetCallerPidLookup(int (*lookup)(int pid));

/// "pid 4121 (python3)"; "pid 4121" when `name` is empty; "pid 15572 (python3; pid 14764 in
/// the job's PID namespace)" as ProcessText(pid) says.
std::string ProcessText(int pid, std::string_view name);

/// ProcessText of the calling process: how the shim's messages start (DESIGN.md, "Errors").
std::string ThisProcess();

/// "CUDA_ERROR_NOT_SUPPORTED (801)" for CUresult `result`: `driver_name` is what the driver's
/// cuGetErrorName gave (null when it gave nothing); without it, the name of a common
/// CUresult, else "CUresult 801". (An int: this header stays free of cuda.h, which the shim
/// includes its own way, shim/driver/cuda_abi.h.)
std::string CuResultText(int result, const char* driver_name = nullptr);

/// "[0x320000000, +536870912)": the VA range of `size` bytes at `address`.
std::string VaRangeText(uint64_t address, uint64_t size);

/// A GPU's UUID (16 raw bytes, CUuuid) as nvidia-smi and CUDA_VISIBLE_DEVICES write it:
/// "GPU-" + 8-4-4-4-12 lowercase hex. How every message, state file and wire field names a GPU.
std::string FormatGpuUuid(const unsigned char bytes[16]);

}  // namespace cusnap
