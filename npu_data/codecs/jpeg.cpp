// Region decoding of JPEGs with libjpeg-turbo (torch.ops.npu_data_jpeg.decode_regions).
//
// Each sample's region (top, left, height, width) is decoded alone. Where the stream has
// restart markers in a usable layout (npu-data's import writes them), only the MCUs around
// the region are decoded at all (jpeg_restarts.cpp cuts them out as a JPEG of their own);
// otherwise the rows above it are skipped (jpeg_skip_scanlines: entropy-decoded, not
// transformed). The columns outside it are not transformed (jpeg_crop_scanline), and decoding
// stops after its last row. Settings are
// Pillow's (ISLOW IDCT, fancy upsampling, RGB out), so the pixels are those of a full decode
// cropped after. Samples this decoder does not handle alike (an EXIF or XMP orientation, CMYK/YCCK,
// a size that differs from the index, a corrupt stream) get status != 0 and no pixels: the
// caller decodes them with Pillow.

#include <torch/library.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <csetjmp>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include <jpeglib.h>
#include <jerror.h>

#include "jpeg_restarts.h"
#include "parallel.h"

namespace npu_data_jpeg {
namespace {

enum Status : int8_t { kOk = 0, kUnsupported = 1, kSizeMismatch = 2, kCorrupt = 3 };

struct ErrorMgr {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
  bool cut_off = false;  // the data ended before the rows asked for (libjpeg fills them grey)
};

void on_error(j_common_ptr cinfo) { std::longjmp(reinterpret_cast<ErrorMgr*>(cinfo->err)->jump, 1); }

// Warnings pass, as in Pillow, except a stream that ends early: Pillow refuses it ("image
// file is truncated"), so the region is refused too and the reader's Pillow decode says so.
void on_message(j_common_ptr cinfo, int level) {
  if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF)
    reinterpret_cast<ErrorMgr*>(cinfo->err)->cut_off = true;
}

uint32_t read_u(const uint8_t* p, int n, bool big) {
  uint32_t v = 0;
  for (int i = 0; i < n; ++i) v |= static_cast<uint32_t>(p[big ? i : n - 1 - i]) << (8 * (n - 1 - i));
  return v;
}

// The EXIF orientation tag of an APP1 marker (1 when absent or unreadable).
int exif_orientation(const jpeg_saved_marker_ptr m) {
  if (m->data_length < 14) return 1;
  const uint8_t* d = m->data;
  if (std::memcmp(d, "Exif\0\0", 6) != 0) return 1;
  const uint8_t* t = d + 6;
  const size_t len = m->data_length - 6;
  const bool big = t[0] == 'M';
  if (!(t[0] == t[1] && (t[0] == 'M' || t[0] == 'I'))) return 1;
  const uint32_t ifd = read_u(t + 4, 4, big);
  if (ifd + 2 > len) return 1;
  const uint32_t n = read_u(t + ifd, 2, big);
  for (uint32_t e = 0; e < n; ++e) {
    const size_t at = ifd + 2 + 12 * static_cast<size_t>(e);
    if (at + 12 > len) break;
    if (read_u(t + at, 2, big) == 0x0112) return static_cast<int>(read_u(t + at + 8, 2, big));
  }
  return 1;
}

// Whether an XMP packet (APP1 "http://ns.adobe.com/xap/1.0/") names an orientation other
// than 1: Pillow's exif_transpose applies tiff:Orientation from XMP too.
bool xmp_rotates(const jpeg_saved_marker_ptr m) {
  static const char kXmp[] = "http://ns.adobe.com/xap/1.0/";
  const size_t head = sizeof(kXmp);  // with its NUL
  if (m->data_length <= head || std::memcmp(m->data, kXmp, head) != 0) return false;
  const std::string packet(reinterpret_cast<const char*>(m->data) + head,
                           m->data_length - head);
  for (size_t at = packet.find("Orientation"); at != std::string::npos;
       at = packet.find("Orientation", at + 1)) {
    const size_t lt = packet.rfind('<', at);
    if (lt != std::string::npos && at - lt < 16 && packet[lt + 1] == '/') continue;  // </..>
    size_t v = at + 11;
    while (v < packet.size() && (packet[v] == '=' || packet[v] == '"' || packet[v] == '\'' ||
                                 packet[v] == '>' || packet[v] == ' '))
      ++v;
    if (v < packet.size() && packet[v] != '1') return true;
  }
  return false;
}

// Whether any orientation Pillow's exif_transpose would apply is present.
bool rotated(const jpeg_saved_marker_ptr markers) {
  for (jpeg_saved_marker_ptr m = markers; m != nullptr; m = m->next) {
    if (m->marker != JPEG_APP0 + 1) continue;
    if (exif_orientation(m) > 1 || xmp_rotates(m)) return true;
  }
  return false;
}

// Whether the stream whose header cinfo has read (APP1 markers saved) is one this decoder
// handles like Pillow (status kOk) at the stored size.
int8_t check(const jpeg_decompress_struct& cinfo, int64_t H, int64_t W) {
  if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK ||
      cinfo.num_components == 2 || cinfo.num_components > 3)
    return kUnsupported;
  if (rotated(cinfo.marker_list)) return kUnsupported;
  if (static_cast<int64_t>(cinfo.image_height) != H ||
      static_cast<int64_t>(cinfo.image_width) != W)
    return kSizeMismatch;
  return kOk;
}

