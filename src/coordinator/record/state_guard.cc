// The state directory's checks before a checkpoint: whose checkpoint it holds, and whether
// it is ours and private (state_guard.h).
#include "coordinator/record/state_guard.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "coordinator/proc/processes.h"
#include "coordinator/record/state_file.h"

namespace cusnap::coord {

Status CheckStateDirOwner(const std::string& state_dir, const std::vector<ProcessIdentity>& job,
                          DirectoryRole role) {
  const std::string named = std::string(role.noun) + " " + state_dir;
  const std::string option = role.option;
  // No file there (or no directory: PrepareStateDir then says why it cannot be made): nothing
  // to lose.
  struct stat st {};
  if (::lstat(StateFilePath(state_dir).c_str(), &st) != 0) return Ok{};
  auto state = ReadStateFile(state_dir);
  if (!state) {
    return Error{-1, named + " already holds a state file that cannot be read (" +
                         state.error().message + "); it is not overwritten: move it away, or " +
                         "choose another " + option};
  }
  // Processes of the recorded job that are not part of this checkpoint and still exist as the
  // same process: that job may still be checkpointed and need this file to be restored.
  std::string alive;
  size_t count = 0;
  for (const auto& p : state->participants) {
    const ProcessIdentity recorded{p.pid, p.start_time};
    if (std::find(job.begin(), job.end(), recorded) != job.end()) continue;
    const auto start = ProcessStartTime(p.pid);
    if (!start || *start != p.start_time) continue;
    alive += (alive.empty() ? "" : ", ") + std::to_string(p.pid);
    ++count;
  }
  if (alive.empty()) return Ok{};
  const std::string pids = (count == 1 ? "pid " : "pids ") + alive;
  return Error{-1, named + " holds the checkpoint of another job (" + pids +
                       ", still checkpointed or running); restore it first if it is "
                       "checkpointed, end it if it runs, or choose another " + option};
}

Status EnsureStateDir(const std::string& state_dir, std::vector<std::string>* created,
                      DirectoryRole role) {
  const std::string noun = role.noun;
  const std::string option = role.option;
  if (state_dir.empty()) return Error{EINVAL, "the " + noun + " is empty"};
  // Create each missing component (parents first) with 0700; an existing one is left as is.
  for (size_t at = state_dir.find('/', 1);; at = state_dir.find('/', at + 1)) {
    const std::string part = state_dir.substr(0, at);
    if (!part.empty() && ::mkdir(part.c_str(), 0700) == 0) {
      if (created != nullptr) created->push_back(part);
    } else if (!part.empty() && errno != EEXIST) {
      return Error{errno, "cannot create " + noun + " " + part + ": " + std::strerror(errno)};
    }
    if (at == std::string::npos) break;
  }
  struct stat st {};
  if (::stat(state_dir.c_str(), &st) != 0) {
    return Error{errno, "cannot use " + noun + " " + state_dir + ": " + std::strerror(errno)};
  }
  if (!S_ISDIR(st.st_mode)) {
    // Not a mode question: say what it is, and that a directory is wanted.
    return Error{ENOTDIR, noun + " " + state_dir + " is " +
                              (S_ISREG(st.st_mode) ? "a file" : "not a directory") + ": " +
                              option + " takes a directory (a missing one is created "
                              "with mode 0700); choose another path"};
  }
  std::string why;
  if (st.st_uid != ::geteuid()) {
    why = "it is owned by uid " + std::to_string(st.st_uid) + ", not by this user (uid " +
          std::to_string(::geteuid()) + ")";
  } else if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    why = std::string("it is writable by ") + ((st.st_mode & S_IWOTH) ? "others" : "its group") +
          " (mode " + mode + ")";
  }
  if (why.empty()) return Ok{};
  return Error{EPERM, noun + " " + state_dir + " is unsafe: " + why + "; cusnap " +
                          "changes no existing directory's mode: choose a directory of your own " +
                          "that only you can write (a missing one is created with mode 0700)"};
}

}  // namespace cusnap::coord
