// ObjectView: a pinned, consistent view of one version of an object, or of a
// byte range of it. It is a scatter list of chunk buffers: callers send or
// copy the segments; nothing was copied to build it.
#pragma once

#include <absl/container/inlined_vector.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "memory/chunk.h"

namespace tierkv::memory {

class ObjectView {
 public:
  ObjectView() = default;
  ObjectView(uint64_t version, uint64_t object_size, int64_t expire_at_ms, uint64_t offset,
             uint64_t length, absl::InlinedVector<ChunkPin, 2> pins, uint32_t chunk_size)
      : version_(version),
        object_size_(object_size),
        expire_at_ms_(expire_at_ms),
        offset_(offset),
        length_(length),
        chunk_size_(chunk_size),
        pins_(std::move(pins)) {}

  uint64_t version() const { return version_; }
  uint64_t object_size() const { return object_size_; }
  int64_t expire_at_ms() const { return expire_at_ms_; }
  uint64_t offset() const { return offset_; }
  uint64_t length() const { return length_; }
  size_t segment_count() const { return pins_.size(); }

  // The i-th piece of the requested range, inside chunk buffer i.
  std::string_view segment(size_t i) const {
    std::string_view b = pins_[i].bytes();
    uint64_t chunk_start = uint64_t{pins_[i].index()} * chunk_size_;
    uint64_t from = offset_ > chunk_start ? offset_ - chunk_start : 0;
    uint64_t end = offset_ + length_ - chunk_start;
    if (end > b.size()) end = b.size();
    return b.substr(from, end - from);
  }

  template <typename Fn>
  void for_each_segment(Fn&& fn) const {
    for (size_t i = 0; i < pins_.size(); ++i) fn(segment(i));
  }

  void append_to(std::string& out) const {
    out.reserve(out.size() + length_);
    for_each_segment([&](std::string_view s) { out.append(s); });
  }
  std::string to_string() const {
    std::string out;
    append_to(out);
    return out;
  }

 private:
  uint64_t version_ = 0;
  uint64_t object_size_ = 0;
  int64_t expire_at_ms_ = 0;
  uint64_t offset_ = 0;
  uint64_t length_ = 0;
  uint32_t chunk_size_ = 0;
  absl::InlinedVector<ChunkPin, 2> pins_;
};

}  // namespace tierkv::memory
