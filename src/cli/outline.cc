// The CLI11 App read back as plain data (outline.h).
#include "cli/outline.h"

#include <algorithm>

namespace cusnap::cli {
namespace {

/// What the shells offer for `option` of `command`: named by the option, since CLI11 keeps
/// no kind of value beyond its type's name.
ValueKind ValueOf(const std::string& command, const CLI::Option& option) {
  if (option.get_expected_max() == 0) return ValueKind::kNone;  // a flag
  const std::string name =
      option.get_lnames().empty() ? option.get_name(true, false) : option.get_lnames().front();
  if (name == "pid") return ValueKind::kPid;
  if (name == "state-dir" || name == "images-dir") return ValueKind::kDirectory;
  if (command == "inspect") return ValueKind::kFile;
  if (command == "completion") return ValueKind::kShell;
  return ValueKind::kText;
}

/// Appends the options of `app` and of its option groups (nameless sub-apps in CLI11) to
/// `options`, each once (every group has a --help of its own).
void CollectOptions(const std::string& command, const CLI::App& app,
                    std::vector<OptionOutline>& options) {
  const std::string group = app.get_name().empty() ? app.get_description() : "";
  for (const CLI::Option* option : app.get_options()) {
    OptionOutline outline;
    outline.positional = !option->nonpositional();
    outline.name = outline.positional ? option->get_name(true, false)
                                      : "--" + option->get_lnames().front();
    if (!outline.positional && option->get_lnames().empty()) continue;
    const bool known = std::any_of(options.begin(), options.end(), [&](const auto& o) {
      return o.name == outline.name;
    });
    if (known) continue;
    outline.required = option->get_required();
    outline.value = ValueOf(command, *option);
    outline.help = option->get_description();
    outline.group = group;
    options.push_back(outline);
  }
  for (const CLI::App* option_group : app.get_subcommands([](const CLI::App* sub) {
         return sub->get_name().empty();
       })) {
    CollectOptions(command, *option_group, options);
  }
}

CommandOutline OutlineOf(const CLI::App& app) {
  CommandOutline outline{app.get_name(), app.get_description(), {}, app.get_footer()};
  CollectOptions(app.get_name(), app, outline.options);
  if (outline.name == "run") {
    outline.options.push_back({"command", true, true, ValueKind::kCommand,
                               "the program to start, with its arguments (after `--`)", ""});
  }
  return outline;
}

}  // namespace

std::vector<CommandOutline> Outline(const CLI::App& app) {
  std::vector<CommandOutline> commands = {OutlineOf(app)};
  commands.front().name = "";
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App* s) {
         return !s->get_name().empty() && !s->get_group().empty();
       })) {
    commands.push_back(OutlineOf(*sub));
  }
  return commands;
}

std::vector<std::string> LongOptionNames(const CLI::App& app) {
  std::vector<OptionOutline> options;
  CollectOptions(app.get_name(), app, options);
  std::vector<std::string> names;
  for (const OptionOutline& option : options) {
    if (!option.positional) names.push_back(option.name);
  }
  return names;
}

std::string ShortHelp(const std::string& help) {
  std::string text = help.substr(0, help.find_first_of(";(:"));
  while (!text.empty() && text.back() == ' ') text.pop_back();
  if (text.size() > 72) text = text.substr(0, text.rfind(' ', 69)) + "...";
  return text;
}

}  // namespace cusnap::cli
