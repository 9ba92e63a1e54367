// gnuplot as a child process for the plots of plot.h: found in PATH, run on one script with a time
// limit. Its console output (warnings such as "empty x range" for a one-point run, its errors) is
// captured, never shown on our console; a failure reports it, shortened, inside one error line.
#pragma once
#include <string>

namespace ht::train {

// The gnuplot executable found in PATH, or "" (for the skip line and tests).
std::string find_gnuplot();

// Runs `gnuplot script`, which draws `png`, and waits at most timeout_s. SIGUSR1 and SIGTERM are
// blocked in gnuplot: they are the trainer's pre-emption signals, and Slurm (proctrack/linuxproc,
// srun) delivers them to every process of the job step, so one arriving while a finished run
// draws its plot used to kill gnuplot ("gnuplot failed ... (status 10)": signal 10 = SIGUSR1).
// Throws ht::Error(kData) naming png, how gnuplot ended and what it said.
void run_gnuplot(const std::string& gnuplot, const std::string& script, const std::string& png, double timeout_s);

}  // namespace ht::train
