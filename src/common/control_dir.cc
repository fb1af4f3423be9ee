// Checks of the control directory (control_dir.h).
#include "common/control_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace cusnap {
namespace {

std::string Octal(mode_t mode) {
  char octal[8];
  std::snprintf(octal, sizeof octal, "%04o", static_cast<unsigned>(mode & 07777));
  return octal;
}

/// Splits `path` into its components, "" and "." left out.
std::vector<std::string> Components(const std::string& path) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    std::string part = path.substr(start, end - start);
    if (!part.empty() && part != ".") parts.push_back(std::move(part));
    start = end + 1;
  }
  return parts;
}

/// Whether `path` has a ".." component.
bool NamesAParent(const std::string& path) {
  const std::vector<std::string> parts = Components(path);
  return std::find(parts.begin(), parts.end(), "..") != parts.end();
}

Error ParentRefusal(const std::string& given) {
  return Error{EINVAL, "control directory " + given + " names a parent with '..': refused (set " +
                           "CUSNAP_CONTROL_DIR to a path without '..')"};
}

}  // namespace

std::string LexicalControlPath(const std::string& dir) {
  if (dir.empty()) return dir;
  std::string path = dir[0] == '/' ? "" : ".";
  for (const std::string& part : Components(dir)) path += "/" + part;
  return path.empty() ? "/" : path;
}

std::string ControlDirProblem(uid_t uid, mode_t mode, uid_t self) {
  if (uid != self) {
    return "it is owned by uid " + std::to_string(uid) + ", not by this user (uid " +
           std::to_string(self) + ")";
  }
  if ((mode & 07777) != 0700) return "its mode is " + Octal(mode) + ", not 0700";
  return "";
}

std::string AncestorProblem(const std::string& name, uid_t uid, mode_t mode, uid_t self) {
  if (uid != 0 && uid != self) {
    return "its parent " + name + " is owned by uid " + std::to_string(uid) +
           ", neither root nor this user (uid " + std::to_string(self) + ")";
  }
  if (S_ISDIR(mode) && (mode & (S_IWGRP | S_IWOTH)) != 0 && (mode & S_ISVTX) == 0) {
    return "its parent " + name + " (mode " + Octal(mode) + ") can be written by other " +
           "users and is not sticky";
  }
  return "";
}

std::string ControlDirAncestorsProblem(const std::string& dir) {
  std::string path = dir;
  if (path.empty() || path[0] != '/') {
    char cwd[4096];
    if (::getcwd(cwd, sizeof cwd) == nullptr) return "its parents cannot be found (getcwd failed)";
    path = std::string(cwd) + "/" + path;
  }
  std::vector<std::string> todo = Components(path);
  if (!todo.empty()) todo.pop_back();  // the directory itself: OpenControlDir checks it, and never follows it
  const uid_t self = ::geteuid();
  UniqueFd at(::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC));
  std::string walked = "/";
  struct stat st;
  if (!at.valid() || ::fstat(at.get(), &st) != 0) return "its parent / cannot be read";
  if (std::string p = AncestorProblem("/", st.st_uid, st.st_mode, self); !p.empty()) return p;
  int links = 0;
  // Walked one component at a time through O_PATH descriptors: what is checked is what the
  // next step opens. A symbolic link is followed only when root or this user owns it (its
  // directory was checked already) and its target is walked the same way.
  for (size_t i = 0; i < todo.size(); ++i) {
    const std::string& part = todo[i];
    UniqueFd next(::openat(at.get(), part.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
    const std::string name = walked == "/" ? "/" + part : walked + "/" + part;
    // A missing parent is created by MakeControlDir (0700, ours): nothing to distrust.
    if (!next.valid() && errno == ENOENT) return "";
    if (!next.valid() || ::fstat(next.get(), &st) != 0) {
      return "its parent " + name + " cannot be read: " + std::strerror(errno);
    }
    if (std::string p = AncestorProblem(name, st.st_uid, st.st_mode, self); !p.empty()) return p;
    if (S_ISLNK(st.st_mode)) {
      if (++links > 40) return "its parents hold too many symbolic links";
      char target[4096];
      const ssize_t n = ::readlinkat(next.get(), "", target, sizeof target - 1);
      if (n <= 0) return "its parent " + name + " (a symbolic link) cannot be read";
      target[n] = '\0';
      std::vector<std::string> rest = Components(target);
      rest.insert(rest.end(), todo.begin() + static_cast<long>(i) + 1, todo.end());
      if (target[0] == '/') {
        at = UniqueFd(::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC));
        walked.assign(1, '/');  // (GCC 12 -O3 misreads `walked = "/"` here: -Wrestrict)
      }
      todo = std::move(rest);
      i = static_cast<size_t>(-1);
      continue;
    }
    if (!S_ISDIR(st.st_mode)) return "its parent " + name + " is not a directory";
    at = std::move(next);
    walked = name;
  }
  return "";
}

