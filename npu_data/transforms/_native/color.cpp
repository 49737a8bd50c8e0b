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

// Byte-table lookups (brightness, contrast) have hand-written paths for AVX-512 VBMI (x86-64)
// and NEON (aarch64, TBL/TBX); NPU_DATA_PORTABLE (NPU_DATA_SIMD=portable|scalar) leaves both out.
#if defined(__AVX512VBMI__) && defined(__AVX512BW__) && !defined(NPU_DATA_PORTABLE)
#include <immintrin.h>
#define NPU_DATA_BYTE_TABLES "avx512vbmi"
#elif defined(__aarch64__) && defined(__ARM_NEON) && !defined(NPU_DATA_PORTABLE)
#include <arm_neon.h>
#define NPU_DATA_BYTE_TABLES "neon"
#endif

// The blends and the grey sum run about 1.5x faster with 512-bit vectors where the CPU has
// them; the hue loop (gathers, doubles) is slower there, so it keeps the default width.
#if defined(__AVX512F__) && defined(__GNUC__) && !defined(__clang__)
#define NPU_DATA_WIDE __attribute__((target("prefer-vector-width=512")))
#else
#define NPU_DATA_WIDE
#endif

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


// Pillow's rgb2hsv H and S of one pixel as Pillow computes them (float divisions, the
// double steps in between), written branch-free so the row loop vectorises without gathers:
// a table of H by (branch, a, c) (768 KB) made every pixel an L2 gather, which cost more
// than the divisions. `a` and `c` are the two other channels' distances from the maximum,
// in the order Pillow's branch uses them; their maximum is maxc - minc.
inline int hue_level(int is_r, int is_g, int a, int c, int d) {
  const float cr = static_cast<float>(d + (d == 0));  // grey pixels: H is masked to 0
  const float qa = static_cast<float>(a) / cr, qc = static_cast<float>(c) / cr;
  const float h_r = qc - qa;                              // r max: h = bc - gc
  const float h_g = static_cast<float>(2.0 + qa - qc);    // g max: h = 2.0 + rc - bc
  const float h_b = static_cast<float>(4.0 + qa - qc);    // b max: h = 4.0 + gc - rc
  const float h0 = is_r ? h_r : (is_g ? h_g : h_b);
  // Pillow's h0 / 6.0 + 1.0 as a product (no division): the same level for every (branch,
  // a, c), tests/transforms/test_native.py::test_hue_constant_products_give_pillows_values
  double y = h0 * (1.0 / 6.0) + 1.0;  // in [5/6, 11/6]: fmod(y, 1.0) is y - 1 from 1 on
  y = y >= 1.0 ? y - 1.0 : y;
  const float h = static_cast<float>(y);
  return std::min(std::max(static_cast<int>(h * 255.0f), 0), 255) * (d != 0);
}

// S = (int)((float)d / (float)maxc * 255.0); H and S times 255 in float give Pillow's levels
// for all inputs (tests/transforms/test_native.py)
inline int sat_level(int d, int maxc) {
  const float sv = static_cast<float>(d) / static_cast<float>(maxc + (maxc == 0));
  return std::min(std::max(static_cast<int>(sv * 255.0f), 0), 255) * (d != 0);
}

