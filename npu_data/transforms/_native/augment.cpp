// Augmentation kernels: the affine warp (nearest, bilinear), per-sample histograms and
// contrast keys, the auto-augment pixel step (a table per sample, Color, Sharpness) and the
// Gaussian blur. Each computes what its torch kernel computes (transforms/_kernels: warp.py,
// pixel.py, blur.py) with the same integer and float32 operations in the same order, so the
// bytes are equal. Plain C++ only (no intrinsics): every build (native, portable, scalar) on
// x86-64 and aarch64 runs this code, vectorised by the compiler where it can.

#include "kernels.h"
#include "parallel.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace npu_data_native {

namespace {

constexpr int kNearestShift = 16;   // warp_tables.NEAREST_SHIFT
constexpr int kBilinearShift = 32;  // warp_tables.BILINEAR_SHIFT
constexpr int kWeightBits = 24;     // warp._WEIGHT_BITS

// floor(v / 2**s) for either sign (what torch.div(..., rounding_mode="floor") gives).
inline int64_t floor_shift(int64_t v, int s) { return v >= 0 ? (v >> s) : ~((~v) >> s); }

// a + b wrapping around as torch's int64 sums do (signed overflow is undefined in C++): the
// tables of points far outside an image may sum past 2**63.
inline int64_t wrap_add(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}

at::Tensor longs(const at::Tensor& t) { return t.to(at::kLong).contiguous(); }

void check_images(const at::Tensor& images, const char* who) {
  TORCH_CHECK(images.dim() == 4 && images.scalar_type() == at::kByte, who,
              ": images must be uint8 (B, C, H, W)");
}

// Each sample's valid (height, width) from a (B, 2) int64 tensor, clamped to the batch (the
// torch kernels' masks select the same pixels).
struct Valid {
  const int64_t* p;
  int64_t H, W;
  int64_t h(int64_t b) const { return std::clamp<int64_t>(p[2 * b], 0, H); }
  int64_t w(int64_t b) const { return std::clamp<int64_t>(p[2 * b + 1], 0, W); }
};

// Pillow's L of one RGB pixel (pixel.grey).
inline int32_t grey(int32_t r, int32_t g, int32_t b) {
  return (r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16;
}

// pixel._truncate of pixel.blend_pixels: trunc(clamp(key + fl(f * (x - key)))).
inline uint8_t blend(const float* prods, int32_t key, int32_t x) {
  const float t = prods[x - key + 255] + static_cast<float>(key);
  return static_cast<uint8_t>(std::min(std::max(t, 0.0f), 255.0f));
}

// Whether a sample's tables map each output pixel to the same source pixel: nearest's
// source x << 16 (the scale path's exact indices), bilinear's pixel centre (x + 1/2) << 32
// (zero weights: the pixel itself).
bool is_identity(const int64_t* col_x, const int64_t* row_x, const int64_t* col_y,
                 const int64_t* row_y, int64_t ow, int64_t oh, bool bilinear) {
  const int shift = bilinear ? kBilinearShift : kNearestShift;
  const int64_t half = bilinear ? int64_t{1} << (kBilinearShift - 1) : 0;
  for (int64_t x = 0; x < ow; ++x)
    if (col_x[x] != (x << shift) + half || col_y[x] != 0) return false;
  for (int64_t y = 0; y < oh; ++y)
    if (row_y[y] != (y << shift) + half || row_x[y] != 0) return false;
  return true;
}

// The identity warp of one sample: the source where inside it, the fill elsewhere in the
// valid output (rows x cols); the rest of the output stays 0.
void copy_identity(const uint8_t* src, uint8_t* dst, int64_t plane_in, int64_t plane_out,
                   int64_t W, int64_t ow, int64_t C, int64_t rows, int64_t cols, int64_t src_h,
                   int64_t src_w, const uint8_t* fill) {
  const int64_t inside = std::min(cols, src_w);
  for (int64_t c = 0; c < C; ++c)
    for (int64_t y = 0; y < rows; ++y) {
      uint8_t* d = dst + c * plane_out + y * ow;
      const int64_t n = y < src_h ? inside : 0;
      if (n > 0) std::memcpy(d, src + c * plane_in + y * W, static_cast<size_t>(n));
      std::memset(d + n, fill[c], static_cast<size_t>(cols - n));
    }
}

}  // namespace

at::Tensor warp(const at::Tensor& images_in, const at::Tensor& sizes_in,
                const at::Tensor& out_sizes_in, const at::Tensor& col_x_in,
                const at::Tensor& row_x_in, const at::Tensor& col_y_in,
                const at::Tensor& row_y_in, bool bilinear, const at::Tensor& fill_in) {
  check_images(images_in, "warp");
  const at::Tensor images = images_in.contiguous();
  const int64_t B = images.size(0), C = images.size(1), H = images.size(2), W = images.size(3);
  const at::Tensor sizes = longs(sizes_in), out_sizes = longs(out_sizes_in);
  const at::Tensor col_x = longs(col_x_in), row_x = longs(row_x_in);
  const at::Tensor col_y = longs(col_y_in), row_y = longs(row_y_in);
  const at::Tensor fill = fill_in.to(at::kByte).contiguous();
  const int64_t oh = row_x.size(1), ow = col_x.size(1);
  TORCH_CHECK(sizes.size(0) == B && out_sizes.size(0) == B && col_x.size(0) == B &&
                  row_x.size(0) == B && col_y.sizes() == col_x.sizes() &&
                  row_y.sizes() == row_x.sizes() && fill.numel() == C,
              "warp: sizes, out_sizes and the tables need B rows, fill C values");
  const int64_t* sz = sizes.data_ptr<int64_t>();
  for (int64_t b = 0; b < B; ++b)
    TORCH_CHECK(sz[2 * b] >= 1 && sz[2 * b] <= H && sz[2 * b + 1] >= 1 && sz[2 * b + 1] <= W,
                "warp: sample ", b, "'s valid size is not inside its ", H, "x", W, " image");
  at::Tensor out = at::zeros({B, C, oh, ow}, images.options());  // 0 outside the valid output
  const uint8_t* in_p = images.data_ptr<uint8_t>();
  uint8_t* out_p = out.data_ptr<uint8_t>();
  const int64_t* osz = out_sizes.data_ptr<int64_t>();
  const int64_t *cx = col_x.data_ptr<int64_t>(), *rx = row_x.data_ptr<int64_t>();
  const int64_t *cy = col_y.data_ptr<int64_t>(), *ry = row_y.data_ptr<int64_t>();
  const uint8_t* fl = fill.data_ptr<uint8_t>();
  const int64_t plane_in = H * W, plane_out = oh * ow;
  constexpr int64_t unit = int64_t{1} << kBilinearShift, one = int64_t{1} << kWeightBits;
  constexpr int drop = kBilinearShift - kWeightBits;
  // Per output row: each pixel's source offsets and weights (-1: outside, the fill), then one
  // pass per channel through them.
  parallel_for_samples(B, [&](int64_t b0, int64_t b1) {
    std::vector<int64_t> at00, at01, at10, at11, wx, wy;
    for (int64_t b = b0; b < b1; ++b) {
      const uint8_t* src = in_p + b * C * plane_in;
      uint8_t* dst = out_p + b * C * plane_out;
      const int64_t src_h = sz[2 * b], src_w = sz[2 * b + 1];
      const int64_t rows = std::clamp<int64_t>(osz[2 * b], 0, oh);
      const int64_t cols = std::clamp<int64_t>(osz[2 * b + 1], 0, ow);
      for (auto* v : {&at00, &at01, &at10, &at11, &wx, &wy}) v->resize(static_cast<size_t>(cols));
      const int64_t* cxb = cx + b * ow;
      const int64_t* cyb = cy + b * ow;
      if (is_identity(cxb, rx + b * oh, cyb, ry + b * oh, ow, oh, bilinear)) {
        copy_identity(src, dst, plane_in, plane_out, W, ow, C, rows, cols, src_h, src_w, fl);
        continue;  // e.g. the samples of an auto-augment step whose op is not geometric
      }
      for (int64_t y = 0; y < rows; ++y) {
        const int64_t ryx = rx[b * oh + y], ryy = ry[b * oh + y];
        for (int64_t x = 0; x < cols; ++x) {
          int64_t gx = wrap_add(cxb[x], ryx), gy = wrap_add(cyb[x], ryy);
          if (!bilinear) {
            const int64_t xi = floor_shift(gx, kNearestShift), yi = floor_shift(gy, kNearestShift);
            const bool inside = xi >= 0 && xi < src_w && yi >= 0 && yi < src_h;
            at00[x] = inside ? yi * W + xi : -1;
            continue;
          }
          if (!(gx >= 0 && gx < src_w * unit && gy >= 0 && gy < src_h * unit)) {
            at00[x] = -1;
            continue;
          }
          gx -= unit / 2;
          gy -= unit / 2;
          const int64_t x0 = floor_shift(gx, kBilinearShift), y0 = floor_shift(gy, kBilinearShift);
          wx[x] = floor_shift(gx - x0 * unit, drop);
          wy[x] = floor_shift(gy - y0 * unit, drop);
          const int64_t xa = std::min(std::max<int64_t>(x0, 0), src_w - 1);
          const int64_t xb = std::min(std::max<int64_t>(x0 + 1, 0), src_w - 1);
          const int64_t ya = std::min(std::max<int64_t>(y0, 0), src_h - 1) * W;
          const int64_t yb = std::min(std::max<int64_t>(y0 + 1, 0), src_h - 1) * W;
          at00[x] = ya + xa;
          at01[x] = ya + xb;
          at10[x] = yb + xa;
          at11[x] = yb + xb;
        }
        for (int64_t c = 0; c < C; ++c) {
          const uint8_t* s = src + c * plane_in;
          uint8_t* d = dst + c * plane_out + y * ow;
          const uint8_t f = fl[c];
          if (!bilinear) {
            for (int64_t x = 0; x < cols; ++x) d[x] = at00[x] < 0 ? f : s[at00[x]];
            continue;
          }
          for (int64_t x = 0; x < cols; ++x) {
            if (at00[x] < 0) {
              d[x] = f;
              continue;
            }
            const int64_t p00 = s[at00[x]], p01 = s[at01[x]], p10 = s[at10[x]], p11 = s[at11[x]];
            const int64_t top = p00 * one + (p01 - p00) * wx[x];
            const int64_t bottom = p10 * one + (p11 - p10) * wx[x];
            d[x] = static_cast<uint8_t>(
                floor_shift(top * one + (bottom - top) * wy[x], 2 * kWeightBits));
          }
        }
      }
    }
  });
  return out;
}

at::Tensor histograms(const at::Tensor& images_in, const at::Tensor& sizes_in) {
  check_images(images_in, "histograms");
  const at::Tensor images = images_in.contiguous();
  const int64_t B = images.size(0), C = images.size(1), H = images.size(2), W = images.size(3);
  const at::Tensor sizes = longs(sizes_in);
  TORCH_CHECK(sizes.size(0) == B, "histograms: sizes needs B rows");
  at::Tensor out = at::zeros({B, C, 256}, images.options().dtype(at::kInt));
  const uint8_t* in_p = images.data_ptr<uint8_t>();
  int32_t* out_p = out.data_ptr<int32_t>();
  const Valid v{sizes.data_ptr<int64_t>(), H, W};
  parallel_for_samples(B * C, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t b = p / C, h = v.h(b), w = v.w(b);
      int32_t part[4][256] = {};  // four counters: repeated levels do not wait on each other
      for (int64_t y = 0; y < h; ++y) {
        const uint8_t* row = in_p + p * H * W + y * W;
        int64_t x = 0;
        for (; x + 4 <= w; x += 4) {
          ++part[0][row[x]];
          ++part[1][row[x + 1]];
          ++part[2][row[x + 2]];
          ++part[3][row[x + 3]];
        }
        for (; x < w; ++x) ++part[0][row[x]];
      }
      int32_t* hist = out_p + p * 256;
      for (int i = 0; i < 256; ++i) hist[i] = part[0][i] + part[1][i] + part[2][i] + part[3][i];
    }
  });
  return out;
}

