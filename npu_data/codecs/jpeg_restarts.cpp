// Cutting a window out of a JPEG at its restart markers (no decoding, bytes only).
//
// A restart marker (RST0..RST7) ends an interval of MCUs: the entropy coder's bits are padded
// to a byte and the DC predictors start again from zero, so an interval can be moved into
// another stream unchanged. npu-data's import writes JPEGs with a restart interval of about
// 32 pixels of one MCU row (jpeg_transcode.cpp, a lossless re-encode); camera files often
// carry one of their own. A crop then only entropy-decodes the intervals it covers instead of
// every row above its bottom edge.

#include "jpeg_restarts.h"

#include <algorithm>
#include <cstring>

namespace npu_data_jpeg {
namespace {

uint32_t be16(const uint8_t* p) { return (static_cast<uint32_t>(p[0]) << 8) | p[1]; }

struct Layout {
  int64_t H = 0, W = 0;
  int64_t mcu_w = 8, mcu_h = 8, cols = 0, rows = 0, interval = 0;
  size_t sof = 0;   // offset of the SOF segment in `header`
  size_t scan = 0;  // first byte of the entropy-coded data in the stream
  std::vector<uint8_t> header;  // SOI + the segments a decoder needs, up to the SOS
};

// The tables, frame and scan of a sequential Huffman JPEG (false for anything else).
// APPn/COM segments are left out of `header` except APP0 (JFIF) and APP14 (Adobe), which
// tell libjpeg the colour space.
bool parse(const uint8_t* d, size_t n, Layout& L) {
  if (n < 4 || d[0] != 0xFF || d[1] != 0xD8) return false;
  L.header.assign(d, d + 2);
  int components = 0;
  size_t at = 2;
  while (true) {
    while (at < n && d[at] == 0xFF && at + 1 < n && d[at + 1] == 0xFF) ++at;  // fill bytes
    if (at + 4 > n || d[at] != 0xFF) return false;
    const uint8_t m = d[at + 1];
    if (m == 0xD8 || m == 0xD9 || m == 0x01 || (m >= 0xD0 && m <= 0xD7)) return false;
    const size_t len = be16(d + at + 2);
    if (len < 2 || at + 2 + len > n) return false;
    const uint8_t* seg = d + at + 4;
    bool keep = true;
    if (m == 0xC0 || m == 0xC1) {  // baseline / extended sequential, Huffman
      if (len < 8 || seg[0] != 8) return false;
      L.H = be16(seg + 1);
      L.W = be16(seg + 3);
      components = seg[5];
      if (L.H < 1 || L.W < 1 || components < 1 || len != 8 + 3u * components) return false;
      int hmax = 1, vmax = 1;
      for (int c = 0; c < components; ++c) {
        hmax = std::max(hmax, seg[7 + 3 * c] >> 4);
        vmax = std::max(vmax, seg[7 + 3 * c] & 15);
      }
      if (components > 1) {  // interleaved MCUs; a one-component scan codes single blocks
        L.mcu_w = 8 * hmax;
        L.mcu_h = 8 * vmax;
      }
      L.sof = L.header.size();
    } else if ((m >= 0xC2 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC) || m == 0xDC) {
      return false;  // progressive, lossless, hierarchical, arithmetic; DNL
    } else if (m == 0xDD) {
      if (len != 4) return false;
      L.interval = be16(seg);
    } else if ((m >= 0xE1 && m <= 0xED) || m == 0xEF || m == 0xFE) {
      keep = false;  // EXIF, XMP, ICC, comments: nothing the pixels depend on
    }
    if (keep) L.header.insert(L.header.end(), d + at, d + at + 2 + len);
    at += 2 + len;
    if (m == 0xDA) {
      // one scan holding every component (the only scan of a sequential JPEG)
      if (components == 0 || len < 3 || seg[0] != components) return false;
      L.scan = at;
      break;
    }
  }
  if (L.interval <= 0) return false;
  L.cols = (L.W + L.mcu_w - 1) / L.mcu_w;
  L.rows = (L.H + L.mcu_h - 1) / L.mcu_h;
  return L.cols % L.interval == 0 || L.interval % L.cols == 0;
}

// Offsets of the first `want` intervals' data in [starts[i], ends[i]), scanning the entropy
// data from L.scan; false when the markers are missing, out of order or another segment
// interrupts the scan.
bool intervals(const uint8_t* d, size_t n, const Layout& L, int64_t want,
               std::vector<size_t>& starts, std::vector<size_t>& ends) {
  starts.assign(1, L.scan);
  ends.clear();
  size_t at = L.scan;
  while (static_cast<int64_t>(ends.size()) < want) {
    const void* hit = std::memchr(d + at, 0xFF, n - at);
    if (hit == nullptr) return false;
    at = static_cast<size_t>(static_cast<const uint8_t*>(hit) - d);
    if (at + 1 >= n) return false;
    const uint8_t m = d[at + 1];
    if (m == 0x00 || m == 0xFF) {  // a stuffed 0xFF byte, or fill before a marker
      at += 1 + (m == 0x00);
      continue;
    }
    if (m >= 0xD0 && m <= 0xD7) {
      if (m != 0xD0 + (ends.size() & 7)) return false;
      ends.push_back(at);
      starts.push_back(at + 2);
      at += 2;
    } else if (m == 0xD9) {
      ends.push_back(at);
      break;
    } else {
      return false;
    }
  }
  return static_cast<int64_t>(ends.size()) == want;
}

}  // namespace

bool restart_window(const uint8_t* data, size_t size, int64_t y0, int64_t y1, int64_t x0,
                    int64_t x1, std::vector<uint8_t>& out, Window& where) {
  thread_local Layout L;
  thread_local std::vector<size_t> starts, ends;
  L = Layout();
  if (!parse(data, size, L)) return false;
  y0 = std::clamp<int64_t>(y0, 0, L.H);
  y1 = std::clamp<int64_t>(y1, y0, L.H);
  x0 = std::clamp<int64_t>(x0, 0, L.W);
  x1 = std::clamp<int64_t>(x1, x0, L.W);
  if (y1 <= y0 || x1 <= x0) return false;
  // the window in MCU rows [r0, r1) and, within a row, runs [a, b) of `run` MCUs
  int64_t r0 = y0 / L.mcu_h, r1 = (y1 + L.mcu_h - 1) / L.mcu_h;
  int64_t run = L.interval, a = 0, b = 1, per_row = 1;
  if (L.cols % L.interval == 0) {  // runs within a row: cut columns too
    per_row = L.cols / L.interval;
    a = x0 / (L.mcu_w * run);
    b = std::min<int64_t>(per_row, (x1 + L.mcu_w * run - 1) / (L.mcu_w * run));
  } else {  // an interval spans `g` whole rows: cut rows at its bounds only
    const int64_t g = L.interval / L.cols;
    r0 = r0 / g * g;
    r1 = std::min<int64_t>(L.rows, (r1 + g - 1) / g * g);
    run = L.cols;
  }
  const int64_t last = L.cols % L.interval == 0 ? (r1 - 1) * per_row + b - 1
                                                : (r1 - 1) / (L.interval / L.cols);
  const int64_t total = (L.rows * L.cols + L.interval - 1) / L.interval;
  if (last >= total || !intervals(data, size, L, last + 1, starts, ends)) return false;
  where.top = r0 * L.mcu_h;
  where.left = a * run * L.mcu_w;
  where.height = std::min(L.H, r1 * L.mcu_h) - where.top;
  where.width = L.cols % L.interval == 0 ? std::min(L.W, b * run * L.mcu_w) - where.left : L.W;
  out = L.header;
  uint8_t* sof = out.data() + L.sof + 5;  // FF Cn, length, precision, height, width
  sof[0] = static_cast<uint8_t>(where.height >> 8);
  sof[1] = static_cast<uint8_t>(where.height & 0xFF);
  sof[2] = static_cast<uint8_t>(where.width >> 8);
  sof[3] = static_cast<uint8_t>(where.width & 0xFF);
  size_t bytes = out.size() + 2;
  std::vector<int64_t> pick;
  if (L.cols % L.interval == 0) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = a; c < b; ++c) pick.push_back(r * per_row + c);
  } else {
    const int64_t g = L.interval / L.cols;
    for (int64_t i = r0 / g; i * g < r1; ++i) pick.push_back(i);
  }
  for (int64_t i : pick) bytes += ends[i] - starts[i] + 2;
  out.reserve(bytes);
  for (size_t j = 0; j < pick.size(); ++j) {
    if (j > 0) {
      out.push_back(0xFF);
      out.push_back(static_cast<uint8_t>(0xD0 + ((j - 1) & 7)));
    }
    out.insert(out.end(), data + starts[pick[j]], data + ends[pick[j]]);
  }
  out.push_back(0xFF);
  out.push_back(0xD9);
  return true;
}

int restart_interval_for(int cols, int mcu_w, int target) {
  int best = 1;
  for (int k = 1; k <= cols && k * mcu_w <= target; ++k)
    if (cols % k == 0) best = k;
  return best;
}

}  // namespace npu_data_jpeg
