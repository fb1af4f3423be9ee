// The carrier files a dump writes beside CRIU's images (shim/carrier/carrier_file.h): a few
// part files per participant that carried bytes, named after its pid as the coordinator saw
// it: carrier-<pid>-<k>.bin. They
// are image files like CRIU's (hashed into the manifest, checked before a restore); CRIU
// never writes them.
#pragma once

#include <cstdint>
#include <string>

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
/// Asks the kernel to read every carrier file of `dir` into the page cache in the background
/// (posix_fadvise WILLNEED; holes cost nothing), so that reallocate finds them there as it
/// streams them to the GPU: a restore calls it before CRIU, which restores the processes
/// meanwhile. Best effort: a file that cannot be opened is left to read_carriers, which
/// names it.
void PrefetchCarrierFiles(const std::string& dir);
/// `dir` made absolute (the shims run in other working directories).
std::string AbsoluteDir(const std::string& dir);

}  // namespace cusnap::coord
