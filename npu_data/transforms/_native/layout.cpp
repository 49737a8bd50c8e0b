// Layout kernels: per-sample left-right flip and the final normalisation to float32.

#include "kernels.h"
#include "parallel.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace npu_data_native {

namespace {
// A flip's per-sample inputs, checked: valid widths and flags, B rows each.
struct FlipArgs {
  at::Tensor sizes, flip;
  int64_t B, C, H, W;
  FlipArgs(const at::Tensor& images, const at::Tensor& sizes_in, const at::Tensor& flip_in)
      : sizes(sizes_in.to(at::kLong).contiguous()), flip(flip_in.to(at::kBool).contiguous()),
        B(images.size(0)), C(images.size(1)), H(images.size(2)), W(images.size(3)) {
    TORCH_CHECK(sizes.size(0) == B && flip.numel() == B, "sizes and flip_mask need B rows");
  }
  // The valid width of plane p when its sample is flipped (and wider than 1), else 0.
  int64_t flipped_width(int64_t p) const {
    const int64_t b = p / C;
    const int64_t w = std::clamp<int64_t>(sizes.data_ptr<int64_t>()[b * 2 + 1], 0, W);
    return flip.data_ptr<bool>()[b] && w > 1 ? w : 0;
  }
};
}  // namespace

// Mirror each flagged sample left-right within its valid width; the padding stays put.
at::Tensor hflip(const at::Tensor& images_in, const at::Tensor& sizes_in, const at::Tensor& flip_in) {
  TORCH_CHECK(images_in.dim() == 4 && images_in.scalar_type() == at::kByte,
              "images must be uint8 (B, C, H, W)");
  const at::Tensor images = images_in.contiguous();
  const FlipArgs a(images, sizes_in, flip_in);
  const int64_t H = a.H, W = a.W;
  at::Tensor out = at::empty_like(images);
  const uint8_t* in_p = images.data_ptr<uint8_t>();
  uint8_t* out_p = out.data_ptr<uint8_t>();
  parallel_for_samples(a.B * a.C, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const uint8_t* src = in_p + p * H * W;
      uint8_t* dst = out_p + p * H * W;
      const int64_t w = a.flipped_width(p);
      if (w == 0) {
        std::memcpy(dst, src, static_cast<size_t>(H * W));
        continue;
      }
      for (int64_t y = 0; y < H; ++y) {
        const uint8_t* __restrict__ s = src + y * W;
        uint8_t* __restrict__ d = dst + y * W;
#pragma omp simd
        for (int64_t x = 0; x < w; ++x) d[x] = s[w - 1 - x];
        if (w < W) std::memcpy(d + w, s + w, static_cast<size_t>(W - w));
      }
    }
  });
  return out;
}

// hflip in place: each flagged sample's valid width reversed row by row, the rest untouched.
void hflip_(at::Tensor& images, const at::Tensor& sizes_in, const at::Tensor& flip_in) {
  TORCH_CHECK(images.dim() == 4 && images.scalar_type() == at::kByte && images.is_contiguous(),
              "hflip_: images must be contiguous uint8 (B, C, H, W)");
  const FlipArgs a(images, sizes_in, flip_in);
  const int64_t H = a.H, W = a.W;
  uint8_t* base = images.data_ptr<uint8_t>();
  parallel_for_samples(a.B * a.C, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t w = a.flipped_width(p);
      uint8_t* plane = base + p * H * W;
      for (int64_t y = 0; w > 0 && y < H; ++y) std::reverse(plane + y * W, plane + y * W + w);
    }
  });
}

// (x / 255 - mean[c]) / std[c] in float32, each step rounded like torch's elementwise ops;
// NCHW contiguous output, or channels-last when asked (written directly, no second copy).
at::Tensor normalize(const at::Tensor& images_in, const at::Tensor& mean_in,
                     const at::Tensor& std_in, bool channels_last) {
  TORCH_CHECK(images_in.dim() == 4 && images_in.scalar_type() == at::kByte,
              "images must be uint8 (B, C, H, W)");
  const at::Tensor images = images_in.contiguous();
  const at::Tensor mean = mean_in.to(at::kFloat).contiguous();
  const at::Tensor stdv = std_in.to(at::kFloat).contiguous();
  const int64_t B = images.size(0), C = images.size(1), H = images.size(2), W = images.size(3);
  TORCH_CHECK(mean.numel() == C && stdv.numel() == C, "mean and std need one value per channel");
  at::Tensor out = channels_last
      ? at::empty({B, C, H, W}, images.options().dtype(at::kFloat).memory_format(at::MemoryFormat::ChannelsLast))
      : at::empty({B, C, H, W}, images.options().dtype(at::kFloat));
  const uint8_t* in_p = images.data_ptr<uint8_t>();
  float* out_p = out.data_ptr<float>();
  const float* m = mean.data_ptr<float>();
  const float* sd = stdv.data_ptr<float>();
  const int64_t plane = H * W;
  parallel_for_samples(B * C, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t b = p / C, c = p % C;
      const uint8_t* __restrict__ src = in_p + p * plane;
      const float mc = m[c], sc = sd[c];
      if (!channels_last) {
        float* __restrict__ dst = out_p + p * plane;
#pragma omp simd
        for (int64_t i = 0; i < plane; ++i) dst[i] = (static_cast<float>(src[i]) / 255.0f - mc) / sc;
      } else {
        float* __restrict__ dst = out_p + b * plane * C + c;
        for (int64_t i = 0; i < plane; ++i) dst[i * C] = (static_cast<float>(src[i]) / 255.0f - mc) / sc;
      }
    }
  });
  return out;
}

}  // namespace npu_data_native
