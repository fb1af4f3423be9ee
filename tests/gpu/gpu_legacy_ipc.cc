// gpu_legacy_ipc (GPU): cuMemAlloc memory shared by legacy CUDA IPC survives
// `cusnap checkpoint` + `cusnap restore`, three cycles, with every byte and every pointer kept.
// Natively the opener's restore fails and it stays stuck (DRIVER-FACTS F11).
//
//   cusnap run -- gpu_legacy_ipc --cusnap <path of cusnap> [--bytes 256M] [--gpus 1|2]
//
// The parent uses no CUDA: it starts role a (cuMemAlloc, filled, cuIpcGetMemHandle at an inner
// pointer) and role b (cuIpcOpenMemHandle with lazy peer access), both on GPU 0 (--gpus 2: b on
// GPU 1, and the third restore swaps the GPUs), joined to it by socket pairs on descriptor 3.
// Each cycle: both check every byte and report their pointer and cuMemGetAddressRange; the
// parent runs cusnap checkpoint and restore of its own tree (the shim's LD_PRELOAD left out of
// cusnap's environment); both check every byte and that pointer and range did not change;
// b writes the next pattern over all of it and a checks it. Prints "LEGACY IPC PASS" and exits 0
// when all held.
#include <cuda.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "gpu/gpu_check.h"

extern char** environ;

namespace {

std::string Line(int fd) {
  std::string s;
  char c = 0;
  while (read(fd, &c, 1) == 1 && c != '\n') s += c;
  return s;
}
void Say(int fd, const std::string& s) {
  const std::string line = s + "\n";
  if (write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) gpu::Fail("lost a peer");
}

uint32_t Word(uint32_t seed, size_t i) { return seed * 0x9E3779B1u ^ static_cast<uint32_t>(i); }

// Fills or checks every byte of [ptr, ptr+bytes) with pattern `seed`; "" or what differs.
std::string Pattern(CUdeviceptr ptr, size_t bytes, uint32_t seed, bool fill) {
  std::vector<uint32_t> words(bytes / 4);
  if (fill) {
    for (size_t i = 0; i < words.size(); ++i) words[i] = Word(seed, i);
    CU(cuMemcpyHtoD(ptr, words.data(), bytes));
    CU(cuCtxSynchronize());
    return "";
  }
  CU(cuMemcpyDtoH(words.data(), ptr, bytes));
  for (size_t i = 0; i < words.size(); ++i) {
    if (words[i] != Word(seed, i)) return "word " + std::to_string(i) + " differs (seed " + std::to_string(seed) + ")";
  }
  return "";
}

std::string Where(CUdeviceptr ptr) {
  CUdeviceptr base = 0;
  size_t size = 0;
  CU(cuMemGetAddressRange(&base, &size, ptr + 100));
  char text[96];
  std::snprintf(text, sizeof text, "%llx %llx %zu", static_cast<unsigned long long>(ptr),
                static_cast<unsigned long long>(base), size);
  return text;
}

int Role(bool creator, size_t bytes) {
  gpu::SetRole(creator ? "a" : "b");
  gpu::UsePrimaryContext(0);
  CUdeviceptr ptr = 0;
  if (creator) {
    CU(cuMemAlloc(&ptr, bytes));
    Pattern(ptr, bytes, 0, true);
    CUipcMemHandle handle{};
    CU(cuIpcGetMemHandle(&handle, ptr + 4096));
    std::string hex;
    for (unsigned char b : handle.reserved) {
      char x[3];
      std::snprintf(x, sizeof x, "%02x", b);
      hex += x;
    }
    Say(3, hex);
  } else {
    const std::string hex = Line(3);
    CUipcMemHandle handle{};
    for (size_t i = 0; i < sizeof handle.reserved; ++i) {
      handle.reserved[i] = static_cast<char>(std::strtoul(hex.substr(2 * i, 2).c_str(), nullptr, 16));
    }
    CU(cuIpcOpenMemHandle(&ptr, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    Say(3, "opened");
  }
  for (;;) {
    const std::string cmd = Line(3);
    unsigned seed = 0;
    if (std::sscanf(cmd.c_str(), "CHECK %u", &seed) == 1) {
      const std::string wrong = Pattern(ptr, bytes, seed, false);
      Say(3, (wrong.empty() ? "ok " : "bad " + wrong + " ") + Where(ptr));
    } else if (std::sscanf(cmd.c_str(), "FILL %u", &seed) == 1) {
      Pattern(ptr, bytes, seed, true);
      Say(3, "ok");
    } else {
      if (!creator) CU(cuIpcCloseMemHandle(ptr));
      if (creator) CU(cuMemFree(ptr));
      return 0;
    }
  }
}

struct Child {
  pid_t pid = -1;
  int fd = -1;
};

Child Spawn(const char* role, size_t bytes, const char* gpu) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) gpu::Fail("socketpair");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, sv[1], 3);
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "CUDA_VISIBLE_DEVICES=", 21) != 0) env.emplace_back(*e);
  }
  env.push_back(std::string("CUDA_VISIBLE_DEVICES=") + gpu);
  std::vector<char*> envp;
  for (std::string& s : env) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string self = "/proc/self/exe", r = role, b = std::to_string(bytes);
  char* argv[] = {self.data(), r.data(), b.data(), nullptr};
  Child c;
  if (posix_spawn(&c.pid, "/proc/self/exe", &fa, nullptr, argv, envp.data()) != 0) gpu::Fail("spawn");
  posix_spawn_file_actions_destroy(&fa);
  close(sv[1]);
  c.fd = sv[0];
  return c;
}

