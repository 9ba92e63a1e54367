#include "core/memory.h"

#include <c10/core/CPUAllocator.h>
#include <torch/cuda.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <mutex>
#include <string>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#if __has_include(<c10/cuda/CUDACachingAllocator.h>)
#include <c10/cuda/CUDACachingAllocator.h>
#define HT_HAVE_CUDA_ALLOCATOR 1
#endif

#include "core/error.h"

namespace ht::memory {
namespace {

std::atomic<int64_t> g_current{0};
std::atomic<int64_t> g_peak{0};
std::atomic<int64_t> g_limit{0};
std::atomic<bool> g_installed{false};

void raise_peak(int64_t now) {
  int64_t peak = g_peak.load(std::memory_order_relaxed);
  while (now > peak && !g_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

// A counted allocation carries a header in front of the data: its size and the base allocator's
// raw deleter. The DataPtr's context is the data pointer itself, as with the default allocator,
// so the raw allocate/deallocate interface that some ATen kernels use (e.g. bf16 and fused
// optimizer scratch buffers) keeps working through the counter.
constexpr size_t kHeaderBytes = 64;  // keeps the data 64-byte aligned like the default allocator's
struct Header {
  int64_t bytes;
  c10::DeleterFnPtr base_delete;
};

void delete_counted(void* data) {
  auto* base = static_cast<char*>(data) - kHeaderBytes;
  const Header h = *reinterpret_cast<Header*>(base);
  g_current.fetch_sub(h.bytes, std::memory_order_relaxed);
  h.base_delete(base);
}

class CountingCpuAllocator final : public c10::Allocator {
 public:
  explicit CountingCpuAllocator(c10::Allocator* base) : base_(base) {
    HT_REQUIRE(base_->raw_deleter() != nullptr, ExitCode::kRuntime,
               "the CPU allocator in place has no raw interface; the memory counter cannot wrap it");
  }

  c10::DataPtr allocate(size_t n) override {
    const auto bytes = static_cast<int64_t>(n);
    const int64_t now = g_current.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    const int64_t limit = g_limit.load(std::memory_order_relaxed);
    if (limit > 0 && now > limit) {
      g_current.fetch_sub(bytes, std::memory_order_relaxed);
      HT_FAIL(ExitCode::kRuntime,
              "CPU memory cap exceeded: allocating {} bytes would bring counted tensor memory to {} bytes, above "
              "the cap of {} bytes (HPCTRAIN_CPU_MEM_LIMIT_BYTES); use a smaller batch or recompute.policy = full",
              bytes, now, limit);
    }
    raise_peak(now);
    char* base = nullptr;
    try {
      base = static_cast<char*>(base_->raw_allocate(n + kHeaderBytes));
    } catch (...) {
      g_current.fetch_sub(bytes, std::memory_order_relaxed);
      throw;
    }
    *reinterpret_cast<Header*>(base) = Header{bytes, base_->raw_deleter()};
    void* data = base + kHeaderBytes;
    return c10::DataPtr(data, data, &delete_counted, c10::Device(c10::DeviceType::CPU));
  }

  c10::DeleterFnPtr raw_deleter() const override { return &delete_counted; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

 private:
  c10::Allocator* base_;
};

int64_t parse_limit_env() {
  const char* s = std::getenv("HPCTRAIN_CPU_MEM_LIMIT_BYTES");
  if (s == nullptr || *s == '\0') return 0;
  try {
    size_t used = 0;
    const long long v = std::stoll(s, &used);
    if (used == std::string(s).size() && v >= 0) return v;
  } catch (const std::exception&) {
  }
  HT_FAIL(ExitCode::kUsage, "HPCTRAIN_CPU_MEM_LIMIT_BYTES='{}' is not a non-negative integer byte count", s);
}

}  // namespace

void install_cpu_counter() {
  static std::once_flag once;
  const int64_t limit = parse_limit_env();
  std::call_once(once, [] {
    // Never freed: tensors may outlive every other static.
    static auto* counting = new CountingCpuAllocator(c10::GetCPUAllocator());
    c10::SetCPUAllocator(counting, /*priority=*/100);
    g_installed = true;
  });
  if (limit > 0) set_cpu_limit_bytes(limit);
}

bool retain_freed_memory() {
#if defined(__GLIBC__)
  // M_TRIM_THRESHOLD takes an int: the largest one means "never trim".
  return mallopt(M_MMAP_MAX, 0) == 1 && mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max()) == 1;
#else
  return false;
#endif
}

bool cpu_counter_installed() { return g_installed.load(); }
int64_t cpu_current_bytes() { return g_current.load(std::memory_order_relaxed); }
int64_t cpu_peak_bytes() { return g_peak.load(std::memory_order_relaxed); }
void reset_cpu_peak() { g_peak.store(g_current.load(std::memory_order_relaxed), std::memory_order_relaxed); }

void set_cpu_limit_bytes(int64_t limit_bytes) {
  HT_REQUIRE(limit_bytes >= 0, ExitCode::kUsage, "CPU memory cap must be >= 0 bytes, got {}", limit_bytes);
  g_limit = limit_bytes;
}
int64_t cpu_limit_bytes() { return g_limit.load(); }

namespace {
bool cuda_device_ok(int device) {
  return torch::cuda::is_available() && device >= 0 && device < static_cast<int>(torch::cuda::device_count());
}
}  // namespace

#ifdef HT_HAVE_CUDA_ALLOCATOR
int64_t cuda_current_bytes(int device) {
  if (!cuda_device_ok(device)) return 0;
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(device));
  return stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].current;
}
int64_t cuda_peak_bytes(int device) {
  if (!cuda_device_ok(device)) return 0;
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(device));
  return stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].peak;
}
void reset_cuda_peak(int device) {
  if (cuda_device_ok(device))
    c10::cuda::CUDACachingAllocator::resetPeakStats(static_cast<c10::DeviceIndex>(device));
}
#else
int64_t cuda_current_bytes(int) { return 0; }
int64_t cuda_peak_bytes(int) { return 0; }
void reset_cuda_peak(int) {}
#endif

int64_t process_peak_rss_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;  // "VmHWM:   1234 kB"
  }
  return 0;
}

}  // namespace ht::memory
