// Pillow-exact colour adjustments, a sample's whole sequence per call (npu_data::color_ops).
//
// Blends are float32 in1 + a * (in2 - in1), clipped and truncated; grayscale is Pillow's
// integer L; hue goes through Pillow's rgb2hsv / hsv2rgb with their float/double mix. Build
// with -ffp-contract=off: a fused multiply-add would round differently from Pillow.

#include "kernels.h"
#include "parallel.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace npu_data_native {
namespace {

inline int32_t gray_of(int32_t r, int32_t g, int32_t b) {
  return (r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16;
}

// Pillow's blend: float32 in1 + a * (in2 - in1), clipped, truncated.
// (clamping first gives the same bytes as Pillow's "<= 0 -> 0, >= 255 -> 255, else (UINT8)t")
inline uint8_t blend_value(float in1, float in2, float a) {
  const float t = in1 + a * (in2 - in1);
  return static_cast<uint8_t>(static_cast<int>(std::min(std::max(t, 0.0f), 255.0f)));
}


// Pillow's rgb2hsv for one non-grey pixel given as the branch Pillow takes (which channel is
// the maximum) and the distances of the two other channels from the maximum; the value
// depends on nothing else, which is what lets hue_tables() tabulate it.
int hue_level(int branch, int a, int c) {
  const int cr_i = std::max(a, c);  // maxc - minc
  if (cr_i == 0) return 0;
  const float cr = static_cast<float>(cr_i);
  const float qa = static_cast<float>(a) / cr, qc = static_cast<float>(c) / cr;
  float h0;
  if (branch == 0) {  // r is the maximum: a = maxc - g, c = maxc - b; h = bc - gc
    h0 = qc - qa;
  } else if (branch == 1) {  // g: a = maxc - r, c = maxc - b; h = 2.0 + rc - bc
    h0 = static_cast<float>(2.0 + qa - qc);
  } else {  // b: a = maxc - g, c = maxc - r; h = 4.0 + gc - rc
    h0 = static_cast<float>(4.0 + qa - qc);
  }
  const float h = static_cast<float>(std::fmod(h0 / 6.0 + 1.0, 1.0));
  return std::min(std::max(static_cast<int>(h * 255.0), 0), 255);
}

// Everything of the HSV round trip that depends on at most two 8-bit values, computed once
// with Pillow's own expressions, so the per-pixel loop has no division left.
struct HueTables {
  std::vector<int32_t> level;  // 3 * 65536: hue_level(branch, a, c) at branch << 16 | a << 8 | c
  std::vector<int32_t> sat;    // 65536: S = (int)((float)d / (float)maxc * 255.0) at d << 8 | maxc
  int32_t sector[256];         // i = floor(h * 6.0 / 255.0)
  float frac[256];             // f = h * 6.0 / 255.0 - i
  float fs[256];               // s / 255.0
  HueTables() : level(3 << 16), sat(1 << 16) {
    for (int branch = 0; branch < 3; ++branch)
      for (int a = 0; a < 256; ++a)
        for (int c = 0; c < 256; ++c) level[(branch << 16) | (a << 8) | c] = hue_level(branch, a, c);
    for (int d = 0; d < 256; ++d)
      for (int maxc = 0; maxc < 256; ++maxc) {
        int us = 0;
        if (d > 0 && maxc >= d) {
          const float sv = static_cast<float>(d) / static_cast<float>(maxc);
          us = std::min(std::max(static_cast<int>(sv * 255.0), 0), 255);
        }
        sat[(d << 8) | maxc] = us;
      }
    for (int h = 0; h < 256; ++h) {
      const double hf = static_cast<float>(h) * 6.0 / 255.0;
      const int i = static_cast<int>(std::floor(hf));
      sector[h] = i == 6 ? 0 : i;  // Pillow switches on i % 6
      frac[h] = static_cast<float>(hf - static_cast<float>(i));
      fs[h] = static_cast<float>(static_cast<float>(h) / 255.0);
    }
  }
};

const HueTables& hue_tables() {
  static const HueTables tables;  // built on first use (thread-safe static)
  return tables;
}

// Pillow's rgb2hsv, the H shift, and hsv2rgb, through the tables. Selections are written as
// arithmetic (x * 0/1 and sums with 0 are exact) so the row loop vectorises; non-negative
// values make round(x) == floor(x) + (frac >= 0.5).
inline void hue_pixel(uint8_t& r8, uint8_t& g8, uint8_t& b8, int shift, const HueTables& T) {
  const int r = r8, g = g8, b = b8;
  const int maxc = std::max(r, std::max(g, b));
  const int minc = std::min(r, std::min(g, b));
  const int d = maxc - minc;
  const int grey = d == 0;
  const int is_r = r == maxc;
  const int is_g = (1 - is_r) & (g == maxc);
  const int is_b = 1 - is_r - is_g;
  const int key = is_r * (((maxc - g) << 8) | (maxc - b)) +
                  is_g * ((1 << 16) | ((maxc - r) << 8) | (maxc - b)) +
                  is_b * ((2 << 16) | ((maxc - g) << 8) | (maxc - r));
  const int uh = T.level.data()[key] * (1 - grey);
  const int us = T.sat.data()[(d << 8) | maxc];
  const int hh = (uh + shift) & 255;
  // back to RGB
  const int i = T.sector[hh];
  const float f = T.frac[hh];
  const float fs = T.fs[us];
  const double v = static_cast<float>(maxc);
  const double xp = v * (1.0 - fs);
  const double xq = v * (1.0 - fs * f);
  const double xt = v * (1.0 - fs * (1.0 - f));
  const int ip = static_cast<int>(xp), iq = static_cast<int>(xq), it = static_cast<int>(xt);
  const int p = std::min(ip + static_cast<int>(xp - ip >= 0.5), 255);
  const int q = std::min(iq + static_cast<int>(xq - iq >= 0.5), 255);
  const int t = std::min(it + static_cast<int>(xt - it >= 0.5), 255);
  const int s0 = i == 0, s1 = i == 1, s2 = i == 2, s3 = i == 3, s4 = i == 4, s5 = i == 5;
  const int vi = maxc;
  const int ro = (s0 + s5) * vi + s1 * q + (s2 + s3) * p + s4 * t;
  const int go = s0 * t + (s1 + s2) * vi + s3 * q + (s4 + s5) * p;
  const int bo = (s0 + s1) * p + s2 * t + (s3 + s4) * vi + s5 * q;
  const int flat = us == 0;
  r8 = static_cast<uint8_t>(ro + flat * (vi - ro));
  g8 = static_cast<uint8_t>(go + flat * (vi - go));
  b8 = static_cast<uint8_t>(bo + flat * (vi - bo));
}

// One sample, planes r/g/b of `plane` values each (row stride W, valid h x w).
struct Planes {
  uint8_t* r;
  uint8_t* g;
  uint8_t* b;
  int64_t stride;
  int64_t rows;   // padded height
  int64_t cols;   // padded width
  int64_t vh;     // valid height
  int64_t vw;     // valid width
};

// Every op reads `in` and writes `out` (the same planes once the first op has run: elementwise,
// each value is read before it is written, and `omp simd` asserts nothing more).
#define NPU_DATA_ROWS(in, out, y)                                              \
  const uint8_t* ir = in.r + y * in.stride;                                    \
  const uint8_t* ig = in.g + y * in.stride;                                    \
  const uint8_t* ib = in.b + y * in.stride;                                    \
  uint8_t* orr = out.r + y * out.stride;                                       \
  uint8_t* og = out.g + y * out.stride;                                        \
  uint8_t* ob = out.b + y * out.stride

void brightness(const Planes& in, Planes& out, float f) {
  for (int64_t y = 0; y < in.rows; ++y) {
    NPU_DATA_ROWS(in, out, y);
#pragma omp simd
    for (int64_t x = 0; x < in.cols; ++x) {
      orr[x] = blend_value(0.0f, static_cast<float>(ir[x]), f);
      og[x] = blend_value(0.0f, static_cast<float>(ig[x]), f);
      ob[x] = blend_value(0.0f, static_cast<float>(ib[x]), f);
    }
  }
}

void saturation(const Planes& in, Planes& out, float f) {
  for (int64_t y = 0; y < in.rows; ++y) {
    NPU_DATA_ROWS(in, out, y);
#pragma omp simd
    for (int64_t x = 0; x < in.cols; ++x) {
      const float l = static_cast<float>(gray_of(ir[x], ig[x], ib[x]));
      orr[x] = blend_value(l, static_cast<float>(ir[x]), f);
      og[x] = blend_value(l, static_cast<float>(ig[x]), f);
      ob[x] = blend_value(l, static_cast<float>(ib[x]), f);
    }
  }
}

void contrast(const Planes& in, Planes& out, float f) {
  int64_t total = 0;
  for (int64_t y = 0; y < in.vh; ++y) {
    NPU_DATA_ROWS(in, out, y);
    (void)orr, (void)og, (void)ob;
    int64_t row_total = 0;
#pragma omp simd reduction(+ : row_total)
    for (int64_t x = 0; x < in.vw; ++x) row_total += gray_of(ir[x], ig[x], ib[x]);
    total += row_total;
  }
  const int64_t n = std::max<int64_t>(in.vh * in.vw, 1);
  const float mean = static_cast<float>((2 * total + n) / (2 * n));
  for (int64_t y = 0; y < in.rows; ++y) {
    NPU_DATA_ROWS(in, out, y);
    const uint8_t* src[3] = {ir, ig, ib};
    uint8_t* dst[3] = {orr, og, ob};
    for (int c = 0; c < 3; ++c) {
      if (y >= in.vh) {  // like Pillow on the valid image, the padding comes out 0
        std::memset(dst[c], 0, in.cols);
        continue;
      }
      const uint8_t* sc = src[c];
      uint8_t* dc = dst[c];
#pragma omp simd
      for (int64_t x = 0; x < in.vw; ++x) dc[x] = blend_value(mean, static_cast<float>(sc[x]), f);
      if (in.vw < in.cols) std::memset(dc + in.vw, 0, in.cols - in.vw);
    }
  }
}

void hue(const Planes& in, Planes& out, int shift) {
  const HueTables& T = hue_tables();
  for (int64_t y = 0; y < in.rows; ++y) {
    NPU_DATA_ROWS(in, out, y);
#pragma omp simd
    for (int64_t x = 0; x < in.cols; ++x) {
      uint8_t r = ir[x], g = ig[x], b = ib[x];
      hue_pixel(r, g, b, shift, T);
      orr[x] = r;
      og[x] = g;
      ob[x] = b;
    }
  }
}

#undef NPU_DATA_ROWS

}  // namespace

// order (B, n) int64 op ids (0 brightness, 1 contrast, 2 saturation, 3 hue; -1 skips);
// factors (B, 3) float32 blend factors; shifts (B,) int64 hue shift in levels.
at::Tensor color_ops(const at::Tensor& images_in, const at::Tensor& sizes_in,
                     const at::Tensor& order_in, const at::Tensor& factors_in,
                     const at::Tensor& shifts_in) {
  TORCH_CHECK(images_in.dim() == 4 && images_in.size(1) == 3 &&
                  images_in.scalar_type() == at::kByte,
              "images must be uint8 (B, 3, H, W)");
  const at::Tensor images = images_in.contiguous();
  at::Tensor out = at::empty_like(images);
  const at::Tensor sizes = sizes_in.to(at::kLong).contiguous();
  const at::Tensor order = order_in.to(at::kLong).contiguous();
  const at::Tensor factors = factors_in.to(at::kFloat).contiguous();
  const at::Tensor shifts = shifts_in.to(at::kLong).contiguous();
  const int64_t B = out.size(0), H = out.size(2), W = out.size(3), n = order.size(1);
  const uint8_t* in_p = images.data_ptr<uint8_t>();
  TORCH_CHECK(sizes.size(0) == B && order.size(0) == B && factors.size(0) == B &&
                  factors.size(1) == 3 && shifts.size(0) == B,
              "per-sample parameters must have B rows");
  uint8_t* base = out.data_ptr<uint8_t>();
  const int64_t* sz = sizes.data_ptr<int64_t>();
  const int64_t* ord = order.data_ptr<int64_t>();
  const float* fac = factors.data_ptr<float>();
  const int64_t* sh = shifts.data_ptr<int64_t>();
  parallel_for_samples(B, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      uint8_t* s = base + b * 3 * H * W;
      uint8_t* src = const_cast<uint8_t*>(in_p + b * 3 * H * W);  // only ever read
      const int64_t vh = std::clamp<int64_t>(sz[b * 2], 0, H);
      const int64_t vw = std::clamp<int64_t>(sz[b * 2 + 1], 0, W);
      const Planes in{src, src + H * W, src + 2 * H * W, W, H, W, vh, vw};
      Planes out{s, s + H * W, s + 2 * H * W, W, H, W, vh, vw};
      const Planes* from = &in;  // the first op reads the input, later ones the output
      for (int64_t k = 0; k < n; ++k) {
        const int64_t op = ord[b * n + k];
        if (op < 0 || op > 3) continue;
        if (op == 0) brightness(*from, out, fac[b * 3 + 0]);
        if (op == 1) contrast(*from, out, fac[b * 3 + 1]);
        if (op == 2) saturation(*from, out, fac[b * 3 + 2]);
        if (op == 3) hue(*from, out, static_cast<int>(((sh[b] % 256) + 256) % 256));
        from = &out;
      }
      if (from == &in) std::memcpy(s, src, static_cast<size_t>(3 * H * W));
    }
  });
  return out;
}

}  // namespace npu_data_native
