// The native checkpoint API over a libcuda.so.1 loaded with dlopen (native_driver.h).
#include "coordinator/native/native_driver.h"
#include "common/settings.h"
#include "common/text.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

namespace cusnap::coord {
namespace {

/// The entry points (native_entry_points.def), resolved once from one dlopen handle.
struct Entry {
#define CUSNAP_NATIVE_ENTRY(member, symbol, fallback, params) CUresult(*member) params = nullptr;
#include "coordinator/native/native_entry_points.def"
};

/// Exported by the simulated driver only (src/simcuda/libcuda.map, the simcuda_test_*
/// hooks): tells it from NVIDIA's libcuda.so.1 whichever path it was found under.
constexpr const char* kSimulatedMarker = "simcuda_test_calls_in_flight";

/// `symbol` (else `fallback` when given) from `handle` into `out`; false when neither exists.
template <typename F>
bool Resolve(void* handle, const char* symbol, const char* fallback, F& out) {
  void* address = ::dlsym(handle, symbol);
  if (address == nullptr && fallback != nullptr) address = ::dlsym(handle, fallback);
  out = reinterpret_cast<F>(address);
  return address != nullptr;
}

Error CallError(int pid, const char* entry, CUresult rc) {
  return Error{static_cast<int>(rc),
               ProcessText(pid) + ": " + entry + " failed: " + CuResultText(rc)};
}

/// KernelModuleVersionFromLine over the first line of /proc/driver/nvidia/version.
std::string KernelModuleVersion() {
  std::ifstream in("/proc/driver/nvidia/version");
  std::string line;
  if (!std::getline(in, line)) return {};
  return KernelModuleVersionFromLine(line);
}

}  // namespace

std::string KernelModuleVersionFromLine(std::string_view line) {
  const auto pos = line.find("Kernel Module");
  if (pos == std::string_view::npos) return {};
  // The version is the first token of digits and dots after "Kernel Module": the
  // proprietary module writes it next ("Kernel Module  580.95.05  Release Build ..."), the
  // open one names the platform first ("Open Kernel Module for x86_64  580.95.05 ...").
  size_t at = pos;
  while (at < line.size()) {
    const size_t begin = line.find_first_not_of(' ', at);
    if (begin == std::string_view::npos) break;
    const size_t end = std::min(line.find(' ', begin), line.size());
    const std::string_view token = line.substr(begin, end - begin);
    const bool version = token.find_first_not_of("0123456789.") == std::string_view::npos &&
                         token.find('.') != std::string_view::npos && token.front() != '.';
    if (version) return std::string(token);
    at = end;
  }
  return {};
}

namespace {

class LoadedDriver final : public CheckpointDriver {
 public:
  /// The library stays loaded after this object goes (see Open): no handle is kept.
  LoadedDriver(Entry entry, bool simulated) : e_(entry), simulated_(simulated) {}
  LoadedDriver(const LoadedDriver&) = delete;
  LoadedDriver& operator=(const LoadedDriver&) = delete;

  std::string Describe() const override {
    if (simulated_) return "simulated";
    int version = 0;
    e_.driver_get_version(&version);
    std::string text = "NVIDIA";
    const std::string module = KernelModuleVersion();
    if (!module.empty()) text += " " + module;
    return text + " (CUDA " + std::to_string(version / 1000) + "." +
           std::to_string(version % 1000 / 10) + ")";
  }
  bool simulated() const override { return simulated_; }
  bool HoldsStopped() const override { return false; }

