// libFuzzer target: arbitrary bytes, cut into arbitrary reads, through the
// RESP parser. Checks that it never crashes, never reads out of bounds, and
// that the same input gives the same commands however it is split.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "server/protocol/resp_parser.h"

namespace {

using tierkv::server::RespParser;

struct Outcome {
  std::vector<std::vector<std::string>> commands;
  std::string error;
  bool operator==(const Outcome&) const = default;
};

// Feeds `data` in reads of the sizes `cut` chooses. Large values are
// alternately buffered and discarded, as a connection would.
template <typename Cut>
Outcome run(const uint8_t* data, size_t size, bool discard_large, Cut cut) {
  RespParser p;
  RespParser::Limits limits;
  limits.max_bulk_len = 1 << 20;
  limits.max_multibulk_args = 4096;
  limits.max_inline_len = 4096;
  p.set_limits(limits);
  Outcome out;
  size_t pos = 0;
  for (;;) {
    for (bool more = true; more;) {
      switch (p.next()) {
        case RespParser::Event::kNeedMore:
          more = false;
          break;
        case RespParser::Event::kError:
          out.error = p.error();
          return out;
        case RespParser::Event::kLargeValue:
          if (discard_large) {
            p.discard();
          } else {
            p.buffer();
          }
          break;
        case RespParser::Event::kCommand:
          out.commands.emplace_back(p.argv().begin(), p.argv().end());
          break;
      }
    }
    if (pos == size) return out;
    std::span<char> span = p.prepare(1);
    size_t n = std::min({span.size(), size - pos, cut(pos)});
    std::memcpy(span.data(), data + pos, n);
    p.commit(n);
    pos += n;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  for (bool discard : {false, true}) {
    Outcome whole = run(data, size, discard, [](size_t) { return SIZE_MAX; });
    Outcome pieces = run(data, size, discard, [](size_t pos) { return 1 + pos % 13; });
    if (!(whole == pieces)) std::abort();
  }
  return 0;
}
