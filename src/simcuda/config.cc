// Parses simcuda's environment variables once (config.h).
#include "config.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

namespace simcuda {
namespace {

// Reads a decimal variable in [lo, hi]; records a message naming it when malformed.
long read_number(const char *name, long fallback, long lo, long hi, std::string &error) {
  const char *text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  char *end = nullptr;
  errno = 0;
  long value = std::strtol(text, &end, 10);
  if (errno != 0 || *end != '\0' || value < lo || value > hi) {
    error = std::string(name) + "='" + text + "' is not a number in [" + std::to_string(lo) + ", " +
            std::to_string(hi) + "]";
    return fallback;
  }
  return value;
}

// True when `name` is an entry point of this driver (entry_points.def), as SIMCUDA_FAULTS
// and SIMCUDA_DELAYS name them.
bool is_entry_point(const std::string &name) {
  static const char *const kNames[] = {
#define SIMCUDA_API(api_name, since, symbol) api_name,
#include "entry_points.def"
#undef SIMCUDA_API
  };
  for (const char *known : kNames)
    if (name == known) return true;
  return false;
}

// Checks every "name:..." entry of the comma-separated `variable` (faults.h has the syntax):
// a name the driver does not have would never fire, so the setting is refused rather than
// silently ignored (cuInit then fails naming it).
void check_entry_names(const char *variable, const char *example, std::string &error) {
  const char *text = std::getenv(variable);
  if (text == nullptr || *text == '\0') return;
  const std::string all(text);
  for (size_t begin = 0; begin <= all.size();) {
    const size_t end = std::min(all.find(',', begin), all.size());
    const std::string item = all.substr(begin, end - begin);
    const std::string name = item.substr(0, item.find(':'));
    if (!is_entry_point(name)) {
      error = std::string(variable) + "='" + all + "': '" + name + "' is not an entry point of " +
              "the simulated driver; it takes comma-separated " + example + " entries naming a " +
              "driver API function (src/simcuda/entry_points.def)";
      return;
    }
    begin = end + 1;
  }
}

Config parse() {
  Config c;
  c.device_count = static_cast<int>(read_number("SIMCUDA_DEVICE_COUNT", 2, 0, kMaxDevices, c.error));
  c.driver_version = static_cast<int>(read_number("SIMCUDA_DRIVER_VERSION", 13010, 1000, 99990, c.error));
  c.device_memory_bytes =
      static_cast<size_t>(read_number("SIMCUDA_DEVICE_MEMORY_MIB", 16384, 64, 1 << 24, c.error)) << 20;
  c.multicast_round_bytes =
      static_cast<size_t>(read_number("SIMCUDA_MULTICAST_ROUND_BYTES", 0, 0, long{1} << 40, c.error));
  if (c.multicast_round_bytes % kGranularity != 0)
    c.error = "SIMCUDA_MULTICAST_ROUND_BYTES=" + std::to_string(c.multicast_round_bytes) +
              " is not a multiple of the 2 MiB multicast granularity";
  c.multicast_bind_timeout_ms =
      static_cast<unsigned>(read_number("SIMCUDA_MULTICAST_BIND_TIMEOUT_MS", 60000, 1, 3600000, c.error));
  c.multicast_checkpoint_wait_ms = read_number("SIMCUDA_MULTICAST_CHECKPOINT_WAIT_MS", -1, 0, 3600000, c.error);
  check_entry_names("SIMCUDA_DELAYS", "name:ms (e.g. cuCtxSynchronize:500)", c.error);
  check_entry_names("SIMCUDA_FAULTS", "name:nth:result (e.g. cuMemMap:1:2)", c.error);
  const char *dir = std::getenv("SIMCUDA_DIR");
  c.dir = (dir != nullptr && *dir != '\0') ? std::string(dir)
                                           : "/tmp/simcuda-" + std::to_string(getuid());
  // Shared by every process of this user: ledger and service sockets. Failure shows later
  // as a clear error from whoever needs the directory.
  (void)mkdir(c.dir.c_str(), 0700);
  return c;
}

}  // namespace

const Config &config() {
  static const Config *c = new Config(parse());  // never destroyed: service thread may outlive main
  return *c;
}

}  // namespace simcuda
