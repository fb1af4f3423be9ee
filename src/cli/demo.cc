// `cusnap demo`: the main job in one command. Starts a creator and an importer sharing three
// allocations with known contents (demo_job.h), checkpoints and restores them through the
// coordinator library, shows device memory leaving and coming back (demo_memory.h), has both
// sides check every byte and see each other's writes, and prints a summary (or --json).
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/cli_common.h"
#include "cli/commands.h"
#include "common/text.h"
#include "demo/demo_job.h"
#include "demo/demo_memory.h"
#include "cli/exit_codes.h"
#include "cli/output.h"
#include "common/endpoint_client.h"
#include "coordinator/coordinator.h"

namespace cusnap::cli {
namespace {

using demo::kAllocations;
using Sizes = std::array<uint64_t, kAllocations>;

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kGiB = uint64_t{1} << 30;
/// Bounded so a stuck process cannot hang the demo (CUcheckpointLockArgs.timeoutMs).
constexpr unsigned kLockTimeoutMs = 30'000;

/// "2M,64M,256M" (K/M/G binary suffixes, optional "iB"; plain numbers are bytes).
Result<Sizes> ParseSizes(const std::string& text) {
  Sizes sizes{};
  std::stringstream in(text);
  std::string item;
  size_t n = 0;
  while (std::getline(in, item, ',')) {
    if (n == kAllocations) break;
    char* end = nullptr;
    const unsigned long long value = std::strtoull(item.c_str(), &end, 10);
    std::string suffix = end ? end : "";
    uint64_t unit = 1;
    if (!suffix.empty()) {
      const char u = static_cast<char>(std::toupper(static_cast<unsigned char>(suffix[0])));
      unit = u == 'K' ? 1024 : u == 'M' ? kMiB : u == 'G' ? kGiB : 0;
      const std::string rest = suffix.substr(1);
      if (rest != "" && rest != "iB" && rest != "B") unit = 0;
    }
    if (end == item.c_str() || unit == 0 || value == 0) {
      return Error{-1, "--sizes: '" + item + "' is not a size (e.g. 2M, 64M, 1G)"};
    }
    sizes[n] = value * unit;
    if (sizes[n] % demo::kGranularity != 0) {
      return Error{-1, "--sizes: " + item + " is not a multiple of the 2 MiB allocation granularity"};
    }
    ++n;
  }
  if (n != kAllocations || in.rdbuf()->in_avail() != 0) {
    return Error{-1, "--sizes: give exactly three sizes, e.g. 2M,64M,256M"};
  }
  return sizes;
}

/// One verdict of the summary.
struct Check {
  std::string name;
  bool ok = false;
  std::string detail;
};

/// A private directory for the demo's state file (and, unless the environment names them,
/// its control directory and simulated machine); removed at the end.
struct TempDir {
  std::string path;
  TempDir() {
    const char* tmp = std::getenv("TMPDIR");
    std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/cusnap-demo.XXXXXX";
    if (::mkdtemp(templ.data()) != nullptr) path = templ;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path.empty()) std::filesystem::remove_all(path, ec);
  }
};

void SetDefaultEnv(const char* name, const std::string& value) {
  const char* old = std::getenv(name);
  if (old == nullptr || *old == '\0') ::setenv(name, value.c_str(), 1);
}

class Demo {
 public:
  explicit Demo(const DemoOptions& options) : options_(options) {}

  int Run() {
    if (int rc = Prepare(); rc != kExitOk) return rc;
    Execute();
    return Summarize();
  }