  Result<CUprocessState> GetState(int pid) override {
    CUprocessState state{};
    const CUresult rc = e_.get_state(pid, &state);
    if (rc != CUDA_SUCCESS) return CallError(pid, "cuCheckpointProcessGetState", rc);
    return state;
  }
  Status Lock(int pid, unsigned timeout_ms) override {
    CUcheckpointLockArgs args{};
    args.timeoutMs = timeout_ms;
    const CUresult rc = e_.lock(pid, &args);
    if (rc != CUDA_SUCCESS) return CallError(pid, "cuCheckpointProcessLock", rc);
    return Ok{};
  }
  Status Checkpoint(int pid) override {
    CUcheckpointCheckpointArgs args{};
    const CUresult rc = e_.checkpoint(pid, &args);
    if (rc != CUDA_SUCCESS) return CallError(pid, "cuCheckpointProcessCheckpoint", rc);
    return Ok{};
  }
  Status Restore(int pid, std::span<const UuidPair> pairs) override {
    std::vector<CUcheckpointGpuPair> gpu_pairs(pairs.size());
    for (size_t i = 0; i < pairs.size(); ++i) {
      unsigned char from[16], to[16];
      if (!ParseGpuUuid(pairs[i].from, from) || !ParseGpuUuid(pairs[i].to, to)) {
        return Error{-1, ProcessText(pid) + ": device map pair " + pairs[i].from +
                             "=" + pairs[i].to + " is not a pair of GPU UUIDs"};
      }
      std::memcpy(gpu_pairs[i].oldUuid.bytes, from, 16);
      std::memcpy(gpu_pairs[i].newUuid.bytes, to, 16);
    }
    CUcheckpointRestoreArgs args{};
    args.gpuPairs = gpu_pairs.empty() ? nullptr : gpu_pairs.data();
    args.gpuPairsCount = static_cast<unsigned>(gpu_pairs.size());
    const CUresult rc = e_.restore(pid, gpu_pairs.empty() ? nullptr : &args);
    if (rc != CUDA_SUCCESS) return CallError(pid, "cuCheckpointProcessRestore", rc);
    return Ok{};
  }
  Status Unlock(int pid) override {
    CUcheckpointUnlockArgs args{};
    const CUresult rc = e_.unlock(pid, &args);
    if (rc != CUDA_SUCCESS) return CallError(pid, "cuCheckpointProcessUnlock", rc);
    return Ok{};
  }
  Result<std::vector<std::string>> DeviceUuids() override {
    return EachDevice("cuDeviceGetUuid", [&](CUdevice device, std::string& out) {
      CUuuid uuid{};
      const CUresult rc = e_.device_get_uuid(&uuid, device);
      if (rc == CUDA_SUCCESS) out = FormatGpuUuid(reinterpret_cast<const unsigned char*>(uuid.bytes));
      return rc;
    });
  }

  Result<std::vector<std::string>> DeviceNames() override {
    return EachDevice("cuDeviceGetName", [&](CUdevice device, std::string& out) {
      char name[256] = {};
      const CUresult rc = e_.device_get_name(name, sizeof name - 1, device);
      out = name;
      return rc;
    });
  }
  Result<uint64_t> DeviceFreeBytes(const std::string& uuid) override {
    auto uuids = DeviceUuids();
    if (!uuids) return uuids.error();
    const auto at = std::find(uuids->begin(), uuids->end(), uuid);
    if (at == uuids->end()) return Error{-1, uuid + " is not a GPU of this machine"};
    CUdevice device = 0;
    CUresult rc = e_.device_get(&device, static_cast<int>(at - uuids->begin()));
    CUcontext context = nullptr;
    if (rc == CUDA_SUCCESS) rc = e_.primary_ctx_retain(&context, device);
    if (rc != CUDA_SUCCESS) {
      return Error{rc, uuid + ": retaining its primary context failed: " + CuResultText(rc)};
    }
    size_t free = 0, total = 0;
    rc = e_.ctx_push(context);
    if (rc == CUDA_SUCCESS) {
      rc = e_.mem_get_info(&free, &total);
      CUcontext popped = nullptr;
      e_.ctx_pop(&popped);
    }
    e_.primary_ctx_release(device);
    if (rc != CUDA_SUCCESS) return Error{rc, uuid + ": cuMemGetInfo failed: " + CuResultText(rc)};
    return uint64_t{free};
  }

 private:
  /// `query(device, text)` for every device of the driver, by ordinal; the error names the
  /// device and `what` (the entry point that failed).
  template <typename Query>
  Result<std::vector<std::string>> EachDevice(const char* what, const Query& query) {
    int count = 0;
    CUresult rc = e_.device_get_count(&count);
    if (rc != CUDA_SUCCESS) return Error{rc, "cuDeviceGetCount failed: " + CuResultText(rc)};
    std::vector<std::string> out;
    for (int i = 0; i < count; ++i) {
      CUdevice device = 0;
      std::string text;
      rc = e_.device_get(&device, i);
      if (rc == CUDA_SUCCESS) rc = query(device, text);
      if (rc != CUDA_SUCCESS) {
        return Error{rc, "device " + std::to_string(i) + ": " + what + " failed: " + CuResultText(rc)};
      }
      out.push_back(std::move(text));
    }
    return out;
  }

