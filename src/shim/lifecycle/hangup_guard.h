// A checkpointed job survives its shell and its terminal (issue 11: never strand a job).
// The long-suspend hold stops each participant with SIGSTOP (coordinator/hold.h). When the
// shell that started the job in the background exits, the job's process group becomes
// orphaned while it has a stopped member, and the kernel sends every member SIGHUP, then
// SIGCONT (POSIX "orphaned process group"; Linux kernel/exit.c, kill_orphaned_pgrp). A
// terminal that hangs up reaches the job the same way, from the kernel or from the shell
// (bash sends its jobs SIGHUP, then SIGCONT). With SIGHUP's default disposition the held
// processes die, and the checkpointed job with them.
//
// While this process is checkpointed (from the release step to activate), the guard
// replaces a default or ignored SIGHUP disposition with its own handler, which drops the
// SIGHUP and, when cusnap holds the process (its held marker exists), stops the process
// again, undoing the SIGCONT that came with it. What was dropped is logged at activate. An
// application that installed its own SIGHUP handler is left alone: it decides. SIGTERM and
// SIGKILL still end a held process (bash sends SIGTERM to the stopped jobs it still lists
// when it exits: README, "Long suspends").
#pragma once

#include <string>

namespace cusnap::shim {

/// Arms the guard (idempotent). `held_marker` is this process's hold marker
/// (HeldMarkerPath); its existence, checked from the handler with access(2), says cusnap
/// holds the process. Only when the disposition is SIG_DFL or SIG_IGN; otherwise nothing.
void ArmHangupGuard(const std::string& held_marker);

/// Puts back the disposition the guard replaced (unless the application changed it since)
/// and logs the hangups it dropped. Nothing when the guard is not armed.
void DisarmHangupGuard();

}  // namespace cusnap::shim