// Runs cusnap with `args` without the shim (it is the coordinator, not a participant).
int Cusnap(const std::string& cusnap, const std::vector<std::string>& args) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "LD_PRELOAD=", 11) != 0) env.emplace_back(*e);
  }
  std::vector<char*> envp;
  for (std::string& s : env) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> owned{cusnap};
  owned.insert(owned.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& s : owned) argv.push_back(s.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  if (posix_spawn(&pid, cusnap.c_str(), nullptr, nullptr, argv.data(), envp.data()) != 0) return -1;
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && (std::strcmp(argv[1], "a") == 0 || std::strcmp(argv[1], "b") == 0)) {
    return Role(argv[1][0] == 'a', std::strtoull(argv[2], nullptr, 10));
  }
  std::string cusnap;
  size_t bytes = (size_t{256} << 20) + 4096;
  int gpus = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--cusnap") == 0) cusnap = argv[i + 1];
    if (std::strcmp(argv[i], "--bytes") == 0) bytes = gpu::ParseSize(argv[i + 1]) + 4096;
    if (std::strcmp(argv[i], "--gpus") == 0) gpus = std::atoi(argv[i + 1]);
  }
  if (cusnap.empty()) gpu::Fail("usage: gpu_legacy_ipc --cusnap <path> [--bytes 256M] [--gpus 1|2]");
  if (!gpu::ShimLoaded()) gpu::Fail("run it under `cusnap run`");
  gpu::SetRole("parent");
  Child a = Spawn("a", bytes, "0");
  const std::string handle = Line(a.fd);
  Child b = Spawn("b", bytes, gpus > 1 ? "1" : "0");
  Say(b.fd, handle);
  if (Line(b.fd) != "opened") gpu::Fail("b could not open the handle");
  const std::string dir = std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") + "/gpu-legacy-ipc-" +
                          std::to_string(getpid());
  Child* both[] = {&a, &b};
  std::string where[2];
  for (unsigned cycle = 1; cycle <= 3; ++cycle) {
    const unsigned seed = cycle - 1;
    for (int i = 0; i < 2; ++i) {
      Say(both[i]->fd, "CHECK " + std::to_string(seed));
      const std::string reply = Line(both[i]->fd);
      if (reply.rfind("ok ", 0) != 0) gpu::Fail("cycle %u, before: %s", cycle, reply.c_str());
      where[i] = reply.substr(3);
    }
    const std::string state = dir + "-" + std::to_string(cycle);
    const double t0 = gpu::NowSeconds();
    if (int rc = Cusnap(cusnap, {"checkpoint", "--pid", std::to_string(getpid()), "--state-dir", state}); rc != 0)
      gpu::Fail("cycle %u: cusnap checkpoint exited %d", cycle, rc);
    std::vector<std::string> restore{"restore", "--pid", std::to_string(getpid()), "--state-dir", state};
    if (gpus > 1 && cycle == 3) restore.insert(restore.end(), {"--device-map", "0=1,1=0"});
    if (int rc = Cusnap(cusnap, restore); rc != 0) gpu::Fail("cycle %u: cusnap restore exited %d", cycle, rc);
    gpu::Log("cycle %u: checkpoint + restore %.2f s", cycle, gpu::NowSeconds() - t0);
    for (int i = 0; i < 2; ++i) {
      Say(both[i]->fd, "CHECK " + std::to_string(seed));
      const std::string reply = Line(both[i]->fd);
      if (reply != "ok " + where[i]) gpu::Fail("cycle %u, after: %s (before: ok %s)", cycle, reply.c_str(), where[i].c_str());
    }
    Say(b.fd, "FILL " + std::to_string(cycle));  // the opener writes, the creator reads
    if (Line(b.fd) != "ok") gpu::Fail("cycle %u: b could not write", cycle);
    gpu::Log("cycle %u: every byte and pointer kept (a %s, b %s)", cycle, where[0].c_str(), where[1].c_str());
  }
  Say(a.fd, "CHECK 3");
  if (Line(a.fd).rfind("ok ", 0) != 0) gpu::Fail("a does not see b's last pattern");
  for (Child* c : {&b, &a}) {
    Say(c->fd, "EXIT");
    int status = 0;
    waitpid(c->pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) gpu::Fail("a role ended with status %d", status);
  }
  for (unsigned cycle = 1; cycle <= 3; ++cycle) {
    std::error_code ec;
    std::filesystem::remove_all(dir + "-" + std::to_string(cycle), ec);
  }
  std::printf("LEGACY IPC PASS\n");
  return 0;
}
