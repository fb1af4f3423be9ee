// Phase lines, progress bar and JSON report (output.h).
#include "cli/output.h"

#include <algorithm>
#include <cmath>

#include "cli/exit_codes.h"

namespace cusnap::cli {

std::string FormatBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < std::size(kUnits)) {
    value /= 1024.0;
    ++unit;
  }
  char text[32];
  if (unit == 0) {
    std::snprintf(text, sizeof text, "%llu B", static_cast<unsigned long long>(bytes));
  } else {
    std::snprintf(text, sizeof text, "%.2f %s", value, kUnits[unit]);
  }
  return text;
}

namespace {

double GbPerS(const coord::PhaseReport& p) {
  if (p.bytes == 0 || p.elapsed_ms <= 0) return 0;
  return static_cast<double>(p.bytes) / (p.elapsed_ms / 1000.0) / 1e9;
}

// The carrier's copy rate: all bytes over the slowest participant's copy time (copies of
// different participants overlap).
double CopyGbPerS(const coord::PhaseReport& p) {
  if (p.bytes == 0 || p.copy_ns == 0) return 0;
  return static_cast<double>(p.bytes) / static_cast<double>(p.copy_ns);
}

}  // namespace

std::string FormatPhaseLine(const coord::PhaseReport& p) {
  char line[256];
  int n = std::snprintf(line, sizeof line, "%-16s %8.1f ms", p.name.c_str(), p.elapsed_ms);
  std::string text(line, static_cast<size_t>(n));
  if (!p.note.empty()) {
    text += "  (" + p.note + ")";
  } else if (!p.coordinator_only) {
    n = std::snprintf(line, sizeof line, "  %zu participant%s", p.participants,
                      p.participants == 1 ? "" : "s");
    text.append(line, static_cast<size_t>(n));
  }
  if (p.bytes > 0) {
    n = std::snprintf(line, sizeof line, "  %s  %.1f GB/s", FormatBytes(p.bytes).c_str(),
                      GbPerS(p));
    text.append(line, static_cast<size_t>(n));
    if (p.copy_ns > 0) {
      n = std::snprintf(line, sizeof line, " (copies %.1f GB/s)", CopyGbPerS(p));
      text.append(line, static_cast<size_t>(n));
    }
    if (p.zero_bytes > 0) {
      text += "  " + FormatBytes(p.zero_bytes) + " zero, skipped";
    }
  }
  if (!p.ok()) text += "  FAILED";
  return text;
}

nlohmann::json PhaseToJson(const coord::PhaseReport& p) {
  return {{"name", p.name},           {"elapsed_ms", p.elapsed_ms}, {"participants", p.participants},
          {"coordinator_only", p.coordinator_only},
          {"bytes", p.bytes},         {"gb_per_s", GbPerS(p)},      {"copy_ns", p.copy_ns},
          {"copy_gb_per_s", CopyGbPerS(p)},  {"zero_bytes", p.zero_bytes}, {"ok", p.ok()},
          {"note", p.note},           {"errors", p.errors}};
}

namespace {
constexpr size_t kBarWidth = 20;
}  // namespace

void PhasePrinter::DrawBar(size_t filled, const std::string& text) {
  std::fprintf(out_, "\r\033[K[%s%s] %s", std::string(filled, '#').c_str(),
               std::string(kBarWidth - filled, ' ').c_str(), text.c_str());
  std::fflush(out_);
}

void PhasePrinter::PhaseStarted(const std::string& name, size_t participants) {
  (void)participants;
  if (quiet_ || !tty_) return;
  std::lock_guard lock(mu_);
  // A refused checkpoint adds a resume phase: never draw past the end.
  const size_t filled = total_ ? std::min(done_, total_) * kBarWidth / total_ : 0;
  DrawBar(filled, std::to_string(done_) + "/" + std::to_string(total_) + " " + name);
}

void PhasePrinter::BytesMoved(const std::string& name, uint64_t done, uint64_t total) {
  if (quiet_ || !tty_ || total == 0) return;
  std::lock_guard lock(mu_);
  const uint64_t clamped = std::min(done, total);
  DrawBar(static_cast<size_t>(clamped * kBarWidth / total),
          name + " " + FormatBytes(clamped) + " / " + FormatBytes(total));
}

void PhasePrinter::PhaseFinished(const coord::PhaseReport& report) {
  std::lock_guard lock(mu_);
  ++done_;
  if (quiet_) return;
  if (tty_) std::fputs("\r\033[K", out_);
  std::fprintf(out_, "%s\n", FormatPhaseLine(report).c_str());
  std::fflush(out_);
}

void PhasePrinter::Remark(const std::string& text) {
  std::lock_guard lock(mu_);
  if (quiet_) return;
  if (tty_) std::fputs("\r\033[K", out_);
  std::fprintf(out_, "-- %s\n", text.c_str());
  std::fflush(out_);
}

nlohmann::json UntouchedToJson(const std::string& command, int exit_code,
                               const std::vector<std::string>& errors) {
  return {{"command", command},
          {"exit_code", exit_code},
          {"outcome", exit_code == kExitRestoreRefused ? "restore_refused" : "refused"},
          {"phases", nlohmann::json::array()},
          {"errors", errors},
          {"notes", nlohmann::json::array()}};
}

nlohmann::json ReportToJson(const std::string& command, const std::string& driver,
                            const coord::CommandReport& report, int exit_code) {
  nlohmann::json phases = nlohmann::json::array();
  // A coordinator-only phase (read_state, write_state) counts the command's participants,
  // as every other phase does: read_state runs before discovery and sees none yet, which
  // would make it 0 where write_state says N.
  size_t participants = 0;
  for (const auto& p : report.phases) participants = std::max(participants, p.participants);
  for (const auto& p : report.phases) {
    nlohmann::json phase = PhaseToJson(p);
    if (p.coordinator_only) phase["participants"] = participants;
    phases.push_back(std::move(phase));
  }
  static constexpr const char* kOutcomes[] = {"ok", "refused", "failed_after_change",
                                              "restore_refused", "rolled_forward"};
  return {{"command", command},
          {"driver", driver},
          {"outcome", kOutcomes[static_cast<int>(report.outcome)]},
          {"exit_code", exit_code},
          {"state_file", report.state_file},
          {"images_dir", report.images_dir},
          {"phases", phases},
          {"errors", report.errors},
          {"notes", report.notes}};
}

}  // namespace cusnap::cli
