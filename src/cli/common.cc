// Helpers every subcommand uses: where the binary is, the state directory, the driver.
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <filesystem>

#include "cli/cli_common.h"
#include "cli/commands.h"

namespace cusnap::cli {

std::string SelfDir() {
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return ".";
  return exe.parent_path().string();
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
  return coord::LoadDriver(*choice, SelfDir());
}

}  // namespace cusnap::cli
