// `cusnap dump` / `cusnap restore --images-dir` / `cusnap inspect` of an images directory,
// through the real `cusnap` on the simulated driver.
//
// Refusals need no CRIU: the test writes a manifest and image files itself, and every
// refusal must leave the directory exactly as it was (no CRIU run, no file touched), exit 5,
// naming its cause. The round trip needs CRIU (CUSNAP_CRIU, set by CMake to the one
// scripts/fetch_criu.sh builds, else `criu` on PATH): a two-process job that shares memory
// is dumped (its processes gone), restored in new processes, and checks every byte itself.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <regex>
#include <sstream>
#include <thread>

#include "cli_runner.h"
#include "criu_job_harness.h"
#include "common/ids.h"
#include "common/socket.h"
#include "criu_problem.h"
#include "coordinator/images/carrier_files.h"
#include "coordinator/participants/hold.h"
#include "coordinator/images/manifest.h"
#include "coordinator/proc/processes.h"
#include "coordinator/images/criu_preconditions.h"
#include "coordinator/images/restore_record.h"
#include "coordinator/record/state_file.h"

namespace cusnap::testing {
namespace {

using ::testing::HasSubstr;

constexpr int kExitRefused = 3;
constexpr int kExitFailedAfterChange = 4;
constexpr int kExitRestoreRefused = 5;

// The simulated driver's GPUs (src/simcuda/devices.cc: "SIMCUDA-GPU-0<n>." as UUID bytes).
const char* const kSimGpu0 = "GPU-53494d43-5544-412d-4750-552d30302e2e";
const char* const kSimGpu1 = "GPU-53494d43-5544-412d-4750-552d30312e2e";

/// The largest file of `dir` whose name `fits` ("" when none).
std::string LargestFile(const std::string& dir, const std::function<bool(const std::string&)>& fits) {
  std::string best;
  uintmax_t most = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (!fits(name) || (!best.empty() && e.file_size() <= most)) continue;
    best = e.path().string();
    most = e.file_size();
  }
  return best;
}

/// `path` with the byte at `at` inverted.
void FlipByte(const std::string& path, size_t at) {
  std::string bytes = ReadAll(path);
  bytes[at] = static_cast<char>(bytes[at] ^ 0xff);
  WriteAll(path, bytes);
}

/// Every file of `dir` with its contents: "nothing changed" compares two of these.
std::map<std::string, std::string> Contents(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    out[e.path().filename().string()] = ReadAll(e.path().string());
  }
  return out;
}

class CliImages : public OwnMachineTest {
 protected:
  CliImages() : OwnMachineTest("images") {}

  void TearDown() override {
    // A mount point cannot be removed (EBUSY): the whole scratch directory stayed in /tmp.
    for (const auto& m : mounts_) ::umount2(m.c_str(), MNT_DETACH);
    OwnMachineTest::TearDown();
  }

  /// A tmpfs of `size` (mount's "size=", e.g. "3m") at <dir_>/full, in a mount namespace of
  /// this test process's own; unmounted at TearDown. "" after a failed assertion.
  std::string SmallDisk(const std::string& size) {
    const std::string full = dir_ + "/full";
    EXPECT_EQ(::mkdir(full.c_str(), 0700), 0);
    EXPECT_EQ(::unshare(CLONE_NEWNS), 0) << std::strerror(errno);
    EXPECT_EQ(::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr), 0) << std::strerror(errno);
    const std::string options = "size=" + size + ",mode=0700";
    EXPECT_EQ(::mount("tmpfs", full.c_str(), "tmpfs", 0, options.c_str()), 0) << std::strerror(errno);
    if (HasFailure()) return "";
    mounts_.push_back(full);
    return full;
  }

  /// An images directory as `cusnap dump` leaves it, for a job on both simulated GPUs:
  /// two fake CRIU images, a state file, and a manifest with their real checksums. `edit`
  /// changes the manifest before it is written.
  std::string MakeImages(const std::function<void(coord::Manifest&)>& edit = {}) {
    const std::string images = dir_ + "/images";
    ::mkdir(images.c_str(), 0700);
    WriteAll(images + "/pages-1.img", std::string(1 << 20, 'p'));
    WriteAll(images + "/core-4242.img", "core image of pid 4242");
    WriteAll(images + "/" + coord::kStateFileName, "{\"format_version\": 2}");
    coord::Manifest m;
    m.cusnap_version = "cusnap test";
    m.driver = "simulated";
    m.criu_version = "Version: 4.2.1";
    m.checkpoint_id = "1-2";
    m.root_pid = 4'194'000;  // no such process
    m.root_start_time = 1;
    m.gpus = {{0, kSimGpu0, ""}, {1, kSimGpu1, ""}};
    m.participants = {{4'194'000, 1, 1 << 20, {kSimGpu0}}, {4'194'001, 1, 0, {kSimGpu1}}};
    auto files = coord::DescribeImageFiles(images);
    EXPECT_TRUE(files.ok()) << files.error().message;
    if (files.ok()) m.files = *files;
    if (edit) edit(m);
    EXPECT_TRUE(coord::WriteManifest(images, m).ok());
    return images;
  }

  /// A dump onto a full disk (below).
  void FullDiskCase(bool criu_fills);

  /// Makes CUSNAP_CRIU a CRIU that runs `then` (shell, as the CLI's child: $PPID is the CLI)
  /// once `criu <verb>` returned, keeping CRIU's exit status; returns the CRIU it wraps (set
  /// CUSNAP_CRIU back to it).
  std::string WrapCriu(const std::string& verb, const std::string& then) {
    const std::string criu = Env("CUSNAP_CRIU"), wrapper = dir_ + "/criu-then-" + verb;
    WriteAll(wrapper, "#!/bin/sh\n" + criu + " \"$@\"; rc=$?\nif [ \"$1\" = " + verb + " ]; then " +
                          then + "; fi\nexit $rc\n");
    EXPECT_EQ(::chmod(wrapper.c_str(), 0700), 0);
    ::setenv("CUSNAP_CRIU", wrapper.c_str(), 1);
    return criu;
  }

  /// `restore --images-dir images` must bring the job back (exit 0), and the job then finds
  /// every byte (ExpectEveryByteOnceTold).
  void ExpectRestoredWhole(const std::string& images, const std::string& job_dir,
                           const std::string& log) {
    const Ran back = Cusnap({"restore", "--images-dir", images});
    ASSERT_EQ(back.status, 0) << back.out << back.err;
    ExpectEveryByteOnceTold(job_dir, log);
  }

  /// `restore --images-dir images` through WrapCriu("restore", then).
  Ran RestoreWithCriuThen(const std::string& images, const std::string& then) {
    const std::string criu = WrapCriu("restore", then);
    const Ran r = Cusnap({"restore", "--images-dir", images});
    ::setenv("CUSNAP_CRIU", criu.c_str(), 1);
    return r;
  }

  std::vector<std::string> mounts_;  // SmallDisk's

  /// The round trip of criu_job through CRIU (below).
  /// A job held stopped (CUSNAP_HOLD=stop) in `job_dir` whose `cusnap dump` into `images`
  /// was killed at the boundary before criu_dump (after write_carriers); returns its pid.
  pid_t DumpKilledBeforeCriu(const std::string& job_dir, const std::string& images,
                             const std::string& log) {
    ::setenv("CUSNAP_HOLD", "stop", 1);
    const pid_t job = StartCriuJob(job_dir, log);
    EXPECT_GT(job, 0);
    const Ran killed = RunCommand(
        "CUSNAP_TEST_PAUSE_AT=dump:criu_dump:before " + Env("CUSNAP_TEST_BIN_DIR") + "/cusnap "
        "dump --pid " + std::to_string(job) + " --images-dir " + images + " >/dev/null 2>&1 & "
        "cli=$!; until grep -q '^State:.*stopped' /proc/$cli/status; do sleep 0.05; done; kill "
        "-KILL $cli; wait $cli; echo $?", dir_);
    EXPECT_EQ(killed.out, "137\n") << killed.err;
    return job;
  }

  void RoundTrip(const std::string& cli_dies_at, bool pids_taken = false, bool leave_running = false,
                 bool criu_fails_after = false);

  /// An images directory as a dump whose CLI died once CRIU had run leaves it: MakeImages'
  /// files with the pending manifest instead of the manifest, and, when `criu_finished`,
  /// CRIU's last image and the last line of its log. `edit` as for MakeImages.
  std::string MakeInterruptedDump(bool criu_finished,
                                  const std::function<void(coord::Manifest&)>& edit = {}) {
    const std::string images = MakeImages(edit);
    auto m = coord::ReadManifest(images);
    EXPECT_TRUE(m.ok());
    if (!m.ok()) return images;
    m->files.clear();  // a dump writes the pending manifest before CRIU writes any file
    EXPECT_TRUE(coord::WritePendingManifest(images, *m).ok());
    std::filesystem::remove(images + "/" + coord::kManifestFileName);
    if (criu_finished) {
      WriteAll(images + "/inventory.img", "inventory");
      WriteAll(images + "/criu-dump.log", "(00.001) Writing stats\n(00.002) Dumping finished successfully\n");
    }
    return images;
  }

  /// Starts criu_job (StartCriuJob), dumps it into `images` and waits until its processes
  /// are gone; `manifest` gets the dump's manifest.
  void DumpAway(const std::string& job_dir, const std::string& images, const std::string& log,
                std::optional<coord::Manifest>& manifest) {
    const pid_t job = StartCriuJob(job_dir, log);
    ASSERT_GT(job, 0);
    const Ran dump = Cusnap({"dump", "--pid", std::to_string(job), "--images-dir", images});
    ASSERT_EQ(dump.status, 0) << dump.out << dump.err;
    ASSERT_EQ(::waitpid(job, nullptr, 0), job);
    auto read = coord::ReadManifest(images);
    ASSERT_TRUE(read.ok()) << read.error().message;
    manifest = std::move(*read);
    AwaitGone(*manifest);
  }

  /// Waits (30 s at most) until no pid of the dump exists, reaping what this subreaper got.
  static void AwaitGone(const coord::Manifest& manifest) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    for (const auto& p : manifest.participants) {
      while (KernelStartTime(p.pid) != 0 && std::chrono::steady_clock::now() < deadline) {
        while (::waitpid(-1, nullptr, WNOHANG) > 0) {
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      EXPECT_EQ(KernelStartTime(p.pid), 0u) << "pid " << p.pid << " still exists";
    }
  }

  /// `restore --images-dir images` must refuse (exit 5) naming `cause`, leaving every file
  /// of the directory as it was and running no CRIU (it would have left its log).
  void ExpectRefused(const std::string& images, const std::string& cause,
                     const std::vector<std::string>& extra = {}) {
    const auto before = Contents(images);
    std::vector<std::string> args = {"restore", "--images-dir", images};
    args.insert(args.end(), extra.begin(), extra.end());
    const Ran r = Cusnap(args);
    EXPECT_EQ(r.status, kExitRestoreRefused) << r.out << r.err;
    EXPECT_THAT(r.err, HasSubstr(cause));
    EXPECT_THAT(r.err, HasSubstr("refused; nothing was changed"));
    EXPECT_THAT(r.out, HasSubstr("check_images"));
    EXPECT_THAT(r.out, ::testing::Not(HasSubstr("criu_restore")));
    EXPECT_EQ(Contents(images), before) << "a refused restore changed " << images;
  }
};

// A restore from a directory another restore is restoring from is refused before anything,
// naming it, and under --json as a JSON document too (the early refusals of `restore
// --images-dir` printed text only).
TEST_F(CliImages, ARestoreWhileAnotherRestoresFromTheSameImagesIsRefusedInJsonToo) {
  const std::string images = MakeImages();
  auto record = coord::BeginRestoreRecord(images, /*resuming=*/false);
  ASSERT_TRUE(record.ok()) << record.error().message;
  const Ran text = Cusnap({"restore", "--images-dir", images});
  EXPECT_EQ(text.status, kExitRestoreRefused) << text.out << text.err;
  EXPECT_EQ(text.err, "cusnap restore: another `cusnap restore` is restoring from " + images +
                          " now\ncusnap restore: refused; nothing was changed\n");
  const Ran json = Cusnap({"restore", "--images-dir", images, "--json"});
  EXPECT_EQ(json.status, kExitRestoreRefused);
  const auto doc = nlohmann::json::parse(json.out, nullptr, false);
  ASSERT_TRUE(doc.is_object()) << json.out;
  EXPECT_EQ(doc["exit_code"], kExitRestoreRefused);
  EXPECT_EQ(doc["errors"], nlohmann::json({"another `cusnap restore` is restoring from " + images +
                                           " now", "refused; nothing was changed"}));
  ASSERT_TRUE(coord::EndRestoreRecord(images, *record).ok());
}