 private:
  /// Driver, directories, sizes, devices; the first line says which driver. Returns an exit
  /// status other than kExitOk when the demo cannot start at all.
  int Prepare() {
    const std::string bin = SelfDir();
    const char* env = std::getenv("CUSNAP_DRIVER");
    auto choice = coord::ParseDriverChoice(env ? env : "");
    if (!choice) return Fail(kExitUsage, choice.error().message);
    auto simulated = coord::WouldUseSimulated(*choice, bin);  // as `cusnap run` decides
    if (!simulated) return Fail(kExitError, simulated.error().message);
    simulated_ = *simulated;
    if (tmp_.path.empty()) return Fail(kExitError, "cannot create a temporary directory");
    SetDefaultEnv("CUSNAP_CONTROL_DIR", tmp_.path + "/control");
    if (simulated_) SetDefaultEnv("SIMCUDA_DIR", tmp_.path + "/sim");
    // The workers' `cusnap run` and this process load the same driver.
    ::setenv("CUSNAP_DRIVER", simulated_ ? "sim" : "real", 1);
    state_dir_ = tmp_.path + "/state";

    auto loaded = coord::LoadDriver(simulated_ ? coord::DriverChoice::kSimulated
                                               : coord::DriverChoice::kReal, bin);
    if (!loaded) return Fail(kExitError, loaded.error().message);
    driver_ = std::move(*loaded);
    described_ = driver_->Describe();
    auto uuids = driver_->DeviceUuids();
    if (!uuids || uuids->empty()) {
      return Fail(kExitError, uuids ? "the driver has no device" : uuids.error().message);
    }
    device_count_ = static_cast<int>(uuids->size());
    devices_ = {0, device_count_ >= 2 ? 1 : 0};

    if (options_.sizes.empty()) {
      sizes_ = simulated_ ? Sizes{2 * kMiB, 64 * kMiB, 256 * kMiB} : Sizes{64 * kMiB, kGiB, 2 * kGiB};
    } else {
      auto parsed = ParseSizes(options_.sizes);
      if (!parsed) return Fail(kExitUsage, parsed.error().message);
      sizes_ = *parsed;
    }
    for (uint64_t s : sizes_) total_ += s;

    Say("cusnap demo: " +
        (simulated_ ? std::string("simulated driver (no usable GPU here)") : "GPU, " + described_) +
        "; creator on device " + std::to_string(devices_[0]) + ", importer on device " +
        std::to_string(devices_[1]));
    std::string sizes_text;
    for (uint64_t s : sizes_) sizes_text += (sizes_text.empty() ? "" : ", ") + FormatBytes(s);
    Say("three shared allocations on device " + std::to_string(devices_[0]) + ": " + sizes_text +
        " (" + FormatBytes(total_) + ")");

    const std::string library =
        simulated_ ? coord::SimulatedDriverDir(bin) + "/libcuda.so.1" : "libcuda.so.1";
    auto probe = demo::MemoryProbe::Open(library, device_count_);
    if (!probe) return Fail(kExitError, probe.error().message);
    probe_ = std::move(*probe);
    return kExitOk;
  }

  /// The job's whole life; each step adds its verdict to checks_ and stops at a failure.
  void Execute() {
    if (!Started() || !(before_ = Memory())) return;
    checkpoint_ = RunCommand("checkpoint", coord::kCheckpointPhaseCount, [&](auto& d, auto& o) {
      return coord::Checkpoint({state_dir_, kLockTimeoutMs, ""}, d, *driver_, o);
    });
    if (!Verdict("checkpoint", checkpoint_.outcome == coord::Outcome::kOk, Summary(checkpoint_)) ||
        !(after_checkpoint_ = Memory())) {
      return;
    }
    restore_ = RunCommand("restore", coord::kRestorePhaseCount, [&](auto& d, auto& o) {
      return coord::Restore({state_dir_, {}}, d, *driver_, o);
    });
    if (!Verdict("restore", restore_.outcome == coord::Outcome::kOk, Summary(restore_)) ||
        !(after_restore_ = Memory())) {
      return;
    }
    MemoryVerdict();
    if (!BytesVerified() || !Shared(demo::kImporter, demo::kCreator, 2) ||
        !Shared(demo::kCreator, demo::kImporter, 0)) {
      return;
    }
    auto stopped = job_.Stop();
    Verdict("clean exit", stopped.ok(),
            stopped ? "both workers released their memory and exited 0" : stopped.error().message);
  }

  bool Started() {
    if (auto s = job_.Start(SelfDir(), devices_, sizes_); !s) {
      return Verdict("start", false, s.error().message);
    }
    std::string detail;
    for (auto role : {demo::kCreator, demo::kImporter}) {
      auto ready = job_.Answer(role, "ready ");
      if (!ready) return Verdict("start", false, ready.error().message);
      if (*ready != "ready " + std::to_string(total_)) return Verdict("start", false, *ready);
      detail += std::string(detail.empty() ? "" : ", ") + demo::RoleName(role) + " " +
                ProcessText(job_.pid(role));
    }
    creator_pid_ = job_.pid(demo::kCreator);
    importer_pid_ = job_.pid(demo::kImporter);
    return Verdict("start", true, detail + "; both sides read the pattern");
  }

