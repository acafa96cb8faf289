// In-memory decompression of trace files: zstd, xz and gzip, picked by the
// magic bytes at the start of the data.
#include <fmt/format.h>
#include <lzma.h>
#include <zlib.h>
#include <zstd.h>

#include <memory>

#include "cli/trace/trace_reader.h"

namespace tierkv::trace {
namespace {

constexpr size_t kOutputStep = size_t{1} << 20;

bool starts_with(std::string_view bytes, std::string_view magic) {
  return bytes.substr(0, magic.size()) == magic;
}

Result<std::string> zstd_decompress(std::string_view in) {
  std::unique_ptr<ZSTD_DStream, decltype(&ZSTD_freeDStream)> ds(ZSTD_createDStream(),
                                                                &ZSTD_freeDStream);
  if (!ds) return Status::internal("zstd: cannot create a decompression stream");
  std::string out;
  ZSTD_inBuffer input{in.data(), in.size(), 0};
  size_t last = 1;  // 0 once a frame is complete
  // Runs until the input is consumed and the decoder has flushed the frame.
  while (input.pos < input.size || last != 0) {
    size_t old = out.size();
    out.resize(old + kOutputStep);
    ZSTD_outBuffer output{out.data() + old, kOutputStep, 0};
    size_t consumed_before = input.pos;
    last = ZSTD_decompressStream(ds.get(), &output, &input);
    out.resize(old + output.pos);
    if (ZSTD_isError(last))
      return Status::corruption(fmt::format("zstd: {}", ZSTD_getErrorName(last)));
    bool stuck = output.pos == 0 && input.pos == consumed_before;
    if (last != 0 && stuck) return Status::corruption("zstd: truncated input");
  }
  return out;
}

Result<std::string> xz_decompress(std::string_view in) {
  lzma_stream strm = LZMA_STREAM_INIT;
  if (lzma_stream_decoder(&strm, UINT64_MAX, LZMA_CONCATENATED) != LZMA_OK)
    return Status::internal("xz: cannot create a decoder");
  std::unique_ptr<lzma_stream, decltype(&lzma_end)> guard(&strm, &lzma_end);
  std::string out;
  strm.next_in = reinterpret_cast<const uint8_t*>(in.data());
  strm.avail_in = in.size();
  for (;;) {
    size_t old = out.size();
    out.resize(old + kOutputStep);
    strm.next_out = reinterpret_cast<uint8_t*>(out.data() + old);
    strm.avail_out = kOutputStep;
    lzma_ret ret = lzma_code(&strm, strm.avail_in == 0 ? LZMA_FINISH : LZMA_RUN);
    out.resize(old + kOutputStep - strm.avail_out);
    if (ret == LZMA_STREAM_END) return out;
    if (ret != LZMA_OK)
      return Status::corruption(fmt::format("xz: decoder error {}", static_cast<int>(ret)));
  }
}

Result<std::string> gzip_decompress(std::string_view in) {
  z_stream zs{};
  // 15 window bits + 32: accept a gzip or zlib header.
  if (inflateInit2(&zs, 15 + 32) != Z_OK) return Status::internal("gzip: cannot create a decoder");
  std::unique_ptr<z_stream, decltype(&inflateEnd)> guard(&zs, &inflateEnd);
  std::string out;
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  zs.avail_in = static_cast<uInt>(in.size());
  for (;;) {
    size_t old = out.size();
    out.resize(old + kOutputStep);
    zs.next_out = reinterpret_cast<Bytef*>(out.data() + old);
    zs.avail_out = static_cast<uInt>(kOutputStep);
    int ret = inflate(&zs, Z_NO_FLUSH);
    out.resize(old + kOutputStep - zs.avail_out);
    if (ret == Z_STREAM_END) {
      if (zs.avail_in == 0) return out;
      // Concatenated gzip members decode as one stream, like gunzip does.
      if (inflateReset(&zs) != Z_OK) return Status::corruption("gzip: cannot reset the decoder");
      continue;
    }
    if (ret == Z_BUF_ERROR && zs.avail_in == 0) return Status::corruption("gzip: truncated input");
    if (ret != Z_OK && ret != Z_BUF_ERROR)
      return Status::corruption(fmt::format("gzip: {}", zs.msg ? zs.msg : "decoder error"));
  }
}

}  // namespace

Result<std::string> decompress(std::string bytes) {
  if (starts_with(bytes, "\x28\xB5\x2F\xFD")) return zstd_decompress(bytes);
  if (starts_with(bytes, std::string_view("\xFD"
                                          "7zXZ\x00",
                                          6)))
    return xz_decompress(bytes);
  if (starts_with(bytes, "\x1F\x8B")) return gzip_decompress(bytes);
  return bytes;
}

}  // namespace tierkv::trace