TEST_F(CliImages, InspectPrintsTheManifest) {
  const std::string images = MakeImages();
  const Ran r = Cusnap({"inspect", images});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("driver simulated, checkpoint 1-2, job root pid 4194000"));
  EXPECT_THAT(r.out, HasSubstr(std::string("gpu 1: ") + kSimGpu1));
  EXPECT_THAT(r.out, HasSubstr("pid 4194000: 1.00 MiB in its host carrier, on " +
                               std::string(kSimGpu0)));
  EXPECT_THAT(r.out, HasSubstr("3 files, "));
  EXPECT_THAT(r.out, HasSubstr("pages-1.img                       1048576  xxh3-128 "));
  const Ran j = Cusnap({"inspect", images, "--json"});
  const auto doc = nlohmann::json::parse(j.out);
  EXPECT_EQ(doc["image_bytes"].get<uint64_t>(), (1u << 20) + 22 + 21);
  EXPECT_EQ(doc["files"].size(), 3u);
}

TEST_F(CliImages, ImagesOfAnotherDriverVersionAreRefused) {
  ExpectRefused(MakeImages([](coord::Manifest& m) { m.driver = "NVIDIA 570.86.10 (CUDA 12.8)"; }),
                "was dumped under driver 'NVIDIA 570.86.10 (CUDA 12.8)', this machine has "
                "'simulated'");
}

TEST_F(CliImages, AJobOnMoreGpusThanTheMachineHasIsRefused) {
  ExpectRefused(MakeImages([](coord::Manifest& m) {
                  m.participants[1].gpus.push_back("GPU-00000000-0000-0000-0000-000000000003");
                }),
                "the dumped job used 3 GPUs, this machine has 2");
}

TEST_F(CliImages, AGpuTheMachineLacksNeedsACompleteMap) {
  const std::string other = "GPU-00000000-0000-0000-0000-000000000009";
  const std::string images = MakeImages([&](coord::Manifest& m) { m.participants[1].gpus = {other}; });
  ExpectRefused(images, "the dumped job used GPU " + other +
                            ", which this machine does not have; say where it goes with --device-map");
  // A map cannot name it either: it is no GPU of this machine.
  ExpectRefused(images, "the checkpoint used " + other + ", which the driver does not list",
                {"--device-map", "0=1,1=0"});
}

TEST_F(CliImages, ACorruptImageFileIsRefused) {
  const std::string images = MakeImages();
  std::string bytes = ReadAll(images + "/core-4242.img");
  bytes[4] = 'X';  // same size, one byte flipped
  WriteAll(images + "/core-4242.img", bytes);
  ExpectRefused(images, "image file " + images + "/core-4242.img is corrupt: its bytes [0, 22) "
                        "do not match their digest in the manifest (the first failing chunk is at "
                        "offset 0)");
}

// CRIU's page images are read beside `criu restore` (they only fill the memory of processes
// CRIU leaves stopped): damage there still refuses the restore naming the file and its first
// failing chunk, before CRIU's own failure on these images (no real process behind them), and
// nothing CRIU wrote stays but its logs.
TEST_F(CliImages, ACorruptPageImageIsNamedBeforeCriusOwnFailure) {
  const std::string images = MakeImages();
  std::string bytes = ReadAll(images + "/pages-1.img");
  bytes[4096] = 'X';
  WriteAll(images + "/pages-1.img", bytes);
  const Ran r = Cusnap({"restore", "--images-dir", images});
  EXPECT_EQ(r.status, kExitRestoreRefused) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("image file " + images + "/pages-1.img is corrupt: its bytes [0, "
                               "1048576) do not match their digest in the manifest (the first "
                               "failing chunk is at offset 0)"));
  EXPECT_THAT(r.err, HasSubstr("refused; nothing was changed"));
  EXPECT_FALSE(std::filesystem::exists(images + "/" + coord::kRestoreRecordName));
  EXPECT_FALSE(std::filesystem::exists(images + "/restored.pid"));
}

// The manifest decides what a restore checks (files, driver, GPUs): a change to it, an
// edited criu_version too, is found by its digest; one without its digest, or whose text is
// not the dump's (white space edited), is corrupt too.
TEST_F(CliImages, AnEditedManifestIsRefused) {
  const std::string images = MakeImages();
  const std::string path = images + "/" + coord::kManifestFileName;
  auto document = nlohmann::json::parse(ReadAll(path));
  ASSERT_TRUE(document.contains("digest"));
  document["criu_version"] = "Version: 9.9";
  WriteAll(path, document.dump(2));
  ExpectRefused(images, path + ": the manifest was changed after the dump wrote it (its digest "
                        "does not match its content)");
  document.erase("digest");
  WriteAll(path, document.dump(2) + "\n");
  auto undigested = coord::ReadManifest(images);
  ASSERT_FALSE(undigested.ok());
  EXPECT_THAT(undigested.error().message, HasSubstr(path + ": corrupt manifest: "));
  auto fresh = coord::ReadManifest(MakeImages());
  ASSERT_TRUE(fresh.ok()) << fresh.error().message;
  WriteAll(path, coord::ManifestToJson(*fresh).dump(4) + "\n");
  ExpectRefused(images, path + ": corrupt manifest: its text is not the text the dump wrote");
}

TEST_F(CliImages, AMissingImageFileIsRefused) {
  const std::string images = MakeImages();
  std::filesystem::remove(images + "/core-4242.img");
  ExpectRefused(images, "image file " + images + "/core-4242.img is missing");
}

// CRIU binds the job's endpoint sockets in its control directory again: without it, CRIU
// fails with "Can't bind". Named first.
TEST_F(CliImages, ADumpWhoseControlDirectoryIsGoneIsRefused) {
  const std::string gone = dir_ + "/removed-control-dir", job = gone + "/pidns-AbC123";
  ExpectRefused(MakeImages([&](coord::Manifest& m) { m.control_dir = job; }),
                "the job's control directory " + job + " does not exist: CRIU binds the job's "
                "endpoint sockets there again; create it (mkdir -m 700 " + gone + " " + job + ")");
}

TEST_F(CliImages, ADumpOfAJobStillRunningIsRefused) {
  // The dumped job's root is a process that exists with the start time the manifest records
  // (this test itself): restoring would make a second copy of a live job.
  const int self = static_cast<int>(::getpid());
  // A thread image of an id the running job holds (here: our parent's pid): the job's own,
  // not another process's, so it is not named as taken.
  ::mkdir((dir_ + "/images").c_str(), 0700);
  WriteAll(dir_ + "/images/core-" + std::to_string(::getppid()) + ".img", "thread");
  const std::string images = MakeImages([&](coord::Manifest& m) {
    m.root_pid = self;
    m.root_start_time = KernelStartTime(self);
    m.left_running = true;
  });
  ExpectRefused(images, "holds a dump of a job that is still running (pid " + std::to_string(self) +
                            ", dumped with --leave-running)");
  const Ran again = Cusnap({"restore", "--images-dir", images, "--pid-namespace"});
  EXPECT_EQ(again.status, kExitRestoreRefused) << again.out << again.err;
  EXPECT_THAT(again.err, HasSubstr("still running"));
  EXPECT_THAT(again.err, ::testing::Not(HasSubstr("held by another process")));
}

TEST_F(CliImages, ADumpWhoseRootEndedButWhoseChildRunsIsRefused) {
  // A --leave-running dump whose root was killed while a child runs on: restoring it would
  // copy that child (the restore would go into a PID namespace of its own and leave the old
  // child running beside the new tree).
  const int self = static_cast<int>(::getpid());
  ExpectRefused(MakeImages([&](coord::Manifest& m) {
                  m.left_running = true;  // root 4'194'000: no such process
                  m.participants[1].pid = self;
                  m.participants[1].start_time = KernelStartTime(self);
                }),
                "holds a dump of a job that is still running (pid " + std::to_string(self) +
                    ", dumped with --leave-running)");
}

// A pid of the dump held by a live cusnap process (its endpoint answers as that pid: maybe
// this very job, brought back by an interrupted restore) is never restored again in a PID
// namespace of its own: refused naming the pid, as before, so no second copy is made. (A
// socket file a dump left behind is no such process: ARestoreWhosePidIsTaken... below.)
TEST_F(CliImages, APidHeldByALiveCusnapProcessIsRefusedNotNamespaced) {
  int to[2];
  ASSERT_EQ(::pipe2(to, O_CLOEXEC), 0);
  const int out = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  const pid_t worker = Spawn({Env("CUSNAP_TEST_BIN_DIR") + "/cusnap", "run", "--",
                              Env("CUSNAP_TEST_BIN_DIR") + "/job_worker", "0"},
                             {{to[0], 0}, {out, 1}});
  ::close(to[0]);
  ::close(out);
  ASSERT_GT(worker, 0);
  const std::string socket = Env("CUSNAP_CONTROL_DIR") + "/" + std::to_string(worker) + ".sock";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (::access(socket.c_str(), F_OK) != 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(::access(socket.c_str(), F_OK), 0) << "the worker has no endpoint";
  const std::string images = MakeImages([&](coord::Manifest& m) {
    m.participants[1].pid = worker;  // recorded with another start time
  });
  // Not in a namespace of its own either, asked (--pid-namespace) or not: its endpoint would
  // be taken over.
  for (const std::vector<std::string>& extra : {std::vector<std::string>{}, {"--pid-namespace"}}) {
    const auto before = Contents(images);
    std::vector<std::string> args = {"restore", "--images-dir", images};
    args.insert(args.end(), extra.begin(), extra.end());
    const Ran r = Cusnap(args);
    EXPECT_EQ(r.status, kExitRestoreRefused) << r.out << r.err;
    EXPECT_THAT(r.err, HasSubstr("pid " + std::to_string(worker) + " of the dump is held here by "
                                 "pid " + std::to_string(worker) + " (job_worker), a process of a "
                                 "cusnap job: the restored process would take over its endpoint (" +
                                 socket + ")"));
    EXPECT_THAT(r.err, HasSubstr("refused; nothing was changed"));
    EXPECT_EQ(Contents(images), before);
  }
  EXPECT_EQ(::kill(worker, 0), 0);
  const Ran st = Cusnap({"status", "--pid", std::to_string(worker)});
  EXPECT_EQ(st.status, 0) << st.out << st.err;
  ::close(to[1]);  // end of its commands: it exits
  ::kill(worker, SIGKILL);
  ::waitpid(worker, nullptr, 0);
}

TEST_F(CliImages, AnInterruptedDumpThatCriuDidNotFinishIsNamedAndRefused) {
  const std::string images = MakeInterruptedDump(false);
  const Ran in = Cusnap({"inspect", images});
  EXPECT_EQ(in.status, 0) << in.err;
  EXPECT_THAT(in.out, HasSubstr("interrupted dump: " + images + " holds no complete images (CRIU "
                                "did not finish the dump: " + images + "/inventory.img, which it "
                                "writes last, is missing); the job was not taken to disk"));
  EXPECT_THAT(in.out, HasSubstr("job root pid 4194000"));
  const auto doc = nlohmann::json::parse(Cusnap({"inspect", images, "--json"}).out);
  EXPECT_TRUE(doc["pending"].get<bool>());
  EXPECT_FALSE(doc["criu_finished"].get<bool>());
  ExpectRefused(images, images + " holds a dump that was interrupted before it was complete "
                        "(CRIU did not finish the dump: ");
  // CRIU's last image without the log's last line is not complete either.
  WriteAll(images + "/inventory.img", "inventory");
  ExpectRefused(images, images + "/criu-dump.log does not say 'Dumping finished successfully'");
}

// CRIU stopped half way (killed with the dump) and the job's processes run on, checkpointed
// in place: the restore names the command that resumes them, 'restore --pid P --state-dir
// D' as the README promises (not 'cusnap recover' alone), once.
TEST_F(CliImages, AnInterruptedDumpOfAJobStillCheckpointedInPlaceNamesTheRestoreInPlace) {
  const std::string images = MakeInterruptedDump(false);
  coord::StateFile state;  // this process stands for the job's one process
  state.driver = "simulated";
  state.checkpoint_id = coord::NewCheckpointId();
  state.participants.resize(1);
  state.participants[0].pid = ::getpid();
  state.participants[0].start_time = KernelStartTime(::getpid());
  const auto wrote = coord::WriteStateFile(images, state);
  ASSERT_TRUE(wrote.ok()) << wrote.error().message;
  const auto read = coord::ReadStateFile(images);
  ASSERT_TRUE(read.ok()) << read.error().message;
  const std::string self = std::to_string(::getpid());
  const std::string resume = "the job was not taken to disk; " + images + " holds the state file "
                             "of a checkpoint whose processes still run here (pid " + self +
                             "): a dump stopped after its checkpoint, before CRIU ran; 'cusnap "
                             "restore --pid " + self + " --state-dir " + images + "' resumes the "
                             "job in place";
  ExpectRefused(images, resume);
  const Ran r = Cusnap({"restore", "--images-dir", images});
  EXPECT_EQ(r.err.find("'cusnap restore --pid"), r.err.rfind("'cusnap restore --pid")) << r.err;
  EXPECT_THAT(r.err, ::testing::Not(HasSubstr("'cusnap recover'")));
}

TEST_F(CliImages, AnInterruptedDumpThatCriuFinishedIsNamedAsRestorable) {
  const std::string images = MakeInterruptedDump(true);
  const Ran in = Cusnap({"inspect", images});
  EXPECT_EQ(in.status, 0) << in.err;
  EXPECT_THAT(in.out, HasSubstr("interrupted dump: " + images + " has CRIU's complete images but "
                                "no manifest (the dump stopped after CRIU finished); 'cusnap "
                                "restore --images-dir " + images + "' writes the manifest and "
                                "restores the job"));
  const auto doc = nlohmann::json::parse(Cusnap({"inspect", images, "--json"}).out);
  EXPECT_TRUE(doc["pending"].get<bool>());
  EXPECT_TRUE(doc["criu_finished"].get<bool>());
  // The restore's checks run on the completed manifest, and a refusal still changes nothing
  // (the manifest is written only once the restore goes ahead).
  std::filesystem::remove_all(images);
  ExpectRefused(MakeInterruptedDump(true, [](coord::Manifest& m) { m.driver = "NVIDIA 570"; }),
                "was dumped under driver 'NVIDIA 570', this machine has 'simulated'");
}

/// A child in a session of its own (where this test's session leader is outside its PID
/// namespace, CI runners, the dump would be refused for that first) that runs `setup`, then
/// pauses until killed; -1 when `setup` returned false.
pid_t PausedChildAfter(const std::function<bool()>& setup) {
  int ready[2];
  if (::pipe(ready) != 0) return -1;
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(ready[0]);
    (void)::setsid();
    const char ok = setup() ? 1 : 0;
    (void)!::write(ready[1], &ok, 1);
    if (ok == 0) ::_exit(1);
    for (;;) ::pause();
  }
  ::close(ready[1]);
  char ok = 0;
  const bool held = ::read(ready[0], &ok, 1) == 1 && ok == 1;
  ::close(ready[0]);
  if (!held) {
    ::waitpid(child, nullptr, 0);
    return -1;
  }
  return child;
}

