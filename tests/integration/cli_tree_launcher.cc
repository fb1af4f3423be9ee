// cli_tree_launcher: a launcher that is no CUDA process, started with `cusnap run` (so the
// shim is loaded and it has an endpoint), forking a CUDA creator and importer as `torchrun`
// or a serving framework's supervisor would. It never calls CUDA.
//
//   cli_tree_launcher <peer program>
//
// The creator runs `<peer program> creator` on the launcher's descriptors 0 and 1, the
// importer `<peer program> importer` on descriptors 4 (its stdin) and 5 (its stdout); each
// gets its end of a ticket socket pair on descriptor 3. Exits 0 when both children did.
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <initializer_list>

namespace {

pid_t Fork(const char* program, const char* role, int in, int out, int ticket) {
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  if (::dup2(in, 0) < 0 || ::dup2(out, 1) < 0 || ::dup2(ticket, 3) < 0) std::_Exit(120);
  ::execl(program, program, role, static_cast<char*>(nullptr));
  std::_Exit(127);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <peer program>\n", argv[0]);
    return 2;
  }
  int tickets[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, tickets) != 0) return 3;
  // Both ticket ends above the descriptors the children receive, so dup2 always copies.
  const int creator_ticket = ::fcntl(tickets[0], F_DUPFD_CLOEXEC, 10);
  const int importer_ticket = ::fcntl(tickets[1], F_DUPFD_CLOEXEC, 10);
  const int importer_in = ::fcntl(4, F_DUPFD_CLOEXEC, 10);
  const int importer_out = ::fcntl(5, F_DUPFD_CLOEXEC, 10);
  if (creator_ticket < 0 || importer_ticket < 0 || importer_in < 0 || importer_out < 0) return 3;
  const pid_t creator = Fork(argv[1], "creator", 0, 1, creator_ticket);
  const pid_t importer = Fork(argv[1], "importer", importer_in, importer_out, importer_ticket);
  // The children hold the pipes now: the test sees their end-of-file, not the launcher's.
  const int null_fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  ::dup2(null_fd, 0);
  ::dup2(null_fd, 1);
  for (int fd : {4, 5, creator_ticket, importer_ticket, importer_in, importer_out}) ::close(fd);
  int ok = 0;
  for (pid_t child : {creator, importer}) {
    int status = 0;
    if (child > 0 && ::waitpid(child, &status, 0) == child && WIFEXITED(status) &&
        WEXITSTATUS(status) == 0) {
      ++ok;
    }
  }
  return ok == 2 ? 0 : 1;
}
