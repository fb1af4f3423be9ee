// What the tests that drive the real `cusnap` program share: running it and capturing its
// exit status, stdout and stderr, and talking to a child over a line protocol on pipes.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace cusnap::testing {

/// $name, or "" when unset.
inline std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

/// What a finished command gave: exit status (-1 when it did not exit), stdout, stderr.
struct Ran {
  int status = -1;
  std::string out, err;
};

/// Runs shell command `command` with stderr sent to `<scratch_dir>/stderr`, and collects all.
inline Ran RunCommand(const std::string& command, const std::string& scratch_dir) {
  const std::string stderr_path = scratch_dir + "/stderr";
  Ran r;
  FILE* p = ::popen((command + " 2>" + stderr_path).c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = ::pclose(p);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (FILE* e = std::fopen(stderr_path.c_str(), "r")) {
    while ((n = std::fread(buf, 1, sizeof buf, e)) > 0) r.err.append(buf, n);
    std::fclose(e);
  }
  return r;
}

/// Runs the built `cusnap` ($CUSNAP_TEST_BIN_DIR/cusnap) with `args`, each single-quoted.
inline Ran RunCusnap(const std::vector<std::string>& args, const std::string& scratch_dir) {
  std::string command = Env("CUSNAP_TEST_BIN_DIR") + "/cusnap";
  for (const auto& a : args) command += " '" + a + "'";
  return RunCommand(command, scratch_dir);
}

/// A child's command channel: one request line in, one answer line out.
struct LineChannel {
  FILE* in = nullptr;
  FILE* out = nullptr;
  /// The next line without its newline, or "<eof>".
  std::string Line() {
    char buf[512];
    if (std::fgets(buf, sizeof buf, out) == nullptr) return "<eof>";
    std::string s(buf);
    if (!s.empty() && s.back() == '\n') s.pop_back();
    return s;
  }
  /// Sends `line` and returns the answer.
  std::string Ask(const std::string& line) {
    std::fprintf(in, "%s\n", line.c_str());
    std::fflush(in);
    return Line();
  }
};

}  // namespace cusnap::testing
