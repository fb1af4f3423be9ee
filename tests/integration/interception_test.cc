// Every intercepted symbol through every resolver path lands in the shim's wrapper; every
// other answer is the driver's own. interception_probe does the
// lookups in a child process on the simulated driver, once without the shim (the baseline:
// what the driver and runtime answer) and once with the shim preloaded; this test compares
// the two line by line:
//   - rc and status are identical (failures and not-found / version-not-sufficient statuses
//     pass through unchanged, DRIVER-FACTS F10);
//   - where the baseline pointer is a CUDA library's function X and X's name is intercepted,
//     the shim's answer is the wrapper of row X: the wrapper of the ABI the driver returned;
//   - every other pointer is the same function in both runs.
// The list of intercepted names comes from entry_points.def and the generated
// gated_entry_points.def (every other driver entry point cuda.h declares), never a hand list.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

extern char** environ;

namespace {

using ::testing::HasSubstr;

struct TableRow {
  const char* symbol;
  const char* api_name;
  bool runtime;
  bool generated;  // a gated_entry_points.def row: not linked directly by the probe
};

const std::vector<TableRow> kTable = {
#define CUSNAP_DRIVER_ENTRY(symbol, api_name, since, variant, params, args) {#symbol, api_name, false, false},
#define CUSNAP_RUNTIME_ENTRY(symbol, api_name, since, variant, params, args) {#symbol, api_name, true, false},
#include "shim/driver/entry_points.def"
#define CUSNAP_GATED_ENTRY(symbol, api_name, since, variant, params, args) {#symbol, api_name, false, true},
#include "shim/driver/gated_entry_points.def"
};

bool is_table_symbol(const std::string& name) {
  for (const TableRow& row : kTable) {
    if (name == row.symbol) return true;
  }
  return false;
}

bool is_driver_api_name(const std::string& name) {
  for (const TableRow& row : kTable) {
    if (!row.runtime && name == row.api_name) return true;
  }
  return false;
}

bool is_resolver_path(const std::string& path) {
  return path.rfind("cuGetProcAddress", 0) == 0 || path.rfind("cudaGetDriverEntryPoint", 0) == 0;
}

struct Answer {
  std::string rc, status, pointer;
};

// path|name|version|flags -> answer
using Answers = std::map<std::string, Answer>;

struct ProbeRun {
  int exit_status = -1;
  std::string output;
  Answers answers;
  std::string build_info;
};

std::string env_or_fail(const char* name) {
  const char* value = std::getenv(name);
  EXPECT_NE(value, nullptr) << name << " is not set (run through ctest)";
  return value != nullptr ? value : "";
}

// Runs `program` <mode> with LD_LIBRARY_PATH=`library_path`, the simulated driver at
// `driver_version` and LD_PRELOAD=`preload` (none when empty); stdout is captured, stderr
// is inherited.
ProbeRun run_program(const std::string& program, const std::string& mode, const std::string& preload,
                     const std::string& library_path, const std::string& driver_version) {
  std::vector<std::string> env;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    std::string e = *entry;
    if (e.rfind("LD_PRELOAD=", 0) == 0 || e.rfind("LD_LIBRARY_PATH=", 0) == 0 ||
        e.rfind("SIMCUDA_DRIVER_VERSION=", 0) == 0) {
      continue;
    }
    env.push_back(e);
  }
  env.push_back("LD_LIBRARY_PATH=" + library_path);
  env.push_back("SIMCUDA_DRIVER_VERSION=" + driver_version);
  if (!preload.empty()) env.push_back("LD_PRELOAD=" + preload);
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string path = program;
  std::vector<char*> argv = {path.data(), const_cast<char*>(mode.c_str()), nullptr};