// Pillow's rgb2hsv, the H shift, and hsv2rgb. Selections are written as arithmetic (x * 0/1
// and sums with 0 are exact) so the row loop vectorises; non-negative values make
// round(x) == floor(x) + (frac >= 0.5).
inline void hue_pixel(uint8_t& r8, uint8_t& g8, uint8_t& b8, int shift) {
  const int r = r8, g = g8, b = b8;
  const int maxc = std::max(r, std::max(g, b));
  const int minc = std::min(r, std::min(g, b));
  const int d = maxc - minc;
  const int is_r = r == maxc;
  const int is_g = (1 - is_r) & (g == maxc);
  const int is_b = 1 - is_r - is_g;
  const int a = (is_r + is_b) * (maxc - g) + is_g * (maxc - r);
  const int c = (is_r + is_g) * (maxc - b) + is_b * (maxc - r);
  const int uh = hue_level(is_r, is_g, a, c, d);
  const int us = sat_level(d, maxc);
  const int hh = (uh + shift) & 255;
  // back to RGB
  // Pillow's h * 6.0 / 255.0 as a product, s / 255.0 in float: the same i, f and fs for all
  // 256 values (the same test)
  const double hf = static_cast<float>(hh) * (6.0 / 255.0);
  const int i0 = static_cast<int>(hf);  // floor: hf >= 0
  const int i = i0 * (i0 != 6);         // Pillow switches on i % 6
  const float f = static_cast<float>(hf - static_cast<float>(i0));
  const float fs = static_cast<float>(us) / 255.0f;
  // Pillow computes these three in double; in float they round to the same integers for
  // every (v, s, h) — all 2^24, tests/transforms/test_native.py — at twice the lanes
  const float v = static_cast<float>(maxc);
  const float xp = v * (1.0f - fs);
  const float xq = v * (1.0f - fs * f);
  const float xt = v * (1.0f - fs * (1.0f - f));
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

// Three planes of one row segment.
struct Row {
  const uint8_t* r;
  const uint8_t* g;
  const uint8_t* b;
};
struct OutRow {
  uint8_t* r;
  uint8_t* g;
  uint8_t* b;
};

// Every row op reads `in` and writes `out`: the input row for a sample's first op, the output
// row (the same pointers) for the later ones. Elementwise, each value is read before it is
// written, which is all `omp simd` asserts; the row stays in L1 between a sample's ops.
NPU_DATA_WIDE void blend_const_row(Row in, OutRow out, int64_t n, float in1, float f) {  // brightness, contrast
#pragma omp simd
  for (int64_t x = 0; x < n; ++x) {
    out.r[x] = blend_value(in1, static_cast<float>(in.r[x]), f);
    out.g[x] = blend_value(in1, static_cast<float>(in.g[x]), f);
    out.b[x] = blend_value(in1, static_cast<float>(in.b[x]), f);
  }
}

// A blend with a constant first image (brightness: black; contrast: the grey mean) maps each
// 8-bit value to one value: a table of 256 built with blend_value itself, so the bytes are the
// same. Where the CPU has AVX-512 VBMI it is looked up 64 bytes at a time (two byte permutes
// and a blend: ~20x fewer instructions than the float blend), with NEON 16 at a time (TBL +
// three TBX); elsewhere the float blend runs.
struct ConstBlend {
  float in1 = 0.0f, f = 1.0f;
  uint8_t table[256];
  ConstBlend() = default;
  ConstBlend(float in1_, float f_) : in1(in1_), f(f_) {
#ifdef NPU_DATA_BYTE_TABLES
    for (int v = 0; v < 256; ++v) table[v] = blend_value(in1, static_cast<float>(v), f);
#endif
  }
};

#if defined(NPU_DATA_BYTE_TABLES) && defined(__aarch64__)
inline uint8x16x4_t load64(const uint8_t* p) {
  uint8x16x4_t t;
  t.val[0] = vld1q_u8(p);
  t.val[1] = vld1q_u8(p + 16);
  t.val[2] = vld1q_u8(p + 32);
  t.val[3] = vld1q_u8(p + 48);
  return t;
}

// TBL looks 16 bytes up in a 64-byte table (0 past its end); TBX in the next quarter keeps
// what it cannot index: four lookups cover 256 entries.
void table_plane(const uint8_t* in, uint8_t* out, int64_t n, const uint8_t* table) {
  const uint8x16x4_t t0 = load64(table), t1 = load64(table + 64);
  const uint8x16x4_t t2 = load64(table + 128), t3 = load64(table + 192);
  const uint8x16_t k64 = vdupq_n_u8(64);
  int64_t x = 0;
  for (; x + 16 <= n; x += 16) {
    uint8x16_t v = vld1q_u8(in + x);
    uint8x16_t r = vqtbl4q_u8(t0, v);
    v = vsubq_u8(v, k64);
    r = vqtbx4q_u8(r, t1, v);
    v = vsubq_u8(v, k64);
    r = vqtbx4q_u8(r, t2, v);
    v = vsubq_u8(v, k64);
    vst1q_u8(out + x, vqtbx4q_u8(r, t3, v));
  }
  for (; x < n; ++x) out[x] = table[in[x]];
}
#elif defined(NPU_DATA_BYTE_TABLES)
void table_plane(const uint8_t* in, uint8_t* out, int64_t n, const uint8_t* table) {
  const __m512i t0 = _mm512_loadu_si512(table), t1 = _mm512_loadu_si512(table + 64);
  const __m512i t2 = _mm512_loadu_si512(table + 128), t3 = _mm512_loadu_si512(table + 192);
  for (int64_t x = 0; x < n; x += 64) {
    const int64_t left = n - x;
    const __mmask64 m = left >= 64 ? ~__mmask64{0} : (__mmask64{1} << left) - 1;
    const __m512i v = _mm512_maskz_loadu_epi8(m, in + x);
    const __m512i lo = _mm512_permutex2var_epi8(t0, v, t1);  // table[v & 127]
    const __m512i hi = _mm512_permutex2var_epi8(t2, v, t3);  // table[128 + (v & 127)]
    _mm512_mask_storeu_epi8(out + x, m, _mm512_mask_blend_epi8(_mm512_movepi8_mask(v), lo, hi));
  }
}
#endif

void const_blend_row(Row in, OutRow out, int64_t n, const ConstBlend& c) {
#ifdef NPU_DATA_BYTE_TABLES
  table_plane(in.r, out.r, n, c.table);
  table_plane(in.g, out.g, n, c.table);
  table_plane(in.b, out.b, n, c.table);
#else
  blend_const_row(in, out, n, c.in1, c.f);
#endif
}

NPU_DATA_WIDE void saturation_row(Row in, OutRow out, int64_t n, float f) {
#pragma omp simd
  for (int64_t x = 0; x < n; ++x) {
    const float l = static_cast<float>(gray_of(in.r[x], in.g[x], in.b[x]));
    out.r[x] = blend_value(l, static_cast<float>(in.r[x]), f);
    out.g[x] = blend_value(l, static_cast<float>(in.g[x]), f);
    out.b[x] = blend_value(l, static_cast<float>(in.b[x]), f);
  }
}

void hue_row(Row in, OutRow out, int64_t n, int shift) {
#pragma omp simd
  for (int64_t x = 0; x < n; ++x) {
    uint8_t r = in.r[x], g = in.g[x], b = in.b[x];
    hue_pixel(r, g, b, shift);
    out.r[x] = r;
    out.g[x] = g;
    out.b[x] = b;
  }
}

NPU_DATA_WIDE int64_t gray_sum_row(Row in, int64_t n) {
  int64_t total = 0;
#pragma omp simd reduction(+ : total)
  for (int64_t x = 0; x < n; ++x) total += gray_of(in.r[x], in.g[x], in.b[x]);
  return total;
}

enum Op { BRIGHTNESS = 0, CONTRAST = 1, SATURATION = 2, HUE = 3 };

// One sample's sequence: its planes, its ops in its drawn order, their parameters.
struct Job {
  const uint8_t* src;  // (3, H, W) input
  uint8_t* dst;        // (3, H, W) output
  int64_t H, W, vh, vw;
  int ops[4];
  int n = 0;
  int contrast_at = -1;  // index into ops, or -1
  float factor[3];       // brightness, contrast, saturation
  ConstBlend brightness;
  int shift;
  Row in_row(int64_t y) const { return {src + y * W, src + (H + y) * W, src + (2 * H + y) * W}; }
  OutRow out_row(int64_t y) const { return {dst + y * W, dst + (H + y) * W, dst + (2 * H + y) * W}; }
  Row done_row(int64_t y) const { return {dst + y * W, dst + (H + y) * W, dst + (2 * H + y) * W}; }
};

// ops[k0, k1) on one row segment of n pixels, the first reading `in`, each writing `out`.
// Returns whether anything was written.
// `contrast` is the sample's contrast blend (its grey mean known) when k0..k1 include it.
bool chain_row(const Job& j, int k0, int k1, Row in, OutRow out, int64_t n,
               const ConstBlend* contrast) {
  const Row done{out.r, out.g, out.b};
  for (int k = k0; k < k1; ++k) {
    const Row from = k == k0 ? in : done;
    switch (j.ops[k]) {
      case BRIGHTNESS: const_blend_row(from, out, n, j.brightness); break;
      case CONTRAST: const_blend_row(from, out, n, *contrast); break;
      case SATURATION: saturation_row(from, out, n, j.factor[2]); break;
      default: hue_row(from, out, n, j.shift); break;
    }
  }
  return k1 > k0;
}

void zero_row(OutRow out, int64_t from, int64_t to) {
  if (to <= from) return;
  std::memset(out.r + from, 0, to - from);
  std::memset(out.g + from, 0, to - from);
  std::memset(out.b + from, 0, to - from);
}

// Contrast at position c: phase 1 runs ops[0, c) on rows [y0, y1) of the valid region into
// the output and returns the grey sum of the result (of the input when c == 0); phase 2 runs
// ops[c, n) with the sample's mean, and zeroes the padding (like Pillow on the valid image,
// contrast leaves it 0, and every later op keeps 0 at 0). Without contrast, phase 2 runs the
// whole chain over the padded rows, as the single ops do.
int64_t phase1(const Job& j, int64_t y0, int64_t y1) {
  int64_t total = 0;
  for (int64_t y = y0; y < std::min(y1, j.vh); ++y) {
    const bool wrote = chain_row(j, 0, j.contrast_at, j.in_row(y), j.out_row(y), j.vw, nullptr);
    total += gray_sum_row(wrote ? j.done_row(y) : j.in_row(y), j.vw);
  }
  return total;
}

void phase2(const Job& j, int64_t y0, int64_t y1, float mean) {
  if (j.contrast_at < 0) {
    for (int64_t y = y0; y < y1; ++y)
      if (!chain_row(j, 0, j.n, j.in_row(y), j.out_row(y), j.W, nullptr)) {
        const Row in = j.in_row(y);
        const OutRow out = j.out_row(y);
        if (in.r == out.r) continue;  // in place: nothing to do
        std::memcpy(out.r, in.r, j.W), std::memcpy(out.g, in.g, j.W), std::memcpy(out.b, in.b, j.W);
      }
    return;
  }
  const ConstBlend contrast(mean, j.factor[1]);
  for (int64_t y = y0; y < y1; ++y) {
    const OutRow out = j.out_row(y);
    if (y >= j.vh) {
      zero_row(out, 0, j.W);
      continue;
    }
    const Row in = j.contrast_at > 0 ? j.done_row(y) : j.in_row(y);
    chain_row(j, j.contrast_at, j.n, in, out, j.vw, &contrast);
    zero_row(out, j.vw, j.W);
  }
}

float contrast_mean(const Job& j, int64_t total) {
  const int64_t n = std::max<int64_t>(j.vh * j.vw, 1);
  return static_cast<float>((2 * total + n) / (2 * n));  // int(mean + 0.5), exactly
}

}  // namespace

