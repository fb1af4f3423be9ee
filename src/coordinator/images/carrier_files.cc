// The carrier files of a dump (carrier_files.h).
#include "coordinator/images/carrier_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <system_error>

namespace cusnap::coord {
namespace {

constexpr std::string_view kPrefix = "carrier-", kSuffix = ".bin";

}  // namespace

std::string CarrierFileStem(int pid) { return std::string(kPrefix) + std::to_string(pid); }

bool IsCarrierFile(const std::string& name) {
  if (name.size() <= kPrefix.size() + kSuffix.size() || !name.starts_with(kPrefix) ||
      !name.ends_with(kSuffix)) {
    return false;
  }
  const std::string middle = name.substr(kPrefix.size(), name.size() - kPrefix.size() - kSuffix.size());
  const size_t dash = middle.find('-');
  const auto digits = [](const std::string& s) {
    return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
  };
  return dash != std::string::npos && digits(middle.substr(0, dash)) && digits(middle.substr(dash + 1));
}

namespace {

/// Calls `visit` with each carrier file of `dir` (a directory that cannot be read has none)
/// until it returns false; false when it did.
bool ForEachCarrierFile(const std::string& dir,
                        const std::function<bool(const std::filesystem::directory_entry&)>& visit) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (IsCarrierFile(e.path().filename().string()) && !visit(e)) return false;
  }
  return true;
}

}  // namespace

uint64_t CarrierFileBytes(const std::string& dir) {
  uint64_t total = 0;
  ForEachCarrierFile(dir, [&](const std::filesystem::directory_entry& e) {
    std::error_code ec;
    const auto bytes = e.file_size(ec);
    if (!ec) total += bytes;
    return true;
  });
  return total;
}

bool HasCarrierFiles(const std::string& dir) {
  return !ForEachCarrierFile(dir, [](const std::filesystem::directory_entry&) { return false; });
}

Status RemoveCarrierFiles(const std::string& dir) {
  Status status = Ok{};
  ForEachCarrierFile(dir, [&](const std::filesystem::directory_entry& e) {
    std::error_code ec;
    if (!std::filesystem::remove(e.path(), ec) && ec) {
      status = Error{ec.value(), "cannot remove " + e.path().string() + ": " + ec.message()};
      return false;
    }
    return true;
  });
  return status;
}

CarrierPrefetch::CarrierPrefetch(const std::string& dir) {
  try {
    thread_ = std::thread([this, dir] {
      // The kernel submits a WILLNEED range's reads before it returns: asked a piece at a
      // time, the thread can stop between pieces.
      constexpr off_t kPiece = off_t{64} << 20;
      ForEachCarrierFile(dir, [&](const std::filesystem::directory_entry& e) {
        const int fd = ::open(e.path().c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0) return !stop_;
        struct stat st {};
        const off_t size = ::fstat(fd, &st) == 0 ? st.st_size : 0;
        for (off_t at = 0; at < size && !stop_; at += kPiece) {
          (void)::posix_fadvise(fd, at, kPiece, POSIX_FADV_WILLNEED);
        }
        ::close(fd);
        return !stop_.load();
      });
    });
  } catch (const std::system_error&) {
    // No thread: reallocate reads the files from the disk itself.
  }
}

CarrierPrefetch::~CarrierPrefetch() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

std::string AbsoluteDir(const std::string& dir) {
  std::error_code ec;
  const auto absolute = std::filesystem::absolute(dir, ec);
  return ec ? dir : absolute.lexically_normal().string();
}

}  // namespace cusnap::coord
