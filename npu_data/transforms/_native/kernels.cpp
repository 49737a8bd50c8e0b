// CPU kernels for npu_data's batched augmentation: Pillow-exact, one sample per task.
//
// Registered as torch operators (namespace npu_data) so the Python layer calls them like any
// other op. Every sample of a batch is processed independently (parallel_for_samples over the
// batch); inside a sample the loops run over contiguous rows so the compiler vectorises them.
// Arithmetic follows Pillow 13 exactly: 22-bit fixed-point resampling weights computed in
// double, an 8-bit intermediate between the two passes, float32 blends that truncate, and
// Pillow's float/double mix in the HSV conversions. Build with -ffp-contract=off: a fused
// multiply-add would round differently from Pillow.

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace {

constexpr int kPrecisionBits = 22;

// body(b0, b1) over [0, n), one index at a time (crops differ in cost), on the calling
// thread plus up to at::get_num_threads() - 1 tasks of torch's inter-op pool (persistent
// threads that sleep when idle, unlike an OpenMP team spinning beside DataLoader workers).
// The caller processes indices too and waits only for indices already taken, so a task the
// pool starts late (or never) finds nothing left and cannot block it.
struct SampleQueue {
  std::atomic<int64_t> next{0};
  int64_t n = 0;
  int64_t done = 0;  // guarded by lock
  std::mutex lock;
  std::condition_variable finished;
  const std::function<void(int64_t)>* body = nullptr;  // valid while done < n

  void drain() {
    for (int64_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) {
      (*body)(i);
      std::lock_guard<std::mutex> g(lock);
      if (++done == n) finished.notify_all();
    }
  }
};

template <typename F>
void parallel_for_samples(int64_t n, const F& body) {
  const int64_t threads = std::min<int64_t>(std::max(1, at::get_num_threads()), n);
  if (threads <= 1) {
    body(0, n);
    return;
  }
  const std::function<void(int64_t)> one = [&body](int64_t i) { body(i, i + 1); };
  auto q = std::make_shared<SampleQueue>();
  q->n = n;
  q->body = &one;
  for (int64_t t = 1; t < threads; ++t) at::launch([q]() { q->drain(); });
  q->drain();
  std::unique_lock<std::mutex> g(q->lock);
  q->finished.wait(g, [&q]() { return q->done == q->n; });
}

inline uint8_t clip8_fixed(int32_t acc) {
  int32_t v = acc >> kPrecisionBits;
  return static_cast<uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v));
}

// Pillow's precompute_coeffs (bilinear filter, box [0, in_size)) + normalize_coeffs_8bpc.
struct Coeffs {
  int ksize = 0;
  std::vector<int32_t> start;   // first input index of each output
  std::vector<int32_t> count;   // taps used by each output
  std::vector<int32_t> weight;  // out_size * ksize fixed-point weights
};

