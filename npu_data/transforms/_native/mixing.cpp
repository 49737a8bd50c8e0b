// MixUp / CutMix pixels, their soft labels and per-sample channel permutation: what the torch
// kernels compute (transforms/_kernels/mixing.py) with the same float32 operations in the same
// order (one product each, then the sum; the build never contracts them into an FMA), so the
// bytes are equal. Plain C++ only (no intrinsics): every build (native, portable, scalar) on
// x86-64 and aarch64 runs this code, vectorised by the compiler where it can.

#include "kernels.h"
#include "parallel.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace npu_data_native {

namespace {

at::Tensor partners(const at::Tensor& partner, int64_t B, const char* who) {
  const at::Tensor p = partner.to(at::kLong).contiguous();
  TORCH_CHECK(p.numel() == B, who, ": partner needs B values");
  const int64_t* v = p.data_ptr<int64_t>();
  for (int64_t b = 0; b < B; ++b)
    TORCH_CHECK(v[b] >= 0 && v[b] < B, who, ": partner ", v[b], " of sample ", b,
                " is outside the batch");
  return p;
}

// partner * (1 - w) + x * w in float32, as torch evaluates x[p] * (1.0 - w) + x * w.
inline float mix(float x, float partner, float w, float one_minus_w) {
  const float a = partner * one_minus_w;
  const float c = x * w;
  return a + c;
}

}  // namespace

at::Tensor mixup(const at::Tensor& images_in, const at::Tensor& partner_in,
                 const at::Tensor& lam_in) {
  TORCH_CHECK(images_in.dim() == 4 && (images_in.scalar_type() == at::kByte ||
                                       images_in.scalar_type() == at::kFloat),
              "mixup: images must be uint8 or float32 (B, C, H, W)");
  const at::Tensor images = images_in.contiguous();
  const int64_t B = images.size(0);
  const at::Tensor p = partners(partner_in, B, "mixup");
  const at::Tensor lam = lam_in.to(at::kFloat).contiguous();
  TORCH_CHECK(lam.numel() == B, "mixup: lam needs B values");
  at::Tensor out = at::empty_like(images);
  if (out.numel() == 0) return out;
  const int64_t n = images.numel() / B;
  const int64_t* pv = p.data_ptr<int64_t>();
  const float* wv = lam.data_ptr<float>();
  const bool bytes = images.scalar_type() == at::kByte;
  parallel_for_samples(B, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const float w = wv[b], om = 1.0f - w;
      if (bytes) {
        const uint8_t* x = images.data_ptr<uint8_t>() + b * n;
        const uint8_t* y = images.data_ptr<uint8_t>() + pv[b] * n;
        uint8_t* d = out.data_ptr<uint8_t>() + b * n;
        for (int64_t i = 0; i < n; ++i) {  // round half to even, then clamp (torch's order)
          const float r = std::nearbyint(mix(x[i], y[i], w, om));
          d[i] = static_cast<uint8_t>(std::min(std::max(r, 0.0f), 255.0f));
        }
      } else {
        const float* x = images.data_ptr<float>() + b * n;
        const float* y = images.data_ptr<float>() + pv[b] * n;
        float* d = out.data_ptr<float>() + b * n;
        for (int64_t i = 0; i < n; ++i) d[i] = mix(x[i], y[i], w, om);
      }
    }
  });
  return out;
}

at::Tensor cutmix(const at::Tensor& images_in, const at::Tensor& partner_in,
                  const at::Tensor& boxes_in) {
  TORCH_CHECK(images_in.dim() == 4, "cutmix: images must be (B, C, H, W)");
  const at::Tensor images = images_in.contiguous();
  const int64_t B = images.size(0), C = images.size(1), H = images.size(2), W = images.size(3);
  const at::Tensor p = partners(partner_in, B, "cutmix");
  const at::Tensor boxes = boxes_in.to(at::kLong).contiguous();
  TORCH_CHECK(boxes.dim() == 2 && boxes.size(0) == B && boxes.size(1) == 4,
              "cutmix: boxes must be (B, 4)");
  at::Tensor out = images.clone();
  if (out.numel() == 0) return out;
  const size_t item = images.element_size();
  const char* src = static_cast<const char*>(images.data_ptr());
  char* dst = static_cast<char*>(out.data_ptr());
  const int64_t* pv = p.data_ptr<int64_t>();
  const int64_t* bx = boxes.data_ptr<int64_t>();
  parallel_for_samples(B, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {  // rows top <= r < top + height, the same for columns
      const int64_t* box = bx + 4 * b;
      const int64_t r0 = std::clamp<int64_t>(box[0], 0, H);
      const int64_t r1 = std::clamp<int64_t>(
          static_cast<int64_t>(static_cast<uint64_t>(box[0]) + static_cast<uint64_t>(box[2])),
          r0, H);
      const int64_t c0 = std::clamp<int64_t>(box[1], 0, W);
      const int64_t c1 = std::clamp<int64_t>(
          static_cast<int64_t>(static_cast<uint64_t>(box[1]) + static_cast<uint64_t>(box[3])),
          c0, W);
      if (r1 <= r0 || c1 <= c0 || pv[b] == b) continue;
      for (int64_t c = 0; c < C; ++c)
        for (int64_t r = r0; r < r1; ++r) {
          const int64_t at = (c * H + r) * W + c0;
          std::memcpy(dst + ((b * C * H * W) + at) * item, src + ((pv[b] * C * H * W) + at) * item,
                      static_cast<size_t>(c1 - c0) * item);
        }
    }
  });
  return out;
}

