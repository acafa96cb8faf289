// ObjectWriter: the chunk buffers reserved for one object that is not yet
// visible (MemoryTier::prepare), filled in place and then handed to
// MemoryTier::publish. A writer dropped unpublished returns its bytes to the
// budget; a published one is spent.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "core/aligned_buffer.h"
#include "memory/chunk.h"
#include "memory/value_sink.h"

namespace tierkv::memory {

class MemoryTier;

class ObjectWriter final : public ValueSink {
 public:
  ObjectWriter(ObjectWriter&& o) noexcept;
  ObjectWriter& operator=(ObjectWriter&& o) noexcept;
  ~ObjectWriter();

  const std::string& key() const { return key_; }
  uint64_t size() const override { return size_; }
  size_t chunk_count() const { return chunks_.size(); }
  // Null for a hole of a partial writer (prepare_partial).
  char* chunk_data(size_t i) { return chunks_[i] ? chunks_[i]->data() : nullptr; }
  uint32_t chunk_length(size_t i) const { return chunks_[i] ? chunks_[i]->size : 0; }
  // Makes `from` (the chunk's bytes at `offset`, a flash read's buffer)
  // chunk i's buffer instead of copying them, if it costs no more than the
  // chunk is charged (Chunk::adopt); `from` is then empty. Counts as filled.
  bool adopt(size_t i, AlignedBuffer& from, uint32_t offset) {
    if (chunks_[i] == nullptr || !chunks_[i]->adopt(from, offset)) return false;
    filled_ += chunks_[i]->size;
    return true;
  }
  // A reference to chunk i's bytes that outlives the writer (empty at a hole).
  ChunkPin pin(size_t i) const { return chunks_[i] ? ChunkPin(chunks_[i]) : ChunkPin(); }
  uint64_t filled() const override { return filled_; }
  // Where the next append() writes, as a writable span (for in-place reads
  // from a socket). Empty when the object is full.
  std::pair<char*, size_t> next_writable() override;
  void advance(size_t n) override { filled_ += n; }

 private:
  friend class MemoryTier;
  ObjectWriter(MemoryTier* tier, std::string key, uint64_t hash, uint64_t size, ChunkList chunks,
               int64_t meta_charge);
  void reset();

  MemoryTier* tier_ = nullptr;
  std::string key_;
  uint64_t hash_ = 0;
  uint64_t size_ = 0;
  uint64_t filled_ = 0;
  ChunkList chunks_;
  int64_t meta_charge_ = 0;  // object metadata, reserved up front
};

}  // namespace tierkv::memory
