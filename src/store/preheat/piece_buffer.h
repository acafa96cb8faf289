// PieceBuffer: the bytes of one preheat piece, from its fetch until it is
// written (and hashed), charged to preheat-buffer while they live. Not
// zero-filled: the source overwrites them.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string_view>
#include <utility>

#include "store/flashio/buffer_budget.h"

namespace tierkv {

class PieceBuffer {
 public:
  // The caller has charged `size` bytes to `budget`.
  PieceBuffer(BufferBudget& budget, size_t size)
      : budget_(&budget), data_(std::make_unique_for_overwrite<char[]>(size)), size_(size) {}
  PieceBuffer(PieceBuffer&& o) noexcept
      : budget_(std::exchange(o.budget_, nullptr)),
        data_(std::move(o.data_)),
        size_(std::exchange(o.size_, 0)) {}
  PieceBuffer& operator=(PieceBuffer&&) = delete;
  ~PieceBuffer() {
    if (budget_) budget_->release(static_cast<int64_t>(size_));
  }
  std::span<char> span() { return {data_.get(), size_}; }
  std::string_view view() const { return {data_.get(), size_}; }

 private:
  BufferBudget* budget_;
  std::unique_ptr<char[]> data_;
  size_t size_;
};

}  // namespace tierkv