at::Tensor contrast_keys(const at::Tensor& images_in, const at::Tensor& sizes_in) {
  check_images(images_in, "contrast_keys");
  TORCH_CHECK(images_in.size(1) == 3, "contrast_keys: images must have 3 channels");
  const at::Tensor images = images_in.contiguous();
  const int64_t B = images.size(0), H = images.size(2), W = images.size(3);
  const at::Tensor sizes = longs(sizes_in);
  TORCH_CHECK(sizes.size(0) == B, "contrast_keys: sizes needs B rows");
  at::Tensor out = at::empty({B}, sizes.options());
  const uint8_t* in_p = images.data_ptr<uint8_t>();
  int64_t* out_p = out.data_ptr<int64_t>();
  const Valid v{sizes.data_ptr<int64_t>(), H, W};
  parallel_for_samples(B, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t h = v.h(b), w = v.w(b), n = h * w;
      const uint8_t* r = in_p + b * 3 * H * W;
      int64_t total = 0;
      for (int64_t y = 0; y < h; ++y)
        for (int64_t x = 0; x < w; ++x) {
          const int64_t i = y * W + x;
          total += grey(r[i], r[H * W + i], r[2 * H * W + i]);
        }
      out_p[b] = (2 * total + n) / (2 * std::max<int64_t>(n, 1));  // int(mean + 0.5)
    }
  });
  return out;
}

