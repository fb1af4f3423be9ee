// The carrier files of a dump (carrier_files.h).
#include "coordinator/carrier_files.h"

#include <filesystem>

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

uint64_t CarrierFileBytes(const std::string& dir) {
  uint64_t total = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    std::error_code size_ec;
    if (IsCarrierFile(e.path().filename().string())) {
      const auto bytes = e.file_size(size_ec);
      if (!size_ec) total += bytes;
    }
  }
  return total;
}

bool HasCarrierFiles(const std::string& dir) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (IsCarrierFile(e.path().filename().string())) return true;
  }
  return false;
}

Status RemoveCarrierFiles(const std::string& dir) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (!IsCarrierFile(e.path().filename().string())) continue;
    std::error_code rm;
    if (!std::filesystem::remove(e.path(), rm) && rm) {
      return Error{rm.value(), "cannot remove " + e.path().string() + ": " + rm.message()};
    }
  }
  return Ok{};
}

std::string AbsoluteDir(const std::string& dir) {
  std::error_code ec;
  const auto absolute = std::filesystem::absolute(dir, ec);
  return ec ? dir : absolute.lexically_normal().string();
}

}  // namespace cusnap::coord
