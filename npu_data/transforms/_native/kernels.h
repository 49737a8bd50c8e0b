// The operators of npu_data's compiled CPU kernels (registered in ops.cpp).
#pragma once

#include <ATen/ATen.h>

#include <c10/util/Optional.h>
#include <string>

namespace npu_data_native {

// Crop boxes (B, 4) = top, left, height, width of each sample, resized to out_h x out_w with
// Pillow's rules for `filter` 0 bilinear, 1 bicubic, 2 lanczos (resample.cpp); with windows
// (B, 4) = top, left, full_h, full_w, each box is resized whole to full_h x full_w and the
// out_h x out_w window kept instead.
at::Tensor resized_crop(const at::Tensor& images, const at::Tensor& boxes, int64_t out_h,
                        int64_t out_w, bool vertical_first_rule,
                        const c10::optional<at::Tensor>& windows, int64_t filter);
// The same for a list of interleaved (H, W, C) images of any sizes (e.g. views of a memory
// map), written into out (B, C, out_h, out_w).
void resized_crop_list(at::TensorList images, const at::Tensor& boxes, int64_t out_h,
                       int64_t out_w, bool vertical_first_rule, const at::Tensor& out,
                       const c10::optional<at::Tensor>& windows, int64_t filter);
// Each sample's sequence of colour ops (color.cpp).
at::Tensor color_ops(const at::Tensor& images, const at::Tensor& sizes, const at::Tensor& order,
                     const at::Tensor& factors, const at::Tensor& shifts);
// Left-right mirror within the valid width; normalisation through a per-channel (C, 256)
// table into the table's dtype (layout.cpp).
at::Tensor hflip(const at::Tensor& images, const at::Tensor& sizes, const at::Tensor& flip_mask);
void hflip_(at::Tensor& images, const at::Tensor& sizes, const at::Tensor& flip_mask);
void color_ops_(at::Tensor& images, const at::Tensor& sizes, const at::Tensor& order,
                const at::Tensor& factors, const at::Tensor& shifts);
at::Tensor normalize(const at::Tensor& images, const at::Tensor& table, bool channels_last);

// The augmentation kernels (augment.cpp), equal to their torch kernels byte for byte: the
// affine warp through fixed-point source tables (B, w) / (B, h) (transforms/_kernels/warp.py),
// per-channel histograms (B, C, 256) and Pillow's contrast keys of the valid pixels, one
// auto-augment pixel step per sample (mode 0 its table, 1 Color, 2 Sharpness) and the
// separable float32 Gaussian blur with per-sample weights.
at::Tensor warp(const at::Tensor& images, const at::Tensor& sizes, const at::Tensor& out_sizes,
                const at::Tensor& col_x, const at::Tensor& row_x, const at::Tensor& col_y,
                const at::Tensor& row_y, bool bilinear, const at::Tensor& fill);
at::Tensor histograms(const at::Tensor& images, const at::Tensor& sizes);
at::Tensor contrast_keys(const at::Tensor& images, const at::Tensor& sizes);
at::Tensor policy_pixels(const at::Tensor& images, const at::Tensor& sizes, const at::Tensor& luts,
                         const at::Tensor& prods, const at::Tensor& mode);
at::Tensor gaussian_blur(const at::Tensor& images, const at::Tensor& sizes, const at::Tensor& wx,
                         const at::Tensor& wy);
// Per sample, images where mask (B,) is set, others elsewhere (any dtype; one copy).
at::Tensor choose(const at::Tensor& mask, const at::Tensor& images, const at::Tensor& others);
// Top-bottom mirror within each flagged sample's valid height; boxes (B, 4) (top, left, height,
// width) set to value (B, C); Pillow's L in all 3 channels of each flagged sample.
at::Tensor vflip(const at::Tensor& images, const at::Tensor& sizes, const at::Tensor& flip_mask);
at::Tensor erase(const at::Tensor& images, const at::Tensor& boxes, const at::Tensor& value);
at::Tensor rgb_to_grayscale(const at::Tensor& images, const at::Tensor& mask);

// MixUp / CutMix and their labels, channel permutation (mixing.cpp), equal to their torch
// kernels byte for byte: partner * (1 - lam) + x * lam per sample (uint8 rounded half to even,
// or float32); each sample's box (B, 4) (top, left, height, width) from its partner (any
// dtype); (B, K) float32 soft labels of class ids (num_classes) or of given rows; output
// channel c of sample b is its input channel permutation[b, c].
at::Tensor mixup(const at::Tensor& images, const at::Tensor& partner, const at::Tensor& lam);
at::Tensor cutmix(const at::Tensor& images, const at::Tensor& partner, const at::Tensor& boxes);
at::Tensor soft_labels(const at::Tensor& labels, const at::Tensor& partner,
                       const at::Tensor& weight, c10::optional<int64_t> num_classes);
at::Tensor permute_channels(const at::Tensor& images, const at::Tensor& permutation);

// The hand-written SIMD path each file was built with ("sse2", "neon", ..., or "none").
const char* transpose_simd();
const char* byte_tables_simd();
const char* word_tables_simd();

}  // namespace npu_data_native