at::Tensor policy_pixels(const at::Tensor& images_in, const at::Tensor& sizes_in,
                         const at::Tensor& luts_in, const at::Tensor& prods_in,
                         const at::Tensor& mode_in) {
  check_images(images_in, "policy_pixels");
  const at::Tensor images = images_in.contiguous();
  const int64_t B = images.size(0), C = images.size(1), H = images.size(2), W = images.size(3);
  const at::Tensor sizes = longs(sizes_in), mode = longs(mode_in);
  const at::Tensor luts = luts_in.to(at::kByte).contiguous();
  const at::Tensor prods = prods_in.to(at::kFloat).contiguous();
  TORCH_CHECK(sizes.size(0) == B && mode.numel() == B && luts.dim() == 3 && luts.size(0) == B &&
                  luts.size(1) == C && luts.size(2) == 256 && prods.dim() == 2 &&
                  prods.size(0) == B && prods.size(1) == 511,
              "policy_pixels: sizes (B, 2), luts (B, C, 256), prods (B, 511), mode (B,)");
  const int64_t* md = mode.data_ptr<int64_t>();
  for (int64_t b = 0; b < B; ++b)
    TORCH_CHECK(md[b] >= 0 && md[b] <= 2 && (md[b] == 0 || C == 3),
                "policy_pixels: mode 0 (table), 1 (Color) or 2 (Sharpness; 3 channels)");
  at::Tensor out = at::zeros_like(images);
  const uint8_t* in_p = images.data_ptr<uint8_t>();
  uint8_t* out_p = out.data_ptr<uint8_t>();
  const uint8_t* lut_p = luts.data_ptr<uint8_t>();
  const float* prod_p = prods.data_ptr<float>();
  const Valid v{sizes.data_ptr<int64_t>(), H, W};
  const int64_t plane = H * W;
  parallel_for_samples(B, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t h = v.h(b), w = v.w(b);
      const uint8_t* src = in_p + b * C * plane;
      uint8_t* dst = out_p + b * C * plane;
      const float* prods_b = prod_p + b * 511;
      if (md[b] == 0) {
        for (int64_t c = 0; c < C; ++c) {
          const uint8_t* lut = lut_p + (b * C + c) * 256;
          for (int64_t y = 0; y < h; ++y) {
            const uint8_t* s = src + c * plane + y * W;
            uint8_t* d = dst + c * plane + y * W;
            for (int64_t x = 0; x < w; ++x) d[x] = lut[s[x]];
          }
        }
      } else if (md[b] == 1) {  // Color: each pixel blended with its own grey
        for (int64_t y = 0; y < h; ++y)
          for (int64_t x = 0; x < w; ++x) {
            const int64_t i = y * W + x;
            const int32_t r = src[i], g = src[plane + i], bl = src[2 * plane + i];
            const int32_t key = grey(r, g, bl);
            dst[i] = blend(prods_b, key, r);
            dst[plane + i] = blend(prods_b, key, g);
            dst[2 * plane + i] = blend(prods_b, key, bl);
          }
      } else {  // Sharpness: blended with SMOOTH inside a 1-px border, the border kept
        for (int64_t c = 0; c < C; ++c) {
          const uint8_t* s = src + c * plane;
          uint8_t* d = dst + c * plane;
          for (int64_t y = 0; y < h; ++y) {
            const uint8_t* row = s + y * W;
            uint8_t* out_row = d + y * W;
            if (y == 0 || y == h - 1 || w < 3) {
              for (int64_t x = 0; x < w; ++x) out_row[x] = blend(prods_b, row[x], row[x]);
              continue;
            }
            const uint8_t* up = row - W;
            const uint8_t* down = row + W;
            out_row[0] = blend(prods_b, row[0], row[0]);
            for (int64_t x = 1; x < w - 1; ++x) {
              const int32_t sum = up[x - 1] + up[x] + up[x + 1] + row[x - 1] + 5 * row[x] +
                                  row[x + 1] + down[x - 1] + down[x] + down[x + 1];
              out_row[x] = blend(prods_b, (2 * sum + 13) / 26, row[x]);
            }
            out_row[w - 1] = blend(prods_b, row[w - 1], row[w - 1]);
          }
        }
      }
    }
  });
  return out;
}

