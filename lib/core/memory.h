// Measured memory accounting. CPU: a counting wrapper around libtorch's CPU allocator
// (current and peak bytes, optional hard cap). CUDA: the caching allocator's statistics.
// Process: peak resident set size from /proc/self/status.
#pragma once
#include <cstdint>

namespace ht::memory {

// Installs the counting CPU allocator (idempotent). Call before allocating model tensors:
// only allocations made after installation are counted (and freed-counted). Reads the cap
// from the environment variable HPCTRAIN_CPU_MEM_LIMIT_BYTES (unset or 0 = no cap).
void install_cpu_counter();
bool cpu_counter_installed();
int64_t cpu_current_bytes();
int64_t cpu_peak_bytes();
void reset_cpu_peak();  // peak := current

// Hard cap on counted CPU tensor bytes (0 = none). An allocation that would push the counted
// current bytes above the cap throws ht::Error(kRuntime) naming the request, the cap and the
// variable. This is the in-process memory cap used to demonstrate activation recompute
// (`ulimit -v` is unusable with libtorch's CUDA build, which reserves large virtual ranges).
void set_cpu_limit_bytes(int64_t limit_bytes);
int64_t cpu_limit_bytes();

// CUDA caching allocator statistics for a device (0 when CUDA is unavailable).
int64_t cuda_current_bytes(int device);
int64_t cuda_peak_bytes(int device);
void reset_cuda_peak(int device);

// Makes the C library keep freed memory for later allocations instead of returning it to the OS
// (glibc: no mmap for large blocks, no trimming of the heap's top). A training step frees and
// allocates the same activations and casts every step; returned to the OS, every page of them
// faults again on the next step (7-17 % system time at a 4 x 512 model on CPU). Resident memory
// then stays at its high-water mark. False where the C library has no such setting.
bool retain_freed_memory();

// Process peak resident set size (VmHWM) in bytes; 0 when /proc is unavailable.
int64_t process_peak_rss_bytes();

}  // namespace ht::memory