// Decode region r (top, left, height, width in the pixels of the image decoded at 1/scale) of
// the stream of H x W pixels whose header cinfo has read into dst: rows `pitch_dst` bytes
// apart, the region's first pixel *shift pixels into each row. Rows are decoded straight into
// dst when libjpeg's cropped scanline (the region plus upsampling context, widened to iMCU
// bounds) fits in a row, with *shift the region's offset in it; else through a buffer and
// copied (*shift = 0). libjpeg's errors jump to the caller's setjmp: nothing here has a
// destructor.
int8_t decode_rows(jpeg_decompress_struct& cinfo, int64_t H, int64_t W, const int64_t* r,
                   int64_t scale, uint8_t* dst, size_t pitch_dst, int64_t* shift,
                   std::vector<uint8_t>& row) {
  const int64_t top = r[0], left = r[1], h = r[2], w = r[3];
  if (scale > 1) {  // DCT scaling: the region is in the coordinates of the scaled image
    H = (H + scale - 1) / scale;
    W = (W + scale - 1) / scale;
  }
  if (top < 0 || left < 0 || h < 1 || w < 1 || top + h > H || left + w > W) return kUnsupported;
  cinfo.out_color_space = JCS_RGB;
  cinfo.dct_method = JDCT_ISLOW;
  cinfo.do_fancy_upsampling = TRUE;
  cinfo.scale_num = 1;
  cinfo.scale_denom = static_cast<unsigned int>(scale > 1 ? scale : 1);
  jpeg_start_decompress(&cinfo);
  if (static_cast<int64_t>(cinfo.output_height) != H ||
      static_cast<int64_t>(cinfo.output_width) != W)
    return kSizeMismatch;
  // Fancy upsampling treats a cropped scanline's ends as image edges: ask for a margin of
  // one iMCU on each side (inside the image) so the region's own columns are never at an end.
  const int64_t margin = 8 * static_cast<int64_t>(cinfo.max_h_samp_factor);
  const int64_t x0 = std::max<int64_t>(0, left - margin);
  const int64_t x1 = std::min<int64_t>(W, left + w + margin);
  JDIMENSION xoff = static_cast<JDIMENSION>(x0), cw = static_cast<JDIMENSION>(x1 - x0);
  if (x1 - x0 < W) jpeg_crop_scanline(&cinfo, &xoff, &cw);
  if (top > 0) jpeg_skip_scanlines(&cinfo, static_cast<JDIMENSION>(top));
  // Rows straight into dst when a decoded row fits in its pitch, else via a buffer of up to
  // 16 rows (one iMCU row per call at most).
  const size_t skip = static_cast<size_t>(left - static_cast<int64_t>(xoff)) * 3;
  constexpr int kRows = 16;
  const size_t pitch = static_cast<size_t>(cinfo.output_width) * 3;
  const bool direct = pitch <= pitch_dst;
  *shift = direct ? static_cast<int64_t>(skip / 3) : 0;
  if (!direct) row.resize(pitch * kRows);
  JSAMPROW ptrs[kRows];
  for (int64_t y = 0; y < h;) {
    const int want = static_cast<int>(std::min<int64_t>(kRows, h - y));
    for (int k = 0; k < want; ++k)
      ptrs[k] = direct ? dst + (y + k) * pitch_dst : row.data() + k * pitch;
    const int got = static_cast<int>(jpeg_read_scanlines(&cinfo, ptrs, want));
    if (got < 1) return kCorrupt;
    if (!direct)
      for (int k = 0; k < got; ++k)
        std::memcpy(dst + (y + k) * pitch_dst, row.data() + k * pitch + skip,
                    static_cast<size_t>(w) * 3);
    y += got;
  }
  return kOk;  // the rows below the region are never decoded
}

// Pixels of context kept around a region cut out at restart markers. A window's edges are
// image edges to libjpeg's fancy upsampling, which makes pixel 2k from chroma samples k - 1
// and k and pixel 2k + 1 from k and k + 1 (rows and columns alike): a region starting one
// pixel inside a window (its edges are on chroma bounds) or ending one before its end sees
// only real samples. Two keeps one to spare; every offset is tested
// (tests/codecs/test_jpeg_restarts.py::test_regions_at_every_offset_from_a_window_edge).
// DCT-scaled decoding keeps 8 scaled pixels: libjpeg scales chroma there in ways of its own.
constexpr int64_t kContext = 2, kContextScaled = 8;

