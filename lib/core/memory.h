// Measured memory accounting. CPU: a counting wrapper around libtorch's CPU allocator
// (current and peak bytes). CUDA: the caching allocator's statistics.
// CONTRACT header written before the implementation; the recompute work owns and may extend it.
#pragma once
#include <cstdint>

namespace ht::memory {

// Installs the counting CPU allocator (idempotent). Call before allocating model tensors.
void install_cpu_counter();
bool cpu_counter_installed();
int64_t cpu_current_bytes();
int64_t cpu_peak_bytes();
void reset_cpu_peak();  // peak := current

// CUDA caching allocator statistics for a device (0 when CUDA is unavailable).
int64_t cuda_current_bytes(int device);
int64_t cuda_peak_bytes(int device);
void reset_cuda_peak(int device);

// Process peak resident set size (VmHWM) in bytes.
int64_t process_peak_rss_bytes();

}  // namespace ht::memory