/// A child that holds an io_uring instance (io_uring_setup's descriptor; the rings are not
/// mapped) until killed; -1 when this kernel or its seccomp filter allows no io_uring.
pid_t ChildWithIoUring() {
  return PausedChildAfter([] {
    unsigned char params[120] = {};  // struct io_uring_params: 120 bytes, zero = defaults
    return ::syscall(__NR_io_uring_setup, 4, params) >= 0;
  });
}

/// A child in a mount namespace of its own; -1 when no mount namespace can be made here.
pid_t ChildInAMountNamespaceOfItsOwn() {
  return PausedChildAfter([] { return ::unshare(CLONE_NEWNS) == 0; });
}

/// A child in this mount namespace that holds `path` opened in another one (it opened the
/// file in a mount namespace of its own, then came back): coord::FilesOnForeignMounts names
/// it. -1 when no mount namespace can be made here.
pid_t ChildHoldingAFileOfAnotherMountNamespace(const std::string& path) {
  return PausedChildAfter([&] {
    const int back = ::open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC);
    if (back < 0 || ::unshare(CLONE_NEWNS) != 0) return false;
    const int fd = ::open(path.c_str(), O_RDONLY);  // kept open while the child pauses
    return fd >= 0 && ::setns(back, CLONE_NEWNS) == 0;
  });
}

/// A child in this mount namespace that maps `path` as mapped in another one (it mapped the
/// file in a mount namespace of its own and closed it, then came back), as a program started
/// through `nsenter --wd` maps its executable: coord::FilesOnForeignMounts names the mapping.
/// -1 when no mount namespace can be made here.
pid_t ChildMappingAFileOfAnotherMountNamespace(const std::string& path) {
  return PausedChildAfter([&] {
    const int back = ::open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC);
    if (back < 0 || ::unshare(CLONE_NEWNS) != 0) return false;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    void* mapped = ::mmap(nullptr, 4096, PROT_READ, MAP_PRIVATE, fd, 0);  // kept while paused
    ::close(fd);
    return mapped != MAP_FAILED && ::setns(back, CLONE_NEWNS) == 0;
  });
}

/// The start of a command line that runs what follows as PID 1 of a new PID namespace (with
/// a user namespace when not root), its session leader outside it; "" when this machine
/// allows no new PID namespace.
std::string InNewPidNamespace() {
  const std::string prefix = ::geteuid() == 0 ? "unshare --pid --fork " :
                                                "unshare --user --map-root-user --pid --fork ";
  const Ran probe = RunCommand(prefix + "true", "/tmp");
  return probe.status == 0 ? prefix : "";
}

TEST_F(CliImages, RunGivesAJobOutsideItsSessionASessionOfItsOwn) {
  // `docker exec` and CI runners start jobs whose session leader is outside their PID
  // namespace; CRIU cannot dump those ("A session leader of P is outside of its pid
  // namespace"), so `cusnap run` makes the job the leader of a new session.
  const std::string ns = InNewPidNamespace();
  if (ns.empty()) GTEST_SKIP() << "no new PID namespace can be made here";
  const Ran outside = RunCommand(ns + "grep NSsid /proc/self/status", "/tmp");
  EXPECT_THAT(outside.out, ::testing::EndsWith("\t0\n")) << "the case this test is about";
  const Ran run = RunCommand(ns + Env("CUSNAP_TEST_BIN_DIR") + "/cusnap run -- grep NSsid "
                                  "/proc/self/status", "/tmp");
  EXPECT_EQ(run.status, 0) << run.out;
  EXPECT_THAT(run.out, ::testing::EndsWith("\t1\n")) << "PID 1 of its namespace leads its session";
}

TEST_F(CliImages, ADumpOfAJobOutsideItsSessionIsRefusedBeforeAnythingChanges) {
  const std::string ns = InNewPidNamespace();
  if (ns.empty()) GTEST_SKIP() << "no new PID namespace can be made here";
  if (const std::string why = CriuProblem(); !why.empty()) GTEST_SKIP() << why;
  // The job's root is `unshare` (in this namespace); its child sleeps as PID 1 of a new one,
  // whose session leader is outside it.
  const pid_t job = Spawn({"/bin/sh", "-c", "exec " + ns + "--kill-child sleep 60"}, {});
  ASSERT_GT(job, 0);
  std::vector<int> tree;
  for (int i = 0; i < 500 && tree.size() < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    tree = coord::ProcessTree(job);
  }
  ASSERT_EQ(tree.size(), 2u);
  ASSERT_EQ(coord::OwnSessionId(tree[1]), 0);
  // The sleeping PID 1 at least; its parent too when this test runs outside its session.
  const std::string named = coord::OwnSessionId(job) == 0 ? "process unshare (pid " + std::to_string(job)
                                                   : "process sleep (pid " + std::to_string(tree[1]);
  const std::string images = dir_ + "/images";
  const Ran r = Cusnap({"dump", "--pid", std::to_string(job), "--images-dir", images});
  for (auto p = tree.rbegin(); p != tree.rend(); ++p) ::kill(*p, SIGKILL);
  ::waitpid(job, nullptr, 0);
  EXPECT_EQ(r.status, 3) << r.out << r.err;  // refused before any change
  EXPECT_THAT(r.err, HasSubstr(named + ") has its session leader outside its PID namespace"));
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("quiesce")));
  EXPECT_FALSE(std::filesystem::exists(images + "/" + coord::kManifestFileName));
}

// A second job dumped into the directory that holds the first one's dump would replace it,
// and the first job (its processes gone) would be lost for good. Refused, whether that job
// runs or not; the same job's own earlier dump is replaced (RoundTrip).
TEST_F(CliImages, ADumpIntoTheDumpOfAnotherJobIsRefusedBeforeAnythingChanges) {
  if (const std::string why = CriuProblem(); !why.empty()) GTEST_SKIP() << why;
  const std::string images = MakeImages();  // another job, gone: only its images remain
  const auto before = Contents(images);
  const std::string job_dir = dir_ + "/job", log = dir_ + "/job.log";
  const pid_t job = StartCriuJob(job_dir, log);
  ASSERT_GT(job, 0);
  const Ran r = Cusnap({"dump", "--pid", std::to_string(job), "--images-dir", images});
  EXPECT_EQ(r.status, 3) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr(images + " holds the dump of another job (root pid 4194000, which "
                               "'cusnap restore --images-dir " + images + "' brings back); cusnap "
                               "does not overwrite it"));
  EXPECT_THAT(r.err, HasSubstr("refused; nothing was changed"));
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("quiesce")));
  EXPECT_EQ(Contents(images), before) << "the other job's dump changed";
  EXPECT_NE(cusnap::testing::ProcState(job), 'T');
  ExpectEveryByteOnceTold(job_dir, log);  // the job ran on, and ends having checked every byte
}