// Decode the region into dst: from a window of the stream cut at its restart markers where it
// has them (only the MCUs around the region are entropy-decoded), else from the whole stream.
// One libjpeg object reads the header, then (reset) the window. The jmp_buf is set here, so
// no object with a destructor may live between setjmp and a libjpeg call (`cut` is
// thread_local, `win` plain data).
int8_t decode_region(const uint8_t* data, size_t size, int64_t H, int64_t W, const int64_t* r,
                     int64_t scale, uint8_t* dst, size_t pitch, int64_t* shift,
                     std::vector<uint8_t>& row) {
  thread_local std::vector<uint8_t> cut;
  Window win;
  int64_t at[4] = {r[0], r[1], r[2], r[3]};
  jpeg_decompress_struct cinfo;
  ErrorMgr err;
  cinfo.err = jpeg_std_error(&err.pub);
  err.pub.error_exit = on_error;
  err.pub.emit_message = on_message;
  jpeg_create_decompress(&cinfo);
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    return kCorrupt;
  }
  jpeg_mem_src(&cinfo, const_cast<uint8_t*>(data), static_cast<unsigned long>(size));
  jpeg_save_markers(&cinfo, JPEG_APP0 + 1, 0xFFFF);
  jpeg_read_header(&cinfo, TRUE);
  int8_t status = check(cinfo, H, W);
  const int64_t s = scale > 1 ? scale : 1;
  const int64_t m = (s > 1 ? kContextScaled : kContext) * s;  // context, full-size pixels
  if (status == kOk &&
      restart_window(data, size, r[0] * s - m, (r[0] + r[2]) * s + m, r[1] * s - m,
                     (r[1] + r[3]) * s + m, cut, win) &&
      (win.height < H || win.width < W)) {
    // the window's origin is on MCU bounds (multiples of 8), so of the scaled image's too
    at[0] = r[0] - win.top / s;
    at[1] = r[1] - win.left / s;
    H = win.height;
    W = win.width;
    jpeg_abort_decompress(&cinfo);
    jpeg_mem_src(&cinfo, cut.data(), static_cast<unsigned long>(cut.size()));
    jpeg_read_header(&cinfo, TRUE);
  }
  if (status == kOk) status = decode_rows(cinfo, H, W, at, scale, dst, pitch, shift, row);
  if (status == kOk && err.cut_off) status = kCorrupt;
  jpeg_destroy_decompress(&cinfo);
  return status;
}

}  // namespace

// Pixels a decoded row may hold beyond its region: upsampling context (one iMCU, up to 32
// pixels, each side) and the widening of libjpeg's cropped scanline to iMCU bounds.
constexpr int64_t kSlack = 96;

