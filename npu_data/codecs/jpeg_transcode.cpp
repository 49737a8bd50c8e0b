// Lossless re-encoding of a JPEG with restart markers (torch.ops.npu_data_jpeg.with_restarts).
//
// jpegtran's "-restart" done in memory: the DCT coefficients are read and written back as
// they are (jpeg_read_coefficients / jpeg_write_coefficients), so every decoder gives the same
// pixels, with Huffman codes optimised for the image (usually smaller than the original) and
// every marker of the original kept (EXIF, ICC, XMP, comments). The restart interval divides
// each MCU row into runs of about `target` pixels so restart_window can cut crops out.

#include <ATen/ATen.h>

#include <csetjmp>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <jpeglib.h>

#include "jpeg_restarts.h"

namespace npu_data_jpeg {
namespace {

struct Err {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
};

void on_error(j_common_ptr cinfo) { std::longjmp(reinterpret_cast<Err*>(cinfo->err)->jump, 1); }
void on_message(j_common_ptr, int) {}

bool is_jfif(const jpeg_saved_marker_ptr m) {
  return m->marker == JPEG_APP0 && m->data_length >= 5 && std::memcmp(m->data, "JFIF", 5) == 0;
}

bool is_adobe(const jpeg_saved_marker_ptr m) {
  return m->marker == JPEG_APP0 + 14 && m->data_length >= 5 &&
         std::memcmp(m->data, "Adobe", 5) == 0;
}

// Whether restart_window can already cut the stream (its own interval fits).
bool usable(const uint8_t* data, size_t size) {
  std::vector<uint8_t> out;
  Window w;
  return restart_window(data, size, 0, 1, 0, 1, out, w);
}

// The re-encoded bytes in *buf / *len (malloc'd by libjpeg), or false. No C++ object with a
// destructor lives between setjmp and the libjpeg calls.
bool transcode(const uint8_t* data, size_t size, int target, unsigned char** buf,
               unsigned long* len) {
  jpeg_decompress_struct src;
  jpeg_compress_struct dst;
  Err err;  // both objects report here
  src.err = jpeg_std_error(&err.pub);
  dst.err = &err.pub;
  err.pub.error_exit = on_error;
  err.pub.emit_message = on_message;
  jpeg_create_decompress(&src);
  jpeg_create_compress(&dst);
  if (setjmp(err.jump)) {
    jpeg_destroy_compress(&dst);
    jpeg_destroy_decompress(&src);
    return false;
  }
  jpeg_mem_src(&src, const_cast<uint8_t*>(data), static_cast<unsigned long>(size));
  jpeg_save_markers(&src, JPEG_COM, 0xFFFF);
  for (int m = 0; m < 16; ++m) jpeg_save_markers(&src, JPEG_APP0 + m, 0xFFFF);
  jpeg_read_header(&src, TRUE);
  const bool sequential = !src.progressive_mode && !src.arith_code && src.data_precision == 8;
  const bool colours = (src.num_components == 3 && src.jpeg_color_space == JCS_YCbCr) ||
                       (src.num_components == 1 && src.jpeg_color_space == JCS_GRAYSCALE);
  if (!sequential || !colours) {
    jpeg_destroy_compress(&dst);
    jpeg_destroy_decompress(&src);
    return false;
  }
  jvirt_barray_ptr* coefs = jpeg_read_coefficients(&src);
  jpeg_mem_dest(&dst, buf, len);
  jpeg_copy_critical_parameters(&src, &dst);
  const int mcu_w = src.num_components > 1 ? 8 * src.max_h_samp_factor : 8;
  const int cols = static_cast<int>((src.image_width + mcu_w - 1) / mcu_w);
  dst.restart_interval = static_cast<unsigned int>(restart_interval_for(cols, mcu_w, target));
  dst.optimize_coding = TRUE;
  jpeg_write_coefficients(&dst, coefs);
  for (jpeg_saved_marker_ptr m = src.marker_list; m != nullptr; m = m->next) {
    if ((dst.write_JFIF_header && is_jfif(m)) || (dst.write_Adobe_marker && is_adobe(m)))
      continue;  // libjpeg wrote its own copy from the header it read
    jpeg_write_marker(&dst, m->marker, m->data, m->data_length);
  }
  jpeg_finish_compress(&dst);
  jpeg_finish_decompress(&src);
  jpeg_destroy_compress(&dst);
  jpeg_destroy_decompress(&src);
  return true;
}

}  // namespace

at::Tensor with_restarts(const at::Tensor& data_in, int64_t target) {
  TORCH_CHECK(data_in.dim() == 1 && data_in.scalar_type() == at::kByte,
              "data must be a 1-D uint8 tensor");
  TORCH_CHECK(target >= 8, "target must be at least 8 pixels");
  const at::Tensor data = data_in.contiguous();
  const uint8_t* p = data.data_ptr<uint8_t>();
  const size_t n = static_cast<size_t>(data.numel());
  at::Tensor none = at::empty({0}, data.options());
  if (usable(p, n)) return none;
  unsigned char* buf = nullptr;
  unsigned long len = 0;
  const bool ok = transcode(p, n, static_cast<int>(target), &buf, &len);
  at::Tensor out = ok ? at::empty({static_cast<int64_t>(len)}, data.options()) : none;
  if (ok) std::memcpy(out.data_ptr<uint8_t>(), buf, len);
  std::free(buf);
  return out;
}

}  // namespace npu_data_jpeg