at::Tensor gaussian_blur(const at::Tensor& images_in, const at::Tensor& sizes_in,
                         const at::Tensor& wx_in, const at::Tensor& wy_in) {
  check_images(images_in, "gaussian_blur");
  const at::Tensor images = images_in.contiguous();
  const int64_t B = images.size(0), C = images.size(1), H = images.size(2), W = images.size(3);
  const at::Tensor sizes = longs(sizes_in);
  const at::Tensor wx = wx_in.to(at::kFloat).contiguous(), wy = wy_in.to(at::kFloat).contiguous();
  TORCH_CHECK(sizes.size(0) == B && wx.dim() == 2 && wx.size(0) == B && wy.dim() == 2 &&
                  wy.size(0) == B,
              "gaussian_blur: sizes (B, 2) and weights (B, kx), (B, ky)");
  const int64_t kx = wx.size(1), ky = wy.size(1);
  at::Tensor out = at::zeros_like(images);
  const uint8_t* in_p = images.data_ptr<uint8_t>();
  uint8_t* out_p = out.data_ptr<uint8_t>();
  const float *wx_p = wx.data_ptr<float>(), *wy_p = wy.data_ptr<float>();
  const Valid v{sizes.data_ptr<int64_t>(), H, W};
  // blur.reflect_index: output j's tap t reads m = j + t - taps // 2 reflected into [0, n)
  // (period 2 (n - 1)); it depends on j + t only, so one row of n + taps - 1 entries holds it
  auto reflect = [](int64_t n, int64_t taps, std::vector<int64_t>& idx) {
    const int64_t period = std::max<int64_t>(2 * (n - 1), 1);
    idx.resize(static_cast<size_t>(n + taps - 1));
    for (int64_t q = 0; q < n + taps - 1; ++q) {
      int64_t m = (q - taps / 2) % period;
      if (m < 0) m += period;
      idx[q] = std::min(m >= n ? period - m : m, n - 1);
    }
  };
  parallel_for_samples(B, [&](int64_t b0, int64_t b1) {
    std::vector<int64_t> ix, iy;
    std::vector<float> across, acc, ext;
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t h = v.h(b), w = v.w(b);
      if (h == 0 || w == 0) continue;
      reflect(w, kx, ix);  // only the valid area is read and written
      reflect(h, ky, iy);
      const float* wxb = wx_p + b * kx;
      const float* wyb = wy_p + b * ky;
      across.resize(static_cast<size_t>(h * w));
      acc.resize(static_cast<size_t>(w));
      ext.resize(static_cast<size_t>(w + kx - 1));
      for (int64_t c = 0; c < C; ++c) {
        const uint8_t* src = in_p + (b * C + c) * H * W;
        uint8_t* dst = out_p + (b * C + c) * H * W;
        for (int64_t y = 0; y < h; ++y) {  // across: sum_t wx[t] * row[ix[x + t]], t in order
          const uint8_t* row = src + y * W;
          for (int64_t q = 0; q < w + kx - 1; ++q) ext[q] = static_cast<float>(row[ix[q]]);
          float* a = across.data() + y * w;
          std::fill(a, a + w, 0.0f);
          for (int64_t t = 0; t < kx; ++t) {
            const float wt = wxb[t];
            const float* e = ext.data() + t;
            for (int64_t x = 0; x < w; ++x) a[x] = a[x] + wt * e[x];
          }
        }
        for (int64_t y = 0; y < h; ++y) {  // down: the same over the rows iy[y + t]
          std::fill(acc.begin(), acc.end(), 0.0f);
          for (int64_t t = 0; t < ky; ++t) {
            const float wt = wyb[t];
            const float* a = across.data() + iy[y + t] * w;
            for (int64_t x = 0; x < w; ++x) acc[x] = acc[x] + wt * a[x];
          }
          uint8_t* d = dst + y * W;
          for (int64_t x = 0; x < w; ++x)
            d[x] = static_cast<uint8_t>(std::min(std::max(std::nearbyint(acc[x]), 0.0f), 255.0f));
        }
      }
    }
  });
  return out;
}

