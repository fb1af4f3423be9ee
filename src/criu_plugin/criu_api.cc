#include "criu_plugin/criu_api.h"

#include <dlfcn.h>

#include <cstring>

namespace cusnap::criu_plugin {
namespace {

using PrintOnLevel = void (*)(unsigned, const char*, ...);
using CheckAndRemoveInventoryPlugin = bool (*)(const char*, size_t);

struct CriuApi {
  PrintOnLevel print_on_level = nullptr;
  CheckAndRemoveInventoryPlugin check_and_remove_inventory_plugin = nullptr;
};

CriuApi& Api() {
  static CriuApi api;
  return api;
}

template <typename Function>
void Lookup(const char* symbol, Function& into, std::string& missing) {
  into = reinterpret_cast<Function>(::dlsym(RTLD_DEFAULT, symbol));
  if (into == nullptr) missing += std::string(missing.empty() ? "" : ", ") + symbol;
}

}  // namespace

void CriuLog(CriuLogLevel level, const std::string& line) {
  if (Api().print_on_level == nullptr) return;
  Api().print_on_level(static_cast<unsigned>(level), "%scusnap_criu: %s\n",
                       level == CriuLogLevel::kError ? "Error: " : "", line.c_str());
}

std::string ResolveCriuApi() {
  std::string missing;
  Lookup("print_on_level", Api().print_on_level, missing);
  Lookup("check_and_remove_inventory_plugin", Api().check_and_remove_inventory_plugin, missing);
  return missing;
}

bool InventoryNames(const char* name) {
  return Api().check_and_remove_inventory_plugin != nullptr &&
         Api().check_and_remove_inventory_plugin(name, std::strlen(name));
}

}  // namespace cusnap::criu_plugin
