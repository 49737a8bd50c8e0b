// Windows of a JPEG cut at its restart markers (jpeg_restarts.cpp).
#pragma once

#include <ATen/ATen.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace npu_data_jpeg {

// Where a window lies in the image it was cut from, in full-resolution pixels.
struct Window {
  int64_t top = 0, left = 0, height = 0, width = 0;
};

// Restart markers end each interval's entropy data on a byte boundary with the DC
// predictors reset, so the intervals covering rows [y0, y1) and columns [x0, x1) can be
// copied out whole, behind the original's tables and a SOF giving the window's size, into a
// JPEG of their own: its pixels are the original's (the same coefficients), except within two
// pixels of a cut edge, where fancy upsampling sees an image edge — the caller asks for a
// margin. Only a baseline or extended Huffman, single-scan, 8-bit JPEG whose restart interval
// is a divisor or a multiple of its MCUs per row qualifies: false otherwise (decode whole).
bool restart_window(const uint8_t* data, size_t size, int64_t y0, int64_t y1, int64_t x0,
                    int64_t x1, std::vector<uint8_t>& out, Window& where);

// The restart interval (in MCUs) that cuts an image with `cols` MCUs per row of `mcu_w`
// pixels into runs of about `target` pixels: the largest divisor of cols whose run fits.
int restart_interval_for(int cols, int mcu_w, int target);

// `data` (a 1-D uint8 JPEG) re-encoded losslessly (the same coefficients, tables and markers;
// optimised Huffman codes) with a restart marker every `target` pixels or so of each MCU row
// (jpeg_transcode.cpp); empty where that does not apply: not a sequential Huffman 8-bit JPEG,
// not one or three components, restarts already usable, or a stream libjpeg rejects.
at::Tensor with_restarts(const at::Tensor& data, int64_t target);

}  // namespace npu_data_jpeg