at::Tensor choose(const at::Tensor& mask_in, const at::Tensor& images_in,
                  const at::Tensor& others_in) {
  TORCH_CHECK(images_in.dim() >= 1 && images_in.sizes() == others_in.sizes() &&
                  images_in.scalar_type() == others_in.scalar_type(),
              "choose: images and others need one shape and dtype");
  const at::Tensor images = images_in.contiguous(), others = others_in.contiguous();
  const at::Tensor mask = mask_in.to(at::kBool).contiguous();
  const int64_t B = images.size(0);
  TORCH_CHECK(mask.numel() == B, "choose: mask needs B values");
  at::Tensor out = at::empty_like(images, at::MemoryFormat::Contiguous);
  if (out.numel() == 0) return out;
  const size_t bytes = static_cast<size_t>(images.numel() / B) * images.element_size();
  const char* a = static_cast<const char*>(images.data_ptr());
  const char* o = static_cast<const char*>(others.data_ptr());
  char* dst = static_cast<char*>(out.data_ptr());
  const bool* m = mask.data_ptr<bool>();
  parallel_for_samples(B, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b)
      std::memcpy(dst + b * bytes, (m[b] ? a : o) + b * bytes, bytes);
  });
  return out;
}

at::Tensor vflip(const at::Tensor& images_in, const at::Tensor& sizes_in,
                 const at::Tensor& flip_in) {
  check_images(images_in, "vflip");
  const at::Tensor images = images_in.contiguous();
  const int64_t B = images.size(0), C = images.size(1), H = images.size(2), W = images.size(3);
  const at::Tensor sizes = longs(sizes_in), flip = flip_in.to(at::kBool).contiguous();
  TORCH_CHECK(sizes.size(0) == B && flip.numel() == B, "vflip: sizes and flip_mask need B rows");
  at::Tensor out = at::empty_like(images);
  const uint8_t* in_p = images.data_ptr<uint8_t>();
  uint8_t* out_p = out.data_ptr<uint8_t>();
  const int64_t* sz = sizes.data_ptr<int64_t>();
  const bool* fl = flip.data_ptr<bool>();
  for (int64_t b = 0; b < B; ++b)
    TORCH_CHECK(!fl[b] || sz[2 * b] <= H, "vflip: sample ", b, "'s valid height ", sz[2 * b],
                " is over the batch's ", H);
  parallel_for_samples(B * C, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t b = p / C, h = sz[2 * b];  // whole rows: the padding columns move too
      for (int64_t r = 0; r < H; ++r) {
        const int64_t from = fl[b] && r < h ? h - 1 - r : r;
        std::memcpy(out_p + (p * H + r) * W, in_p + (p * H + from) * W, static_cast<size_t>(W));
      }
    }
  });
  return out;
}

