// Every CUSNAP_* setting read from the environment, as one table of plain constant data that
// the shim and the CLI both include: its name, what it takes, its default, who reads it and
// what it means. The CLI refuses a bad value of a setting a command reads before the command
// starts (`cusnap run` every setting of the table: the job inherits them); the shim logs a
// bad value and uses the default, and reports it over its endpoint (kIdentify). The README's
// settings table is checked against this one (tests/unit/common_settings_test.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/durations.h"

namespace cusnap::settings {

/// What a setting takes.
enum class Kind : uint8_t {
  kChoice,  ///< one of `words`
  kNumber,  ///< a whole number from `min` to `max`, a multiple of `multiple`, or one of `words`
  kPath,    ///< any path (the control directory's own checks are control_dir.h's)
  kFile,    ///< a file one can append to: a writable file, or a new one in a writable folder
  kText,    ///< any text
};

/// Who reads a setting: the shim, and the `cusnap` commands, as bits.
enum Reader : uint32_t {
  kShim = 1u << 0,
  kRun = 1u << 1,
  kCheckpoint = 1u << 2,
  kRestore = 1u << 3,
  kRecover = 1u << 4,
  kDump = 1u << 5,
  kStatus = 1u << 6,
  kInspect = 1u << 7,
  kDemo = 1u << 8,
  kCriuPlugin = 1u << 9,  ///< libcusnap_criu.so, CRIU's plugin (docs/CONTAINERS.md)
};

/// The readers' names, in bit order ("shim", "run", ... "CRIU plugin").
inline constexpr const char* kReaderNames[] = {"shim",    "run",    "checkpoint", "restore",
                                               "recover", "dump",   "status",     "inspect",
                                               "demo",    "CRIU plugin"};

/// One setting. Plain data: a constant expression the shim can hold without running code.
struct Setting {
  const char* name;
  Kind kind;
  /// kChoice: the values, '|'-separated, the default first; kNumber: words taken besides
  /// numbers ("" when none).
  const char* words;
  uint64_t min;       ///< kNumber: the smallest number taken
  uint64_t max;       ///< kNumber: the largest
  uint64_t multiple;  ///< kNumber: numbers taken are multiples of this (1: any)
  const char* unit;   ///< kNumber: "ms", "MiB", "threads", "bytes"
  const char* fallback;  ///< the default, as the README says it
  uint32_t readers;      ///< Reader bits
  const char* meaning;   ///< one sentence; the README's row starts with it
};

inline constexpr uint32_t kCommandsThatDrive = kCheckpoint | kRestore | kRecover | kDump;

inline constexpr Setting kControlDir{
    "CUSNAP_CONTROL_DIR", Kind::kPath, "", 0, 0, 1, "",
    "`$XDG_RUNTIME_DIR/cusnap`, else `/tmp/cusnap-<uid>`",
    kShim | kRun | kCommandsThatDrive | kStatus | kDemo | kCriuPlugin,
    "where endpoints live; created mode 0700 when missing"};
inline constexpr Setting kStateDir{
    "CUSNAP_STATE_DIR", Kind::kPath, "", 0, 0, 1, "", "`./cusnap-state`",
    kCheckpoint | kRestore | kRecover | kInspect,
    "the state directory when `--state-dir` is not given"};
inline constexpr Setting kLog{
    "CUSNAP_LOG", Kind::kChoice, "error|warn|info|debug", 0, 0, 1, "", "`error`", kShim,
    "how much the shim logs, as `cusnap[pid]` lines on the job's stderr or in `CUSNAP_LOG_FILE`"};
inline constexpr Setting kLogFile{
    "CUSNAP_LOG_FILE", Kind::kFile, "", 0, 0, 1, "", "the job's stderr", kShim,
    "a file the shim appends its log lines to instead (created mode 0600 when missing)"};
inline constexpr Setting kCarrier{
    "CUSNAP_CARRIER", Kind::kChoice, "lazy|eager", 0, 0, 1, "", "`lazy`", kShim,
    "when the host carrier's memory is provided"};
inline constexpr Setting kCarry{
    "CUSNAP_CARRY", Kind::kChoice, "all|shared", 0, 0, 1, "", "`all`", kShim,
    "which `cuMemCreate` allocations the shim tracks and carries through the host carrier"};
inline constexpr Setting kCarrierPin{
    "CUSNAP_CARRIER_PIN", Kind::kChoice, "kept|pipelined|transfer", 0, 0, 1, "", "`kept`",
    kShim, "how the carrier's host memory is pinned for the copies"};
inline constexpr Setting kCarrierChunkMib{
    "CUSNAP_CARRIER_CHUNK_MIB", Kind::kNumber, "", 2, 65536, 2, "MiB", "`64`", kShim,
    "the carrier's copy, pinning and zero-scan unit"};
inline constexpr Setting kZeroScan{
    "CUSNAP_ZERO_SCAN", Kind::kChoice, "on|off", 0, 0, 1, "", "`on`", kShim,
    "whether a device-side scan skips chunks that are all zero"};
inline constexpr Setting kCarrierKeep{
    "CUSNAP_CARRIER_KEEP", Kind::kNumber, "all|none", 1, uint64_t{1} << 30, 1, "MiB", "`all`",
    kShim, "host memory the carrier keeps once a cycle finished"};
inline constexpr Setting kCarrierThreads{
    "CUSNAP_CARRIER_THREADS", Kind::kNumber, "", 1, 64, 1, "threads",
    "`16`, at most the CPUs the process may run on", kShim,
    "threads that first-touch a growing carrier arena and stream carrier files to and from the GPU"};
inline constexpr Setting kCarrierRingMib{
    "CUSNAP_CARRIER_RING_MIB", Kind::kNumber, "", 2, 65536, 2, "MiB", "`512`", kShim,
    "the most pinned host memory a dump or restore streams carrier files through (4 MiB a thread)"};
inline constexpr Setting kLeaseMs{
    "CUSNAP_LEASE_MS", Kind::kNumber, "", 1, kMaxLeaseMs, 1, "ms", "`10000`", kCommandsThatDrive,
    "the lease a command holds on the job"};
inline constexpr Setting kDriver{
    "CUSNAP_DRIVER", Kind::kChoice, "auto|real|sim", 0, 0, 1, "", "`auto`",
    kRun | kCommandsThatDrive | kDemo, "which CUDA driver cusnap loads"};
inline constexpr Setting kHold{
    "CUSNAP_HOLD", Kind::kChoice, "stop|run", 0, 0, 1, "", "`stop`", kCommandsThatDrive,
    "whether a checkpointed job's CUDA processes are held stopped until `restore`"};
inline constexpr Setting kCriu{
    "CUSNAP_CRIU", Kind::kPath, "", 0, 0, 1, "", "`criu` on `PATH`", kRestore | kDump,
    "the CRIU program `dump` and `restore --images-dir` run"};
inline constexpr Setting kCriuOpts{
    "CUSNAP_CRIU_OPTS", Kind::kText, "", 0, 0, 1, "", "none", kRestore | kDump,
    "more CRIU options for both (space-separated)"};
inline constexpr Setting kBin{
    "CUSNAP_BIN", Kind::kPath, "", 0, 0, 1, "", "`../../bin/cusnap` from the plugin",
    kCriuPlugin, "the `cusnap` program the CRIU plugin runs"};
inline constexpr Setting kDeviceMap{
    "CUSNAP_DEVICE_MAP", Kind::kText, "", 0, 0, 1, "", "none", kCriuPlugin,
    "the `--device-map` of a restore CRIU runs with the plugin"};
inline constexpr Setting kDumpRunsCriu{
    "CUSNAP_DUMP_RUNS_CRIU", Kind::kText, "", 0, 0, 1, "", "unset", kCriuPlugin,
    "set by `cusnap dump` and `restore --images-dir` for the CRIU they run: the plugin stays out"};
inline constexpr Setting kTestCgroupRoot{
    "CUSNAP_TEST_CGROUP_ROOT", Kind::kPath, "", 0, 0, 1, "", "`/sys/fs/cgroup`", kShim,
    "tests only: a folder the shims' resource check reads instead of `/sys/fs/cgroup`"};
inline constexpr Setting kTestStateDirFreeBytes{
    "CUSNAP_TEST_STATE_DIR_FREE_BYTES", Kind::kNumber, "", 0, uint64_t{1} << 62, 1, "bytes",
    "what statvfs says", kCheckpoint | kDump,
    "tests only: the bytes free taken for the state directory's filesystem"};
inline constexpr Setting kTestPauseAt{
    "CUSNAP_TEST_PAUSE_AT", Kind::kText, "", 0, 0, 1, "", "none", kCommandsThatDrive | kCriuPlugin,
    "tests only: the phases at which a command stops itself until continued"};
inline constexpr Setting kTestCarrierIoFault{
    "CUSNAP_TEST_CARRIER_IO_FAULT", Kind::kText, "", 0, 0, 1, "", "none", kShim,
    "tests only: a fault in one unit of a carrier file's write or read"};

/// Every setting, in the README's order.
inline constexpr const Setting* kAll[] = {
    &kControlDir,  &kStateDir,         &kLog,        &kLogFile,   &kCarrier,   &kCarry,
    &kCarrierPin,  &kCarrierChunkMib,  &kZeroScan,   &kCarrierKeep, &kCarrierThreads, &kCarrierRingMib,
    &kLeaseMs,     &kDriver,           &kHold,       &kCriu,      &kCriuOpts,
    &kBin,         &kDeviceMap,        &kDumpRunsCriu, &kTestCgroupRoot,
    &kTestStateDirFreeBytes, &kTestPauseAt, &kTestCarrierIoFault};

/// The value of `setting` in this process's environment; nullptr when unset or empty (both
/// mean the default).
const char* Value(const Setting& setting);

/// The place of `value` among a kChoice's values or a kNumber's words (0 for the first),
/// nullopt when it is not one of them.
std::optional<size_t> WordIndex(const Setting& setting, std::string_view value);

/// A kNumber's `value` as a number when it is a whole number in its range and a multiple of
/// its `multiple` (digits only: no sign, space or fraction); nullopt otherwise (words too).
std::optional<uint64_t> NumberOf(const Setting& setting, std::string_view value);

/// Whether `value` is taken: a kChoice's value, a kNumber's number or word, a kFile that is a
/// writable file or a missing one in a writable folder (asked of the file system now), any
/// kPath or kText.
bool Accepts(const Setting& setting, std::string_view value);

/// What `setting` takes, as a phrase: "one of error, warn, info, debug", "a whole number of
/// ms from 1 to 3600000", "all, none or a whole number of MiB from 1 to 1073741824", "an
/// even whole number of MiB from 2 to 65536", "a path", "any text".
std::string Takes(const Setting& setting);

/// "NAME='value' is not <Takes>" for a value Accepts refuses.
std::string Refusal(const Setting& setting, std::string_view value);

/// The readers named, comma-separated, in kReaderNames' order.
std::string ReadersText(uint32_t readers);

/// The refusal of every setting one of `readers` reads whose value in the environment is not
/// taken, in kAll's order; empty when all are fine.
std::vector<std::string> EnvironmentProblems(uint32_t readers);

/// A few values `setting` does not take, for tests and examples (none for kPath and kText; a
/// kFile's are a file in a missing folder and a directory).
std::vector<std::string> BadValues(const Setting& setting);

/// The default as plain text, without the README's backquotes: "64" for "`64`".
std::string FallbackText(const Setting& setting);

/// "NAME='value' is not <Takes>; using the default, <fallback>": how a shim logs and reports a
/// value it does not take.
std::string DefaultUsed(const Setting& setting, std::string_view value);

/// The README's row of `setting` up to its meaning: "| `NAME` | takes | default | readers | ".
std::string ReadmeRowStart(const Setting& setting);

}  // namespace cusnap::settings