// order (B, n) int64 op ids (0 brightness, 1 contrast, 2 saturation, 3 hue; -1 skips);
// factors (B, 3) float32 blend factors; shifts (B,) int64 hue shift in levels. One fused pass
// per sample row (all its ops while the row is in L1), plus the grey-mean pass contrast needs
// over the ops before it; samples, or row blocks of them when the batch is smaller than the
// thread count, spread over the threads.
// `out` may be `images` itself (color_ops_): every op reads a value before writing it, the
// grey sums of contrast finish before any row is written past them, and rows without ops are
// left as they are.
namespace {
void run_color_ops(const at::Tensor& images, at::Tensor& out, const at::Tensor& sizes_in,
                   const at::Tensor& order_in, const at::Tensor& factors_in,
                   const at::Tensor& shifts_in) {
  const at::Tensor sizes = sizes_in.to(at::kLong).contiguous();
  const at::Tensor order = order_in.to(at::kLong).contiguous();
  const at::Tensor factors = factors_in.to(at::kFloat).contiguous();
  const at::Tensor shifts = shifts_in.to(at::kLong).contiguous();
  const int64_t B = out.size(0), H = out.size(2), W = out.size(3), n = order.size(1);
  TORCH_CHECK(sizes.size(0) == B && order.size(0) == B && factors.size(0) == B &&
                  factors.size(1) == 3 && shifts.size(0) == B,
              "per-sample parameters must have B rows");
  if (out.numel() == 0) return;  // an empty batch (B == 0) or empty images: nothing to do
  const uint8_t* in_p = images.data_ptr<uint8_t>();
  uint8_t* base = out.data_ptr<uint8_t>();
  const int64_t* sz = sizes.data_ptr<int64_t>();
  const int64_t* ord = order.data_ptr<int64_t>();
  const float* fac = factors.data_ptr<float>();
  const int64_t* sh = shifts.data_ptr<int64_t>();
  std::vector<Job> jobs(static_cast<size_t>(B));
  bool any_contrast = false;
  for (int64_t b = 0; b < B; ++b) {
    Job& j = jobs[b];
    j.src = in_p + b * 3 * H * W;
    j.dst = base + b * 3 * H * W;
    j.H = H, j.W = W;
    j.vh = std::clamp<int64_t>(sz[b * 2], 0, H);
    j.vw = std::clamp<int64_t>(sz[b * 2 + 1], 0, W);
    for (int64_t k = 0; k < n; ++k) {
      const int64_t op = ord[b * n + k];
      if (op < 0 || op > 3 || j.n == 4) continue;
      if (op == CONTRAST) j.contrast_at = j.n;
      j.ops[j.n++] = static_cast<int>(op);
    }
    any_contrast = any_contrast || j.contrast_at >= 0;
    for (int c = 0; c < 3; ++c) j.factor[c] = fac[b * 3 + c];
    j.brightness = ConstBlend(0.0f, j.factor[0]);
    j.shift = static_cast<int>(((sh[b] % 256) + 256) % 256);
  }
  const int64_t threads = std::max(1, at::get_num_threads());
  // a small batch is cut into row blocks so every thread has work
  const int64_t blocks = B >= threads || H == 0 ? 1 : std::min<int64_t>(H, (2 * threads + B - 1) / B);
  const int64_t rows = (H + blocks - 1) / std::max<int64_t>(blocks, 1);
  if (blocks == 1) {
    parallel_for_samples(B, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        const Job& j = jobs[b];
        const float mean = j.contrast_at >= 0 ? contrast_mean(j, phase1(j, 0, H)) : 0.0f;
        phase2(j, 0, H, mean);
      }
    });
    return;
  }
  std::vector<int64_t> partial(static_cast<size_t>(B * blocks), 0);
  if (any_contrast) {
    parallel_for_samples(B * blocks, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const Job& j = jobs[t / blocks];
        const int64_t y0 = (t % blocks) * rows;
        if (j.contrast_at >= 0) partial[t] = phase1(j, y0, std::min(H, y0 + rows));
      }
    });
  }
  parallel_for_samples(B * blocks, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t b = t / blocks, y0 = (t % blocks) * rows;
      const Job& j = jobs[b];
      float mean = 0.0f;
      if (j.contrast_at >= 0) {
        int64_t total = 0;  // integer sums: the same for any split
        for (int64_t k = 0; k < blocks; ++k) total += partial[b * blocks + k];
        mean = contrast_mean(j, total);
      }
      phase2(j, y0, std::min(H, y0 + rows), mean);
    }
  });
}
}  // namespace

