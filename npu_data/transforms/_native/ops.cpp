// npu_data's compiled CPU kernels as torch operators: torch.ops.npu_data.*.
//
// One sample per task over the batch (parallel.h); the arithmetic of each op follows Pillow
// 13 exactly (the mixing ops: their torch kernels), so the CPU versions in npu_data/transforms/oracle/pillow.py match to the bit.

#include <torch/library.h>

#include "kernels.h"
#include "parallel.h"

#include <string>

namespace npu_data_native {
// Which hand-written SIMD paths and which vector ISA this build has (npu-data doctor).
std::string simd_paths() {
  std::string isa =
#if defined(__AVX512F__)
      "avx512";
#elif defined(__AVX2__)
      "avx2";
#elif defined(__SSE2__)
      "sse2";
#elif defined(__ARM_FEATURE_SVE)
      "neon+sve";
#elif defined(__ARM_NEON)
      "neon";
#else
      "none";
#endif
#if defined(NPU_DATA_PORTABLE) && defined(NPU_DATA_SCALAR)
  return "isa=" + isa + " build=scalar";
#elif defined(NPU_DATA_PORTABLE)
  return "isa=" + isa + " build=portable";
#else
  return "isa=" + isa + " build=native transpose=" + transpose_simd() + " byte_tables=" +
         byte_tables_simd() + " word_tables=" + word_tables_simd();
#endif
}
}  // namespace npu_data_native

TORCH_LIBRARY(npu_data, m) {
  m.def("resized_crop(Tensor images, Tensor boxes, int out_h, int out_w, bool vertical_first_rule, Tensor? windows=None, int filter=0) -> Tensor");
  m.def("resized_crop_list(Tensor[] images, Tensor boxes, int out_h, int out_w, bool vertical_first_rule, Tensor(a!) out, Tensor? windows=None, int filter=0) -> ()");
  m.def("normalize(Tensor images, Tensor table, bool channels_last) -> Tensor");
  m.def("hflip(Tensor images, Tensor sizes, Tensor flip_mask) -> Tensor");
  m.def("color_ops(Tensor images, Tensor sizes, Tensor order, Tensor factors, Tensor shifts) -> Tensor");
  m.def("hflip_(Tensor(a!) images, Tensor sizes, Tensor flip_mask) -> ()");
  m.def("simd_paths() -> str");
  m.def("set_threads(int n) -> ()");
  m.def("warp(Tensor images, Tensor sizes, Tensor out_sizes, Tensor col_x, Tensor row_x, Tensor col_y, Tensor row_y, bool bilinear, Tensor fill) -> Tensor");
  m.def("histograms(Tensor images, Tensor sizes) -> Tensor");
  m.def("contrast_keys(Tensor images, Tensor sizes) -> Tensor");
  m.def("policy_pixels(Tensor images, Tensor sizes, Tensor luts, Tensor prods, Tensor mode) -> Tensor");
  m.def("gaussian_blur(Tensor images, Tensor sizes, Tensor wx, Tensor wy) -> Tensor");
  m.def("choose(Tensor mask, Tensor images, Tensor others) -> Tensor");
  m.def("vflip(Tensor images, Tensor sizes, Tensor flip_mask) -> Tensor");
  m.def("erase(Tensor images, Tensor boxes, Tensor value) -> Tensor");
  m.def("rgb_to_grayscale(Tensor images, Tensor mask) -> Tensor");
  m.def("mixup(Tensor images, Tensor partner, Tensor lam) -> Tensor");
  m.def("cutmix(Tensor images, Tensor partner, Tensor boxes) -> Tensor");
  m.def("soft_labels(Tensor labels, Tensor partner, Tensor weight, int? num_classes) -> Tensor");
  m.def("permute_channels(Tensor images, Tensor permutation) -> Tensor");
  m.def("color_ops_(Tensor(a!) images, Tensor sizes, Tensor order, Tensor factors, Tensor shifts) -> ()");
}

TORCH_LIBRARY_IMPL(npu_data, CompositeExplicitAutograd, m) {
  m.impl("simd_paths", &npu_data_native::simd_paths);
  m.impl("set_threads", &npu_data_native::set_threads);
}

TORCH_LIBRARY_IMPL(npu_data, CPU, m) {
  m.impl("resized_crop", &npu_data_native::resized_crop);
  m.impl("resized_crop_list", &npu_data_native::resized_crop_list);
  m.impl("color_ops", &npu_data_native::color_ops);
  m.impl("hflip", &npu_data_native::hflip);
  m.impl("hflip_", &npu_data_native::hflip_);
  m.impl("color_ops_", &npu_data_native::color_ops_);
  m.impl("normalize", &npu_data_native::normalize);
  m.impl("warp", &npu_data_native::warp);
  m.impl("histograms", &npu_data_native::histograms);
  m.impl("contrast_keys", &npu_data_native::contrast_keys);
  m.impl("policy_pixels", &npu_data_native::policy_pixels);
  m.impl("gaussian_blur", &npu_data_native::gaussian_blur);
  m.impl("choose", &npu_data_native::choose);
  m.impl("vflip", &npu_data_native::vflip);
  m.impl("erase", &npu_data_native::erase);
  m.impl("rgb_to_grayscale", &npu_data_native::rgb_to_grayscale);
  m.impl("mixup", &npu_data_native::mixup);
  m.impl("cutmix", &npu_data_native::cutmix);
  m.impl("soft_labels", &npu_data_native::soft_labels);
  m.impl("permute_channels", &npu_data_native::permute_channels);
}