  ProbeRun run;
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) {
    ADD_FAILURE() << "pipe2: " << std::strerror(errno);
    return run;
  }
  pid_t pid = fork();
  if (pid == 0) {
    dup2(out[1], STDOUT_FILENO);
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  close(out[1]);
  char buffer[65536];
  for (;;) {
    ssize_t got = read(out[0], buffer, sizeof buffer);
    if (got > 0) {
      run.output.append(buffer, static_cast<size_t>(got));
    } else if (got == 0 || errno != EINTR) {
      break;
    }
  }
  close(out[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  run.exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);

  std::istringstream lines(run.output);
  std::string text;
  while (std::getline(lines, text)) {
    std::vector<std::string> f;
    std::stringstream fields(text);
    std::string field;
    while (std::getline(fields, field, '|')) f.push_back(field);
    if (f.size() == 2 && f[0] == "build-info") run.build_info = f[1];
    if (f.size() != 7) continue;
    run.answers[f[0] + "|" + f[1] + "|" + f[2] + "|" + f[3]] = {f[4], f[5], f[6]};
  }
  return run;
}

// interception_probe <mode> on the simulated driver.
ProbeRun run_probe(const std::string& mode, const std::string& preload, const std::string& driver_version) {
  return run_program(CUSNAP_TEST_PROBE, mode, preload, env_or_fail("CUSNAP_TEST_SIMCUDA_DIR"), driver_version);
}

std::vector<std::string> split_key(const std::string& key) {
  std::vector<std::string> parts;
  std::stringstream stream(key);
  std::string part;
  while (std::getline(stream, part, '|')) parts.push_back(part);
  return parts;
}

// "libcuda.so.1:cuMemCreate" -> "cuMemCreate" when the pointer is exactly an exported
// function of a CUDA library; "" otherwise.
std::string cuda_function_name(const std::string& pointer) {
  if (pointer.rfind("libcuda.so", 0) != 0 && pointer.rfind("libcudart.so", 0) != 0) return "";
  std::string name = pointer.substr(pointer.find(':') + 1);
  return name.find('+') == std::string::npos ? name : "";
}

// The comparison described at the top of this file, for one simulated driver version.
void compare_with_baseline(const std::string& driver_version, Answers* shim_answers) {
  ProbeRun baseline = run_probe("walk", "", driver_version);
  ProbeRun shim = run_probe("walk", env_or_fail("CUSNAP_TEST_SHIM"), driver_version);
  ASSERT_EQ(baseline.exit_status, 0) << baseline.output;
  ASSERT_EQ(shim.exit_status, 0) << shim.output;
  ASSERT_GT(baseline.answers.size(), 1000u) << baseline.output;
  ASSERT_EQ(baseline.answers.size(), shim.answers.size());
  EXPECT_THAT(shim.build_info, HasSubstr("cusnap "));
  for (const auto& [key, expected] : baseline.answers) {
    auto found = shim.answers.find(key);
    ASSERT_NE(found, shim.answers.end()) << key;
    const Answer& got = found->second;
    std::vector<std::string> k = split_key(key);
    const std::string& path = k[0];
    const std::string& name = k[1];
    EXPECT_EQ(got.rc, expected.rc) << key;
    EXPECT_EQ(got.status, expected.status) << key;
    bool intercepted = is_resolver_path(path) ? is_driver_api_name(name) : is_table_symbol(name);
    std::string function = cuda_function_name(expected.pointer);
    const bool global_scope = path == "rtld-default" || path == "rtld-next";
    if (global_scope && intercepted) {
      // The shim exports every table symbol, so the global scope finds its wrapper even
      // where the driver lacks the entry point (the wrapper then answers "not found").
      EXPECT_EQ(got.pointer, "shim:" + name) << key << " (driver: " << expected.pointer << ")";
    } else if (intercepted && !function.empty()) {
      EXPECT_TRUE(is_table_symbol(function)) << key << ": the driver returned " << expected.pointer
                                             << ", an ABI the interception table lacks";
      EXPECT_EQ(got.pointer, "shim:" + function) << key << " (driver: " << expected.pointer << ")";
    } else {
      EXPECT_EQ(got.pointer, expected.pointer) << key;
    }
  }
  *shim_answers = shim.answers;
}

const Answer& at(const Answers& answers, const std::string& key) {
  static const Answer kMissing{"missing", "missing", "missing"};
  auto found = answers.find(key);
  EXPECT_NE(found, answers.end()) << key;
  return found != answers.end() ? found->second : kMissing;
}

TEST(Interception, EveryPathLandsInTheWrapperOnA131Driver) {
  Answers shim;
  compare_with_baseline("13010", &shim);
  if (HasFatalFailure()) return;
  // Coverage: every row reached through every path (at some version and flag for the
  // versioned resolvers), so no row of the table is left unwalked.
  std::map<std::string, std::set<std::string>> reached;  // path -> wrappers seen
  for (const auto& [key, answer] : shim) {
    if (answer.pointer.rfind("shim:", 0) == 0) reached[split_key(key)[0]].insert(answer.pointer.substr(5));
  }
  for (const TableRow& row : kTable) {
    std::vector<std::string> paths = {"rtld-default", "rtld-next"};
    // Every hand-written row through every path; a generated row through those the
    // simulated driver can answer (the comparison above covers the rest: whatever the driver
    // hands out for a table name comes back as that row's wrapper).
    if (row.generated) {
      for (const std::string& path : paths) {
        EXPECT_EQ(reached[path].count(row.symbol), 1u) << row.symbol << " never reached through " << path;
      }
      continue;
    }
    paths.insert(paths.end(), {"direct", row.runtime ? "dlsym-libcudart" : "dlsym-libcuda"});
    if (!row.runtime) {
      for (const char* p : {"cuGetProcAddress", "cuGetProcAddress_v2", "cuGetProcAddress_v2_ptsz",
                            "cudaGetDriverEntryPointByVersion", "cudaGetDriverEntryPointByVersion_ptsz"}) {
        paths.emplace_back(p);
      }
    }
    for (const std::string& path : paths) {
      EXPECT_EQ(reached[path].count(row.symbol), 1u) << row.symbol << " never reached through " << path;
    }
  }
  for (const TableRow& row : kTable) {
    for (const char* path : {"direct", "rtld-default", "rtld-next"}) {
      if (row.generated && std::string(path) == "direct") continue;
      EXPECT_EQ(at(shim, std::string(path) + "|" + row.symbol + "|-|-").pointer,
                std::string("shim:") + row.symbol);
    }
  }
}

TEST(Interception, EveryPathLandsInTheWrapperOnA130Driver) {
  Answers shim;
  compare_with_baseline("13000", &shim);
}

// The device-explicit multicast bind ABI (CUDA 13.1) is handed out for 13010 and later,
// the original below it, through the driver's and the runtime's resolvers alike.
TEST(Interception, MulticastBindAbiFollowsTheRequestedVersion) {
  Answers shim;
  compare_with_baseline("13010", &shim);
  if (HasFatalFailure()) return;
  for (const char* api : {"cuMulticastBindMem", "cuMulticastBindAddr"}) {
    for (const char* path : {"cuGetProcAddress", "cuGetProcAddress_v2", "cuGetProcAddress_v2_ptsz",
                             "cudaGetDriverEntryPointByVersion"}) {
      for (const char* flags : {"0", "1", "2"}) {
        std::string prefix = std::string(path) + "|" + api + "|";
        EXPECT_EQ(at(shim, prefix + "13010|" + flags).pointer, std::string("shim:") + api + "_v2") << prefix;
        EXPECT_EQ(at(shim, prefix + "13000|" + flags).pointer, std::string("shim:") + api) << prefix;
        EXPECT_EQ(at(shim, prefix + "12000|" + flags).pointer, "null") << prefix;  // since 12010
      }
    }
  }
}

// DRIVER-FACTS F10 on a 13.0 driver: asking for 13010 is CUDA_ERROR_INVALID_VALUE, and the
// shim passes it through (the baseline comparison checks it equals the driver's answer).
TEST(Interception, NewerThanTheDriverFailsUnchangedOnA130Driver) {
  Answers shim;
  compare_with_baseline("13000", &shim);
  if (HasFatalFailure()) return;
  const std::string invalid_value = std::to_string(1);  // CUDA_ERROR_INVALID_VALUE
  for (const char* path : {"cuGetProcAddress", "cuGetProcAddress_v2", "cuGetProcAddress_v2_ptsz"}) {
    const Answer& a = at(shim, std::string(path) + "|cuMulticastBindMem|13010|0");
    EXPECT_EQ(a.rc, invalid_value) << path;
    EXPECT_EQ(a.pointer, "null") << path;
    EXPECT_EQ(at(shim, std::string(path) + "|cuMulticastBindMem|13000|0").pointer, "shim:cuMulticastBindMem");
  }
}

// Unknown names and too-old versions: the statuses of F10, unchanged.
TEST(Interception, NotFoundAndVersionNotSufficientComeBackUnchanged) {
  Answers shim;
  compare_with_baseline("13010", &shim);
  if (HasFatalFailure()) return;
  const Answer& unknown = at(shim, "cuGetProcAddress_v2|cuNoSuchEntryPoint|13000|0");
  EXPECT_EQ(unknown.rc, "0");
  EXPECT_EQ(unknown.status, "1"  /* CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND */);
  EXPECT_EQ(unknown.pointer, "null");
  const Answer& too_old = at(shim, "cuGetProcAddress_v2|cuMemCreate|9000|0");
  EXPECT_EQ(too_old.rc, "0");
  EXPECT_EQ(too_old.status, "2"  /* CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT */);
  EXPECT_EQ(too_old.pointer, "null");
  EXPECT_EQ(at(shim, "cuGetProcAddress|cuNoSuchEntryPoint|13000|0").rc, "500");  // CUDA_ERROR_NOT_FOUND
  const Answer& runtime_unknown = at(shim, "cudaGetDriverEntryPointByVersion|cuNoSuchEntryPoint|13000|0");
  EXPECT_EQ(runtime_unknown.rc, "0");
  EXPECT_EQ(runtime_unknown.status, "1");  // cudaDriverEntryPointSymbolNotFound
  EXPECT_EQ(runtime_unknown.pointer, "null");
}

// Asking a resolver for cuGetProcAddress itself gives the shim's resolver of the matching
// ABI: legacy from 11030, _v2 from 12000, _v2_ptsz with the per-thread flag.
TEST(Interception, CuGetProcAddressResolvesToTheShimsResolver) {
  Answers shim;
  compare_with_baseline("13010", &shim);
  if (HasFatalFailure()) return;
  for (const char* path : {"cuGetProcAddress", "cuGetProcAddress_v2", "cudaGetDriverEntryPointByVersion"}) {
    std::string prefix = std::string(path) + "|cuGetProcAddress|";
    EXPECT_EQ(at(shim, prefix + "11030|0").pointer, "shim:cuGetProcAddress") << path;
    EXPECT_EQ(at(shim, prefix + "12000|0").pointer, "shim:cuGetProcAddress_v2") << path;
    EXPECT_EQ(at(shim, prefix + "13010|0").pointer, "shim:cuGetProcAddress_v2") << path;
    EXPECT_EQ(at(shim, prefix + "13000|2").pointer, "shim:cuGetProcAddress_v2_ptsz") << path;
  }
  EXPECT_EQ(at(shim, "cuGetProcAddress_v2_ptsz|cuGetProcAddress|13000|0").pointer, "shim:cuGetProcAddress_v2_ptsz");
  EXPECT_EQ(at(shim, "cudaGetDriverEntryPoint_ptsz|cuGetProcAddress|-|0").pointer, "shim:cuGetProcAddress_v2_ptsz");
}

// Entry points the shim does not track are gated wrappers too, per-thread forms included,
// each the wrapper of the ABI the driver returned (the whole application is held).
TEST(Interception, UntrackedNamesLandInGatedWrappers) {
  Answers shim;
  compare_with_baseline("13010", &shim);
  if (HasFatalFailure()) return;
  EXPECT_EQ(at(shim, "cuGetProcAddress_v2|cuMemcpyAsync|13000|2").pointer, "shim:cuMemcpyAsync_ptsz");
  EXPECT_EQ(at(shim, "cuGetProcAddress_v2|cuMemcpyAsync|13000|0").pointer, "shim:cuMemcpyAsync");
  EXPECT_EQ(at(shim, "cuGetProcAddress_v2|cuMemAlloc|13000|0").pointer, "shim:cuMemAlloc_v2");
  EXPECT_EQ(at(shim, "cuGetProcAddress_v2|cuInit|13000|0").pointer, "shim:cuInit");
  EXPECT_EQ(at(shim, "cudaGetDriverEntryPoint|cuCtxSynchronize|-|0").pointer, "shim:cuCtxSynchronize");
  EXPECT_EQ(at(shim, "cuGetProcAddress_v2_ptsz|cuMemsetD32Async|13000|0").pointer,
            "shim:cuMemsetD32Async_ptsz");
  EXPECT_EQ(at(shim, "dlsym-libcuda|cuMemGetAllocationGranularity|-|-").pointer,
            "shim:cuMemGetAllocationGranularity");
  EXPECT_EQ(at(shim, "cuGetProcAddress_v2|cuCtxCreate|12000|0").pointer, "shim:cuCtxCreate_v3");
  EXPECT_EQ(at(shim, "cuGetProcAddress_v2|cuCtxCreate|13000|0").pointer, "shim:cuCtxCreate_v4");
}

// RTLD_NEXT keeps the caller's scope: an interposer preloaded after the shim gets what
// follows it (libcuda's function), never itself; its own same-named symbol is never
// replaced, and lookups from the program still land in the shim.
TEST(Interception, RtldNextSearchesAfterTheCallerAndForeignSymbolsStay) {
  std::string preload = env_or_fail("CUSNAP_TEST_SHIM") + ":" + CUSNAP_TEST_INTERPOSER;
  ProbeRun run = run_probe("scope", preload, "13010");
  ASSERT_EQ(run.exit_status, 0) << run.output;
  EXPECT_EQ(at(run.answers, "interposer-next|cuMemGetAccess|-|-").pointer, "libcuda.so.1:cuMemGetAccess");
  EXPECT_EQ(at(run.answers, "interposer-next|interposer_next|-|-").pointer, "null");
  EXPECT_EQ(at(run.answers, "dlsym-interposer|cuMemGetAccess|-|-").pointer,
            "libinterception_interposer.so:cuMemGetAccess");
  EXPECT_EQ(at(run.answers, "rtld-default|cuMemGetAccess|-|-").pointer, "shim:cuMemGetAccess");
  EXPECT_EQ(at(run.answers, "rtld-next|cuMemGetAccess|-|-").pointer, "shim:cuMemGetAccess");
}

// A driver that answers an intercepted name with a function that is none of the table's
// ABIs (interception_fakecuda: cuMemCreate asked at 13000) gets "not found" from the shim,
// never its untracked function; the known ABI (asked at 12000) gets the wrapper.
TEST(Interception, UnknownAbiOfAnInterceptedNameFailsClosed) {
  ProbeRun run = run_program(CUSNAP_TEST_FAILCLOSED, "", env_or_fail("CUSNAP_TEST_SHIM"),
                             CUSNAP_TEST_FAKECUDA_DIR, "13010");
  ASSERT_EQ(run.exit_status, 0) << run.output;
  std::istringstream lines(run.output);
  std::set<std::string> got;
  for (std::string text; std::getline(lines, text);) got.insert(text);
  for (const char* expected : {
           "v2|cuMemCreate|13000|0|1|null",        // CUDA_SUCCESS, SYMBOL_NOT_FOUND
           "legacy|cuMemCreate|13000|500|-|null",  // CUDA_ERROR_NOT_FOUND
           "v2|cuMemCreate|12000|0|0|shim",
           "legacy|cuMemCreate|12000|0|-|shim",
           "v2|cuMemGetAccess|13000|0|0|shim",
           "legacy|cuMemGetAccess|12000|0|-|shim",
       }) {
    EXPECT_EQ(got.count(expected), 1u) << expected << " missing from:\n" << run.output;
  }
}

// The real tables are resolved without a lock: eight threads making the first lookups of
// the process at once all get the wrapper (under ASan, a loser's freed table being used
// would abort the probe).
TEST(Interception, ConcurrentFirstUseResolvesOnce) {
  ProbeRun run = run_probe("race", env_or_fail("CUSNAP_TEST_SHIM"), "13010");
  ASSERT_EQ(run.exit_status, 0) << run.output;
  for (int t = 0; t < 8; ++t) {
    for (const char* api : {"cuMemCreate", "cuMulticastBindMem", "cuGetProcAddress"}) {
      std::string expected = std::string("shim:") + (std::string(api) == "cuMulticastBindMem"
                                                         ? "cuMulticastBindMem_v2"
                                                         : std::string(api) == "cuGetProcAddress"
                                                               ? "cuGetProcAddress_v2"
                                                               : api);
      EXPECT_EQ(at(run.answers, "race-" + std::to_string(t) + "|" + api + "|-|-").pointer, expected);
    }
  }
}

// No driver entry point bypasses the gate: in a process with the shim preloaded,
// every generated wrapper is what the global scope finds, and a call of each made while the
// process is quiesced through its own endpoint waits until kResume; then the held async
// memset and launch write their words (gate_probe.cc).
// gate_probe <mode> with the shim preloaded, in a control directory and a simulated machine
// of its own (separate folders: the shim's endpoint and the simulated driver's service both
// name their socket after the pid).
ProbeRun run_gate_probe(const std::string& mode) {
  char dir[] = "/tmp/cusnap-gate-XXXXXX";
  EXPECT_NE(mkdtemp(dir), nullptr);
  const std::string control = std::string(dir) + "/control", machine = std::string(dir) + "/machine";
  // A control directory must be private (0700), or the shim refuses to serve from it.
  EXPECT_EQ(::mkdir(control.c_str(), 0700), 0);
  EXPECT_TRUE(std::filesystem::create_directory(machine));
  setenv("CUSNAP_CONTROL_DIR", control.c_str(), 1);
  setenv("SIMCUDA_DIR", machine.c_str(), 1);
  ProbeRun run = run_program(CUSNAP_TEST_GATE_PROBE, mode, env_or_fail("CUSNAP_TEST_SHIM"),
                             env_or_fail("CUSNAP_TEST_SIMCUDA_DIR"), "13010");
  std::filesystem::remove_all(dir);
  return run;
}

TEST(Interception, GateHoldsEveryEntryPoint) {
  ProbeRun run = run_gate_probe("walk");
  EXPECT_EQ(run.exit_status, 0) << run.output;
  EXPECT_THAT(run.output, HasSubstr("returned-early 0 ok")) << run.output;
  size_t generated = 0;
  for (const TableRow& row : kTable) generated += row.generated ? 1 : 0;
  EXPECT_GT(generated, 500u);
  EXPECT_THAT(run.output, HasSubstr("gated " + std::to_string(generated) + " ")) << run.output;
}

// The drain before save (lifecycle/drain.h): kQuiesce is refused, and the gate reopened, while
// a stream capture is open (naming the stream and the thread) and while a kernel waits for a
// word nobody writes (naming the device and the deadline); once the work finished the process
// quiesces.
TEST(Interception, QuiesceDrainsDeviceWorkOrRefusesByName) {
  ProbeRun run = run_gate_probe("drain");
  EXPECT_EQ(run.exit_status, 0) << run.output;
  EXPECT_THAT(run.output, HasSubstr("is capturing (begun by thread ")) << run.output;
  EXPECT_THAT(run.output, HasSubstr("a checkpoint waits until the capture ends")) << run.output;
  EXPECT_THAT(run.output, HasSubstr("device 0 still has work in flight after 300 ms")) << run.output;
  EXPECT_THAT(run.output, HasSubstr("drain ok")) << run.output;
}

}  // namespace