  template <typename F>
  coord::CommandReport RunCommand(const std::string& name, size_t phases, F run) {
    Say(name + ":");
    PhasePrinter printer(stdout, options_.json, ::isatty(STDOUT_FILENO) == 1, phases);
    const coord::DiscoveryOptions discovery{ControlDir(), static_cast<int>(::getpid()), false};
    const auto discover = coord::EndpointDiscoverer(discovery);
    coord::CommandReport report = run(discover, printer);
    for (const auto& e : report.errors) std::fprintf(stderr, "cusnap demo: %s: %s\n", name.c_str(), e.c_str());
    return report;
  }

  static std::string Summary(const coord::CommandReport& report) {
    double ms = 0;
    for (const auto& p : report.phases) ms += p.elapsed_ms;
    char text[64];
    std::snprintf(text, sizeof text, "%zu phases, %.1f ms", report.phases.size(), ms);
    return report.outcome == coord::Outcome::kOk
               ? std::string(text)
               : (report.errors.empty() ? std::string("failed") : report.errors.front());
  }

  std::optional<std::vector<demo::DeviceMemory>> Memory() {
    auto read = probe_->Read();
    if (!read) {
      Verdict("memory", false, read.error().message);
      return std::nullopt;
    }
    std::string line;
    for (const auto& m : *read) {
      line += std::string(line.empty() ? "" : ", ") + "device " + std::to_string(m.device) +
              " " + FormatBytes(m.used) + " used";
    }
    Say("memory: " + line);
    return *read;
  }

  /// The creator's device gave back at least the shared bytes at checkpoint and took them
  /// again at restore (readings are device-wide: contexts add to them on a GPU).
  void MemoryVerdict() {
    const auto d = static_cast<size_t>(devices_[0]);
    const uint64_t before = (*before_)[d].used, parked = (*after_checkpoint_)[d].used,
                   back = (*after_restore_)[d].used;
    const bool released = parked + total_ <= before;
    const bool returned = back >= parked + total_;
    Verdict("memory released", released && returned,
            "device " + std::to_string(d) + ": " + FormatBytes(before) + " used before, " +
                FormatBytes(parked) + " after checkpoint, " + FormatBytes(back) + " after restore");
  }

  bool BytesVerified() {
    std::string detail;
    for (auto role : {demo::kCreator, demo::kImporter}) {
      auto checked = job_.Ask(role, "check", "ok ");
      if (!checked) return Verdict("every byte", false, checked.error().message);
      if (*checked != "ok " + std::to_string(total_)) return Verdict("every byte", false, *checked);
      detail += std::string(detail.empty() ? "" : ", ") + demo::RoleName(role) + " " +
                FormatBytes(total_);
    }
    return Verdict("every byte", true, detail + " checked after restore");
  }

  /// `writer` writes a new value into the last word of allocation `k`; `reader` must read it.
  bool Shared(demo::Role writer, demo::Role reader, size_t k) {
    const std::string name = std::string("sharing ") + demo::RoleName(writer) + " -> " +
                             demo::RoleName(reader);
    const uint64_t word = sizes_[k] / sizeof(uint64_t) - 1;
    const uint64_t value = ~demo::PatternWord(k, word) ^ (uint64_t{writer} << 32);
    char hex[24];
    std::snprintf(hex, sizeof hex, "%llx", static_cast<unsigned long long>(value));
    const std::string where = "allocation " + std::to_string(k) + " word " + std::to_string(word);
    if (auto w = job_.Ask(writer, "write " + std::to_string(k) + " " + std::to_string(word) + " " + hex, "ok");
        !w) {
      return Verdict(name, false, w.error().message);
    }
    auto r = job_.Ask(reader, "read " + std::to_string(k) + " " + std::to_string(word), "ok ");
    if (!r) return Verdict(name, false, r.error().message);
    const bool same = *r == "ok " + std::string(hex);
    return Verdict(name, same, where + ": wrote 0x" + hex + ", read 0x" + r->substr(3) +
                                   (same ? "" : " (expected 0x" + std::string(hex) + ")"));
  }

