// Reading and checking the settings of the table (settings.h).
#include "common/settings.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

namespace cusnap::settings {
namespace {

/// The '|'-separated words of `list`, in order.
std::vector<std::string_view> Words(const char* list) {
  std::vector<std::string_view> words;
  std::string_view rest(list);
  while (!rest.empty()) {
    const size_t bar = rest.find('|');
    words.push_back(rest.substr(0, bar));
    if (bar == std::string_view::npos) break;
    rest.remove_prefix(bar + 1);
  }
  return words;
}

/// "a, b or c" (`last` "or"), or "a, b, c" (`last` ",").
std::string Listed(const std::vector<std::string_view>& words, const char* last) {
  std::string text;
  for (size_t i = 0; i < words.size(); ++i) {
    if (i > 0) {
      text += (i + 1 == words.size() && *last != ',') ? std::string(" ") + last + " " : ", ";
    }
    text += words[i];
  }
  return text;
}

/// "a whole number of <unit> from <min> to <max>", "even" when a multiple of 2.
std::string NumberPhrase(const Setting& setting) {
  std::string phrase = setting.multiple == 2 ? "an even whole number" : "a whole number";
  phrase += std::string(" of ") + setting.unit + " from " + std::to_string(setting.min) + " to " +
            std::to_string(setting.max);
  if (setting.multiple > 2) phrase += ", a multiple of " + std::to_string(setting.multiple);
  return phrase;
}

/// Whether `path` names a file this process can append to: an existing one that is no
/// directory and is writable, or a missing one whose folder is writable and searchable.
bool Appendable(std::string_view path) {
  const std::string file(path);
  struct stat st {};
  if (::stat(file.c_str(), &st) == 0) {
    return !S_ISDIR(st.st_mode) && ::access(file.c_str(), W_OK) == 0;
  }
  if (errno != ENOENT) return false;
  const size_t slash = file.rfind('/');
  const std::string folder = slash == std::string::npos ? "."
                             : slash == 0                ? "/"
                                                         : file.substr(0, slash);
  return ::stat(folder.c_str(), &st) == 0 && S_ISDIR(st.st_mode) &&
         ::access(folder.c_str(), W_OK | X_OK) == 0;
}

}  // namespace

const char* Value(const Setting& setting) {
  const char* value = getenv(setting.name);
  return value == nullptr || *value == '\0' ? nullptr : value;
}

std::optional<size_t> WordIndex(const Setting& setting, std::string_view value) {
  const std::vector<std::string_view> words = Words(setting.words);
  for (size_t i = 0; i < words.size(); ++i) {
    if (words[i] == value) return i;
  }
  return std::nullopt;
}

std::optional<uint64_t> NumberOf(const Setting& setting, std::string_view value) {
  // Twenty digits may wrap 64 bits; every maximum of the table has far fewer.
  if (setting.kind != Kind::kNumber || value.empty() || value.size() > 19) return std::nullopt;
  uint64_t number = 0;
  for (const char c : value) {
    if (c < '0' || c > '9') return std::nullopt;
    number = number * 10 + static_cast<uint64_t>(c - '0');
  }
  if (number < setting.min || number > setting.max || number % setting.multiple != 0) {
    return std::nullopt;
  }
  return number;
}

bool Accepts(const Setting& setting, std::string_view value) {
  switch (setting.kind) {
    case Kind::kChoice: return WordIndex(setting, value).has_value();
    case Kind::kNumber:
      return NumberOf(setting, value).has_value() || WordIndex(setting, value).has_value();
    case Kind::kFile: return Appendable(value);
    case Kind::kPath:
    case Kind::kText: return true;
  }
  return true;
}

std::string Takes(const Setting& setting) {
  switch (setting.kind) {
    case Kind::kChoice: return "one of " + Listed(Words(setting.words), ",");
    case Kind::kNumber: {
      std::vector<std::string_view> words = Words(setting.words);
      const std::string number = NumberPhrase(setting);
      words.push_back(number);
      return words.size() == 1 ? number : Listed(words, "or");
    }
    case Kind::kFile:
      return "a file one can append to (a writable file, or a new one in a writable folder)";
    case Kind::kPath: return "a path";
    case Kind::kText: return "any text";
  }
  return "";
}

std::string Refusal(const Setting& setting, std::string_view value) {
  return std::string(setting.name) + "='" + std::string(value) + "' is not " + Takes(setting);
}

std::string ReadersText(uint32_t readers) {
  std::string text;
  for (size_t bit = 0; bit < sizeof kReaderNames / sizeof kReaderNames[0]; ++bit) {
    if ((readers & (1u << bit)) == 0) continue;
    text += (text.empty() ? "" : ", ") + std::string(kReaderNames[bit]);
  }
  return text;
}

std::vector<std::string> EnvironmentProblems(uint32_t readers) {
  std::vector<std::string> problems;
  for (const Setting* setting : kAll) {
    if ((setting->readers & readers) == 0) continue;
    const char* value = Value(*setting);
    if (value != nullptr && !Accepts(*setting, value)) problems.push_back(Refusal(*setting, value));
  }
  return problems;
}

std::vector<std::string> BadValues(const Setting& setting) {
  switch (setting.kind) {
    case Kind::kChoice: return {"bogus", std::string(Words(setting.words).front()) + " "};
    case Kind::kNumber: {
      std::vector<std::string> bad = {"abc", "-1", "1.5", std::to_string(setting.max + 1)};
      if (setting.min > 0) bad.push_back(std::to_string(setting.min - 1));
      if (setting.multiple > 1) bad.push_back(std::to_string(setting.min + 1));
      return bad;
    }
    case Kind::kFile: return {"/nonexistent-cusnap-folder/shim.log", "/"};
    case Kind::kPath:
    case Kind::kText: return {};
  }
  return {};
}

std::string FallbackText(const Setting& setting) {
  std::string fallback;
  for (const char* c = setting.fallback; *c != '\0'; ++c) {
    if (*c != '`') fallback += *c;
  }
  return fallback;
}

std::string DefaultUsed(const Setting& setting, std::string_view value) {
  return Refusal(setting, value) + "; using the default, " + FallbackText(setting);
}

std::string ReadmeRowStart(const Setting& setting) {
  return std::string("| `") + setting.name + "` | " + Takes(setting) + " | " + setting.fallback +
         " | " + ReadersText(setting.readers) + " | ";
}

}  // namespace cusnap::settings
