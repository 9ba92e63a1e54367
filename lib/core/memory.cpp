#include "core/memory.h"

#include <c10/core/CPUAllocator.h>
#include <torch/cuda.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <string>

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

// The DataPtr context of a counted allocation: the wrapped allocator's DataPtr and the size,
// so the deleter can count the free and then release the memory through the original deleter.
struct Counted {
  c10::DataPtr inner;
  int64_t bytes;
};

void delete_counted(void* ctx) {
  auto* c = static_cast<Counted*>(ctx);
  g_current.fetch_sub(c->bytes, std::memory_order_relaxed);
  delete c;  // ~DataPtr frees through the original allocator
}

class CountingCpuAllocator final : public c10::Allocator {
 public:
  explicit CountingCpuAllocator(c10::Allocator* base) : base_(base) {}

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
    c10::DataPtr inner;
    try {
      inner = base_->allocate(n);
    } catch (...) {
      g_current.fetch_sub(bytes, std::memory_order_relaxed);
      throw;
    }
    void* data = inner.get();
    const c10::Device device = inner.device();
    return c10::DataPtr(data, new Counted{std::move(inner), bytes}, &delete_counted, device);
  }

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
