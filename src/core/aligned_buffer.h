// AlignedBuffer: an owned (by default zero-initialised) byte buffer whose
// address and length are multiples of the device block (4 KiB), as O_DIRECT
// requires. A buffer taken from a BufferPool goes back to it when destroyed,
// so the pages it maps are used again instead of faulted in afresh.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

namespace tierkv {

inline constexpr size_t kBlockSize = 4096;

inline constexpr size_t align_up(size_t n, size_t a = kBlockSize) {
  return (n + a - 1) / a * a;
}

class BufferPool;

class AlignedBuffer {
 public:
  // For buffers the device fills completely: skips zeroing.
  struct Uninitialized {};

  AlignedBuffer() = default;
  // Rounds `size` up to a whole number of blocks.
  explicit AlignedBuffer(size_t size) : AlignedBuffer(size, Uninitialized{}) {
    if (data_ != nullptr) std::memset(data_, 0, size_);
  }
  AlignedBuffer(size_t size, Uninitialized) : size_(align_up(size)) {
    if (size_ == 0) return;
    data_ = static_cast<char*>(std::aligned_alloc(kBlockSize, size_));
    if (data_ == nullptr) throw std::bad_alloc();
  }
  AlignedBuffer(AlignedBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)),
        size_(std::exchange(o.size_, 0)),
        pool_(std::exchange(o.pool_, nullptr)) {}
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    std::swap(pool_, o.pool_);
    return *this;
  }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  ~AlignedBuffer() { reset(); }

  // Frees the bytes now (or gives them back to their pool).
  void reset();

  char* data() { return data_; }
  const char* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  bool pooled() const { return pool_ != nullptr; }

 private:
  friend class BufferPool;
  AlignedBuffer(char* data, size_t size, BufferPool* pool)
      : data_(data), size_(size), pool_(pool) {}

  char* data_ = nullptr;
  size_t size_ = 0;
  BufferPool* pool_ = nullptr;  // takes data_ back, if set
};

}  // namespace tierkv