// A dump keeps its state file in the images directory, so its refusals name the images
// directory and --images-dir, not a "state directory" nor --state-dir, which `dump` does not
// take.
TEST_F(CliImages, ADumpIntoAnUnusableDirectoryNamesTheImagesDirectory) {
  if (const std::string why = CriuProblem(); !why.empty()) GTEST_SKIP() << why;
  const std::string job_dir = dir_ + "/job", log = dir_ + "/job.log";
  const pid_t job = StartCriuJob(job_dir, log);
  ASSERT_GT(job, 0);
  const std::string shared = dir_ + "/shared", file = dir_ + "/a-file";
  ASSERT_EQ(::mkdir(shared.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(shared.c_str(), 0777), 0);
  { std::ofstream(file) << "not a directory\n"; }
  const Ran unsafe = Cusnap({"dump", "--pid", std::to_string(job), "--images-dir", shared});
  EXPECT_EQ(unsafe.status, 3) << unsafe.out << unsafe.err;
  EXPECT_THAT(unsafe.err, HasSubstr("images directory " + shared + " is unsafe: it is writable "
                                    "by others (mode 0777)"));
  const Ran not_dir = Cusnap({"dump", "--pid", std::to_string(job), "--images-dir", file});
  EXPECT_EQ(not_dir.status, 3) << not_dir.out << not_dir.err;
  EXPECT_THAT(not_dir.err, HasSubstr("images directory " + file + " is a file: --images-dir "
                                     "takes a directory"));
  for (const Ran& r : {unsafe, not_dir}) {
    EXPECT_THAT(r.err, ::testing::Not(HasSubstr("state directory")));
    EXPECT_THAT(r.err, ::testing::Not(HasSubstr("--state-dir")));
    EXPECT_THAT(r.err, HasSubstr("refused; nothing was changed"));
  }
  EXPECT_TRUE(std::filesystem::is_empty(shared));
  EXPECT_NE(cusnap::testing::ProcState(job), 'T');
  ExpectEveryByteOnceTold(job_dir, log);  // the job ran on, and ends having checked every byte
}

TEST_F(CliImages, ADumpOfAJobHoldingAnIoUringIsRefusedBeforeAnythingChanges) {
  // torchrun's agent hosts its rendezvous store on libuv, which holds an io_uring; CRIU
  // finds it only after the checkpoint took the GPUs away.
  if (const std::string why = CriuProblem(); !why.empty()) GTEST_SKIP() << why;
  const pid_t job = ChildWithIoUring();
  if (job < 0) GTEST_SKIP() << "no io_uring here";
  EXPECT_TRUE(coord::HoldsIoUring(job));
  EXPECT_FALSE(coord::HoldsIoUring(::getpid()));
  const std::string images = dir_ + "/images";
  const Ran r = Cusnap({"dump", "--pid", std::to_string(job), "--images-dir", images});
  ::kill(job, SIGKILL);
  ::waitpid(job, nullptr, 0);
  EXPECT_EQ(r.status, 3) << r.out << r.err;  // refused before any change
  EXPECT_THAT(r.err, HasSubstr("(pid " + std::to_string(job) + ") holds an io_uring instance, "
                               "which CRIU cannot dump"));
  EXPECT_THAT(r.err, HasSubstr("refused; nothing was changed"));
  EXPECT_FALSE(std::filesystem::exists(images + "/" + coord::kManifestFileName));
}

/// `cusnap dump` of `job` (not a cusnap job: check_images refuses before discovery), which
/// it must refuse (exit 3) with `why`, the job running on; the child is ended after.
void ExpectDumpRefused(const std::string& dir, pid_t job, const std::string& why,
                       const std::function<Ran(const std::vector<std::string>&)>& cusnap) {
  const std::string images = dir + "/images";
  const Ran r = cusnap({"dump", "--pid", std::to_string(job), "--images-dir", images});
  const bool ran_on = ::kill(job, 0) == 0;
  ::kill(job, SIGKILL);
  ::waitpid(job, nullptr, 0);
  EXPECT_EQ(r.status, 3) << r.out << r.err;  // refused before any change
  EXPECT_THAT(r.err, HasSubstr("(pid " + std::to_string(job) + ") " + why));
  EXPECT_THAT(r.err, HasSubstr("refused; nothing was changed"));
  EXPECT_TRUE(ran_on);
  EXPECT_FALSE(std::filesystem::exists(images));
}

TEST_F(CliImages, ADumpOfAJobHoldingAFileOfAnotherMountNamespaceIsRefusedBeforeAnythingChanges) {
  // A file inherited from a sandbox's shell, or opened before entering this mount
  // namespace: CRIU says "Can't lookup mount" only after the checkpoint took the GPUs away.
  if (const std::string why = CriuProblem(); !why.empty()) GTEST_SKIP() << why;
  const std::string held = dir_ + "/held.txt";
  WriteAll(held, "x");
  const pid_t job = ChildHoldingAFileOfAnotherMountNamespace(held);
  if (job < 0) GTEST_SKIP() << "no mount namespace can be made here";
  const auto foreign = coord::FilesOnForeignMounts("/proc/" + std::to_string(job));
  const auto named = std::find_if(foreign.begin(), foreign.end(),
                                  [&](const auto& f) { return f.path == held; });
  ASSERT_NE(named, foreign.end());
  ExpectDumpRefused(dir_, job, "holds descriptor" + std::string(foreign.size() == 1 ? " " : "s "),
                    [&](const auto& args) { return Cusnap(args); });
  EXPECT_FALSE(HasFailure()) << "descriptor " << named->fd;
}

// The same for a file the job maps (its program, a library: a job started through `nsenter
// --wd` runs a program of the outer namespace); CRIU would fail on it after the checkpoint
// ("Can't lookup mount=27 ... criu_job").
TEST_F(CliImages, ADumpOfAJobMappingAFileOfAnotherMountNamespaceIsRefusedBeforeAnythingChanges) {
  if (const std::string why = CriuProblem(); !why.empty()) GTEST_SKIP() << why;
  const std::string mapped = dir_ + "/mapped.bin";
  WriteAll(mapped, std::string(4096, 'm'));
  const pid_t job = ChildMappingAFileOfAnotherMountNamespace(mapped);
  if (job < 0) GTEST_SKIP() << "no mount namespace can be made here";
  const auto foreign = coord::FilesOnForeignMounts("/proc/" + std::to_string(job));
  const auto named = std::find_if(foreign.begin(), foreign.end(),
                                  [&](const auto& f) { return f.path == mapped; });
  ASSERT_NE(named, foreign.end());
  EXPECT_EQ(named->fd, -1);
  EXPECT_EQ(named->what, "a mapping");
  // Not ExpectDumpRefused: what the child inherited may be named before the mapping.
  const std::string images = dir_ + "/images";
  const Ran r = Cusnap({"dump", "--pid", std::to_string(job), "--images-dir", images});
  const bool ran_on = ::kill(job, 0) == 0;
  ::kill(job, SIGKILL);
  ::waitpid(job, nullptr, 0);
  EXPECT_EQ(r.status, 3) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("holds a mapping (" + mapped + ") on a mount of another mount "
                               "namespace, which CRIU cannot dump"));
  EXPECT_THAT(r.err, HasSubstr("refused; nothing was changed"));
  EXPECT_TRUE(ran_on);
  EXPECT_FALSE(std::filesystem::exists(images));
}

TEST_F(CliImages, ADumpOfAJobWritingAPipeReadOutsideItIsRefusedBeforeAnythingChanges) {
  // `cusnap run -- job | tee log`: restored from images, the job would write into a new pipe
  // that nobody reads, and die of SIGPIPE. A pipe the job reads itself, or one nobody reads
  // any more, is no concern.
  if (const std::string why = CriuProblem(); !why.empty()) GTEST_SKIP() << why;
  int out[2];
  ASSERT_EQ(::pipe(out), 0);  // inherited by the child; this test keeps the read end
  const pid_t job = PausedChildAfter([&] {
    ::close(out[0]);
    int inner[2];
    return ::pipe(inner) == 0;  // both ends in the job
  });
  ::close(out[1]);
  ASSERT_GT(job, 0);
  const auto outside = coord::PipesWrittenOutside({job});
  const Ran r = Cusnap({"dump", "--pid", std::to_string(job), "--images-dir", dir_ + "/images"});
  ::kill(job, SIGKILL);
  ::waitpid(job, nullptr, 0);
  ::close(out[0]);
  // Ours, and no other of its pipes but those it inherited from this test (its output, which
  // ctest reads, and whatever pipe the test's own environment passed down: the same case).
  std::vector<int> fds;
  for (const auto& p : outside) {
    EXPECT_EQ(p.pid, job);
    fds.push_back(p.fd);
  }
  EXPECT_THAT(fds, ::testing::Contains(out[1]));
  for (const int fd : fds) {
    if (fd == out[1]) continue;
    char link[64] = {};
    const std::string self = "/proc/self/fd/" + std::to_string(fd);
    const ssize_t n = ::readlink(self.c_str(), link, sizeof link - 1);
    EXPECT_TRUE(n > 0 && std::string(link, static_cast<size_t>(n)).starts_with("pipe:"))
        << "descriptor " << fd << " is not a pipe this test passed down";
  }
  EXPECT_EQ(r.status, 3) << r.out << r.err;  // refused before anything changed
  EXPECT_THAT(r.err, HasSubstr("cusnap dump: pid " + std::to_string(job) + " (cli_images_test) "
                               "writes to a pipe (descriptor " + std::to_string(out[1]) + ") "
                               "whose reader is outside the job"));
  // Not its output (descriptor 1 or 2): a descriptor it inherited, which it can go without.
  EXPECT_THAT(r.err, HasSubstr("start the job without it (a descriptor it inherited: `cusnap run "
                               "-- job " + std::to_string(out[1]) + ">&-`) or give it a file"));
  EXPECT_THAT(r.err, HasSubstr("refused; nothing was changed"));
  EXPECT_THAT(r.out, HasSubstr("check_images"));
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("discover")));
}

// The same pipe seen from inside a PID namespace of the job's own (`unshare -pf --mount-proc`,
// as the README suggests), its reader outside: that /proc does not show the reader, so the
// pipe itself is asked whether a reader is left (otherwise such a dump would go through and
// its restore die of SIGPIPE). A pipe whose reader is gone is none.
TEST(PipesWrittenOutside, AReaderInAnotherPidNamespaceIsFoundThroughThePipe) {
  int out[2];
  ASSERT_EQ(::pipe(out), 0);  // this test keeps the read end, outside the namespace
  EXPECT_TRUE(coord::PipeHasReader(::getpid(), out[1]));
  const pid_t outer = ::fork();
  ASSERT_GE(outer, 0);
  if (outer == 0) {
    ::close(out[0]);
    if (::unshare(CLONE_NEWPID | CLONE_NEWNS) != 0) _exit(20);
    const pid_t init = ::fork();  // pid 1 of the new namespace
    if (init < 0) _exit(21);
    if (init > 0) {
      int status = 0;
      ::waitpid(init, &status, 0);
      _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 22);
    }
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        ::mount("proc", "/proc", "proc", 0, nullptr) != 0) {
      _exit(23);
    }
    const pid_t job = ::fork();  // holds the write end, waits to be killed
    if (job == 0) {
      ::pause();
      _exit(0);
    }
    ::close(out[1]);
    const auto found = coord::PipesWrittenOutside({job});
    const bool seen = std::any_of(found.begin(), found.end(), [&](const auto& p) { return p.pid == job && p.fd == out[1]; });
    ::kill(job, SIGKILL);
    ::waitpid(job, nullptr, 0);
    _exit(seen ? 0 : 24);
  }
  ::close(out[1]);
  int status = 0;
  ASSERT_EQ(::waitpid(outer, &status, 0), outer);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  if (WEXITSTATUS(status) == 20) GTEST_SKIP() << "no PID namespace can be made here";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the job's write end to a pipe read outside its namespace "
                                        "was not found (20-23: set-up, 24: not found)";
  ::close(out[0]);
  // Nobody reads it any more: no concern.
  int gone[2];
  ASSERT_EQ(::pipe(gone), 0);
  ::close(gone[0]);
  EXPECT_FALSE(coord::PipeHasReader(::getpid(), gone[1]));
  ::close(gone[1]);
}

TEST_F(CliImages, ADumpOfAJobInAnotherMountNamespaceIsRefusedBeforeAnythingChanges) {
  // `unshare --mount cusnap run -- ...`: CRIU dumps such a job with its mounts, and its
  // restore fails ("mnt: BUG"): the job would be gone for good.
  if (const std::string why = CriuProblem(); !why.empty()) GTEST_SKIP() << why;
  const pid_t job = ChildInAMountNamespaceOfItsOwn();
  if (job < 0) GTEST_SKIP() << "no mount namespace can be made here";
  ExpectDumpRefused(dir_, job, "runs in a mount namespace other than this cusnap's",
                    [&](const auto& args) { return Cusnap(args); });
}

