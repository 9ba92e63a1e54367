// The counting CPU allocator: current/peak bytes follow tensor allocations and frees, the cap
// throws a clear ht::Error, and the CUDA/RSS queries answer sensibly on this machine;
// retain_freed_memory keeps a large freed block in the process where glibc would unmap it.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <cstring>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "core/error.h"
#include "core/memory.h"

namespace ht::memory {
namespace {

TEST(CoreMemory, CountsAllocationsAndFrees) {
  install_cpu_counter();
  install_cpu_counter();  // idempotent
  ASSERT_TRUE(cpu_counter_installed());
  const int64_t base = cpu_current_bytes();
  reset_cpu_peak();
  {
    auto t = torch::empty({1024, 256}, torch::kFloat);  // 1 MiB
    EXPECT_EQ(cpu_current_bytes() - base, 1024 * 256 * 4);
    auto u = torch::empty({1024}, torch::kDouble);
    EXPECT_EQ(cpu_current_bytes() - base, 1024 * 256 * 4 + 1024 * 8);
  }
  EXPECT_EQ(cpu_current_bytes(), base);
  EXPECT_GE(cpu_peak_bytes() - base, 1024 * 256 * 4 + 1024 * 8);
  reset_cpu_peak();
  EXPECT_EQ(cpu_peak_bytes(), cpu_current_bytes());
}

TEST(CoreMemory, PeakSeesTemporariesOfAnExpression) {
  install_cpu_counter();
  auto a = torch::ones({512, 512});
  const int64_t base = cpu_current_bytes();
  reset_cpu_peak();
  auto s = (a * 2 + 1).sum();  // two 1 MiB temporaries, freed when the expression ends
  EXPECT_EQ(cpu_current_bytes() - base, 4);
  EXPECT_GE(cpu_peak_bytes() - base, 512 * 512 * 4);
}

TEST(CoreMemory, CapThrowsClearErrorAndLeavesCountsConsistent) {
  install_cpu_counter();
  const int64_t base = cpu_current_bytes();
  set_cpu_limit_bytes(base + (1 << 20));
  auto small = torch::empty({1000}, torch::kFloat);
  try {
    auto big = torch::empty({1 << 20}, torch::kFloat);  // 4 MiB > cap
    FAIL() << "expected the cap to refuse the allocation";
  } catch (const ht::Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kRuntime);
    EXPECT_NE(std::string(e.what()).find("HPCTRAIN_CPU_MEM_LIMIT_BYTES"), std::string::npos) << e.what();
  } catch (const std::exception& e) {
    FAIL() << "wrong exception type: " << e.what();
  }
  set_cpu_limit_bytes(0);
  EXPECT_EQ(cpu_current_bytes(), base + 4000);
  EXPECT_THROW(set_cpu_limit_bytes(-1), ht::Error);
}

TEST(CoreMemory, ProcessAndCudaQueries) {
  EXPECT_GT(process_peak_rss_bytes(), 1 << 20);
  if (!torch::cuda::is_available()) {
    EXPECT_EQ(cuda_current_bytes(0), 0);
    EXPECT_EQ(cuda_peak_bytes(0), 0);
    reset_cuda_peak(0);
    GTEST_SKIP() << "no CUDA device: CUDA statistics are 0 by contract";
  }
  reset_cuda_peak(0);
  const int64_t before = cuda_current_bytes(0);
  auto t = torch::empty({1 << 20}, torch::TensorOptions().device(torch::kCUDA));
  EXPECT_GE(cuda_current_bytes(0) - before, 4 << 20);
  EXPECT_GE(cuda_peak_bytes(0), cuda_current_bytes(0));
}

#if defined(__GLIBC__)
// Allocates and touches `bytes`, then reports (bytes glibc holds in mmapped blocks while the block
// lives, free bytes it keeps in its heaps after the block is freed).
std::pair<size_t, size_t> mapped_then_kept(size_t bytes) {
  void* p = std::malloc(bytes);
  EXPECT_NE(p, nullptr);
  std::memset(p, 1, bytes);
  asm volatile("" : : "g"(p) : "memory");  // the block is used: the compiler keeps the malloc
  const size_t mapped = mallinfo2().hblkhd;
  std::free(p);
  return {mapped, mallinfo2().fordblks};
}

TEST(CoreMemory, RetainFreedMemoryKeepsLargeBlocksInTheProcess) {
  constexpr size_t kBlock = size_t{64} << 20;  // above glibc's largest dynamic mmap threshold (32 MiB)
  // Without it (a child process, this one's settings untouched): the block is mmapped, and unmapped on free.
  auto mapped_and_given_back = [&] {
    const auto [mapped, kept] = mapped_then_kept(kBlock);
    return mapped >= kBlock && kept < kBlock;
  };
  EXPECT_EXIT(std::_Exit(mapped_and_given_back() ? 0 : 1), ::testing::ExitedWithCode(0), "");
  ASSERT_TRUE(retain_freed_memory());
  const size_t mapped_before = mallinfo2().hblkhd;
  const auto [mapped, kept] = mapped_then_kept(kBlock);
  EXPECT_EQ(mapped, mapped_before) << "the block was mmapped";
  EXPECT_GE(kept, kBlock) << "the freed block went back to the OS";
}
#endif

}  // namespace
}  // namespace ht::memory
