// Parses simcuda's environment variables once (config.h).
#include "config.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
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
