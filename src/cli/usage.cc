// `cusnap`'s own usage errors (usage.h).
#include "cli/usage.h"

#include <algorithm>
#include <cstdio>

#include "cli/exit_codes.h"
#include "cli/outline.h"
#include "cli/output.h"

namespace cusnap::cli {
namespace {

/// Levenshtein distance of `a` and `b` (single-byte characters).
size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

constexpr long kMaxPid = 1L << 30;

/// "; did you mean '--x'?" for each unexpected option of `extras` within two edits of an
/// option `command` has (of `app` itself when `command` is ""), "" when none is.
std::string NearestOptions(CLI::App& app, const std::string& command,
                           const std::vector<std::string>& extras) {
  const CLI::App* owner = &app;
  if (!command.empty()) {
    const auto named = app.get_subcommands([&](const CLI::App* sub) {
      return sub->get_name() == command;
    });
    if (named.empty()) return "";
    owner = named.front();
  }
  const std::vector<std::string> names = LongOptionNames(*owner);
  std::string text;
  for (const std::string& extra : extras) {
    if (extra.rfind("--", 0) != 0) continue;
    const std::string given = extra.substr(0, extra.find('='));
    std::string nearest;
    size_t best = 3;  // at most two edits away counts as "close", as for commands
    for (const std::string& name : names) {
      if (const size_t d = EditDistance(given, name); d < best) {
        best = d;
        nearest = name;
      }
    }
    if (!nearest.empty()) text += "; did you mean '" + nearest + "' for '" + given + "'?";
  }
  return text;
}

// "run, checkpoint, ...": the commands as both answers list them.
std::string CommandList(const std::vector<std::string>& commands) {
  std::string list;
  for (const auto& c : commands) list += (list.empty() ? "" : ", ") + c;
  return list;
}

}  // namespace

std::string CommandWord(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (argv[i][0] != '-') return argv[i];
  }
  return "";
}

std::string UnknownCommand(const std::string& word, const std::vector<std::string>& commands) {
  if (word.empty() || std::find(commands.begin(), commands.end(), word) != commands.end()) {
    return "";
  }
  std::string nearest;
  size_t best = 3;  // at most two edits away counts as "close"
  for (const auto& c : commands) {
    if (const size_t d = EditDistance(word, c); d < best) {
      best = d;
      nearest = c;
    }
  }
  std::string text = "unknown command '" + word + "'; the commands are: " + CommandList(commands);
  if (!nearest.empty()) text += "; did you mean '" + nearest + "'?";
  return text;
}

std::string NoCommand(const std::vector<std::string>& commands) {
  return "a command is required; the commands are: " + CommandList(commands) +
         " (cusnap --help says what each does)";
}

CLI::Validator PidValidator() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        const bool digits = !value.empty() && value.size() <= 10 &&
                            value.find_first_not_of("0123456789") == std::string::npos;
        if (!digits) return "'" + value + "' is not a number (a pid is a positive integer)";
        const long pid = std::stol(value);
        if (pid < 1 || pid > kMaxPid) {
          return "'" + value + "' is not a pid (a pid is a positive integer, at most " +
                 std::to_string(kMaxPid) + ")";
        }
        return "";
      },
      "PID");
}

int ReportParseError(CLI::App& app, const std::string& command, const CLI::ParseError& e,
                     bool json) {
  if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) {
    app.exit(e);  // --help, --version: their text on stdout
    return kExitOk;
  }
  const std::string prefix = command.empty() ? "cusnap" : "cusnap " + command;
  std::string what = e.what();
  const std::vector<std::string> extras = app.remaining(true);
  if (dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr) {
    what += NearestOptions(app, command, extras);
  } else if (const std::string nearest = NearestOptions(app, command, extras); !nearest.empty()) {
    // A mistyped option reads first as a required one missing ("Exactly 1 option from
    // [--pid,--all] is required" for `--pdi 123`): the typo is what to fix.
    std::string given;
    for (const std::string& x : extras) given += (given.empty() ? "" : " ") + x;
    what = "The following arguments were not expected: " + given + nearest;
  }
  if (json) {
    std::printf("%s\n", UntouchedToJson(command, kExitUsage, {what}).dump(2).c_str());
  }
  std::fprintf(stderr, "%s: %s\nRun '%s --help' for more information.\n", prefix.c_str(),
               what.c_str(), prefix.c_str());
  return kExitUsage;
}

}  // namespace cusnap::cli