const char* byte_tables_simd() {
#if defined(NPU_DATA_BYTE_TABLES)
  return NPU_DATA_BYTE_TABLES;
#else
  return "none";
#endif
}

at::Tensor color_ops(const at::Tensor& images_in, const at::Tensor& sizes,
                     const at::Tensor& order, const at::Tensor& factors,
                     const at::Tensor& shifts) {
  TORCH_CHECK(images_in.dim() == 4 && images_in.size(1) == 3 &&
                  images_in.scalar_type() == at::kByte,
              "images must be uint8 (B, 3, H, W)");
  const at::Tensor images = images_in.contiguous();
  at::Tensor out = at::empty_like(images, at::MemoryFormat::Contiguous);
  run_color_ops(images, out, sizes, order, factors, shifts);
  return out;
}

void color_ops_(at::Tensor& images, const at::Tensor& sizes, const at::Tensor& order,
                const at::Tensor& factors, const at::Tensor& shifts) {
  TORCH_CHECK(images.dim() == 4 && images.size(1) == 3 && images.scalar_type() == at::kByte &&
                  images.is_contiguous(),
              "color_ops_: images must be contiguous uint8 (B, 3, H, W)");
  run_color_ops(images, images, sizes, order, factors, shifts);
}

}  // namespace npu_data_native
