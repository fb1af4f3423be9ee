// Fault and delay injection (faults.h).
#include "faults.h"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace simcuda::faults {
namespace {

struct Fault {
  unsigned long long call_number;  // fires on this call (1-based) of the entry point
  CUresult result;
};

struct Injection {
  std::mutex mutex;
  int call_log = -1;                                      // SIMCUDA_CALL_LOG's file, or -1
  std::map<std::string, unsigned long long> calls;        // api name -> calls so far
  std::map<std::string, std::vector<Fault>> faults;       // api name -> pending faults
  std::map<std::string, unsigned> delays_ms;              // api name -> delay per call
};

std::vector<std::string> split(const std::string &text, char sep) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  for (std::string part; std::getline(in, part, sep);) parts.push_back(part);
  return parts;
}

void complain(const char *variable, const std::string &item) {
  std::fprintf(stderr, "simcuda[%d]: ignoring malformed %s entry '%s'\n", static_cast<int>(getpid()),
               variable, item.c_str());
}

Injection *parse() {
  auto *inj = new Injection;
  if (const char *text = std::getenv("SIMCUDA_FAULTS")) {
    for (const std::string &item : split(text, ',')) {
      std::vector<std::string> f = split(item, ':');
      char *end1 = nullptr, *end2 = nullptr;
      if (f.size() != 3 || f[0].empty()) { complain("SIMCUDA_FAULTS", item); continue; }
      unsigned long long nth = std::strtoull(f[1].c_str(), &end1, 10);
      long result = std::strtol(f[2].c_str(), &end2, 10);
      if (*end1 != '\0' || *end2 != '\0' || nth == 0 || result <= 0) { complain("SIMCUDA_FAULTS", item); continue; }
      inj->faults[f[0]].push_back({nth, static_cast<CUresult>(result)});
    }
  }
  if (const char *dir = std::getenv("SIMCUDA_CALL_LOG"); dir != nullptr && *dir != '\0') {
    const std::string path = std::string(dir) + "/" + std::to_string(getpid()) + ".calls";
    inj->call_log = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (inj->call_log < 0) complain("SIMCUDA_CALL_LOG", path);
  }
  if (const char *text = std::getenv("SIMCUDA_DELAYS")) {
    for (const std::string &item : split(text, ',')) {
      std::vector<std::string> f = split(item, ':');
      char *end = nullptr;
      if (f.size() != 2 || f[0].empty()) { complain("SIMCUDA_DELAYS", item); continue; }
      unsigned long ms = std::strtoul(f[1].c_str(), &end, 10);
      if (*end != '\0') { complain("SIMCUDA_DELAYS", item); continue; }
      inj->delays_ms[f[0]] = static_cast<unsigned>(ms);
    }
  }
  return inj;
}

Injection &injection() {
  static Injection *inj = parse();  // never destroyed (calls may run during exit)
  return *inj;
}

}  // namespace

std::optional<CUresult> on_call(const char *api_name) {
  Injection &inj = injection();
  std::optional<CUresult> fail;
  unsigned delay_ms = 0;
  {
    std::lock_guard lock(inj.mutex);
    if (inj.call_log >= 0) {  // one write per call: whole lines even across threads
      const std::string line = std::string(api_name) + "\n";
      (void)!::write(inj.call_log, line.data(), line.size());
    }
    if (inj.faults.empty() && inj.delays_ms.empty()) return std::nullopt;
    std::string name(api_name);
    unsigned long long n = ++inj.calls[name];
    if (auto it = inj.faults.find(name); it != inj.faults.end()) {
      for (auto f = it->second.begin(); f != it->second.end(); ++f) {
        if (f->call_number == n) {
          fail = f->result;
          it->second.erase(f);
          break;
        }
      }
    }
    if (auto it = inj.delays_ms.find(name); it != inj.delays_ms.end()) delay_ms = it->second;
  }
  if (delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
  return fail;
}

void inject(const char *api_name, unsigned nth, CUresult result) {
  Injection &inj = injection();
  std::lock_guard lock(inj.mutex);
  std::string name(api_name);
  inj.faults[name].push_back({inj.calls[name] + nth, result});
}

}  // namespace simcuda::faults