  bool Verdict(const std::string& name, bool ok, const std::string& detail) {
    checks_.push_back(Check{name, ok, detail});
    Say(std::string(ok ? "PASS " : "FAIL ") + name + ": " + detail);
    return ok;
  }

  /// Carrier throughput lines of a report's byte-moving phases.
  std::string Throughput(const coord::CommandReport& report) const {
    std::string out;
    for (const auto& p : report.phases) {
      if (p.bytes == 0) continue;
      out += (out.empty() ? "" : ", ") + FormatPhaseLine(p);
    }
    return out;
  }

  int Summarize() {
    bool pass = !checks_.empty();
    for (const auto& c : checks_) pass = pass && c.ok;
    const int rc = pass ? kExitOk : kExitError;
    if (options_.json) {
      std::printf("%s\n", Json(pass, rc).dump(2).c_str());
      return rc;
    }
    if (!checkpoint_.phases.empty()) Say("checkpoint carrier: " + Throughput(checkpoint_));
    if (!restore_.phases.empty()) Say("restore carrier: " + Throughput(restore_));
    size_t passed = 0;
    for (const auto& c : checks_) passed += c.ok ? 1 : 0;
    Say(std::string(pass ? "PASS" : "FAIL") + ": " + std::to_string(passed) + "/" +
        std::to_string(checks_.size()) + " checks (" + (simulated_ ? "simulated driver" : described_) + ")");
    return rc;
  }

  nlohmann::json Json(bool pass, int rc) const {
    nlohmann::json memory = nlohmann::json::array();
    for (int d = 0; d < device_count_ && before_; ++d) {
      const auto i = static_cast<size_t>(d);
      nlohmann::json m = {{"device", d}, {"total", (*before_)[i].total}, {"before", (*before_)[i].used}};
      if (after_checkpoint_) m["after_checkpoint"] = (*after_checkpoint_)[i].used;
      if (after_restore_) m["after_restore"] = (*after_restore_)[i].used;
      memory.push_back(m);
    }
    nlohmann::json checks = nlohmann::json::array();
    for (const auto& c : checks_) checks.push_back({{"name", c.name}, {"ok", c.ok}, {"detail", c.detail}});
    auto command = [&](const char* name, const coord::CommandReport& r) -> nlohmann::json {
      if (r.phases.empty()) return nullptr;
      return ReportToJson(name, described_, r, ExitFor(r.outcome));
    };
    return {{"command", "demo"},
            {"driver", described_},
            {"simulated", simulated_},
            {"devices", {{"creator", devices_[0]}, {"importer", devices_[1]}}},
            {"pids", {{"creator", creator_pid_}, {"importer", importer_pid_}}},
            {"sizes", sizes_},
            {"total_bytes", total_},
            {"checkpoint", command("checkpoint", checkpoint_)},
            {"restore", command("restore", restore_)},
            {"memory", memory},
            {"checks", checks},
            {"result", pass ? "PASS" : "FAIL"},
            {"exit_code", rc}};
  }

  /// A line of the human summary (nothing on stdout with --json but the document).
  void Say(const std::string& line) const {
    if (!options_.json) std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  }

  int Fail(int rc, const std::string& why) const {
    if (options_.json) {
      std::printf("%s\n", nlohmann::json{{"command", "demo"}, {"result", "FAIL"}, {"exit_code", rc},
                                         {"errors", {why}}}.dump(2).c_str());
    }
    std::fprintf(stderr, "cusnap demo: %s\n", why.c_str());
    return rc;
  }

  const DemoOptions& options_;
  TempDir tmp_;  // declared before the job: removed after the workers are gone
  bool simulated_ = false;
  std::string state_dir_;
  std::unique_ptr<coord::CheckpointDriver> driver_;
  std::string described_;
  int device_count_ = 0;
  std::array<int, 2> devices_{};
  Sizes sizes_{};
  uint64_t total_ = 0;
  std::unique_ptr<demo::MemoryProbe> probe_;
  demo::DemoJob job_;
  int creator_pid_ = 0, importer_pid_ = 0;
  std::optional<std::vector<demo::DeviceMemory>> before_, after_checkpoint_, after_restore_;
  coord::CommandReport checkpoint_, restore_;
  std::vector<Check> checks_;
};

}  // namespace

int DemoCommand(const DemoOptions& options) { return Demo(options).Run(); }

}  // namespace cusnap::cli
