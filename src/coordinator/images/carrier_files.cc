// The carrier files of a dump (carrier_files.h).
#include "coordinator/images/carrier_files.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <filesystem>
#include <algorithm>
#include <functional>
#include <vector>
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
  // Files in memory already (tmpfs) would only be copied for nothing.
  struct statfs fs {};
  if (::statfs(dir.c_str(), &fs) == 0 && (fs.f_type == TMPFS_MAGIC || fs.f_type == RAMFS_MAGIC)) return;
  try {
    thread_ = std::thread([this, dir] {
      // Read, not advised: the kernel caps a WILLNEED range at its readahead window (128 KiB
      // by default), so advice alone brought almost nothing in. Holes are skipped (no disk
      // behind them), and the thread can stop between blocks.
      constexpr size_t kBlock = size_t{8} << 20;
      std::vector<char> block(kBlock);
      ForEachCarrierFile(dir, [&](const std::filesystem::directory_entry& e) {
        const int fd = ::open(e.path().c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0) return !stop_;
        for (off_t at = ::lseek(fd, 0, SEEK_DATA); at >= 0 && !stop_;) {
          const off_t hole = ::lseek(fd, at, SEEK_HOLE);
          if (hole < 0) break;
          for (; at < hole && !stop_;) {
            const off_t want = std::min(static_cast<off_t>(kBlock), hole - at);
            const ssize_t n = ::pread(fd, block.data(), static_cast<size_t>(want), at);
            if (n <= 0) break;
            at += n;
          }
          at = ::lseek(fd, hole, SEEK_DATA);
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
