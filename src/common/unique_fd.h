// An owning file descriptor: closes what it holds when it goes out of scope, so an early
// return cannot leak a socket or a received descriptor. Move-only.
#pragma once

#include <unistd.h>

#include <utility>

namespace cusnap {

class UniqueFd {
 public:
  UniqueFd() = default;
  /// Takes ownership of `fd` (-1: holds nothing).
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    reset(other.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  /// The descriptor, still owned (-1 when none).
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  /// Gives up ownership: the caller closes the returned descriptor.
  [[nodiscard]] int release() { return std::exchange(fd_, -1); }
  /// Closes what it holds and takes `fd` instead.
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

}  // namespace cusnap
