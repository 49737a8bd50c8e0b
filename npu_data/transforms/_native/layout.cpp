// Layout kernels: per-sample left-right flip and the final normalisation (a table lookup).

#include "kernels.h"
#include "parallel.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

// Normalize's 16-bit tables (bfloat16, float16) have a hand-written AVX-512 BW path (eight
// registers hold the 256 entries); NPU_DATA_PORTABLE leaves it out. Other element sizes and the
// channels-last layout run the plain loop (the compiler's gathers where it has them).
#if defined(__AVX512BW__) && defined(__AVX512VL__) && !defined(NPU_DATA_PORTABLE)
#include <immintrin.h>
#define NPU_DATA_WORD_TABLES "avx512bw"
#endif

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

namespace {
constexpr int64_t kNormalizeRows = 16;  // rows of one sample per task

template <typename T>
void table_row(const uint8_t* __restrict__ src, T* __restrict__ dst, int64_t n,
               const T* __restrict__ table) {
  for (int64_t x = 0; x < n; ++x) dst[x] = table[src[x]];
}

#if defined(NPU_DATA_WORD_TABLES)
// 32 values at a time: each 64-entry quarter of the table is one two-register permute
// (index bits 0-5), bits 6 and 7 pick the quarter.
template <>
void table_row<uint16_t>(const uint8_t* __restrict__ src, uint16_t* __restrict__ dst,
                         int64_t n, const uint16_t* __restrict__ table) {
  __m512i t[8];
  for (int k = 0; k < 8; ++k) t[k] = _mm512_loadu_si512(table + 32 * k);
  const __m512i bit6 = _mm512_set1_epi16(64), bit7 = _mm512_set1_epi16(128);
  for (int64_t x = 0; x < n; x += 32) {
    const int64_t left = n - x;
    const __mmask32 m = left >= 32 ? ~__mmask32{0} : (__mmask32{1} << left) - 1;
    const __m512i v = _mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8(m, src + x));
    const __m512i q0 = _mm512_permutex2var_epi16(t[0], v, t[1]);
    const __m512i q1 = _mm512_permutex2var_epi16(t[2], v, t[3]);
    const __m512i q2 = _mm512_permutex2var_epi16(t[4], v, t[5]);
    const __m512i q3 = _mm512_permutex2var_epi16(t[6], v, t[7]);
    const __mmask32 h6 = _mm512_test_epi16_mask(v, bit6), h7 = _mm512_test_epi16_mask(v, bit7);
    const __m512i lo = _mm512_mask_blend_epi16(h6, q0, q1);
    const __m512i hi = _mm512_mask_blend_epi16(h6, q2, q3);
    _mm512_mask_storeu_epi16(dst + x, m, _mm512_mask_blend_epi16(h7, lo, hi));
  }
}
#endif

// out[b, c, y, x] = table[c * 256 + images[b, c, y, x]], element type T (the table's bits):
// the task's rows of one sample, NCHW or channels-last (written directly, no second copy).
template <typename T>
void lookup_rows(const uint8_t* in_p, const T* table, T* out_p, int64_t C, int64_t H,
                 int64_t W, int64_t b, int64_t y0, int64_t y1, bool channels_last) {
  for (int64_t c = 0; c < C; ++c) {
    const T* __restrict__ tab = table + c * 256;
    for (int64_t y = y0; y < y1; ++y) {
      const uint8_t* __restrict__ src = in_p + ((b * C + c) * H + y) * W;
      if (!channels_last) {
        table_row<T>(src, out_p + ((b * C + c) * H + y) * W, W, tab);
      } else {
        T* __restrict__ dst = out_p + ((b * H + y) * W) * C + c;
        for (int64_t x = 0; x < W; ++x) dst[x * C] = tab[src[x]];
      }
    }
  }
}

// Ask Linux for transparent huge pages (where its policy is "madvise") in the 2 MiB-aligned
// interior of a large output not yet written: a fresh batch of 1024-px floats is tens of MB,
// and faulting it in 4 KiB pages costs several times the lookup itself. Advice only: the
// bytes are unchanged and a refusal is ignored.
void advise_huge_pages(const at::Tensor& t) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  constexpr uintptr_t kHuge = uintptr_t{1} << 21;
  const auto begin = reinterpret_cast<uintptr_t>(t.data_ptr());
  const uintptr_t end = begin + static_cast<uintptr_t>(t.nbytes());
  const uintptr_t first = (begin + kHuge - 1) & ~(kHuge - 1), last = end & ~(kHuge - 1);
  if (t.nbytes() >= 2 * kHuge && last > first)
    madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
#else
  (void)t;
#endif
}

template <typename T>
void lookup(const at::Tensor& images, const at::Tensor& table, at::Tensor& out,
            bool channels_last) {
  const int64_t B = images.size(0), C = images.size(1), H = images.size(2), W = images.size(3);
  const int64_t blocks = (H + kNormalizeRows - 1) / kNormalizeRows;
  const uint8_t* in_p = images.data_ptr<uint8_t>();
  const T* tab = static_cast<const T*>(table.data_ptr());
  T* out_p = static_cast<T*>(out.data_ptr());
  parallel_for_samples(B * blocks, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t b = t / blocks, y0 = (t % blocks) * kNormalizeRows;
      lookup_rows<T>(in_p, tab, out_p, C, H, W, b, y0, std::min(H, y0 + kNormalizeRows),
                     channels_last);
    }
  });
}
}  // namespace

const char* word_tables_simd() {
#if defined(NPU_DATA_WORD_TABLES)
  return NPU_DATA_WORD_TABLES;
#else
  return "none";
#endif
}

// Normalize in one pass: each uint8 value replaced by its channel's entry of table (C, 256),
// whose values the caller computed once per (channel, value) with the float ops of the
// formula; the output has the table's dtype (its bits are copied, whatever the dtype).
at::Tensor normalize(const at::Tensor& images_in, const at::Tensor& table_in, bool channels_last) {
  TORCH_CHECK(images_in.dim() == 4 && images_in.scalar_type() == at::kByte,
              "images must be uint8 (B, C, H, W)");
  const at::Tensor images = images_in.contiguous();
  const at::Tensor table = table_in.contiguous();
  const int64_t B = images.size(0), C = images.size(1), H = images.size(2), W = images.size(3);
  TORCH_CHECK(table.dim() == 2 && table.size(0) == C && table.size(1) == 256,
              "table must be (C, 256), one row per channel");
  const auto options = images.options().dtype(table.scalar_type());
  at::Tensor out = channels_last
      ? at::empty({B, C, H, W}, options.memory_format(at::MemoryFormat::ChannelsLast))
      : at::empty({B, C, H, W}, options);
  advise_huge_pages(out);
  switch (table.element_size()) {
    case 2: lookup<uint16_t>(images, table, out, channels_last); break;
    case 4: lookup<uint32_t>(images, table, out, channels_last); break;
    case 8: lookup<uint64_t>(images, table, out, channels_last); break;
    default: TORCH_CHECK(false, "normalize: tables of ", table.element_size(),
                         "-byte elements are not supported");
  }
  return out;
}

}  // namespace npu_data_native