at::Tensor erase(const at::Tensor& images_in, const at::Tensor& boxes_in,
                 const at::Tensor& value_in) {
  check_images(images_in, "erase");
  const at::Tensor images = images_in.contiguous();
  const int64_t B = images.size(0), C = images.size(1), H = images.size(2), W = images.size(3);
  const at::Tensor boxes = longs(boxes_in), value = value_in.to(at::kByte).contiguous();
  TORCH_CHECK(boxes.dim() == 2 && boxes.size(0) == B && boxes.size(1) == 4 &&
                  value.numel() == B * C,
              "erase: boxes (B, 4) and value (B, C)");
  at::Tensor out = images.clone();
  uint8_t* out_p = out.data_ptr<uint8_t>();
  const int64_t* bx = boxes.data_ptr<int64_t>();
  const uint8_t* v = value.data_ptr<uint8_t>();
  parallel_for_samples(B, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {  // rows top <= r < top + height, the same for columns
      const int64_t* box = bx + 4 * b;
      const int64_t r0 = std::clamp<int64_t>(box[0], 0, H);
      const int64_t r1 = std::clamp<int64_t>(wrap_add(box[0], box[2]), r0, H);
      const int64_t c0 = std::clamp<int64_t>(box[1], 0, W);
      const int64_t c1 = std::clamp<int64_t>(wrap_add(box[1], box[3]), c0, W);
      for (int64_t c = 0; c < C; ++c)
        for (int64_t r = r0; r < r1; ++r)
          std::memset(out_p + ((b * C + c) * H + r) * W + c0, v[b * C + c],
                      static_cast<size_t>(c1 - c0));
    }
  });
  return out;
}

