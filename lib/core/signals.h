// Pre-emption signals (SIGTERM, SIGUSR1: what Slurm sends before a time limit or pre-emption).
// install() sets an async-signal-safe handler that only records the signal in a volatile
// sig_atomic_t; the training loop polls pending() once per step and agrees across ranks
// (comm.any(pending())) so that every rank stops at the same step, saves and exits with
// ExitCode::kRequeue (75). A second signal while the checkpoint is being written only sets
// the flag again: nothing is interrupted, nothing is corrupted.
#pragma once

namespace ht::signals {

// Installs the handler for SIGTERM and SIGUSR1 (SA_RESTART, so slow system calls are not
// interrupted). Idempotent. Throws ht::Error(kRuntime) if sigaction fails.
void install();
// True once SIGTERM or SIGUSR1 arrived after install() (or the last reset_for_tests()).
bool pending();
// The last signal number received (SIGTERM or SIGUSR1), 0 if none.
int last_signal();
// Human-readable name of last_signal() ("SIGTERM", "SIGUSR1" or "none").
const char* last_signal_name();
// Clears the flag (tests; also usable by a driver that handled the signal and continues).
void reset_for_tests();

}  // namespace ht::signals
