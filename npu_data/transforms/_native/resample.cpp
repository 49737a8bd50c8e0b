// Pillow-exact resampling (BILINEAR, BICUBIC, LANCZOS) of per-sample crops
// (npu_data::resized_crop).
//
// Pillow 13's rules: 22-bit fixed-point weights computed in double, an 8-bit intermediate
// between the passes (clipped to 0..255: bicubic and Lanczos weights can be negative), and
// the vertical pass first when the height shrinks by more than twice as many pixels as the
// width, whatever the filter. The horizontal pass runs as transpose + vertical pass +
// transpose so that every inner loop walks contiguous memory.

// The 16 x 16 byte transpose has hand-written paths for SSE2 (x86-64) and NEON (aarch64) —
// the same four rounds of interleaving; NPU_DATA_PORTABLE (NPU_DATA_SIMD=portable|scalar)
// builds the plain loop alone.
#if defined(__SSE2__) && !defined(NPU_DATA_PORTABLE)
#include <emmintrin.h>
#define NPU_DATA_TRANSPOSE_SIMD "sse2"
#elif defined(__aarch64__) && defined(__ARM_NEON) && !defined(NPU_DATA_PORTABLE)
#include <arm_neon.h>
#define NPU_DATA_TRANSPOSE_SIMD "neon"
#endif

#include "kernels.h"
#include "parallel.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace npu_data_native {
namespace {

constexpr int kPrecisionBits = 22;

inline uint8_t clip8_fixed(int32_t acc) {
  int32_t v = acc >> kPrecisionBits;
  return static_cast<uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v));
}

// Pillow's filters: 0 bilinear (support 1), 1 bicubic (a = -0.5, support 2), 2 lanczos
// (support 3, a product of sincs) — the same double arithmetic as Resample.c.
double filter_support(int filter) { return filter == 2 ? 3.0 : (filter == 1 ? 2.0 : 1.0); }

double sinc(double x) {
  if (x == 0.0) return 1.0;
  x = x * M_PI;
  return std::sin(x) / x;
}

double filter_weight(int filter, double x) {
  if (filter == 2) return (-3.0 <= x && x < 3.0) ? sinc(x) * sinc(x / 3) : 0.0;
  if (x < 0.0) x = -x;
  if (filter == 1) {
    constexpr double a = -0.5;
    if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
    if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
    return 0.0;
  }
  return x < 1.0 ? 1.0 - x : 0.0;
}

// Pillow's precompute_coeffs (box [0, in_size)) + normalize_coeffs_8bpc;
// with `full` >= 0, the outputs [off, off + out_size) of an in_size -> full resize (a window;
// outputs outside [0, full) get no taps and come out 0).
struct Coeffs {
  int ksize = 0;
  std::vector<int32_t> start;   // first input index of each output
  std::vector<int32_t> count;   // taps used by each output
  std::vector<int32_t> weight;  // out_size * ksize fixed-point weights
};

