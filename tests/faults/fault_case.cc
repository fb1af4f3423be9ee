// The fault matrix's cases (fault_case.h).
#include "fault_case.h"

#include <sstream>

namespace faults {
namespace {

constexpr const char* kKindNames[] = {"cli-sigint", "cli-sigkill", "kill-participant",
                                      "driver-error"};

/// `text` or "-" (a field of a case line is never empty).
std::string Field(const std::string& text) { return text.empty() ? "-" : text; }
std::string Unfield(const std::string& text) { return text == "-" ? "" : text; }

}  // namespace

std::string Case::Text() const {
  std::ostringstream out;
  out << kKindNames[static_cast<int>(kind)] << ' ' << command << ' ' << phase << ' ' << when
      << ' ' << Field(process) << ' ' << Field(entry) << ' ' << nth;
  return out.str();
}

std::optional<Case> Case::Parse(const std::string& text) {
  std::istringstream in(text);
  std::string kind, process, entry;
  Case c;
  if (!(in >> kind >> c.command >> c.phase >> c.when >> process >> entry >> c.nth)) {
    return std::nullopt;
  }
  bool known = false;
  for (int k = 0; k < 4; ++k) {
    if (kind == kKindNames[k]) {
      c.kind = static_cast<Kind>(k);
      known = true;
    }
  }
  if (!known) return std::nullopt;
  c.process = Unfield(process);
  c.entry = Unfield(entry);
  return c;
}

std::vector<Case> Enumerate(const std::map<std::string, CommandPlan>& plans) {
  std::vector<Case> cases;
  for (const auto& [command, plan] : plans) {
    if (plan.phases.empty()) continue;
    // The CLI is signalled before and after each phase: a signal before a phase comes
    // after that phase's interrupt check (it lands while the phase runs), one after it
    // comes before the next check. A participant dies at every boundary once: before the
    // first phase, then after each one (where the job's processes exist then).
    for (const auto& phase : plan.phases) {
      for (const char* when : {"before", "after"}) {
        for (Kind kind : {Kind::kCliSigint, Kind::kCliSigkill}) {
          cases.push_back(Case{kind, command, phase, when, "", "", 0});
        }
      }
    }
    std::vector<std::pair<std::string, std::string>> boundaries = {{plan.phases.front(), "before"}};
    for (const auto& phase : plan.phases) boundaries.emplace_back(phase, "after");
    for (const auto& [phase, when] : boundaries) {
      if (plan.without_job.contains(phase + ":" + when)) continue;
      for (const auto& w : plan.workers) {
        cases.push_back(Case{Kind::kKillParticipant, command, phase, when, w, "", 0});
      }
    }
    for (const auto& phase : plan.phases) {
      for (const auto& [key, entries] : plan.calls) {
        if (key.first != phase) continue;
        for (const auto& [entry, before] : entries) {
          cases.push_back(Case{Kind::kDriverError, command, phase, "before", key.second, entry,
                               plan.counted.contains(key.second) ? before + 1 : 0});
        }
      }
    }
  }
  return cases;
}

}  // namespace faults
