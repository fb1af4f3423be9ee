// Helpers every subcommand uses: where the binary is, the state directory, the driver.
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <filesystem>

#include "cli/cli_common.h"
#include "cli/commands.h"
#include "common/endpoint_client.h"
#include "coordinator/participants/hold.h"

namespace cusnap::cli {

std::string SelfDir() {
  // Read once: in another mount namespace (a container's, pid_namespace.h) /proc/self/exe
  // names a path that does not exist there.
  static const std::string dir = [] {
    std::error_code ec;
    const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
    return ec ? std::string(".") : exe.parent_path().string();
  }();
  return dir;
}

void KeepChosenDriverMapped() {
  const char* env = std::getenv("CUSNAP_DRIVER");
  if (auto choice = coord::ParseDriverChoice(env ? env : ""); choice) {
    coord::KeepDriverLibrariesMapped(*choice, SelfDir());
  }
}

std::string StateDir(const std::string& given) {
  if (!given.empty()) return given;
  if (const char* env = std::getenv("CUSNAP_STATE_DIR"); env && *env) return env;
  return "./cusnap-state";
}

Result<std::unique_ptr<coord::CheckpointDriver>> LoadChosenDriver() {
  const char* env = std::getenv("CUSNAP_DRIVER");
  auto choice = coord::ParseDriverChoice(env ? env : "");
  if (!choice) return choice.error();
  auto hold = coord::HoldModeFromEnvironment();
  if (!hold) return hold.error();
  // The CLI sees every GPU of the machine, numbered as nvidia-smi numbers them (PCI bus
  // order), whatever its own environment says: a --device-map index names the same GPU from
  // any shell, and a job's GPUs outside the CLI's CUDA_VISIBLE_DEVICES stay reachable. The
  // driver reads both variables once, at cuInit, which LoadDriver runs next.
  ::unsetenv("CUDA_VISIBLE_DEVICES");
  ::setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID", 1);
  auto driver = coord::LoadDriver(*choice, SelfDir());
  if (driver) return coord::WithHold(std::move(*driver), ControlDir(), *hold);
  if (*choice == coord::DriverChoice::kReal) {
    // Auto mode already fell back to the simulated driver; only an explicit choice of the
    // real one leaves this way out untried.
    return Error{driver.error().code,
                 driver.error().message + "; set CUSNAP_DRIVER=sim to use the simulated driver"};
  }
  return driver;
}

}  // namespace cusnap::cli