// jpegs: 1-D uint8 streams; regions (B, 4) top, left, height, width; sizes (B, 2) the
// stored (height, width); scales (B,) 1, 2, 4 or 8: DCT-scaled decoding (not exact; the
// region is then in the scaled image's pixels). Returns the (h, w, 3) regions (empty where
// status != 0) and the status. The regions are views, rows (w + 96) * 3 bytes apart, into
// `arena` when it is given and large enough (callers reuse it: no allocation, no fresh
// pages per batch; the views are valid until the arena is written again), else into one
// new buffer.
std::tuple<std::vector<at::Tensor>, at::Tensor> decode_regions(
    at::TensorList jpegs, const at::Tensor& regions_in, const at::Tensor& sizes_in,
    const at::Tensor& scales_in, const c10::optional<at::Tensor>& arena) {
  const int64_t B = static_cast<int64_t>(jpegs.size());
  const at::Tensor regions = regions_in.to(at::kLong).contiguous();
  const at::Tensor sizes = sizes_in.to(at::kLong).contiguous();
  const at::Tensor scales = scales_in.to(at::kLong).contiguous();
  TORCH_CHECK(scales.dim() == 1 && scales.size(0) == B, "scales must be (B,)");
  TORCH_CHECK(regions.dim() == 2 && regions.size(0) == B && regions.size(1) == 4,
              "regions must be (B, 4) top, left, height, width");
  TORCH_CHECK(sizes.dim() == 2 && sizes.size(0) == B && sizes.size(1) == 2,
              "sizes must be (B, 2) height, width");
  const int64_t* r = regions.data_ptr<int64_t>();
  std::vector<int64_t> offset(B + 1, 0);
  for (int64_t b = 0; b < B; ++b) {
    TORCH_CHECK(jpegs[b].dim() == 1 && jpegs[b].scalar_type() == at::kByte &&
                    jpegs[b].is_contiguous(), "jpeg ", b, " must be a contiguous 1-D uint8 tensor");
    const int64_t h = std::max<int64_t>(r[b * 4 + 2], 1), w = std::max<int64_t>(r[b * 4 + 3], 1);
    offset[b + 1] = offset[b] + h * (w + kSlack) * 3;
  }
  at::Tensor buf;
  if (arena.has_value() && arena->defined()) {
    TORCH_CHECK(arena->dim() == 1 && arena->scalar_type() == at::kByte &&
                    arena->is_contiguous() && arena->device().is_cpu(),
                "arena must be a contiguous 1-D uint8 CPU tensor");
    if (arena->numel() >= offset[B]) buf = *arena;
  }
  if (!buf.defined()) buf = at::empty({offset[B]}, at::kByte);
  uint8_t* base = buf.data_ptr<uint8_t>();
  at::Tensor status = at::zeros({B}, at::kChar);
  int8_t* st = status.data_ptr<int8_t>();
  const int64_t* s = sizes.data_ptr<int64_t>();
  const int64_t* sc = scales.data_ptr<int64_t>();
  for (int64_t b = 0; b < B; ++b)
    TORCH_CHECK(sc[b] == 1 || sc[b] == 2 || sc[b] == 4 || sc[b] == 8,
                "scales must be 1, 2, 4 or 8, got ", sc[b]);
  std::vector<int64_t> shift(B, 0);
  npu_data_native::parallel_for_samples(B, [&](int64_t b0, int64_t b1) {
    thread_local std::vector<uint8_t> row;
    for (int64_t b = b0; b < b1; ++b) {
      const size_t pitch = static_cast<size_t>(std::max<int64_t>(r[b * 4 + 3], 1) + kSlack) * 3;
      st[b] = decode_region(jpegs[b].data_ptr<uint8_t>(), static_cast<size_t>(jpegs[b].numel()),
                            s[b * 2], s[b * 2 + 1], r + b * 4, sc[b], base + offset[b], pitch,
                            &shift[b], row);
    }
  });
  std::vector<at::Tensor> out;
  out.reserve(B);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t h = std::max<int64_t>(r[b * 4 + 2], 1), w = std::max<int64_t>(r[b * 4 + 3], 1);
    out.push_back(buf.as_strided({h, w, 3}, {(w + kSlack) * 3, 3, 1},
                                 buf.storage_offset() + offset[b] + shift[b] * 3));
  }
  return {out, status};
}

// The window restart_window cuts for rows [y0, y1) and columns [x0, x1) of a stream, and
// where it lies (top, left, height, width); both empty where the stream cannot be cut.
std::tuple<at::Tensor, at::Tensor> cut_window(const at::Tensor& data_in, int64_t y0, int64_t y1,
                                              int64_t x0, int64_t x1) {
  TORCH_CHECK(data_in.dim() == 1 && data_in.scalar_type() == at::kByte,
              "data must be a 1-D uint8 tensor");
  const at::Tensor data = data_in.contiguous();
  std::vector<uint8_t> cut;
  Window w;
  if (!restart_window(data.data_ptr<uint8_t>(), static_cast<size_t>(data.numel()), y0, y1, x0,
                      x1, cut, w))
    return {at::empty({0}, data.options()), at::empty({0}, at::kLong)};
  at::Tensor out = at::empty({static_cast<int64_t>(cut.size())}, data.options());
  std::memcpy(out.data_ptr<uint8_t>(), cut.data(), cut.size());
  at::Tensor where = at::empty({4}, at::kLong);
  int64_t* p = where.data_ptr<int64_t>();
  p[0] = w.top;
  p[1] = w.left;
  p[2] = w.height;
  p[3] = w.width;
  return {out, where};
}

}  // namespace npu_data_jpeg

TORCH_LIBRARY(npu_data_jpeg, m) {
  m.def("decode_regions(Tensor[] jpegs, Tensor regions, Tensor sizes, Tensor scales, Tensor? arena=None) -> (Tensor[], Tensor)");
  m.def("with_restarts(Tensor data, int target) -> Tensor");
  m.def("cut_window(Tensor data, int y0, int y1, int x0, int x1) -> (Tensor, Tensor)");
  m.def("set_threads(int n) -> ()");
}

TORCH_LIBRARY_IMPL(npu_data_jpeg, CompositeExplicitAutograd, m) {
  m.impl("set_threads", &npu_data_native::set_threads);
}

TORCH_LIBRARY_IMPL(npu_data_jpeg, CPU, m) {
  m.impl("decode_regions", &npu_data_jpeg::decode_regions);
  m.impl("with_restarts", &npu_data_jpeg::with_restarts);
  m.impl("cut_window", &npu_data_jpeg::cut_window);
}