Result<UniqueFd> OpenControlDir(const std::string& given) {
  // "dir/" and "dir/." would open a symbolic link's target although O_NOFOLLOW is given, and
  // "missing/../x" lets a walk of the parents stop early: the path is checked and opened as
  // its plain components, and ".." is refused.
  const std::string dir = LexicalControlPath(given);
  if (NamesAParent(dir)) return ParentRefusal(given);
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
  std::string problem = ControlDirProblem(st.st_uid, st.st_mode, ::geteuid());
  // Its parents too (ssh's StrictModes): whoever can write to one of them can replace the
  // directory, or a link on the way to it, between this check and the next use of the path.
  if (problem.empty()) problem = ControlDirAncestorsProblem(dir);
  if (!problem.empty()) {
    return Error{EPERM, "control directory " + dir + " is unsafe: " + problem + " (another " +
                            "user could serve fake endpoints there); refused: remove it, or " +
                            "set CUSNAP_CONTROL_DIR to a directory of your own with mode 0700"};
  }
  return fd;
}

std::string UnsafeControlDir(const std::string& dir) {
  Result<UniqueFd> fd = OpenControlDir(dir);
  if (fd.ok()) return "";
  if (fd.error().code != ENOENT) return fd.error().message;
  // (OpenControlDir refused ".." already: it would have said so above.)
  // Not there yet: the shim will create it, unless a parent on the way cannot be trusted.
  const std::string problem = ControlDirAncestorsProblem(dir);
  return problem.empty() ? "" : "control directory " + dir + " would be unsafe: " + problem;
}

Result<UniqueFd> MakeControlDir(const std::string& given) {
  if (given.empty()) return Error{EINVAL, "the control directory is empty"};
  const std::string dir = LexicalControlPath(given);
  if (NamesAParent(dir)) return ParentRefusal(given);
  // Nothing is created below a parent others control.
  if (const std::string problem = ControlDirAncestorsProblem(dir); !problem.empty()) {
    return Error{EPERM, "control directory " + dir + " is unsafe: " + problem + "; refused: " +
                            "set CUSNAP_CONTROL_DIR to a directory of your own with mode 0700"};
  }
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

Result<std::string> MakeJobControlDir(const std::string& control_dir) {
  if (auto made = MakeControlDir(control_dir); !made) return made.error();
  std::string templ = LexicalControlPath(control_dir) + "/" + kJobControlDirPrefix + "XXXXXX";
  if (::mkdtemp(templ.data()) == nullptr) {
    return Error{errno, "cannot create a control directory for the job below " + control_dir +
                            ": " + std::strerror(errno)};
  }
  return templ;
}

bool IsJobControlDir(const std::string& control_dir, const std::string& dir) {
  const std::string base = LexicalControlPath(control_dir) + "/" + kJobControlDirPrefix;
  const std::string path = LexicalControlPath(dir);
  if (path.size() != base.size() + 6 || path.compare(0, base.size(), base) != 0) return false;
  for (size_t i = base.size(); i < path.size(); ++i) {
    if (std::isalnum(static_cast<unsigned char>(path[i])) == 0) return false;
  }
  return true;
}

}  // namespace cusnap