at::Tensor rgb_to_grayscale(const at::Tensor& images_in, const at::Tensor& mask_in) {
  check_images(images_in, "rgb_to_grayscale");
  TORCH_CHECK(images_in.size(1) == 3, "rgb_to_grayscale: images must have 3 channels");
  const at::Tensor images = images_in.contiguous();
  const int64_t B = images.size(0), plane = images.size(2) * images.size(3);
  const at::Tensor mask = mask_in.to(at::kBool).contiguous();
  TORCH_CHECK(mask.numel() == B, "rgb_to_grayscale: mask needs B values");
  at::Tensor out = at::empty_like(images);
  const uint8_t* in_p = images.data_ptr<uint8_t>();
  uint8_t* out_p = out.data_ptr<uint8_t>();
  const bool* m = mask.data_ptr<bool>();
  parallel_for_samples(B, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const uint8_t* s = in_p + b * 3 * plane;
      uint8_t* d = out_p + b * 3 * plane;
      if (!m[b]) {
        std::memcpy(d, s, static_cast<size_t>(3 * plane));
        continue;
      }
      for (int64_t i = 0; i < plane; ++i) {  // the whole plane, padding included (0 stays 0)
        const uint8_t g = static_cast<uint8_t>(grey(s[i], s[plane + i], s[2 * plane + i]));
        d[i] = g;
        d[plane + i] = g;
        d[2 * plane + i] = g;
      }
    }
  });
  return out;
}

}  // namespace npu_data_native
