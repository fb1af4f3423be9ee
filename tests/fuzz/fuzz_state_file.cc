// libFuzzer target: the state-file reader. The input is written as
// cusnap-state.json in a private directory and read with ReadStateFile (safe open, size cap,
// JSON parse, structure and range checks); the document is also parsed straight through
// StateFromJson. Nothing may crash, and what is accepted has its numbers in range.
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "coordinator/record/json_number.h"
#include "coordinator/record/state_file.h"

namespace {

const std::string& Dir() {
  static const std::string dir = [] {
    // Static storage: the exit handler below runs after `dir` itself was destroyed.
    static char templ[] = "/tmp/cusnap-fuzz-state-XXXXXX";
    if (mkdtemp(templ) == nullptr) return std::string("/tmp");
    // Removed when the fuzzer exits (libFuzzer ends with exit()).
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(templ, ec);
    });
    return std::string(templ);
  }();
  return dir;
}

void Check(cusnap::Result<cusnap::coord::StateFile> state) {
  if (!state.ok()) return;
  for (const auto& p : state->participants) {
    if (p.pid <= 0 || p.pid > cusnap::coord::kMaxPid) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = cusnap::coord::StateFilePath(Dir());
  const int fd = open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0600);
  if (fd < 0) return 0;
  const bool written = size == 0 || write(fd, data, size) == static_cast<ssize_t>(size);
  close(fd);
  if (!written) return 0;
  Check(cusnap::coord::ReadStateFile(Dir()));
  const auto json = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (!json.is_discarded()) Check(cusnap::coord::StateFromJson(json, path));
  return 0;
}