  Entry e_;
  bool simulated_;
};

/// dlopens `path`, resolves every entry point and runs cuInit(0). `need_device` also
/// requires at least one device (auto mode's test for a usable GPU). Whether the library is
/// the simulated driver is read from the library itself (kSimulatedMarker), not from `path`:
/// LD_LIBRARY_PATH may put the simulated libcuda.so.1 where the system one is looked up.
Result<std::unique_ptr<CheckpointDriver>> Open(const std::string& path, bool need_device) {
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = ::dlerror();
    return Error{-1, std::string("cannot load the CUDA driver: ") + (why ? why : path.c_str())};
  }
  Entry e;
  const char* missing = nullptr;
#define CUSNAP_NATIVE_ENTRY(member, symbol, fallback, params) \
  if (missing == nullptr && !Resolve(handle, symbol, fallback, e.member)) missing = symbol;
#include "coordinator/native/native_entry_points.def"
  if (missing != nullptr) {
    ::dlclose(handle);  // safe: cuInit never ran, the driver started nothing
    return Error{-1, "the CUDA driver " + path + " lacks " + missing +
                         " (the checkpoint API cuCheckpointProcess* needs driver 570 or newer)"};
  }
  const bool simulated = ::dlsym(handle, kSimulatedMarker) != nullptr;
  // From cuInit on, the library is never unloaded, whatever the outcome: a driver starts
  // threads of its own (the simulated one does, NVIDIA's too), and a dlclose would unmap the
  // code they run (`cusnap run` would crash after its auto probe, now and then). It
  // stays loaded for the life of this process (exec or exit ends it).
  CUresult rc = e.init(0);
  int count = 0;
  if (rc == CUDA_SUCCESS && need_device) rc = e.device_get_count(&count);
  if (rc != CUDA_SUCCESS || (need_device && count < 1)) {
    return Error{static_cast<int>(rc), "the CUDA driver " + path + " is not usable: cuInit: " +
                                           CuResultText(rc) + ", " + std::to_string(count) +
                                           " device(s)"};
  }
  return std::unique_ptr<CheckpointDriver>(new LoadedDriver(e, simulated));
}

}  // namespace

Result<DriverChoice> ParseDriverChoice(const std::string& text) {
  if (text.empty()) return DriverChoice::kAuto;
  // The table's values are in DriverChoice's order: auto, real, sim.
  if (const auto index = settings::WordIndex(settings::kDriver, text)) {
    return static_cast<DriverChoice>(*index);
  }
  return Error{EINVAL, settings::Refusal(settings::kDriver, text)};
}

std::string SimulatedDriverDir(const std::string& bin_dir) {
  const std::string build_tree = bin_dir + "/../simcuda";
  const std::string installed = bin_dir + "/../libexec/cusnap/simcuda";
  if (::access((build_tree + "/libcuda.so.1").c_str(), F_OK) != 0 &&
      ::access((installed + "/libcuda.so.1").c_str(), F_OK) == 0) {
    return installed;
  }
  return build_tree;
}

Result<std::unique_ptr<CheckpointDriver>> LoadDriver(DriverChoice choice,
                                                     const std::string& bin_dir) {
  const std::string sim = SimulatedDriverDir(bin_dir) + "/libcuda.so.1";
  switch (choice) {
    case DriverChoice::kReal:
      return Open("libcuda.so.1", false);
    case DriverChoice::kSimulated:
      return Open(sim, false);
    case DriverChoice::kAuto: {
      auto found = Open("libcuda.so.1", true);
      if (found) return found;
      return Open(sim, false);
    }
  }
  return Error{-1, "unknown driver choice"};
}

void KeepDriverLibrariesMapped(DriverChoice choice, const std::string& bin_dir) {
  constexpr int kMapOnly = RTLD_LAZY | RTLD_LOCAL | RTLD_NODELETE;
  if (choice != DriverChoice::kSimulated) (void)::dlopen("libcuda.so.1", kMapOnly);
  if (choice != DriverChoice::kReal) {
    (void)::dlopen((SimulatedDriverDir(bin_dir) + "/libcuda.so.1").c_str(), kMapOnly);
  }
}

Result<bool> WouldUseSimulated(DriverChoice choice, const std::string& bin_dir) {
  if (choice != DriverChoice::kAuto) return choice == DriverChoice::kSimulated;
  // The probed library stays loaded (Open); a simulated one found on the library path (it
  // says so) counts as the simulated driver: the job gets ours first on its path.
  if (auto found = Open("libcuda.so.1", true); found) return (*found)->simulated();
  // The simulated driver is not loaded here: the command about to be executed in this
  // process loads it itself, and should find no trace of this process in it.
  const std::string sim = SimulatedDriverDir(bin_dir) + "/libcuda.so.1";
  if (::access(sim.c_str(), R_OK) != 0) {
    return Error{ENOENT, "no usable NVIDIA driver, and no simulated driver at " + sim};
  }
  return true;
}

}  // namespace cusnap::coord
