// The error type both sides share: a code (a CUresult, or an errno for system errors) and a
// message that names the process and the resource, as users read it (DESIGN.md, "Errors").
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace cusnap {

/// What went wrong. `code` is a CUresult where the driver said no, an errno where the system
/// did, or -1 for a cusnap rule (e.g. a refused topology); `message` is the full sentence.
struct Error {
  int code = -1;
  std::string message;
};

/// Error::code of a carrier file that a restore could not read back whole and as written (a
/// unit whose bytes do not match their digest, a read error, a file that ends early), whatever
/// errno the read met (the message names the file, the range and the cause). The images are
/// the job then: an images restore ends the processes CRIU brought back, the images as they
/// were (coordinator/sequences/dump.cc).
inline constexpr int kCarrierFileUnreadable = -2;

/// A value or an Error (the shim is built without exceptions, so errors travel as values).
/// [[nodiscard]]: an error dropped unread is a bug; a caller that means to ignore one says so
/// with a cast to void and a comment.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}          // NOLINT: implicit by design
  Result(Error error) : v_(std::move(error)) {}      // NOLINT: implicit by design
  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() { return std::get<0>(v_); }
  const T& value() const { return std::get<0>(v_); }
  T& operator*() { return value(); }
  T* operator->() { return &value(); }
  const Error& error() const { return std::get<1>(v_); }

 private:
  std::variant<T, Error> v_;
};

/// Result of an operation that returns nothing on success.
struct Ok {};
using Status = Result<Ok>;

/// `error` in a wider context: "<who>: <context>: <what went wrong>", with the same code.
/// `who` is said once: a message that starts with "<who>: " already (a shim names its own
/// process in every error it reports) is not named again. An empty message is "code <n>".
inline Error InContext(const std::string& who, const std::string& context, const Error& error) {
  const std::string prefix = who + ": ";
  std::string what = error.message.empty() ? "code " + std::to_string(error.code) : error.message;
  if (what.compare(0, prefix.size(), prefix) == 0) what.erase(0, prefix.size());
  return Error{error.code, prefix + context + ": " + what};
}

}  // namespace cusnap
