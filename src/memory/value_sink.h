// ValueSink: where a value that arrives in pieces (a large SET's bulk read
// from a socket) is written in place. The memory tier's ObjectWriter is one;
// the store's FlashValueSink, which writes a value larger than memory
// straight to flash, is the other.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <utility>

namespace tierkv::memory {

class ValueSink {
 public:
  virtual ~ValueSink() = default;
  // Where the next bytes go, as a writable span; empty once the value is whole.
  virtual std::pair<char*, size_t> next_writable() = 0;
  // `n` bytes of next_writable() were written.
  virtual void advance(size_t n) = 0;
  virtual uint64_t size() const = 0;
  virtual uint64_t filled() const = 0;

  // Sequential fill: copies bytes at the write cursor; false past the end.
  bool append(std::string_view bytes) {
    if (bytes.size() > size() - filled()) return false;
    while (!bytes.empty()) {
      auto [dst, room] = next_writable();
      size_t n = std::min(room, bytes.size());
      std::memcpy(dst, bytes.data(), n);
      bytes.remove_prefix(n);
      advance(n);
    }
    return true;
  }
};

}  // namespace tierkv::memory