Coeffs coefficients(int filter, int in_size, int out_size, int full = -1, int off = 0) {
  Coeffs c;
  if (full < 0) full = out_size;
  const double scale = static_cast<double>(in_size) / full;
  const double filterscale = scale < 1.0 ? 1.0 : scale;
  const double support = filterscale * filter_support(filter);
  c.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  c.start.resize(out_size);
  c.count.resize(out_size);
  c.weight.assign(static_cast<size_t>(out_size) * c.ksize, 0);
  std::vector<double> k(c.ksize);
  const double ss = 1.0 / filterscale;
  for (int xx = 0; xx < out_size; ++xx) {
    const int X = xx + off;  // the output's index in the whole resize
    if (X < 0 || X >= full) {
      c.start[xx] = 0;
      c.count[xx] = 0;
      continue;
    }
    const double center = 0.0 + (X + 0.5) * scale;
    int xmin = static_cast<int>(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = static_cast<int>(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    double ww = 0.0;
    for (int x = 0; x < xmax; ++x) {
      const double w = filter_weight(filter, (x + xmin - center + 0.5) * ss);
      k[x] = w;
      ww += w;
    }
    int32_t* out = &c.weight[static_cast<size_t>(xx) * c.ksize];
    for (int x = 0; x < xmax; ++x) {
      const double v = ww != 0.0 ? k[x] / ww : k[x];
      out[x] = v < 0 ? static_cast<int32_t>(-0.5 + v * (1 << kPrecisionBits))
                     : static_cast<int32_t>(0.5 + v * (1 << kPrecisionBits));
    }
    c.start[xx] = xmin;
    c.count[xx] = xmax;
  }
  return c;
}

// Vertical pass: `src` rows (stride `src_stride`, `width` values used per row) -> `out_h`
// rows of `dst`: 64 values at a time summed over every tap in registers, the tail through
// `acc` (integer sums: the same as Pillow's in any order).
void vertical(const uint8_t* src, int64_t src_stride, int width, const Coeffs& c, int out_h,
              uint8_t* dst, int64_t dst_stride, std::vector<int32_t>& acc) {
  acc.resize(width);
  constexpr int kChunk = 64;  // values summed in registers over all taps (4 x 16 lanes)
  const int full = width / kChunk * kChunk;
  for (int yy = 0; yy < out_h; ++yy) {
    const int32_t* k = &c.weight[static_cast<size_t>(yy) * c.ksize];
    const int n = c.count[yy];
    const uint8_t* rows = src + c.start[yy] * src_stride;
    uint8_t* __restrict__ out_row = dst + yy * dst_stride;
    for (int x0 = 0; x0 < full; x0 += kChunk) {
      int32_t a[kChunk];
#pragma omp simd
      for (int i = 0; i < kChunk; ++i) a[i] = 1 << (kPrecisionBits - 1);
      for (int y = 0; y < n; ++y) {
        const uint8_t* __restrict__ row = rows + y * src_stride + x0;
        const int32_t w = k[y];
#pragma omp simd
        for (int i = 0; i < kChunk; ++i) a[i] += static_cast<int32_t>(row[i]) * w;
      }
#pragma omp simd
      for (int i = 0; i < kChunk; ++i) out_row[x0 + i] = clip8_fixed(a[i]);
    }
    if (full == width) continue;
    // the tail: whole rows at a time through `acc`
    std::fill(acc.begin() + full, acc.end(), 1 << (kPrecisionBits - 1));
    for (int y = 0; y < n; ++y) {
      const uint8_t* __restrict__ row = rows + y * src_stride;
      const int32_t w = k[y];
      int32_t* __restrict__ a = acc.data();
#pragma omp simd
      for (int x = full; x < width; ++x) a[x] += static_cast<int32_t>(row[x]) * w;
    }
    const int32_t* __restrict__ a = acc.data();
#pragma omp simd
    for (int x = full; x < width; ++x) out_row[x] = clip8_fixed(a[x]);
  }
}

#if defined(NPU_DATA_TRANSPOSE_SIMD) && defined(__SSE2__)
using V16 = __m128i;
inline V16 load16(const uint8_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }
inline void store16(uint8_t* p, V16 v) { _mm_storeu_si128(reinterpret_cast<__m128i*>(p), v); }
inline V16 zip8_lo(V16 a, V16 b) { return _mm_unpacklo_epi8(a, b); }
inline V16 zip8_hi(V16 a, V16 b) { return _mm_unpackhi_epi8(a, b); }
inline V16 zip16_lo(V16 a, V16 b) { return _mm_unpacklo_epi16(a, b); }
inline V16 zip16_hi(V16 a, V16 b) { return _mm_unpackhi_epi16(a, b); }
inline V16 zip32_lo(V16 a, V16 b) { return _mm_unpacklo_epi32(a, b); }
inline V16 zip32_hi(V16 a, V16 b) { return _mm_unpackhi_epi32(a, b); }
inline V16 zip64_lo(V16 a, V16 b) { return _mm_unpacklo_epi64(a, b); }
inline V16 zip64_hi(V16 a, V16 b) { return _mm_unpackhi_epi64(a, b); }
#elif defined(NPU_DATA_TRANSPOSE_SIMD)
// NEON's zip1/zip2 interleave the low/high halves of two vectors, as SSE2's unpacklo/hi do
using V16 = uint8x16_t;
inline V16 load16(const uint8_t* p) { return vld1q_u8(p); }
inline void store16(uint8_t* p, V16 v) { vst1q_u8(p, v); }
inline V16 zip8_lo(V16 a, V16 b) { return vzip1q_u8(a, b); }
inline V16 zip8_hi(V16 a, V16 b) { return vzip2q_u8(a, b); }
inline V16 zip16_lo(V16 a, V16 b) {
  return vreinterpretq_u8_u16(vzip1q_u16(vreinterpretq_u16_u8(a), vreinterpretq_u16_u8(b)));
}
inline V16 zip16_hi(V16 a, V16 b) {
  return vreinterpretq_u8_u16(vzip2q_u16(vreinterpretq_u16_u8(a), vreinterpretq_u16_u8(b)));
}
inline V16 zip32_lo(V16 a, V16 b) {
  return vreinterpretq_u8_u32(vzip1q_u32(vreinterpretq_u32_u8(a), vreinterpretq_u32_u8(b)));
}
inline V16 zip32_hi(V16 a, V16 b) {
  return vreinterpretq_u8_u32(vzip2q_u32(vreinterpretq_u32_u8(a), vreinterpretq_u32_u8(b)));
}
inline V16 zip64_lo(V16 a, V16 b) {
  return vreinterpretq_u8_u64(vzip1q_u64(vreinterpretq_u64_u8(a), vreinterpretq_u64_u8(b)));
}
inline V16 zip64_hi(V16 a, V16 b) {
  return vreinterpretq_u8_u64(vzip2q_u64(vreinterpretq_u64_u8(a), vreinterpretq_u64_u8(b)));
}
#endif

// dst[x * dst_stride + y] = src[y * src_stride + x] for a rows x cols block.
void transpose(const uint8_t* src, int64_t src_stride, int rows, int cols, uint8_t* dst,
               int64_t dst_stride) {
  int y0 = 0;
#if defined(NPU_DATA_TRANSPOSE_SIMD)
  // 16 x 16 tiles: four rounds of interleaving (bytes, then 16-, 32- and 64-bit lanes)
  for (; y0 + 16 <= rows; y0 += 16) {
    int x0 = 0;
    for (; x0 + 16 <= cols; x0 += 16) {
      V16 r[16], a[16], b[16], c[16];
      for (int i = 0; i < 16; ++i) r[i] = load16(src + (y0 + i) * src_stride + x0);
      for (int q = 0; q < 8; ++q) {  // a[h*8+q]: rows 2q, 2q+1; columns h*8 .. h*8+7
        a[q] = zip8_lo(r[2 * q], r[2 * q + 1]);
        a[8 + q] = zip8_hi(r[2 * q], r[2 * q + 1]);
      }
      for (int h = 0; h < 2; ++h)
        for (int q = 0; q < 4; ++q) {  // b[h*8+g*4+q]: rows 4q..4q+3; columns h*8+g*4 ..+3
          b[h * 8 + q] = zip16_lo(a[h * 8 + 2 * q], a[h * 8 + 2 * q + 1]);
          b[h * 8 + 4 + q] = zip16_hi(a[h * 8 + 2 * q], a[h * 8 + 2 * q + 1]);
        }
      for (int hg = 0; hg < 4; ++hg)
        for (int o = 0; o < 2; ++o) {  // c[hg*4+k*2+o]: rows 8o..8o+7; columns hg*4+k*2 ..+1
          c[hg * 4 + o] = zip32_lo(b[hg * 4 + 2 * o], b[hg * 4 + 2 * o + 1]);
          c[hg * 4 + 2 + o] = zip32_hi(b[hg * 4 + 2 * o], b[hg * 4 + 2 * o + 1]);
        }
      for (int hgk = 0; hgk < 8; ++hgk) {  // columns 2*hgk and 2*hgk+1, all 16 rows
        store16(dst + (x0 + 2 * hgk) * dst_stride + y0, zip64_lo(c[hgk * 2], c[hgk * 2 + 1]));
        store16(dst + (x0 + 2 * hgk + 1) * dst_stride + y0, zip64_hi(c[hgk * 2], c[hgk * 2 + 1]));
      }
    }
    for (; x0 < cols; ++x0)
      for (int i = 0; i < 16; ++i) dst[x0 * dst_stride + y0 + i] = src[(y0 + i) * src_stride + x0];
  }
#endif
  for (; y0 < rows; ++y0)
    for (int x = 0; x < cols; ++x) dst[x * dst_stride + y0] = src[y0 * src_stride + x];
}

// Horizontal pass as transpose, vertical pass, transpose: `rows` rows of `src` (row stride
// `src_stride`, `c`'s input extent per row) -> `dst` rows of `out_w` values. Same integer
// sums as Pillow's horizontal pass, but the inner loop runs over contiguous memory.
struct Scratch {
  std::vector<uint8_t> t1, t2, tmp;
  std::vector<int32_t> acc;
};

void horizontal(const uint8_t* src, int64_t src_stride, int rows, int in_w, const Coeffs& c,
                int out_w, uint8_t* dst, int64_t dst_stride, Scratch& s) {
  s.t1.resize(static_cast<size_t>(in_w) * rows);
  s.t2.resize(static_cast<size_t>(out_w) * rows);
  transpose(src, src_stride, rows, in_w, s.t1.data(), rows);
  vertical(s.t1.data(), rows, rows, c, out_w, s.t2.data(), rows, s.acc);
  transpose(s.t2.data(), rows, out_w, rows, dst, dst_stride);
}

}  // namespace

// The crop of an interleaved (H, W, C) sample as C planes of rows x cols.
void deinterleave(const uint8_t* src, int64_t row_stride, int rows, int cols, int64_t C,
                  uint8_t* dst) {
  const size_t plane = static_cast<size_t>(rows) * cols;
  for (int y = 0; y < rows; ++y) {
    const uint8_t* __restrict__ s = src + y * row_stride;
    if (C == 3) {
      uint8_t* __restrict__ r = dst + static_cast<size_t>(y) * cols;
      uint8_t* __restrict__ g = r + plane;
      uint8_t* __restrict__ b = g + plane;
#pragma omp simd
      for (int x = 0; x < cols; ++x) {
        r[x] = s[3 * x];
        g[x] = s[3 * x + 1];
        b[x] = s[3 * x + 2];
      }
    } else {
      for (int64_t c = 0; c < C; ++c)
        for (int x = 0; x < cols; ++x) dst[c * plane + static_cast<size_t>(y) * cols + x] = s[x * C + c];
    }
  }
}

namespace {

// One sample: the crop box of an image whose pixel (y, x) of channel c lives at
// base + y * sH + x * sW + c * sC (interleaved when sW == C and sC == 1), resized into the
// C contiguous oh x ow planes at dst.
struct SampleIn {
  const uint8_t* base;
  int64_t H, W, sH, sC;
  bool interleaved;
};

void crop_one(const SampleIn& in, int64_t C, const int64_t* bx, int oh, int ow,
              bool vertical_first_rule, int filter, uint8_t* out, Scratch& scratch) {
  std::vector<uint8_t>& tmp = scratch.tmp;
  std::vector<int32_t>& acc = scratch.acc;
  thread_local std::vector<uint8_t> planes;  // the crop as planes, for interleaved input
  const int64_t top = std::clamp<int64_t>(bx[0], 0, in.H - 1);
  const int64_t left = std::clamp<int64_t>(bx[1], 0, in.W - 1);
  const int ch = static_cast<int>(std::clamp<int64_t>(bx[2], 1, in.H - top));
  const int cw = static_cast<int>(std::clamp<int64_t>(bx[3], 1, in.W - left));
  const bool need_h = ow != cw, need_v = oh != ch;
  const bool v_first = vertical_first_rule && (ch - oh) > 0 && (ch - oh) > 2 * (cw - ow);
  const Coeffs hc = need_h ? coefficients(filter, cw, ow) : Coeffs();
  Coeffs vc = need_v ? coefficients(filter, ch, oh) : Coeffs();
  int64_t stride = in.sH;  // row stride of the planes read below
  if (in.interleaved) {
    planes.resize(static_cast<size_t>(C) * ch * cw);
    deinterleave(in.base + top * in.sH + left * C, in.sH, ch, cw, C, planes.data());
    stride = cw;
  }
  for (int64_t c = 0; c < C; ++c) {
    const uint8_t* plane = in.interleaved  // crop origin of this channel
        ? planes.data() + static_cast<size_t>(c) * ch * cw
        : in.base + c * in.sC + top * in.sH + left;
    uint8_t* dst = out + c * oh * ow;
    if (!need_h && !need_v) {
      for (int y = 0; y < oh; ++y) std::memcpy(dst + y * ow, plane + y * stride, ow);
    } else if (!need_h) {
      vertical(plane, stride, ow, vc, oh, dst, ow, acc);
    } else if (!need_v) {
      horizontal(plane, stride, oh, cw, hc, ow, dst, ow, scratch);
    } else if (v_first) {
      tmp.resize(static_cast<size_t>(oh) * cw);
      vertical(plane, stride, cw, vc, oh, tmp.data(), cw, acc);
      horizontal(tmp.data(), cw, oh, cw, hc, ow, dst, ow, scratch);
    } else {
      // horizontal pass over the rows the vertical pass reads
      const int first = vc.start[0];
      const int last = vc.start[oh - 1] + vc.count[oh - 1];
      tmp.resize(static_cast<size_t>(last - first) * ow);
      horizontal(plane + first * stride, stride, last - first, cw, hc, ow,
                 tmp.data(), ow, scratch);
      Coeffs shifted = vc;
      for (auto& s : shifted.start) s -= first;
      vertical(tmp.data(), ow, ow, shifted, oh, dst, ow, acc);
    }
  }
}

// The rows [first, last) some output of `c` reads (first == last: none), and `c` shifted
// to start at `first`.
void touched(Coeffs& c, int& first, int& last) {
  first = 0;
  last = 0;
  bool any = false;
  for (size_t i = 0; i < c.start.size(); ++i) {
    if (c.count[i] == 0) continue;
    first = any ? std::min(first, c.start[i]) : c.start[i];
    last = any ? std::max(last, c.start[i] + c.count[i]) : c.start[i] + c.count[i];
    any = true;
  }
  for (size_t i = 0; i < c.start.size(); ++i)
    if (c.count[i] != 0) c.start[i] -= first;
}

// One sample's window (win = top, left, full_h, full_w): its box resized whole to
// full_h x full_w in Pillow's pass order for that resize, the oh x ow outputs at (top, left)
// kept; only the box's rows and columns those outputs read are touched. The box may extend
// past the image (a region decoded alone) as long as those rows and columns are inside.
void window_one(const SampleIn& in, int64_t C, const int64_t* bx, const int64_t* win, int oh,
                int ow, bool vertical_first_rule, int filter, uint8_t* out, Scratch& scratch) {
  std::vector<uint8_t>& tmp = scratch.tmp;
  std::vector<int32_t>& acc = scratch.acc;
  thread_local std::vector<uint8_t> planes;
  const int64_t top = bx[0], left = bx[1];
  const int ch = static_cast<int>(std::max<int64_t>(bx[2], 1));
  const int cw = static_cast<int>(std::max<int64_t>(bx[3], 1));
  const int full_h = static_cast<int>(std::max<int64_t>(win[2], 1));
  const int full_w = static_cast<int>(std::max<int64_t>(win[3], 1));
  const int oy = static_cast<int>(win[0]), ox = static_cast<int>(win[1]);
  const bool v_first = vertical_first_rule && (ch - full_h) > 0 &&
                       (ch - full_h) > 2 * (cw - full_w);
  Coeffs hc = coefficients(filter, cw, ow, full_w, ox);
  Coeffs vc = coefficients(filter, ch, oh, full_h, oy);
  int r0, r1, c0, c1;
  touched(vc, r0, r1);
  touched(hc, c0, c1);
  if (r1 == r0 || c1 == c0) {  // the window misses the resized image: all padding
    std::memset(out, 0, static_cast<size_t>(C) * oh * ow);
    return;
  }
  if (top + r0 < 0 || top + r1 > in.H || left + c0 < 0 || left + c1 > in.W) {
    std::memset(out, 0, static_cast<size_t>(C) * oh * ow);  // refused by the caller first
    return;
  }
  const int rh = r1 - r0, rw = c1 - c0;
  int64_t stride = in.sH;
  if (in.interleaved) {
    planes.resize(static_cast<size_t>(C) * rh * rw);
    deinterleave(in.base + (top + r0) * in.sH + (left + c0) * C, in.sH, rh, rw, C,
                 planes.data());
    stride = rw;
  }
  for (int64_t c = 0; c < C; ++c) {
    const uint8_t* plane = in.interleaved
        ? planes.data() + static_cast<size_t>(c) * rh * rw
        : in.base + c * in.sC + (top + r0) * in.sH + left + c0;
    uint8_t* dst = out + c * oh * ow;
    if (v_first) {
      tmp.resize(static_cast<size_t>(oh) * rw);
      vertical(plane, stride, rw, vc, oh, tmp.data(), rw, acc);
      horizontal(tmp.data(), rw, oh, rw, hc, ow, dst, ow, scratch);
    } else {
      tmp.resize(static_cast<size_t>(rh) * ow);
      horizontal(plane, stride, rh, rw, hc, ow, tmp.data(), ow, scratch);
      vertical(tmp.data(), ow, ow, vc, oh, dst, ow, acc);
    }
  }
}

// Optional windows (B, 4) = top, left, full_h, full_w, as int64 (undefined when absent).
at::Tensor checked_windows(const c10::optional<at::Tensor>& windows, int64_t B) {
  if (!windows.has_value() || !windows->defined()) return at::Tensor();
  const at::Tensor w = windows->to(at::kLong).contiguous();
  TORCH_CHECK(w.dim() == 2 && w.size(0) == B && w.size(1) == 4,
              "windows must be (B, 4) top, left, full height, full width");
  return w;
}

}  // namespace

at::Tensor resized_crop(const at::Tensor& images_in, const at::Tensor& boxes_in, int64_t out_h,
                        int64_t out_w, bool vertical_first_rule,
                        const c10::optional<at::Tensor>& windows_in, int64_t filter) {
  TORCH_CHECK(images_in.dim() == 4 && images_in.scalar_type() == at::kByte,
              "images must be uint8 (B, C, H, W)");
  TORCH_CHECK(out_h > 0 && out_w > 0, "output size must be positive");
  // Rows must be contiguous (NCHW) or pixels interleaved (channels-last, as the loaders
  // collate): anything else is copied to NCHW first.
  const bool interleaved = images_in.stride(3) == images_in.size(1) && images_in.stride(1) == 1;
  const at::Tensor images =
      interleaved || images_in.stride(3) == 1 ? images_in : images_in.contiguous();
  const at::Tensor boxes = boxes_in.to(at::kLong).contiguous();
  const int64_t B = images.size(0), C = images.size(1), H = images.size(2), W = images.size(3);
  const int64_t sB = images.stride(0), sC = images.stride(1), sH = images.stride(2);
  TORCH_CHECK(boxes.dim() == 2 && boxes.size(0) == B && boxes.size(1) == 4,
              "boxes must be (B, 4) top, left, height, width");
  const at::Tensor windows = checked_windows(windows_in, B);
  const int64_t* win_p = windows.defined() ? windows.data_ptr<int64_t>() : nullptr;
  at::Tensor out = at::empty({B, C, out_h, out_w}, images.options());
  const uint8_t* in_p = images.data_ptr<uint8_t>();
  const int64_t* box_p = boxes.data_ptr<int64_t>();
  uint8_t* out_p = out.data_ptr<uint8_t>();
  const int oh = static_cast<int>(out_h), ow = static_cast<int>(out_w);
  TORCH_CHECK(filter >= 0 && filter <= 2, "filter must be 0 (bilinear), 1 (bicubic) or 2 (lanczos)");
  const int flt = static_cast<int>(filter);
  parallel_for_samples(B, [&](int64_t b0, int64_t b1) {
    thread_local Scratch scratch;  // reused by every sample a thread takes
    for (int64_t b = b0; b < b1; ++b) {
      const SampleIn in{in_p + b * sB, H, W, sH, sC, interleaved};
      if (win_p != nullptr)
        window_one(in, C, box_p + b * 4, win_p + b * 4, oh, ow, vertical_first_rule,
                   flt, out_p + b * C * oh * ow, scratch);
      else
        crop_one(in, C, box_p + b * 4, oh, ow, vertical_first_rule, flt,
                 out_p + b * C * oh * ow, scratch);
    }
  });
  return out;
}

const char* transpose_simd() {
#if defined(NPU_DATA_TRANSPOSE_SIMD)
  return NPU_DATA_TRANSPOSE_SIMD;
#else
  return "none";
#endif
}

void resized_crop_list(at::TensorList images, const at::Tensor& boxes_in, int64_t out_h,
                       int64_t out_w, bool vertical_first_rule, const at::Tensor& out,
                       const c10::optional<at::Tensor>& windows_in, int64_t filter) {
  const int64_t B = static_cast<int64_t>(images.size());
  TORCH_CHECK(out.dim() == 4 && out.size(0) == B && out.size(2) == out_h && out.size(3) == out_w
              && out.scalar_type() == at::kByte && out.is_contiguous(),
              "out must be a contiguous uint8 (B, C, out_h, out_w) tensor");
  const at::Tensor boxes = boxes_in.to(at::kLong).contiguous();
  TORCH_CHECK(boxes.dim() == 2 && boxes.size(0) == B && boxes.size(1) == 4,
              "boxes must be (B, 4) top, left, height, width");
  const int64_t C = out.size(1);
  for (int64_t b = 0; b < B; ++b) {
    const at::Tensor& im = images[b];
    TORCH_CHECK(im.dim() == 3 && im.scalar_type() == at::kByte && im.size(2) == C &&
                    im.stride(2) == 1 && im.stride(1) == C,
                "image ", b, " must be an interleaved uint8 (H, W, ", C, ") tensor");
  }
  const at::Tensor windows = checked_windows(windows_in, B);
  const int64_t* win_p = windows.defined() ? windows.data_ptr<int64_t>() : nullptr;
  const int64_t* box_p = boxes.data_ptr<int64_t>();
  uint8_t* out_p = out.data_ptr<uint8_t>();
  const int oh = static_cast<int>(out_h), ow = static_cast<int>(out_w);
  TORCH_CHECK(filter >= 0 && filter <= 2, "filter must be 0 (bilinear), 1 (bicubic) or 2 (lanczos)");
  const int flt = static_cast<int>(filter);
  parallel_for_samples(B, [&](int64_t b0, int64_t b1) {
    thread_local Scratch scratch;
    for (int64_t b = b0; b < b1; ++b) {
      const at::Tensor& im = images[b];
      const SampleIn in{im.data_ptr<uint8_t>(), im.size(0), im.size(1), im.stride(0), 1, true};
      if (win_p != nullptr)
        window_one(in, C, box_p + b * 4, win_p + b * 4, oh, ow, vertical_first_rule,
                   flt, out_p + b * C * oh * ow, scratch);
      else
        crop_one(in, C, box_p + b * 4, oh, ow, vertical_first_rule, flt,
                 out_p + b * C * oh * ow, scratch);
    }
  });
}

}  // namespace npu_data_native