at::Tensor soft_labels(const at::Tensor& labels_in, const at::Tensor& partner_in,
                       const at::Tensor& weight_in, c10::optional<int64_t> num_classes) {
  const int64_t B = labels_in.size(0);
  const at::Tensor p = partners(partner_in, B, "soft_labels");
  const at::Tensor weight = weight_in.to(at::kFloat).contiguous();
  TORCH_CHECK(weight.numel() == B, "soft_labels: weight needs B values");
  at::Tensor rows;  // (B, K) float32: the given rows, or one-hot rows of the class ids
  if (num_classes.has_value()) {
    const int64_t K = *num_classes;
    const at::Tensor ids = labels_in.to(at::kLong).contiguous();
    TORCH_CHECK(ids.dim() == 1, "soft_labels: labels must be (B,) class ids");
    rows = at::zeros({B, K}, at::TensorOptions().dtype(at::kFloat));
    const int64_t* id = ids.data_ptr<int64_t>();
    float* r = rows.data_ptr<float>();
    for (int64_t b = 0; b < B; ++b) {
      TORCH_CHECK(id[b] >= 0 && id[b] < K, "soft_labels: class id ", id[b], " of sample ", b,
                  " is outside 0..", K - 1);
      r[b * K + id[b]] = 1.0f;
    }
  } else {
    TORCH_CHECK(labels_in.dim() == 2, "soft_labels: labels must be (B, classes) rows");
    rows = labels_in.to(at::kFloat).contiguous();
  }
  const int64_t K = rows.size(1);
  at::Tensor out = at::empty({B, K}, at::TensorOptions().dtype(at::kFloat));
  const float* r = rows.data_ptr<float>();
  float* d = out.data_ptr<float>();
  const int64_t* pv = p.data_ptr<int64_t>();
  const float* wv = weight.data_ptr<float>();
  for (int64_t b = 0; b < B; ++b) {
    const float w = wv[b], om = 1.0f - w;
    for (int64_t k = 0; k < K; ++k) d[b * K + k] = mix(r[b * K + k], r[pv[b] * K + k], w, om);
  }
  return out;
}

at::Tensor permute_channels(const at::Tensor& images_in, const at::Tensor& permutation_in) {
  TORCH_CHECK(images_in.dim() == 4, "permute_channels: images must be (B, C, H, W)");
  const at::Tensor images = images_in.contiguous();
  const int64_t B = images.size(0), C = images.size(1);
  const at::Tensor perm = permutation_in.to(at::kLong).contiguous();
  TORCH_CHECK(perm.dim() == 2 && perm.size(0) == B && perm.size(1) == C,
              "permute_channels: permutation must be (B, C)");
  const int64_t* pv = perm.data_ptr<int64_t>();
  for (int64_t i = 0; i < B * C; ++i)
    TORCH_CHECK(pv[i] >= 0 && pv[i] < C, "permute_channels: channel ", pv[i], " is outside 0..",
                C - 1);
  at::Tensor out = at::empty_like(images);
  if (out.numel() == 0) return out;
  const size_t plane = static_cast<size_t>(images.size(2) * images.size(3)) * images.element_size();
  const char* src = static_cast<const char*>(images.data_ptr());
  char* dst = static_cast<char*>(out.data_ptr());
  parallel_for_samples(B * C, [&](int64_t q0, int64_t q1) {
    for (int64_t q = q0; q < q1; ++q) {
      const int64_t b = q / C;
      std::memcpy(dst + q * plane, src + (b * C + pv[q]) * plane, plane);
    }
  });
  return out;
}

}  // namespace npu_data_native
