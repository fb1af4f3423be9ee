// The carrier files a dump writes beside CRIU's images (shim/carrier/carrier_file.h): a few
// part files per participant that carried bytes, named after its pid as the coordinator saw
// it: carrier-<pid>-<k>.bin. They
// are image files like CRIU's (hashed into the manifest, checked before a restore); CRIU
// never writes them.
#pragma once

#include <cstdint>
#include <atomic>
#include <string>
#include <thread>

#include "common/error.h"

namespace cusnap::coord {

/// "carrier-<pid>": the stem the participant's part files are named after (kWriteCarrier).
std::string CarrierFileStem(int pid);
/// True for the name of a part file: "carrier-<digits>-<digits>.bin".
bool IsCarrierFile(const std::string& name);
/// Bytes of the carrier files in `dir` (their sizes: holes included), 0 when none.
uint64_t CarrierFileBytes(const std::string& dir);
/// True when `dir` holds a carrier file.
bool HasCarrierFiles(const std::string& dir);
/// Removes every carrier file of `dir`. Errors name the file (errno-coded).
Status RemoveCarrierFiles(const std::string& dir);
/// Reads every carrier file of `dir` into the page cache on a thread of its own, from
/// construction until every byte was read or the object goes (8 MiB reads; holes skipped;
/// nothing on tmpfs, whose files are in memory): a restore starts it before anything else, so
/// that a cold disk reads the carriers while check_images reads CRIU's images and CRIU
/// restores the processes, and reallocate finds them in the page cache as it streams them to
/// the GPU. Best effort: a file that cannot be opened is left to read_carriers, which names it.
class CarrierPrefetch {
 public:
  explicit CarrierPrefetch(const std::string& dir);
  /// Stops after the 64 MiB asked for last, and waits for the thread.
  ~CarrierPrefetch();
  CarrierPrefetch(const CarrierPrefetch&) = delete;
  CarrierPrefetch& operator=(const CarrierPrefetch&) = delete;

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};
/// `dir` made absolute (the shims run in other working directories).
std::string AbsoluteDir(const std::string& dir);

}  // namespace cusnap::coord