TEST_F(CliImages, RunOpensTheFilesAJobInheritsFromAnotherMountNamespaceAgain) {
  // `unshare --mount cusnap run -- sleep`: the log the job inherits lies on a mount of the
  // namespace outside; the job gets the same file, at the same offset, on a mount of its own.
  const std::string log = dir_ + "/inherited.log";
  WriteAll(log, "0123456789");
  const int fd = ::open(log.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::lseek(fd, 4, SEEK_SET), 4);
  const pid_t job = Spawn({"/usr/bin/unshare", "--mount", "--", Env("CUSNAP_TEST_BIN_DIR") + "/cusnap",
                           "run", "--", "sleep", "30"}, {{fd, 10}});
  ::close(fd);
  ASSERT_GT(job, 0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (ReadAll("/proc/" + std::to_string(job) + "/comm") != "sleep\n" &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const std::string proc = "/proc/" + std::to_string(job);
  const std::string comm = ReadAll(proc + "/comm");
  const auto foreign = coord::FilesOnForeignMounts(proc);
  std::error_code ec;
  const std::string target = std::filesystem::read_symlink(proc + "/fd/10", ec).string();
  const std::string info = ReadAll(proc + "/fdinfo/10");
  ::kill(job, SIGKILL);
  int status = 0;
  ::waitpid(job, &status, 0);
  if (comm == "unshare\n" || (WIFEXITED(status) && WEXITSTATUS(status) == 1)) {
    GTEST_SKIP() << "no mount namespace can be made here";
  }
  ASSERT_EQ(comm, "sleep\n");
  EXPECT_TRUE(foreign.empty()) << foreign.front().fd << " " << foreign.front().path;
  EXPECT_EQ(target, log);
  EXPECT_THAT(info, HasSubstr("pos:\t4\n"));
}

/// The round trip of criu_job through `dump` and `restore --images-dir`, every byte checked by
/// the restored processes. With `cli_dies_at` ("<phase>:<when>", test_pause.h), the dump's CLI
/// is killed (SIGKILL) at that boundary of the dump instead of finishing it; the restore must
/// still bring the job back.
void CliImages::RoundTrip(const std::string& cli_dies_at, bool pids_taken, bool leave_running,
                          bool criu_fails_after) {
  SKIP_UNLESS_CRIU_ROUND_TRIPS();
  const std::string job_dir = dir_ + "/job", images = dir_ + "/images", log = dir_ + "/job.log";
  const pid_t job = StartCriuJob(job_dir, log);
  ASSERT_GT(job, 0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  auto count = [&](const std::string& word) { return CountIn(log, word); };

  if (cli_dies_at.empty()) {
    std::vector<std::string> args = {"dump", "--pid", std::to_string(job), "--images-dir", images};
    if (leave_running) args.push_back("--leave-running");
    const std::string criu = Env("CUSNAP_CRIU");
    if (criu_fails_after) {
      // CRIU dumps the job, then exits with an error (a signal, a late failure).
      const std::string wrapper = dir_ + "/late-failing-criu";
      WriteAll(wrapper, "#!/bin/sh\n" + criu + " \"$@\" || exit\nif [ \"$1\" = dump ]; then exit 9; fi\n");
      ASSERT_EQ(::chmod(wrapper.c_str(), 0700), 0);
      ::setenv("CUSNAP_CRIU", wrapper.c_str(), 1);
    }
    const Ran dump = Cusnap(args);
    ::setenv("CUSNAP_CRIU", criu.c_str(), 1);
    ASSERT_EQ(dump.status, 0) << dump.out << dump.err;
    if (criu_fails_after) {
      EXPECT_THAT(dump.err, HasSubstr("criu finished the dump, then exited with an error "
                                      "(criu dump failed (exit 9"));
    }
    if (leave_running) {
      // The restore's phases that follow the dump's are announced.
      EXPECT_THAT(dump.out, HasSubstr("-- --leave-running: the job is on disk; it goes on in place "
                                      "now (the phases of 'cusnap restore' follow)"));
      // The job ran on; it ends now (both processes), so the dump is what is left of it.
      const std::string text = ReadAll(log);
      const auto at = text.find("PID child ");
      ASSERT_NE(at, std::string::npos) << text;
      ::kill(std::stoi(text.substr(at + 10)), SIGKILL);
      ::kill(job, SIGKILL);
    }
    EXPECT_THAT(dump.out, HasSubstr("save "));
    // check_images names the CRIU that dumps the job (it did "0 participants": it looks at
    // none).
    EXPECT_THAT(dump.out, ::testing::ContainsRegex("check_images +[0-9.]+ ms  \\(CRIU [0-9]+\\.[0-9.]+ at /"));
    EXPECT_THAT(dump.out, HasSubstr("write_carriers"));
    EXPECT_THAT(dump.out, HasSubstr("criu_dump"));
    EXPECT_THAT(dump.out, HasSubstr("write_manifest"));
  } else {
    // The pause knob stops the CLI at the boundary; the shell kills it once it has stopped.
    const Ran killed = RunCommand(
        "CUSNAP_TEST_PAUSE_AT=dump:" + cli_dies_at + " " + Env("CUSNAP_TEST_BIN_DIR") +
            "/cusnap dump --pid " + std::to_string(job) + " --images-dir " + images +
            " >/dev/null 2>&1 & cli=$!; until grep -q '^State:.*stopped' /proc/$cli/status; do "
            "sleep 0.05; done; kill -KILL $cli; wait $cli; echo $?",
        dir_);
    ASSERT_EQ(killed.out, "137\n") << killed.err;
    EXPECT_FALSE(coord::HasManifest(images));
    EXPECT_TRUE(coord::HasPendingManifest(images));
  }
  // The processes are gone: CRIU killed the tree (the root is our child: reap it, so its
  // pid is free for the restore).
  int status = 0;
  ASSERT_EQ(::waitpid(job, &status, 0), job);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
  auto manifest = cli_dies_at.empty() ? coord::ReadManifest(images)
                                      : coord::ReadPendingManifest(images);
  ASSERT_TRUE(manifest.ok()) << manifest.error().message;
  ASSERT_EQ(manifest->participants.size(), 2u);
  EXPECT_EQ(manifest->control_dir, Env("CUSNAP_CONTROL_DIR"));
  EXPECT_EQ(manifest->participants[0].saved_bytes + manifest->participants[1].saved_bytes,
            8u << 20);  // the root's shared allocation and the child's private one
                        // (CUSNAP_CARRY=all, the default, carries private allocations too)
  // The child, reparented to us when the root died, is reaped: its pid must be free before
  // CRIU can give it back.
  for (const auto& p : manifest->participants) {
    while (KernelStartTime(p.pid) != 0 && std::chrono::steady_clock::now() < deadline) {
      ::waitpid(p.pid, nullptr, WNOHANG);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_EQ(KernelStartTime(p.pid), 0u) << "pid " << p.pid << " still exists after the dump";
  }
  // Each process wrote its carrier beside CRIU's images in part files (write_carriers),
  // which the manifest lists with their checksums like CRIU's own files.
  uint64_t carrier_bytes = 0;
  for (const auto& f : manifest->files) {
    if (coord::IsCarrierFile(f.name)) carrier_bytes += f.bytes;
  }
  if (cli_dies_at.empty()) {
    EXPECT_EQ(carrier_bytes, 8u << 20);
  }
  EXPECT_EQ(coord::CarrierFileBytes(images), 8u << 20);
  const Ran in_out = Cusnap({"inspect", images});
  EXPECT_THAT(in_out.out, HasSubstr(cli_dies_at.empty() ? "pages-" : "CRIU's complete images"));

  // Another process takes the root's pid: CRIU cannot give it back here.
  pid_t holder = -1;
  if (pids_taken) {
    holder = HoldPid(manifest->root_pid);
    ASSERT_EQ(holder, manifest->root_pid) << "cannot take pid " << manifest->root_pid << ": "
                                          << std::strerror(errno);
  }
  const Ran restore = Cusnap({"restore", "--images-dir", images});
  ASSERT_EQ(restore.status, 0) << restore.out << restore.err << ReadAll(images + "/criu-restore.log").substr(0, 4000);
  EXPECT_THAT(restore.out, HasSubstr("criu_restore"));
  // check_images counts the files it hashed and their bytes, with the hashing rate.
  EXPECT_THAT(restore.out, ::testing::ContainsRegex(
                               "check_images +[0-9.]+ ms  \\([1-9][0-9]* files\\)  [0-9.]+ [KM]iB  [0-9.]+ GB/s"));
  EXPECT_THAT(restore.out, HasSubstr("read_carriers"));
  EXPECT_THAT(restore.out, HasSubstr("verify"));
  if (!cli_dies_at.empty()) {
    EXPECT_THAT(restore.err, HasSubstr("holds a dump interrupted after CRIU finished it"));
    EXPECT_TRUE(coord::HasManifest(images));
    EXPECT_FALSE(coord::HasPendingManifest(images));
  }
  if (pids_taken) {
    EXPECT_THAT(restore.err, HasSubstr("pid " + std::to_string(manifest->root_pid) + " of the "
                                       "dump is held by another process here: the job is "
                                       "restored in a PID namespace of its own"));
    // The job is named by any of its pids as this machine numbers them: cusnap joins its
    // namespaces. A checkpoint and a restore in place there keep every byte too.
    std::smatch here;
    const std::regex named("its root is pid (\\d+) there and pid (\\d+) here");
    ASSERT_TRUE(std::regex_search(restore.err, here, named)) << restore.err;
    EXPECT_EQ(here[1], std::to_string(manifest->root_pid));
    const std::string outside = here[2];
    EXPECT_NE(outside, std::to_string(manifest->root_pid));
    const Ran st = Cusnap({"status", "--pid", outside});
    EXPECT_EQ(st.status, 0) << st.out << st.err;
    EXPECT_THAT(st.out, HasSubstr("pid " + std::to_string(manifest->root_pid) + " "));
    const std::string state = dir_ + "/in-place";
    const Ran ck = Cusnap({"checkpoint", "--pid", outside, "--state-dir", state});
    ASSERT_EQ(ck.status, 0) << ck.out << ck.err;
    const Ran rs = Cusnap({"restore", "--pid", outside, "--state-dir", state});
    ASSERT_EQ(rs.status, 0) << rs.out << rs.err;
    // A listening endpoint is never stale, whatever this namespace's pid of its name is.
    const Ran pruned = Cusnap({"status", "--all", "--prune"});
    EXPECT_THAT(pruned.out, HasSubstr("pid " + std::to_string(manifest->root_pid) + " of a job in "
                                      "a PID namespace of its own, pid " + outside + " here: "
                                      "see 'cusnap status --pid " + outside + "'"));
    for (const auto& p : manifest->participants) {
      EXPECT_EQ(::access((Env("CUSNAP_CONTROL_DIR") + "/" + std::to_string(p.pid) + ".sock").c_str(),
                         F_OK), 0) << "pid " << p.pid << "'s endpoint was pruned: " << pruned.out;
    }
    // Held in there (stopped): its hold markers name pids of its namespace, never stale here.
    const Ran held = Cusnap({"checkpoint", "--pid", outside, "--state-dir", state + "-held"});
    ASSERT_EQ(held.status, 0) << held.out << held.err;
    const Ran pruned_held = Cusnap({"status", "--all", "--prune"});
    EXPECT_EQ(pruned_held.status, 0) << pruned_held.out << pruned_held.err;
    EXPECT_THAT(pruned_held.out, ::testing::Not(HasSubstr("stale hold marker")));
    const Ran back = Cusnap({"restore", "--pid", outside, "--state-dir", state + "-held"});
    ASSERT_EQ(back.status, 0) << back.out << back.err;
    // To disk and back again, into the same directory (the restore left CRIU's pid file and
    // statistics there: replaced, never hashed): the dump joins the namespace (whose init
    // waits for it), and the restore makes a new namespace (the root's pid is still held
    // here), where the job's pids and its threads' do not meet cusnap's own.
    const std::string images2 = images;
    const Ran dump2 = Cusnap({"dump", "--pid", outside, "--images-dir", images2});
    ASSERT_EQ(dump2.status, 0) << dump2.out << dump2.err;
    while (KernelStartTime(std::stoi(outside)) != 0 && std::chrono::steady_clock::now() < deadline + std::chrono::seconds(30)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    const Ran restore2 = Cusnap({"restore", "--images-dir", images2});
    ASSERT_EQ(restore2.status, 0) << restore2.out << restore2.err
                                  << ReadAll(images2 + "/criu-restore.log").substr(0, 4000);
    EXPECT_THAT(restore2.err, HasSubstr("restored in a PID namespace of its own"));
    auto again = coord::ReadManifest(images2);
    ASSERT_TRUE(again.ok()) << again.error().message;
    for (const auto& f : again->files) {
      EXPECT_NE(f.name, "stats-restore");
      EXPECT_NE(f.name, "restored.pid");
    }
  }
  // The restored processes are not our children: they check their bytes once told to go,
  // and say so in the log they kept writing.
  WriteAll(job_dir + "/go", "");
  while (count("PASS") + count("FAIL") < 2 && std::chrono::steady_clock::now() < deadline + std::chrono::seconds(30)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const std::string text = ReadAll(log);
  EXPECT_THAT(text, HasSubstr("PASS root 4194304"));
  EXPECT_THAT(text, HasSubstr("PASS child 8388608"));
  EXPECT_THAT(text, ::testing::Not(HasSubstr("FAIL")));
  if (holder > 0) {
    ::kill(holder, SIGKILL);
    ::waitpid(holder, nullptr, 0);
  }
  while (::waitpid(-1, nullptr, WNOHANG) > 0) {  // the namespace's init, adopted once it ended
  }
}

// A dump onto a disk without room for it (a tmpfs mounted in a mount namespace of this
// test's own, which the job, cusnap and CRIU share), in two ways:
// - `criu_fills` false: the disk is too small for the job's memory from the start. The dump
//   is refused at validate, naming the images directory and the bytes, before anything
//   changed: the job runs on.
// - `criu_fills` true: there was room at validate, but something else fills the disk right
//   before CRIU writes (a CUSNAP_CRIU wrapper does). CRIU fails (the refusal says the disk
//   is full) and resumes the tree; the dump restores the job in place from what each process holds
//   (exit 4, said), and the directory holds no dump (its restore is refused).
// Either way the job then dumps to a directory with room, and comes back with every byte.
void CliImages::FullDiskCase(bool criu_fills) {
  SKIP_UNLESS_CRIU_ROUND_TRIPS();
  const std::string full = SmallDisk(criu_fills ? "64m" : "3m");
  ASSERT_FALSE(full.empty());
  const std::string job_dir = dir_ + "/job", log = dir_ + "/job.log", images = full + "/images";
  const pid_t job = StartCriuJob(job_dir, log);
  ASSERT_GT(job, 0);

  const std::string criu = Env("CUSNAP_CRIU");
  if (criu_fills) {
    // Something else fills the disk once cusnap checked it, leaving CRIU 256 KiB (its log
    // and first images fit, its pages do not).
    const std::string wrapper = dir_ + "/filling-criu";
    WriteAll(wrapper, "#!/bin/sh\nif [ \"$1\" = dump ]; then cat /dev/zero > " + full +
                          "/filler 2>/dev/null; truncate -s -256K " + full + "/filler; fi\n"
                          "exec " + criu + " \"$@\"\n");
    ASSERT_EQ(::chmod(wrapper.c_str(), 0700), 0);
    ::setenv("CUSNAP_CRIU", wrapper.c_str(), 1);
  }
  const Ran dump = Cusnap({"dump", "--pid", std::to_string(job), "--images-dir", images});
  ::setenv("CUSNAP_CRIU", criu.c_str(), 1);
  if (criu_fills) {
    EXPECT_EQ(dump.status, kExitFailedAfterChange) << dump.out << dump.err;
    EXPECT_THAT(dump.err, HasSubstr("criu dump failed"));
    // CRIU's own log is cut short by the same full disk: cusnap says what it is.
    EXPECT_THAT(dump.err, HasSubstr("the images directory's filesystem is full ("));
    EXPECT_THAT(dump.out + dump.err, HasSubstr("restoring the job in place"));
    EXPECT_THAT(dump.out, HasSubstr("activate"));
    // What CRIU and the checkpoint wrote there is no dump, and goes; CRIU's logs stay, and
    // name the directory as a failed dump.
    for (const auto& e : std::filesystem::directory_iterator(images)) {
      EXPECT_TRUE(e.path().extension() == ".log") << e.path();
    }
    EXPECT_TRUE(std::filesystem::exists(images + "/" + coord::kCriuDumpLogName));
    const Ran inspect = Cusnap({"inspect", images});
    EXPECT_EQ(inspect.status, 1) << inspect.out << inspect.err;
    EXPECT_THAT(inspect.err, HasSubstr("no images in " + images + ": a dump failed there and its "
                                       "job was restored in place (CRIU's log: "));
  } else {
    EXPECT_EQ(dump.status, kExitRefused) << dump.out << dump.err;
    EXPECT_THAT(dump.err, HasSubstr("images directory " + images + ": not enough disk space "
                                    "for the dump: at least "));
    EXPECT_THAT(dump.err, HasSubstr("choose another --images-dir"));
    EXPECT_THAT(dump.err, HasSubstr("nothing was changed, the job keeps running"));
    // The images directory the dump made for itself goes with the refusal.
    EXPECT_FALSE(std::filesystem::exists(images));
  }
  // The job runs on, unheld, its shims active.
  EXPECT_EQ(::kill(job, 0), 0);
  EXPECT_NE(cusnap::testing::ProcState(job), 'T');
  const Ran st = Cusnap({"status", "--pid", std::to_string(job), "--json"});
  ASSERT_EQ(st.status, 0) << st.out << st.err;
  const auto participants = nlohmann::json::parse(st.out)["participants"];
  EXPECT_EQ(participants.size(), 2u) << st.out;
  for (const auto& p : participants) EXPECT_EQ(p["phase"], "active") << p.dump();
  // No dump is left to restore: refused, and the running job is untouched.
  EXPECT_FALSE(coord::HasManifest(images));
  EXPECT_FALSE(coord::HasPendingManifest(images));
  const Ran restore = Cusnap({"restore", "--images-dir", images});
  EXPECT_EQ(restore.status, kExitRestoreRefused) << restore.out << restore.err;
  if (criu_fills) {
    EXPECT_THAT(restore.err, HasSubstr("a dump failed there"));
  }
  EXPECT_EQ(::kill(job, 0), 0);

  // With room, the same job dumps (its processes are gone) and comes back.
  const std::string roomy = dir_ + "/images";
  const Ran again = Cusnap({"dump", "--pid", std::to_string(job), "--images-dir", roomy});
  ASSERT_EQ(again.status, 0) << again.out << again.err;
  int status = 0;
  ASSERT_EQ(::waitpid(job, &status, 0), job);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  if (auto m = coord::ReadManifest(roomy); m.ok()) {
    for (const auto& p : m->participants) {  // the child, orphaned, is ours to reap
      while (KernelStartTime(p.pid) != 0 && std::chrono::steady_clock::now() < deadline) {
        ::waitpid(p.pid, nullptr, WNOHANG);
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
  }
  const Ran back = Cusnap({"restore", "--images-dir", roomy});
  ASSERT_EQ(back.status, 0) << back.out << back.err;
  ExpectEveryByteOnceTold(job_dir, log);
}

// The disk fills up once CRIU is done: write_manifest fails, and the job is on disk only. The
// dump names the restore, which completes the dump once there is space (not `recover`,
// which would find no process).
TEST_F(CliImages, ADumpWhoseDiskFillsUpAfterCriuNamesTheRestoreThatCompletesIt) {
  SKIP_UNLESS_CRIU_ROUND_TRIPS();
  const std::string full = SmallDisk("64m");
  ASSERT_FALSE(full.empty());
  const std::string job_dir = dir_ + "/job", log = dir_ + "/job.log", images = full + "/images";
  const pid_t job = StartCriuJob(job_dir, log);
  ASSERT_GT(job, 0);
  const std::string criu = WrapCriu("dump", "cat /dev/zero > " + full + "/filler 2>/dev/null");
  const Ran dump = Cusnap({"dump", "--pid", std::to_string(job), "--images-dir", images});
  ::setenv("CUSNAP_CRIU", criu.c_str(), 1);
  EXPECT_EQ(dump.status, kExitFailedAfterChange) << dump.out << dump.err;
  EXPECT_THAT(dump.err, HasSubstr("FAILED in phase 'write_manifest' after the job was changed; "
                                  "the job is on disk only (CRIU's images are complete): once "
                                  "there is space, 'cusnap restore --images-dir " + images +
                                  "' writes the manifest and brings the job back"));
  EXPECT_THAT(dump.err, ::testing::Not(HasSubstr("recover")));
  ASSERT_EQ(::waitpid(job, nullptr, 0), job);
  ASSERT_EQ(::unlink((full + "/filler").c_str()), 0);
  const Ran restore = Cusnap({"restore", "--images-dir", images});
  ASSERT_EQ(restore.status, 0) << restore.out << restore.err;
  EXPECT_THAT(restore.err, HasSubstr("holds a dump interrupted after CRIU finished it"));
  ExpectEveryByteOnceTold(job_dir, log);
}

TEST_F(CliImages, ADumpOntoADiskTooSmallIsRefusedBeforeAnythingChanges) { FullDiskCase(false); }

TEST_F(CliImages, ADumpWhoseDiskFillsUpWhileCriuWritesRestoresTheJobInPlace) {
  FullDiskCase(true);
}

// `cusnap run --pid-namespace`: the job starts in a PID namespace of its own, its root there
// having the pid the `cusnap run` has here, its endpoints in a control directory of its own
// (their names are pids of that namespace). It is named by the `cusnap run`'s pid ($!), is
// listed by `status --all`, checkpoints and restores in place, dumps (the files it inherited
// were reopened in its mount namespace, where CRIU looks for them) and comes back from the
// images with every byte.
TEST_F(CliImages, AJobRunInAPidNamespaceOfItsOwnCheckpointsDumpsAndRestores) {
  SKIP_UNLESS_CRIU_ROUND_TRIPS();
  const std::string job_dir = dir_ + "/job", log = dir_ + "/job.log";
  ::mkdir(job_dir.c_str(), 0700);
  KeepInheritedDescriptorsFromChildren();
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  const int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  const int in = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  const pid_t outer = Spawn({Env("CUSNAP_TEST_BIN_DIR") + "/cusnap", "run", "--pid-namespace", "--",
                             Env("CUSNAP_TEST_BIN_DIR") + "/criu_job", job_dir, "4"},
                            {{in, 0}, {out, 1}, {out, 2}});
  ::close(out);
  ::close(in);
  ASSERT_GT(outer, 0);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (CountIn(log, "READY") < 2 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_EQ(CountIn(log, "READY"), 2u) << ReadAll(log);
  // Its root's pid there is the `cusnap run`'s here.
  EXPECT_THAT(ReadAll(log), HasSubstr("PID root " + std::to_string(outer) + "\n"));
  const std::string pid = std::to_string(outer);

  const Ran st = Cusnap({"status", "--pid", pid, "--json"});
  ASSERT_EQ(st.status, 0) << st.out << st.err;
  // What it prints names this machine's pids, the namespace's beside them, and it says so.
  EXPECT_THAT(st.err, HasSubstr("runs in a PID namespace of its own, where it is pid " + pid +
                                ": the pids below are this machine's, each with the "
                                "namespace's beside it"));
  const auto doc = nlohmann::json::parse(st.out);
  EXPECT_EQ(doc["participants"].size(), 2u) << st.out;
  const std::string job_control = doc.value("control_dir", "");
  EXPECT_THAT(job_control, HasSubstr(Env("CUSNAP_CONTROL_DIR") + "/pidns-")) << st.out;
  const Ran all = Cusnap({"status", "--all"});
  EXPECT_THAT(all.out, HasSubstr("pid " + pid + " of a job in a PID namespace of its own"));

  const std::string state = dir_ + "/in-place";
  const Ran ck = Cusnap({"checkpoint", "--pid", pid, "--state-dir", state});
  ASSERT_EQ(ck.status, 0) << ck.out << ck.err;
  const Ran rs = Cusnap({"restore", "--pid", pid, "--state-dir", state});
  ASSERT_EQ(rs.status, 0) << rs.out << rs.err;

  const std::string images = dir_ + "/images";
  const Ran dump = Cusnap({"dump", "--pid", pid, "--images-dir", images});
  ASSERT_EQ(dump.status, 0) << dump.out << dump.err << ReadAll(images + "/criu-dump.log").substr(0, 3000);
  int status = 0;
  ASSERT_EQ(::waitpid(outer, &status, 0), outer);  // the job was taken away by CRIU
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 128 + SIGKILL) << status;
  // Restored in a PID namespace of its own again (every pid of it is free here): in this
  // namespace it would have no session of its own, and CRIU could not dump it again.
  EXPECT_TRUE(coord::ReadManifest(images)->own_pid_namespace);
  EXPECT_EQ(coord::ReadManifest(images)->control_dir, job_control);
  // What the dumped job left in its control directory (endpoint sockets, hold markers) is
  // stale: listed and pruned (status looks there too); the directory stays, as the restore
  // binds the endpoints there again.
  const auto job_init_gone = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!coord::StaleHoldMarkersOfJobDir(job_control).size() &&
         std::chrono::steady_clock::now() < job_init_gone) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // its namespace empties
  }
  // A process of the namespace that is still dying (its threads close its descriptors before
  // it shows as exited) keeps its socket listening a moment longer: prune until it is gone.
  const auto only_directories = [&] {
    for (const auto& e : std::filesystem::directory_iterator(job_control)) {
      if (!e.is_directory()) return false;
    }
    return true;
  };
  std::string pruned_out;
  const auto pruned_by = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  do {
    const Ran pruned = Cusnap({"status", "--all", "--prune"});
    EXPECT_EQ(pruned.status, 0) << pruned.out << pruned.err;
    pruned_out += pruned.out;
  } while (!only_directories() && std::chrono::steady_clock::now() < pruned_by);
  EXPECT_THAT(pruned_out, HasSubstr("stale endpoint " + job_control + "/" + pid + ".sock: nothing "
                                    "listens on it: its process, pid " + pid + " of a job in a "
                                    "PID namespace of its own, is gone (removed)"));
  EXPECT_THAT(pruned_out, HasSubstr("stale hold marker " + job_control + "/"));
  for (const auto& e : std::filesystem::directory_iterator(job_control)) {
    EXPECT_TRUE(e.is_directory())
        << e.path() << " stayed after --prune; its listener (SocketListenerPid): "
        << cusnap::SocketListenerPid(e.path().string()) << "; status --prune said: " << pruned_out
        << "\nprocesses: " << RunCommand("ps -eo pid,ppid,stat,comm", dir_).out;
  }
  const Ran back = Cusnap({"restore", "--images-dir", images});
  ASSERT_EQ(back.status, 0) << back.out << back.err << ReadAll(images + "/criu-restore.log").substr(0, 3000);
  EXPECT_THAT(back.err, HasSubstr("the job ran in a PID namespace of its own: it is restored in "
                                  "a PID namespace of its own again"));
  std::smatch here;
  ASSERT_TRUE(std::regex_search(back.err, here, std::regex("its root is pid (\\d+) there and pid "
                                                           "(\\d+) here"))) << back.err;
  EXPECT_EQ(here[1], pid);
  // Restoring the same images again, or a copy of them, would make a second copy of the job,
  // which runs in a PID namespace of its own: refused, naming its root as this machine
  // numbers it.
  const std::string copy = dir_ + "/images-copy";
  std::filesystem::copy(images, copy);
  for (const std::string& from : {images, copy}) {
    const auto before = Contents(from);
    const Ran twice = Cusnap({"restore", "--images-dir", from});
    EXPECT_EQ(twice.status, kExitRestoreRefused) << twice.out << twice.err;
    EXPECT_THAT(twice.err, HasSubstr(from + " holds a dump of a job that is still running (pid " +
                                     std::string(here[2]) + ")"));
    EXPECT_THAT(twice.out, ::testing::Not(HasSubstr("criu_restore")));
    EXPECT_EQ(Contents(from), before);
  }
  const Ran again = Cusnap({"dump", "--pid", here[2], "--images-dir", dir_ + "/images-again"});
  ASSERT_EQ(again.status, 0) << again.out << again.err;
  const Ran back_again = Cusnap({"restore", "--images-dir", dir_ + "/images-again"});
  ASSERT_EQ(back_again.status, 0) << back_again.out << back_again.err;
  ExpectEveryByteOnceTold(job_dir, log);
}

// A held job one of whose processes is killed: the child of a held,
// stopped root dies and stays a zombie (its parent cannot reap it while stopped). `restore`
// recovers the root without it, naming it, instead of refusing because the zombie is "not a
// participant now" (README: a checkpointed process that exited is not a refusal).
TEST_F(CliImages, AHeldJobWhoseChildWasKilledIsRestoredWithoutIt) {
  ::setenv("CUSNAP_HOLD", "stop", 1);
  const std::string job_dir = dir_ + "/job", log = dir_ + "/job.log";
  const pid_t root = StartCriuJob(job_dir, log);
  ASSERT_GT(root, 0);
  const std::string text = ReadAll(log);
  const auto at = text.find("PID child ");
  ASSERT_NE(at, std::string::npos) << text;
  const pid_t child = std::stoi(text.substr(at + 10));
  const std::string state = dir_ + "/state";
  const Ran ck = Cusnap({"checkpoint", "--pid", std::to_string(root), "--state-dir", state});
  ASSERT_EQ(ck.status, 0) << ck.out << ck.err;
  ASSERT_EQ(cusnap::testing::ProcState(root), 'T');
  ASSERT_EQ(::kill(child, SIGKILL), 0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (cusnap::testing::ProcState(child) != 'Z' && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(cusnap::testing::ProcState(child), 'Z') << "the held root reaped its child";
  const Ran rs = Cusnap({"restore", "--pid", std::to_string(root), "--state-dir", state});
  ASSERT_EQ(rs.status, 0) << rs.out << rs.err;
  EXPECT_THAT(rs.err, HasSubstr("pid " + std::to_string(child)));
  EXPECT_NE(cusnap::testing::ProcState(root), 'T');
  // The root runs on, active, alone (criu_job itself then fails: its child is gone).
  const Ran st = Cusnap({"status", "--pid", std::to_string(root), "--json"});
  ASSERT_EQ(st.status, 0) << st.out << st.err;
  const auto participants = nlohmann::json::parse(st.out)["participants"];
  ASSERT_EQ(participants.size(), 1u) << st.out;
  EXPECT_EQ(participants[0]["phase"], "active") << st.out;
  ::kill(root, SIGKILL);
  ::waitpid(root, nullptr, 0);
  ::waitpid(child, nullptr, WNOHANG);
}

// Once CRIU has brought the job back, a restore that fails ends those processes (never
// "refused; nothing was changed" printed over a stopped copy that no command could finish),
// and a restore killed there is finished by the next one (otherwise the job would stay
// stopped for good). The control directory's `restored` being a file fails the identities; a CRIU
// wrapper kills the restore once CRIU is done.
TEST_F(CliImages, ARestoreThatFailsOrIsKilledOnceCriuRanIsUndoneOrFinished) {
  SKIP_UNLESS_CRIU_ROUND_TRIPS();
  const std::string job_dir = dir_ + "/job", images = dir_ + "/images", log = dir_ + "/job.log";
  std::optional<coord::Manifest> manifest;
  ASSERT_NO_FATAL_FAILURE(DumpAway(job_dir, images, log, manifest));
  const auto gone = [&] { AwaitGone(*manifest); };
  const std::string control = Env("CUSNAP_CONTROL_DIR");

  // A failure after CRIU: the identities cannot be written.
  const Ran failed = RestoreWithCriuThen(images, "[ -d " + control + "/restored ] || : > " +
                                                     control + "/restored");
  EXPECT_EQ(failed.status, kExitRestoreRefused) << failed.out << failed.err;
  EXPECT_THAT(failed.err, HasSubstr("processes CRIU brought back were ended before any of them "
                                    "ran application code again; " + images + " is as it was"));
  EXPECT_THAT(failed.err, HasSubstr("refused; nothing was changed"));
  gone();  // no copy left behind
  EXPECT_FALSE(std::filesystem::exists(images + "/" + coord::kRestoreRecordName));
  std::filesystem::remove(control + "/restored");

  // Killed once CRIU is done: the next restore finishes it.
  const Ran killed = RestoreWithCriuThen(images, "kill -KILL $PPID");
  EXPECT_EQ(killed.status, 128 + SIGKILL) << killed.out << killed.err;
  EXPECT_EQ(cusnap::testing::ProcState(manifest->root_pid), 'T') << "CRIU brought the job back stopped";
  // status names the restore to run again (not 'kill -CONT', and the markers are not
  // stale), and --prune keeps the markers.
  const Ran st = Cusnap({"status", "--all", "--prune"});
  EXPECT_THAT(st.out + st.err, HasSubstr("pid " + std::to_string(manifest->root_pid) +
                                         " (criu_job) is stopped with the hold marker of the "
                                         "dumped process it replaces: CRIU brought it back for a "
                                         "'cusnap restore --images-dir' that did not finish; run "
                                         "that restore again"));
  EXPECT_THAT(st.out + st.err, ::testing::Not(HasSubstr("kill -CONT")));
  EXPECT_TRUE(std::filesystem::exists(control + "/" + std::to_string(manifest->root_pid) + ".held"));
  const Ran finished = Cusnap({"restore", "--images-dir", images});
  ASSERT_EQ(finished.status, 0) << finished.out << finished.err;
  EXPECT_THAT(finished.err, HasSubstr("a restore from " + images + " was killed after CRIU brought "
                                      "the job back (its root is pid " +
                                      std::to_string(manifest->root_pid) + " here): this restore "
                                      "finishes it"));
  EXPECT_THAT(finished.out, HasSubstr("verify"));
  // It runs now: a third restore would copy it.
  const Ran third = Cusnap({"restore", "--images-dir", images});
  EXPECT_EQ(third.status, kExitRestoreRefused) << third.out << third.err;
  EXPECT_THAT(third.err, HasSubstr("still running"));
  ExpectEveryByteOnceTold(job_dir, log);
}

// The restored shims keep the control directory they were dumped with (their environment
// comes back as it was): a restore run with another one is refused before CRIU runs, naming
// both and the setting to use, instead of leaving the job stopped where no command finds it.
TEST_F(CliImages, ARestoreWithAnotherControlDirectoryIsRefusedNamingTheJobs) {
  SKIP_UNLESS_CRIU_ROUND_TRIPS();
  const std::string job_dir = dir_ + "/job", images = dir_ + "/images", log = dir_ + "/job.log";
  std::optional<coord::Manifest> manifest;
  ASSERT_NO_FATAL_FAILURE(DumpAway(job_dir, images, log, manifest));
  const std::string control = Env("CUSNAP_CONTROL_DIR"), other = dir_ + "/other-control";
  ASSERT_EQ(::mkdir(other.c_str(), 0700), 0);
  ::setenv("CUSNAP_CONTROL_DIR", other.c_str(), 1);
  ExpectRefused(images, "the job's endpoints and hold markers are in control directory " +
                            control + " (its CUSNAP_CONTROL_DIR when it was dumped), this "
                            "restore's is " + other + ": run the restore with "
                            "CUSNAP_CONTROL_DIR=" + control);
  ::setenv("CUSNAP_CONTROL_DIR", control.c_str(), 1);
  ExpectRestoredWhole(images, job_dir, log);
}

// CRIU's page images are read beside `criu restore`: a restore killed once CRIU is done has
// not vouched for them, so the restore that finishes it reads them first, and damage found
// there ends the stopped tree, naming the file (the job ran nothing); mended, the images
// restore every byte.
TEST_F(CliImages, ARestoreKilledOnceCriuRanChecksThePageImagesBeforeFinishing) {
  SKIP_UNLESS_CRIU_ROUND_TRIPS();
  const std::string job_dir = dir_ + "/job", images = dir_ + "/images", log = dir_ + "/job.log";
  std::optional<coord::Manifest> manifest;
  ASSERT_NO_FATAL_FAILURE(DumpAway(job_dir, images, log, manifest));
  const Ran killed = RestoreWithCriuThen(images, "kill -KILL $PPID");
  EXPECT_EQ(killed.status, 128 + SIGKILL) << killed.out << killed.err;
  EXPECT_EQ(cusnap::testing::ProcState(manifest->root_pid), 'T') << "CRIU left the job stopped";
  const std::string pages = LargestFile(images, coord::IsCriuPageImage);
  ASSERT_FALSE(pages.empty());
  FlipByte(pages, 0);
  const Ran refused = Cusnap({"restore", "--images-dir", images});
  EXPECT_EQ(refused.status, kExitRestoreRefused) << refused.out << refused.err;
  EXPECT_THAT(refused.err, HasSubstr("image file " + pages + " is corrupt"));
  EXPECT_THAT(refused.err, HasSubstr("processes CRIU brought back were ended before any of them "
                                     "ran application code again; " + images + " is as it was: "
                                     "mend the damaged image file this restore names"));
  AwaitGone(*manifest);
  EXPECT_FALSE(std::filesystem::exists(images + "/" + coord::kRestoreRecordName));
  EXPECT_THAT(ReadAll(log), ::testing::Not(HasSubstr("PASS")));
  FlipByte(pages, 0);
  ExpectRestoredWhole(images, job_dir, log);
}

// A dump killed between its checkpoint and CRIU leaves the job checkpointed in place, held:
// `dump` and `restore --images-dir` both name the command that resumes it (not just "restore
// it first" and "no images"), and it works.
TEST_F(CliImages, ADumpKilledBeforeCriuNamesTheRestoreInPlace) {
  SKIP_UNLESS_CRIU_ROUND_TRIPS();
  const std::string job_dir = dir_ + "/job", images = dir_ + "/images", log = dir_ + "/job.log";
  pid_t job = 0;
  ASSERT_NO_FATAL_FAILURE(job = DumpKilledBeforeCriu(job_dir, images, log));
  const std::string resume = "'cusnap restore --pid " + std::to_string(job) + " --state-dir " +
                             images + "' resumes the job in place";
  const Ran again = Cusnap({"dump", "--pid", std::to_string(job), "--images-dir", images});
  EXPECT_EQ(again.status, kExitRefused) << again.out << again.err;
  EXPECT_THAT(again.err, HasSubstr(resume + ", then dump it again"));
  const Ran from_images = Cusnap({"restore", "--images-dir", images});
  EXPECT_EQ(from_images.status, kExitRestoreRefused) << from_images.out << from_images.err;
  EXPECT_THAT(from_images.err, HasSubstr("a dump stopped after its checkpoint, before CRIU ran; " + resume));
  const Ran in_place = Cusnap({"restore", "--pid", std::to_string(job), "--state-dir", images});
  ASSERT_EQ(in_place.status, 0) << in_place.out << in_place.err;
  ExpectEveryByteOnceTold(job_dir, log);
}

// A dump killed between write_carriers and CRIU leaves each carrier in its part files: `recover`
// without a state directory reads them back from where they were written (read_carriers),
// and every byte comes back.
TEST_F(CliImages, ADumpKilledBeforeCriuIsRecoveredFromItsCarrierFiles) {
  SKIP_UNLESS_CRIU_ROUND_TRIPS();
  const std::string job_dir = dir_ + "/job", images = dir_ + "/images", log = dir_ + "/job.log";
  pid_t job = 0;
  ASSERT_NO_FATAL_FAILURE(job = DumpKilledBeforeCriu(job_dir, images, log));
  EXPECT_EQ(coord::CarrierFileBytes(images), 8u << 20) << "write_carriers ran before the kill";
  const Ran recovered = Cusnap({"recover", "--pid", std::to_string(job)});
  ASSERT_EQ(recovered.status, 0) << recovered.out << recovered.err;
  EXPECT_THAT(recovered.out, ::testing::ContainsRegex("read_carriers +[0-9.]+ ms  2 participants  8.00 MiB"));
  ExpectEveryByteOnceTold(job_dir, log);
}

// A dump under the default hold (CUSNAP_HOLD=stop) records each GPU's model in its manifest:
// the hold's driver wrapper answered none (its base class's default), so such dumps named no
// models, and a restore could not refuse another GPU model.
TEST_F(CliImages, ADumpUnderTheHoldRecordsTheGpuModels) {
  SKIP_UNLESS_CRIU_ROUND_TRIPS();
  ::setenv("CUSNAP_HOLD", "stop", 1);
  const std::string job_dir = dir_ + "/job", images = dir_ + "/images", log = dir_ + "/job.log";
  const pid_t job = StartCriuJob(job_dir, log);
  ASSERT_GT(job, 0);
  const Ran dump = Cusnap({"dump", "--pid", std::to_string(job), "--images-dir", images});
  ASSERT_EQ(dump.status, 0) << dump.out << dump.err;
  const auto manifest = nlohmann::json::parse(ReadAll(images + "/" + coord::kManifestFileName),
                                              nullptr, false);
  ASSERT_TRUE(manifest.is_object() && manifest["gpus"].is_array() && !manifest["gpus"].empty())
      << manifest.dump();
  for (const auto& gpu : manifest["gpus"]) EXPECT_NE(gpu["model"], "") << manifest.dump();
  ExpectRestoredWhole(images, job_dir, log);
}

TEST_F(CliImages, DumpAndRestoreInNewProcessesKeepEveryByte) { RoundTrip(""); }

// Restore while another process holds the job's pid. The job comes back in a PID
// namespace of its own, keeps its pids there, and later commands name it by its pids here.
TEST_F(CliImages, ARestoreWhosePidIsTakenMakesANamespaceOfItsOwn) { RoundTrip("", true); }

// The root's pid taken after the restore found it free, before CRIU forks it (the CLI paused
// at criu_restore): CRIU fails ("Can't fork for <pid>: File exists") before any process came
// back, and the restore runs again in a PID namespace of its own, with every byte.
TEST_F(CliImages, APidTakenWhileCriuRestoresIsRestoredAgainInANamespaceOfItsOwn) {
  SKIP_UNLESS_CRIU_ROUND_TRIPS();
  const std::string job_dir = dir_ + "/job", images = dir_ + "/images", log = dir_ + "/job.log";
  std::optional<coord::Manifest> manifest;
  ASSERT_NO_FATAL_FAILURE(DumpAway(job_dir, images, log, manifest));
  const std::string out_path = dir_ + "/restore.out", err_path = dir_ + "/restore.err";
  const int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  const int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  ASSERT_GE(out, 0);
  ASSERT_GE(err, 0);
  ::setenv("CUSNAP_TEST_PAUSE_AT", "restore:criu_restore:before", 1);
  const pid_t cli = Spawn({Env("CUSNAP_TEST_BIN_DIR") + "/cusnap", "restore", "--images-dir", images},
                          {{out, 1}, {err, 2}});
  ::unsetenv("CUSNAP_TEST_PAUSE_AT");
  ::close(out);
  ::close(err);
  ASSERT_GT(cli, 0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (coord::ProcessState(cli) != 'T' && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const pid_t holder = HoldPid(manifest->root_pid);
  ::kill(cli, SIGCONT);
  // The restore run again pauses at its criu_restore too (the same environment), in the
  // init of its PID namespace: each cusnap of cli's tree that stopped itself goes on.
  int status = 0;
  while (::waitpid(cli, &status, WNOHANG) != cli) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << ReadAll(err_path);
    for (const int pid : coord::ProcessTree(cli)) {
      if (coord::ProcessName(pid) == "cusnap" && coord::ProcessState(pid) == 'T') ::kill(pid, SIGCONT);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (holder > 0) {
    ::kill(holder, SIGKILL);
    ::waitpid(holder, nullptr, 0);
  }
  ASSERT_EQ(holder, manifest->root_pid) << "cannot take pid " << manifest->root_pid;
  const std::string said = ReadAll(err_path);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << ReadAll(out_path) << said;
  EXPECT_THAT(said, HasSubstr("Can't fork for " + std::to_string(manifest->root_pid)));
  EXPECT_THAT(said, HasSubstr("note: pid " + std::to_string(manifest->root_pid) + " of the dump was "
                              "taken by another process while CRIU restored the job: it is "
                              "restored again, in a PID namespace of its own"));
  EXPECT_THAT(said, HasSubstr("its root is pid " + std::to_string(manifest->root_pid) + " there"));
  ExpectEveryByteOnceTold(job_dir, log);
}

// A dump with --leave-running resumed the job in place (its hold markers went with that), but
// CRIU wrote its processes as the hold had stopped them: restored, they must run again (left
// stopped, the restore would time out at discover).
TEST_F(CliImages, ALeaveRunningDumpRestoresOnceTheJobIsGone) { RoundTrip("", false, true); }

// CRIU wrote the whole dump (its log says it finished), then exited with an error: the
// images are the dump, and the job comes back from them (rolling back would restore a job
// CRIU had already ended).
TEST_F(CliImages, ACriuThatFailsAfterFinishingTheDumpLeavesAGoodDump) {
  RoundTrip("", false, false, true);
}

TEST_F(CliImages, ADumpWhoseCliDiedOnceCriuFinishedIsCompletedByTheRestore) {
  // The tree is gone once CRIU ran; the manifest was not written yet (the dump, too, never
  // strands a job): the pending manifest lets the restore finish the dump.
  RoundTrip("criu_dump:after");
}

}  // namespace
}  // namespace cusnap::testing

namespace cusnap::testing {
namespace {

// Which image file a corruption case damages.
enum class FileKind { kCarrier, kCriuPages, kCriuImage, kStateFile, kManifest };

std::string KindName(const ::testing::TestParamInfo<FileKind>& info) {
  switch (info.param) {
    case FileKind::kCarrier: return "Carrier";
    case FileKind::kCriuPages: return "CriuPages";
    case FileKind::kCriuImage: return "CriuImage";
    case FileKind::kStateFile: return "StateFile";
    case FileKind::kManifest: return "Manifest";
  }
  return "Unknown";
}

class CliImagesCorrupt : public CliImages, public ::testing::WithParamInterface<FileKind> {
 protected:
  /// Whether `name` is a file of this case's kind.
  bool OfKind(const std::string& name) const {
    switch (GetParam()) {
      case FileKind::kCarrier: return coord::IsCarrierFile(name);
      case FileKind::kCriuPages: return coord::IsCriuPageImage(name);
      case FileKind::kCriuImage: return name.ends_with(".img") && !coord::IsCriuPageImage(name);
      case FileKind::kStateFile: return name == coord::kStateFileName;
      case FileKind::kManifest: return name == coord::kManifestFileName;
    }
    return false;
  }

  /// The file of `images` this case damages: the first carrier file, CRIU's largest page
  /// image or largest other image, the state file or the manifest.
  std::string Victim(const std::string& images) const {
    const auto fits = [this](const std::string& name) { return OfKind(name); };
    if (GetParam() != FileKind::kCarrier) return LargestFile(images, fits);
    std::string first;
    for (const auto& e : std::filesystem::directory_iterator(images)) {
      const std::string name = e.path().filename().string();
      if (fits(name) && (first.empty() || name < first)) first = name;
    }
    return first.empty() ? "" : images + "/" + first;
  }

  /// `restore --images-dir` must refuse (exit 5) naming `path`, leave no process of the
  /// dump behind and the images restorable; returns what it printed. `streamed`: the damage
  /// is found as reallocate streams a carrier to the GPU, else before reallocate runs.
  Ran ExpectRefusedNaming(const std::string& images, const std::string& path,
                          const coord::Manifest& manifest, const std::string& what,
                          bool streamed = false) {
    const Ran r = Cusnap({"restore", "--images-dir", images});
    EXPECT_EQ(r.status, kExitRestoreRefused) << what << "\n" << r.out << r.err;
    EXPECT_THAT(r.err, HasSubstr(path)) << what;
    EXPECT_THAT(r.err, HasSubstr("refused; nothing was changed")) << what;
    if (streamed) {
      EXPECT_THAT(r.out, ::testing::ContainsRegex("reallocate .*FAILED")) << what;
    } else {
      EXPECT_THAT(r.out, ::testing::Not(HasSubstr("reallocate"))) << what;
    }
    AwaitGone(manifest);
    EXPECT_FALSE(std::filesystem::exists(images + "/" + coord::kRestoreRecordName)) << what;
    return r;
  }
};

// A byte flipped at the first, a middle and the last offset of any image file (a carrier,
// CRIU's page image or another of its images, the state file, the manifest), the file
// truncated, and an extra dump file: each refuses the restore before the job runs again,
// naming the file (a carrier's chunk is found as its shim streams it to the GPU at
// reallocate, a page image's beside criu restore: the processes CRIU brought back are ended,
// having run no application code); mended, the same images restore every byte.
TEST_P(CliImagesCorrupt, AnyDamagedImageFileRefusesTheRestoreNamingItAndMendedRestores) {
  SKIP_UNLESS_CRIU_ROUND_TRIPS();
  const std::string job_dir = dir_ + "/job", images = dir_ + "/images", log = dir_ + "/job.log";
  std::optional<coord::Manifest> manifest;
  ASSERT_NO_FATAL_FAILURE(DumpAway(job_dir, images, log, manifest));
  const std::string path = Victim(images);
  ASSERT_FALSE(path.empty()) << "no file of that kind in " << images;
  const std::string good = ReadAll(path);
  ASSERT_GT(good.size(), 2u);
  // CRIU restores the job's output file as it was dumped (a file that grew since fails the
  // restore): a refused restore must not have written into it.
  const std::string output = ReadAll(log);
  for (const size_t at : {size_t{0}, good.size() / 2, good.size() - 1}) {
    std::string bad = good;
    bad[at] = static_cast<char>(bad[at] ^ 0xff);
    WriteAll(path, bad);
    const bool carrier = GetParam() == FileKind::kCarrier;
    const Ran r = ExpectRefusedNaming(images, path, *manifest,
                                      "byte " + std::to_string(at) + " flipped", carrier);
    if (carrier) {
      EXPECT_THAT(r.err, HasSubstr("do not match the digest written with them"));
    }
    if (carrier || GetParam() == FileKind::kCriuPages) {
      // Found after CRIU brought the processes back, which were ended unrun.
      EXPECT_THAT(r.err, HasSubstr("processes CRIU brought back were ended before any of them "
                                   "ran application code again; " + images + " is as it was"));
    }
    EXPECT_EQ(ReadAll(log), output) << "the refused restore wrote into the job's output";
    if (GetParam() == FileKind::kCriuPages) {
      EXPECT_THAT(r.out, ::testing::ContainsRegex("criu_restore .*FAILED")) << r.out;
    }
  }
  WriteAll(path, good.substr(0, good.size() - 1));
  ExpectRefusedNaming(images, path, *manifest, "truncated");
  WriteAll(path, good);
  if (GetParam() == FileKind::kCriuImage) {
    const std::string extra = images + "/core-4194303.img";
    WriteAll(extra, "not of this dump");
    ExpectRefusedNaming(images, extra, *manifest, "an extra file");
    std::filesystem::remove(extra);
  }
  ExpectRestoredWhole(images, job_dir, log);
}

INSTANTIATE_TEST_SUITE_P(EveryKind, CliImagesCorrupt,
                         ::testing::Values(FileKind::kCarrier, FileKind::kCriuPages,
                                           FileKind::kCriuImage, FileKind::kStateFile,
                                           FileKind::kManifest),
                         KindName);

}  // namespace
}  // namespace cusnap::testing
