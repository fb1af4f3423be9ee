// Checks of the control directory (control_dir.h).
#include "common/control_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace cusnap {

std::string ControlDirProblem(uid_t uid, mode_t mode, uid_t self) {
  if (uid != self) {
    return "it is owned by uid " + std::to_string(uid) + ", not by this user (uid " +
           std::to_string(self) + ")";
  }
  if ((mode & 07777) != 0700) {
    char octal[8];
    std::snprintf(octal, sizeof octal, "%04o", static_cast<unsigned>(mode & 07777));
    return std::string("its mode is ") + octal + ", not 0700";
  }
  return "";
}

Result<UniqueFd> OpenControlDir(const std::string& dir) {
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) {
    const int code = errno;
    struct stat st;
    if ((code == ELOOP || code == ENOTDIR) && ::lstat(dir.c_str(), &st) == 0 &&
        S_ISLNK(st.st_mode)) {
      return Error{ELOOP, "control directory " + dir + " is a symbolic link: refused (it is " +
                              "never followed; point CUSNAP_CONTROL_DIR at a real directory)"};
    }
    return Error{code, "cannot read control directory " + dir + ": " + std::strerror(code)};
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) {
    return Error{errno, "cannot stat control directory " + dir + ": " + std::strerror(errno)};
  }
  const std::string problem = ControlDirProblem(st.st_uid, st.st_mode, ::geteuid());
  if (!problem.empty()) {
    return Error{EPERM, "control directory " + dir + " is unsafe: " + problem + " (another " +
                            "user could serve fake endpoints there); refused: remove it, or " +
                            "set CUSNAP_CONTROL_DIR to a directory of your own with mode 0700"};
  }
  return fd;
}

std::string UnsafeControlDir(const std::string& dir) {
  Result<UniqueFd> fd = OpenControlDir(dir);
  if (fd.ok() || fd.error().code == ENOENT) return "";
  return fd.error().message;
}

Result<UniqueFd> MakeControlDir(const std::string& dir) {
  if (dir.empty()) return Error{EINVAL, "the control directory is empty"};
  bool created = false;
  for (size_t slash = 1; slash <= dir.size(); ++slash) {
    if (slash != dir.size() && dir[slash] != '/') continue;
    const std::string part = dir.substr(0, slash);
    if (::mkdir(part.c_str(), 0700) == 0) {
      created = slash == dir.size();
    } else if (errno != EEXIST) {
      return Error{errno, "cannot create control directory " + part + ": " + std::strerror(errno)};
    }
  }
  if (created) {
    // The umask may have taken bits away (0500 under umask 0277): set them on what was just
    // created, through its descriptor, never by path.
    UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (fd.valid()) {
      struct stat st;
      if (::fstat(fd.get(), &st) == 0 && st.st_uid == ::geteuid()) ::fchmod(fd.get(), 0700);
    }
  }
  return OpenControlDir(dir);
}

}  // namespace cusnap
