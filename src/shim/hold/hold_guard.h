// A held job stays held, whatever its shell, its terminal or a user does with signals
// (a job is never stranded). The long-suspend hold stops each participant with SIGSTOP
// (coordinator/participants/hold.h) while its GPU memory is released; a process that runs on then faults
// on the first access to that memory. Two signals continue a stopped process:
// - SIGHUP then SIGCONT, when the shell that started the job in the background exits (the
//   job's process group is orphaned with a stopped member: POSIX "orphaned process group";
//   Linux kernel/exit.c, kill_orphaned_pgrp) or its terminal hangs up (bash sends its jobs
//   SIGHUP, then SIGCONT). With SIGHUP's default disposition the held processes die.
// - a plain SIGCONT: `kill -CONT`, a shell's `bg` or `fg`, a process supervisor.
//
// While this process is checkpointed (from the release step to activate), the guard
// replaces a default or ignored disposition of each of these signals with its own handler.
// The handler drops the signal and, when cusnap holds the process (its held marker exists),
// stops the process again, undoing the continue that came with it (the kernel continues a
// stopped process when SIGCONT is sent, before any handler runs). What was dropped is logged
// at activate. An application that installed its own handler for one of them is left alone
// for that one: it decides. SIGTERM and SIGKILL still end a held process (bash sends SIGTERM
// to the stopped jobs it still lists when it exits: docs/LONG-SUSPEND.md). `cusnap
// restore` and `recover` rename the marker away before their own SIGCONT, so the guard never
// undoes those.
#pragma once

#include <string>

#include "common/error.h"

namespace cusnap::shim {

/// Arms the guard (idempotent). `held_marker` is this process's hold marker
/// (HeldMarkerPath); its existence, checked from the handler with access(2), says cusnap
/// holds the process. Per signal (SIGHUP, SIGCONT), only when its disposition is SIG_DFL or
/// SIG_IGN.
void ArmHoldGuard(const std::string& held_marker);

/// Holds this process again: writes its marker `held_marker` (common/hold_marker.h, as the
/// coordinator's StopHeld does) and stops the process with SIGSTOP; returns once the process
/// was continued (by a restore, which renames the marker away first). Error (code errno,
/// naming the file) when the marker cannot be written: the process is then not stopped (a
/// process found stopped with no marker is never continued by cusnap).
/// `phase` (its ShimState name) goes into the marker: `cusnap status` shows it.
Status HoldThisProcess(const std::string& held_marker, const std::string& phase);

/// Puts back the dispositions the guard replaced (each unless the application changed it
/// since) and logs the signals it dropped. Nothing when the guard is not armed.
void DisarmHoldGuard();

}  // namespace cusnap::shim
