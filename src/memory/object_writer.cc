#include "memory/object_writer.h"

#include "memory/memory_tier.h"

namespace tierkv::memory {

ObjectWriter::ObjectWriter(MemoryTier* tier, std::string key, uint64_t hash, uint64_t size,
                           ChunkList chunks, int64_t meta_charge)
    : tier_(tier),
      key_(std::move(key)),
      hash_(hash),
      size_(size),
      chunks_(std::move(chunks)),
      meta_charge_(meta_charge) {}

ObjectWriter::ObjectWriter(ObjectWriter&& o) noexcept
    : tier_(std::exchange(o.tier_, nullptr)),
      key_(std::move(o.key_)),
      hash_(o.hash_),
      size_(o.size_),
      filled_(o.filled_),
      chunks_(std::move(o.chunks_)),
      meta_charge_(std::exchange(o.meta_charge_, 0)) {
  o.chunks_.clear();
}

ObjectWriter& ObjectWriter::operator=(ObjectWriter&& o) noexcept {
  if (this != &o) {
    reset();
    tier_ = std::exchange(o.tier_, nullptr);
    key_ = std::move(o.key_);
    hash_ = o.hash_;
    size_ = o.size_;
    filled_ = o.filled_;
    chunks_ = std::move(o.chunks_);
    o.chunks_.clear();
    meta_charge_ = std::exchange(o.meta_charge_, 0);
  }
  return *this;
}

ObjectWriter::~ObjectWriter() {
  reset();
}

void ObjectWriter::reset() {
  for (Chunk* c : chunks_)
    if (c) c->release();
  chunks_.clear();
  if (tier_ && meta_charge_) tier_->unreserve(meta_charge_);
  meta_charge_ = 0;
  // Empty now: publishing it again must fail, not index a chunkless object.
  tier_ = nullptr;
  size_ = filled_ = 0;
}

std::pair<char*, size_t> ObjectWriter::next_writable() {
  if (filled_ >= size_) return {nullptr, 0};
  size_t cs = tier_->chunk_size();
  size_t i = filled_ / cs;
  size_t off = filled_ % cs;
  if (!chunks_[i]) return {nullptr, 0};  // a partial writer is filled by chunk
  return {chunks_[i]->data() + off, chunks_[i]->size - off};
}

}  // namespace tierkv::memory
