#include "model/gelu.h"

// See model/avx512.h: GCC 12's false warning inside the intrinsics.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "core/error.h"
#include "model/avx2.h"
#include "model/avx512.h"

namespace ht::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

using avx512::cpu_has_avx512_bf16;
using avx512::with_element_type;

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;

// One copy of the kernels per instruction set (model/gelu_lanes.inc), each in its own namespace.
namespace lanes16 {
using V = __m512;
constexpr int64_t kLanes = 16;
#define HT_LANES_TARGET HT_AVX512_TARGET
HT_LANES_TARGET inline V splat(float a) { return _mm512_set1_ps(a); }
HT_LANES_TARGET inline V mul(V a, V b) { return _mm512_mul_ps(a, b); }
HT_LANES_TARGET inline V add(V a, V b) { return _mm512_add_ps(a, b); }
HT_LANES_TARGET inline V fmadd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
HT_LANES_TARGET inline V div(V a, V b) { return _mm512_div_ps(a, b); }
HT_LANES_TARGET inline V vmin(V a, V b) { return _mm512_min_ps(a, b); }
HT_LANES_TARGET inline V vexp(V a) { return avx512::exp16(a); }
HT_LANES_TARGET inline V load_lanes(const float* p) { return avx512::load16(p); }
HT_LANES_TARGET inline V load_lanes(const c10::BFloat16* p) { return avx512::load16(p); }
HT_LANES_TARGET inline void store_lanes(float* p, V v) { avx512::store16(p, v); }
HT_LANES_TARGET inline void store_lanes(c10::BFloat16* p, V v) { avx512::store16(p, v); }
#include "model/gelu_lanes.inc"
#undef HT_LANES_TARGET
}  // namespace lanes16

namespace lanes8 {
using V = __m256;
constexpr int64_t kLanes = 8;
#define HT_LANES_TARGET HT_AVX2_TARGET
HT_LANES_TARGET inline V splat(float a) { return _mm256_set1_ps(a); }
HT_LANES_TARGET inline V mul(V a, V b) { return _mm256_mul_ps(a, b); }
HT_LANES_TARGET inline V add(V a, V b) { return _mm256_add_ps(a, b); }
HT_LANES_TARGET inline V fmadd(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
HT_LANES_TARGET inline V div(V a, V b) { return _mm256_div_ps(a, b); }
HT_LANES_TARGET inline V vmin(V a, V b) { return _mm256_min_ps(a, b); }
HT_LANES_TARGET inline V vexp(V a) { return avx2::exp8(a); }
HT_LANES_TARGET inline V load_lanes(const float* p) { return avx2::load8(p); }
HT_LANES_TARGET inline void store_lanes(float* p, V v) { avx2::store8(p, v); }
#include "model/gelu_lanes.inc"
#undef HT_LANES_TARGET
}  // namespace lanes8

// Elementwise, so any split gives the same bits; the grain keeps small tensors on one thread.
constexpr int64_t kGrain = 1 << 15;

// One pass over x's elements in parallel through `path`'s kernels, for x in fp32 or bf16 (the 8-lane
// kernels see fp32 only: gelu_paths admits nothing else for them).
torch::Tensor forward_vec(const torch::Tensor& x, GeluPath path) {
  torch::Tensor y = torch::empty_like(x, at::MemoryFormat::Contiguous);
  with_element_type(x, [&](auto* type) {
    using T = std::remove_pointer_t<decltype(type)>;
    const T* xp = x.const_data_ptr<T>();
    T* yp = y.mutable_data_ptr<T>();
    at::parallel_for(0, x.numel(), kGrain, [&](int64_t b, int64_t e) {
      if constexpr (std::is_same_v<T, float>) {
        if (path == GeluPath::kAvx2) return lanes8::forward_range(xp + b, yp + b, e - b);
      }
      lanes16::forward_range(xp + b, yp + b, e - b);
    });
  });
  return y;
}

torch::Tensor backward_vec(const torch::Tensor& g, const torch::Tensor& x, GeluPath path) {
  torch::Tensor gx = torch::empty_like(x, at::MemoryFormat::Contiguous);
  with_element_type(x, [&](auto* type) {
    using T = std::remove_pointer_t<decltype(type)>;
    const T* gp = g.const_data_ptr<T>();
    const T* xp = x.const_data_ptr<T>();
    T* op = gx.mutable_data_ptr<T>();
    at::parallel_for(0, x.numel(), kGrain, [&](int64_t b, int64_t e) {
      if constexpr (std::is_same_v<T, float>) {
        if (path == GeluPath::kAvx2) return lanes8::backward_range(gp + b, xp + b, op + b, e - b);
      }
      lanes16::backward_range(gp + b, xp + b, op + b, e - b);
    });
  });
  return gx;
}

struct GeluTanhFunction : torch::autograd::Function<GeluTanhFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, GeluPath path) {
    ctx->save_for_backward({x});
    ctx->saved_data["path"] = static_cast<int64_t>(path);
    return forward_vec(x, path);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const torch::Tensor x = ctx->get_saved_variables()[0];
    const torch::Tensor g = grad_outputs[0].contiguous();
    // With create_graph the gradient must itself be differentiable: ATen's formula is.
    if (torch::GradMode::is_enabled() || g.scalar_type() != x.scalar_type())
      return {at::gelu_backward(g, x, "tanh"), torch::Tensor()};
    return {backward_vec(g, x, static_cast<GeluPath>(ctx->saved_data["path"].toInt())), torch::Tensor()};
  }
};

}  // namespace

std::vector<GeluPath> gelu_paths(const torch::Tensor& x) {
  std::vector<GeluPath> out;
  if (x.device().is_cpu() && x.is_contiguous()) {
    const bool f32 = x.scalar_type() == at::kFloat;
    if ((f32 || x.scalar_type() == at::kBFloat16) && cpu_has_avx512_bf16()) out.push_back(GeluPath::kAvx512);
    if (f32 && avx2::cpu_has_avx2_fma()) out.push_back(GeluPath::kAvx2);
  }
  out.push_back(GeluPath::kAten);
  return out;
}

GeluPath gelu_path(const torch::Tensor& x) { return gelu_paths(x).front(); }

const char* gelu_path_name(GeluPath p) {
  switch (p) {
    case GeluPath::kAvx512: return "avx512";
    case GeluPath::kAvx2: return "avx2";
    case GeluPath::kAten: break;
  }
  return "aten";
}

namespace {

// `path` already known to be admitted for x.
torch::Tensor gelu_tanh_on(const torch::Tensor& x, GeluPath path) {
  if (path == GeluPath::kAten) return torch::gelu(x, "tanh");
  if (!x.requires_grad() || !torch::GradMode::is_enabled()) return forward_vec(x, path);
  return GeluTanhFunction::apply(x, path);
}

}  // namespace

torch::Tensor gelu_tanh_via(const torch::Tensor& x, GeluPath path) {
  const auto admitted = gelu_paths(x);
  HT_REQUIRE(std::find(admitted.begin(), admitted.end(), path) != admitted.end(), ExitCode::kRuntime,
             "gelu_tanh: the {} path is not one this CPU and this tensor admit", gelu_path_name(path));
  return gelu_tanh_on(x, path);
}

// The model's call, once per block and step: the path list is built once, not again to check it.
torch::Tensor gelu_tanh(const torch::Tensor& x) { return gelu_tanh_on(x, gelu_path(x)); }

}  // namespace ht::model