Coeffs coefficients(int in_size, int out_size) {
  Coeffs c;
  const double scale = static_cast<double>(in_size) / out_size;
  const double filterscale = scale < 1.0 ? 1.0 : scale;
  const double support = filterscale * 1.0;
  c.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  c.start.resize(out_size);
  c.count.resize(out_size);
  c.weight.assign(static_cast<size_t>(out_size) * c.ksize, 0);
  std::vector<double> k(c.ksize);
  const double ss = 1.0 / filterscale;
  for (int xx = 0; xx < out_size; ++xx) {
    const double center = 0.0 + (xx + 0.5) * scale;
    int xmin = static_cast<int>(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = static_cast<int>(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    double ww = 0.0;
    for (int x = 0; x < xmax; ++x) {
      double t = (x + xmin - center + 0.5) * ss;
      if (t < 0.0) t = -t;
      const double w = t < 1.0 ? 1.0 - t : 0.0;
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
// rows of `dst`. Accumulates whole rows at a time (vectorisable).
void vertical(const uint8_t* src, int64_t src_stride, int width, const Coeffs& c, int out_h,
              uint8_t* dst, int64_t dst_stride, std::vector<int32_t>& acc) {
  acc.resize(width);
  for (int yy = 0; yy < out_h; ++yy) {
    std::fill(acc.begin(), acc.end(), 1 << (kPrecisionBits - 1));
    const int32_t* k = &c.weight[static_cast<size_t>(yy) * c.ksize];
    const int n = c.count[yy];
    for (int y = 0; y < n; ++y) {
      const uint8_t* __restrict__ row = src + (c.start[yy] + y) * src_stride;
      const int32_t w = k[y];
      int32_t* __restrict__ a = acc.data();
#pragma omp simd
      for (int x = 0; x < width; ++x) a[x] += static_cast<int32_t>(row[x]) * w;
    }
    uint8_t* __restrict__ out = dst + yy * dst_stride;
    const int32_t* __restrict__ a = acc.data();
#pragma omp simd
    for (int x = 0; x < width; ++x) out[x] = clip8_fixed(a[x]);
  }
}

// dst[x * dst_stride + y] = src[y * src_stride + x] for a rows x cols block.
void transpose(const uint8_t* src, int64_t src_stride, int rows, int cols, uint8_t* dst,
               int64_t dst_stride) {
  int y0 = 0;
#if defined(__SSE2__)
  // 16 x 16 tiles: four rounds of interleaving (bytes, then 16-, 32- and 64-bit lanes)
  for (; y0 + 16 <= rows; y0 += 16) {
    int x0 = 0;
    for (; x0 + 16 <= cols; x0 += 16) {
      __m128i r[16], a[16], b[16], c[16];
      for (int i = 0; i < 16; ++i)
        r[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + (y0 + i) * src_stride + x0));
      for (int q = 0; q < 8; ++q) {  // a[h*8+q]: rows 2q, 2q+1; columns h*8 .. h*8+7
        a[q] = _mm_unpacklo_epi8(r[2 * q], r[2 * q + 1]);
        a[8 + q] = _mm_unpackhi_epi8(r[2 * q], r[2 * q + 1]);
      }
      for (int h = 0; h < 2; ++h)
        for (int q = 0; q < 4; ++q) {  // b[h*8+g*4+q]: rows 4q..4q+3; columns h*8+g*4 ..+3
          b[h * 8 + q] = _mm_unpacklo_epi16(a[h * 8 + 2 * q], a[h * 8 + 2 * q + 1]);
          b[h * 8 + 4 + q] = _mm_unpackhi_epi16(a[h * 8 + 2 * q], a[h * 8 + 2 * q + 1]);
        }
      for (int hg = 0; hg < 4; ++hg)
        for (int o = 0; o < 2; ++o) {  // c[hg*4+k*2+o]: rows 8o..8o+7; columns hg*4+k*2 ..+1
          c[hg * 4 + o] = _mm_unpacklo_epi32(b[hg * 4 + 2 * o], b[hg * 4 + 2 * o + 1]);
          c[hg * 4 + 2 + o] = _mm_unpackhi_epi32(b[hg * 4 + 2 * o], b[hg * 4 + 2 * o + 1]);
        }
      for (int hgk = 0; hgk < 8; ++hgk) {  // columns 2*hgk and 2*hgk+1, all 16 rows
        const __m128i lo = _mm_unpacklo_epi64(c[hgk * 2], c[hgk * 2 + 1]);
        const __m128i hi = _mm_unpackhi_epi64(c[hgk * 2], c[hgk * 2 + 1]);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + (x0 + 2 * hgk) * dst_stride + y0), lo);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + (x0 + 2 * hgk + 1) * dst_stride + y0), hi);
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

at::Tensor resized_crop(const at::Tensor& images_in, const at::Tensor& boxes_in, int64_t out_h,
                        int64_t out_w, bool vertical_first_rule) {
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
  at::Tensor out = at::empty({B, C, out_h, out_w}, images.options());
  const uint8_t* in_p = images.data_ptr<uint8_t>();
  const int64_t* box_p = boxes.data_ptr<int64_t>();
  uint8_t* out_p = out.data_ptr<uint8_t>();
  const int oh = static_cast<int>(out_h), ow = static_cast<int>(out_w);
  parallel_for_samples(B, [&](int64_t b0, int64_t b1) {
    thread_local Scratch scratch;  // reused by every sample a thread takes
    std::vector<uint8_t>& tmp = scratch.tmp;
    std::vector<int32_t>& acc = scratch.acc;
    thread_local std::vector<uint8_t> planes;  // the crop as planes, for interleaved input
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t* bx = box_p + b * 4;
      const int64_t top = std::clamp<int64_t>(bx[0], 0, H - 1);
      const int64_t left = std::clamp<int64_t>(bx[1], 0, W - 1);
      const int ch = static_cast<int>(std::clamp<int64_t>(bx[2], 1, H - top));
      const int cw = static_cast<int>(std::clamp<int64_t>(bx[3], 1, W - left));
      const bool need_h = ow != cw, need_v = oh != ch;
      const bool v_first = vertical_first_rule && (ch - oh) > 0 && (ch - oh) > 2 * (cw - ow);
      const Coeffs hc = need_h ? coefficients(cw, ow) : Coeffs();
      Coeffs vc = need_v ? coefficients(ch, oh) : Coeffs();
      int64_t stride = sH;  // row stride of the planes read below
      if (interleaved) {
        planes.resize(static_cast<size_t>(C) * ch * cw);
        deinterleave(in_p + b * sB + top * sH + left * C, sH, ch, cw, C, planes.data());
        stride = cw;
      }
      for (int64_t c = 0; c < C; ++c) {
        const uint8_t* plane = interleaved  // crop origin of this channel
            ? planes.data() + static_cast<size_t>(c) * ch * cw
            : in_p + b * sB + c * sC + top * sH + left;
        uint8_t* dst = out_p + (b * C + c) * out_h * out_w;
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
  });
  return out;
}

// ---- colour ------------------------------------------------------------------------------

inline int32_t gray_of(int32_t r, int32_t g, int32_t b) {
  return (r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16;
}

// Pillow's blend: float32 in1 + a * (in2 - in1), clipped, truncated.
// (clamping first gives the same bytes as Pillow's "<= 0 -> 0, >= 255 -> 255, else (UINT8)t")
inline uint8_t blend_value(float in1, float in2, float a) {
  const float t = in1 + a * (in2 - in1);
  return static_cast<uint8_t>(static_cast<int>(std::min(std::max(t, 0.0f), 255.0f)));
}


// Pillow's rgb2hsv / hsv2rgb with a hue shift, written without branches so the row loop
// vectorises. Each expression keeps Pillow's types: float variables, double literals.
// Non-negative values make trunc == floor and round(x) == floor(x) + (frac >= 0.5).
inline void hue_pixel(uint8_t& r8, uint8_t& g8, uint8_t& b8, int shift) {
  // Selections are written as arithmetic (x * 0/1 and sums with 0 are exact) so that the
  // compiler can if-convert and vectorise the loop.
  const int r = r8, g = g8, b = b8;
  const int maxc = std::max(r, std::max(g, b));
  const int minc = std::min(r, std::min(g, b));
  const int d = maxc - minc;
  const int grey = d == 0;
  const float cr = static_cast<float>(d + grey);  // grey pixels: any non-zero divisor
  const float s = cr / static_cast<float>(maxc + (maxc == 0));
  const float rc = static_cast<float>(maxc - r) / cr;
  const float gc = static_cast<float>(maxc - g) / cr;
  const float bc = static_cast<float>(maxc - b) / cr;
  const float h_r = bc - gc;
  const float h_g = static_cast<float>(2.0 + rc - bc);
  const float h_b = static_cast<float>(4.0 + gc - rc);
  const int is_r = r == maxc;
  const int is_g = (1 - is_r) & (g == maxc);
  const int is_b = 1 - is_r - is_g;
  const float h0 = h_r * static_cast<float>(is_r) + h_g * static_cast<float>(is_g) +
                   h_b * static_cast<float>(is_b);
  const double wrapped = h0 / 6.0 + 1.0;  // in [5/6, 11/6): fmod(x, 1) is x or x - 1, exactly
  const float h = static_cast<float>(wrapped - static_cast<double>(wrapped >= 1.0));
  const int uh = std::min(std::max(static_cast<int>(h * 255.0), 0), 255) * (1 - grey);
  const int us = std::min(std::max(static_cast<int>(s * 255.0), 0), 255) * (1 - grey);
  const int hh = (uh + shift) & 255;
  // back to RGB
  const double hf = static_cast<float>(hh) * 6.0 / 255.0;
  int i = static_cast<int>(hf);
  const float f = static_cast<float>(hf - static_cast<float>(i));
  const float fs = static_cast<float>(static_cast<float>(us) / 255.0);
  const double v = static_cast<float>(maxc);
  const double xp = v * (1.0 - fs);
  const double xq = v * (1.0 - fs * f);
  const double xt = v * (1.0 - fs * (1.0 - f));
  const int ip = static_cast<int>(xp), iq = static_cast<int>(xq), it = static_cast<int>(xt);
  const int p = std::min(ip + static_cast<int>(xp - ip >= 0.5), 255);
  const int q = std::min(iq + static_cast<int>(xq - iq >= 0.5), 255);
  const int t = std::min(it + static_cast<int>(xt - it >= 0.5), 255);
  i -= 6 * (i == 6);
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

void brightness(Planes& p, float f) {
  for (int64_t y = 0; y < p.rows; ++y) {
    uint8_t* __restrict__ r = p.r + y * p.stride;
    uint8_t* __restrict__ g = p.g + y * p.stride;
    uint8_t* __restrict__ b = p.b + y * p.stride;
#pragma omp simd
    for (int64_t x = 0; x < p.cols; ++x) {
      r[x] = blend_value(0.0f, static_cast<float>(r[x]), f);
      g[x] = blend_value(0.0f, static_cast<float>(g[x]), f);
      b[x] = blend_value(0.0f, static_cast<float>(b[x]), f);
    }
  }
}

void saturation(Planes& p, float f) {
  for (int64_t y = 0; y < p.rows; ++y) {
    uint8_t* __restrict__ r = p.r + y * p.stride;
    uint8_t* __restrict__ g = p.g + y * p.stride;
    uint8_t* __restrict__ b = p.b + y * p.stride;
#pragma omp simd
    for (int64_t x = 0; x < p.cols; ++x) {
      const float l = static_cast<float>(gray_of(r[x], g[x], b[x]));
      r[x] = blend_value(l, static_cast<float>(r[x]), f);
      g[x] = blend_value(l, static_cast<float>(g[x]), f);
      b[x] = blend_value(l, static_cast<float>(b[x]), f);
    }
  }
}

void contrast(Planes& p, float f) {
  int64_t total = 0;
  for (int64_t y = 0; y < p.vh; ++y) {
    const uint8_t* r = p.r + y * p.stride;
    const uint8_t* g = p.g + y * p.stride;
    const uint8_t* b = p.b + y * p.stride;
    int64_t row_total = 0;
#pragma omp simd reduction(+ : row_total)
    for (int64_t x = 0; x < p.vw; ++x) row_total += gray_of(r[x], g[x], b[x]);
    total += row_total;
  }
  const int64_t n = std::max<int64_t>(p.vh * p.vw, 1);
  const float mean = static_cast<float>((2 * total + n) / (2 * n));
  for (int64_t y = 0; y < p.rows; ++y) {
    uint8_t* ch[3] = {p.r + y * p.stride, p.g + y * p.stride, p.b + y * p.stride};
    for (uint8_t* __restrict__ row : ch) {
      if (y >= p.vh) {
        std::memset(row, 0, p.cols);
        continue;
      }
#pragma omp simd
      for (int64_t x = 0; x < p.vw; ++x) row[x] = blend_value(mean, static_cast<float>(row[x]), f);
      if (p.vw < p.cols) std::memset(row + p.vw, 0, p.cols - p.vw);
    }
  }
}

void hue(Planes& p, int shift) {
  for (int64_t y = 0; y < p.rows; ++y) {
    uint8_t* __restrict__ r = p.r + y * p.stride;
    uint8_t* __restrict__ g = p.g + y * p.stride;
    uint8_t* __restrict__ b = p.b + y * p.stride;
#pragma omp simd
    for (int64_t x = 0; x < p.cols; ++x) hue_pixel(r[x], g[x], b[x], shift);
  }
}

// order (B, n) int64 op ids (0 brightness, 1 contrast, 2 saturation, 3 hue; -1 skips);
// factors (B, 3) float32 blend factors; shifts (B,) int64 hue shift in levels.
at::Tensor color_ops(const at::Tensor& images_in, const at::Tensor& sizes_in,
                     const at::Tensor& order_in, const at::Tensor& factors_in,
                     const at::Tensor& shifts_in) {
  TORCH_CHECK(images_in.dim() == 4 && images_in.size(1) == 3 &&
                  images_in.scalar_type() == at::kByte,
              "images must be uint8 (B, 3, H, W)");
  // copied sample by sample inside the parallel loop: a torch copy would wake its OpenMP pool
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
      std::memcpy(s, in_p + b * 3 * H * W, static_cast<size_t>(3 * H * W));
      Planes p{s, s + H * W, s + 2 * H * W, W, H, W,
               std::clamp<int64_t>(sz[b * 2], 0, H), std::clamp<int64_t>(sz[b * 2 + 1], 0, W)};
      for (int64_t k = 0; k < n; ++k) {
        switch (ord[b * n + k]) {
          case 0: brightness(p, fac[b * 3 + 0]); break;
          case 1: contrast(p, fac[b * 3 + 1]); break;
          case 2: saturation(p, fac[b * 3 + 2]); break;
          case 3: hue(p, static_cast<int>(((sh[b] % 256) + 256) % 256)); break;
          default: break;
        }
      }
    }
  });
  return out;
}

// Mirror each flagged sample left-right within its valid width; the padding stays put.
at::Tensor hflip(const at::Tensor& images_in, const at::Tensor& sizes_in, const at::Tensor& flip_in) {
  TORCH_CHECK(images_in.dim() == 4 && images_in.scalar_type() == at::kByte,
              "images must be uint8 (B, C, H, W)");
  const at::Tensor images = images_in.contiguous();
  const at::Tensor sizes = sizes_in.to(at::kLong).contiguous();
  const at::Tensor flip = flip_in.to(at::kBool).contiguous();
  const int64_t B = images.size(0), C = images.size(1), H = images.size(2), W = images.size(3);
  TORCH_CHECK(sizes.size(0) == B && flip.numel() == B, "sizes and flip_mask need B rows");
  at::Tensor out = at::empty_like(images);
  const uint8_t* in_p = images.data_ptr<uint8_t>();
  uint8_t* out_p = out.data_ptr<uint8_t>();
  const int64_t* sz = sizes.data_ptr<int64_t>();
  const bool* fl = flip.data_ptr<bool>();
  parallel_for_samples(B * C, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t b = p / C;
      const uint8_t* src = in_p + p * H * W;
      uint8_t* dst = out_p + p * H * W;
      const int64_t w = std::clamp<int64_t>(sz[b * 2 + 1], 0, W);
      if (!fl[b] || w <= 1) {
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

}  // namespace

TORCH_LIBRARY(npu_data, m) {
  m.def("resized_crop(Tensor images, Tensor boxes, int out_h, int out_w, bool vertical_first_rule) -> Tensor");
  m.def("normalize(Tensor images, Tensor mean, Tensor std, bool channels_last) -> Tensor");
  m.def("hflip(Tensor images, Tensor sizes, Tensor flip_mask) -> Tensor");
  m.def("color_ops(Tensor images, Tensor sizes, Tensor order, Tensor factors, Tensor shifts) -> Tensor");
}

TORCH_LIBRARY_IMPL(npu_data, CPU, m) {
  m.impl("resized_crop", &resized_crop);
  m.impl("color_ops", &color_ops);
  m.impl("hflip", &hflip);
  m.impl("normalize", &normalize);
}
