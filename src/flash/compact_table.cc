#include "flash/compact_table.h"

#include <malloc.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

namespace tierkv::flash {

namespace {

uint64_t load_le(const uint8_t* p, unsigned bytes) {
  uint64_t v = 0;
  std::memcpy(&v, p, bytes);  // little-endian hosts only (record.h)
  return v;
}

void store_le(uint8_t* p, uint64_t v, unsigned bytes) {
  std::memcpy(p, &v, bytes);
}

constexpr unsigned kSizeShift = 45;
constexpr uint64_t kExpiryBit = uint64_t{1} << 63;

// The allocator's real footprint for one array: usable size plus its header.
size_t footprint(const void* p) {
  return p == nullptr ? 0 : malloc_usable_size(const_cast<void*>(p)) + 8;
}

}  // namespace

CompactTable::CompactTable(unsigned bucket_bits)
    : bucket_bits_(bucket_bits < kMaxBucketBits ? bucket_bits : kMaxBucketBits),
      bucket_shift_(64 - bucket_bits_),
      tag_shift_(64 - bucket_bits_ - kTagBits),
      ident_mask_(ident_mask(bucket_bits)),
      buckets_(size_t{1} << bucket_bits_) {}

CompactTable::~CompactTable() {
  clear();
}

uint64_t CompactTable::ident_at(uint64_t bucket, uint64_t tag) const {
  const uint64_t top = bucket_bits_ == 0 ? 0 : bucket << bucket_shift_;
  return top | (tag << tag_shift_);
}

uint64_t CompactTable::tag_at(const Bucket& b, uint32_t pos) {
  return load_le(b.data + size_t{pos} * kEntryBytes, 5);
}

uint32_t CompactTable::lower_bound(const Bucket& b, uint64_t tag) {
  uint32_t lo = 0, hi = b.count;
  while (lo < hi) {
    const uint32_t mid = lo + (hi - lo) / 2;
    if (tag_at(b, mid) < tag) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

CompactTable::Entry CompactTable::decode(const uint8_t* p) {
  const uint64_t word = load_le(p + 13, 8);
  return Entry{load_le(p + 5, 8), word & kMaxVersion,
               static_cast<uint32_t>((word >> kSizeShift) & kMaxSize), (word & kExpiryBit) != 0};
}

void CompactTable::encode(uint8_t* p, uint64_t tag, const Entry& e) {
  store_le(p, tag, 5);
  store_le(p + 5, e.location, 8);
  const uint64_t word = (e.version & kMaxVersion) | (uint64_t{e.size & kMaxSize} << kSizeShift) |
                        (e.has_expiry ? kExpiryBit : 0);
  store_le(p + 13, word, 8);
}

void CompactTable::reserve(Bucket& b, uint32_t capacity) {
  heap_bytes_ -= footprint(b.data);
  void* grown = std::realloc(b.data, size_t{capacity} * kEntryBytes);
  if (grown == nullptr) {
    heap_bytes_ += footprint(b.data);
    throw std::bad_alloc();
  }
  b.data = static_cast<uint8_t*>(grown);
  // The allocator rounds up: use what it gave.
  b.capacity =
      std::max<uint32_t>(capacity, static_cast<uint32_t>(malloc_usable_size(b.data) / kEntryBytes));
  heap_bytes_ += footprint(b.data);
}

void CompactTable::release(Bucket& b) {
  heap_bytes_ -= footprint(b.data);
  std::free(b.data);
  b = Bucket{};
}

std::optional<CompactTable::Entry> CompactTable::find(uint64_t hash) const {
  const Bucket& b = buckets_[bucket_of(hash)];
  const uint64_t tag = tag_of(hash);
  const uint32_t pos = lower_bound(b, tag);
  if (pos == b.count || tag_at(b, pos) != tag) return std::nullopt;
  return decode(b.data + size_t{pos} * kEntryBytes);
}

bool CompactTable::put(uint64_t hash, const Entry& entry) {
  Bucket& b = buckets_[bucket_of(hash)];
  const uint64_t tag = tag_of(hash);
  const uint32_t pos = lower_bound(b, tag);
  if (pos < b.count && tag_at(b, pos) == tag) {
    encode(b.data + size_t{pos} * kEntryBytes, tag, entry);
    return false;
  }
  // Grow by a sixteenth (at least one entry): the slack stays near 3 %,
  // and the allocator's 16-byte rounding absorbs some steps.
  if (b.count == b.capacity) reserve(b, b.count + std::max<uint32_t>(1, b.count / 16));
  uint8_t* at = b.data + size_t{pos} * kEntryBytes;
  std::memmove(at + kEntryBytes, at, size_t{b.count - pos} * kEntryBytes);
  encode(at, tag, entry);
  ++b.count;
  ++size_;
  return true;
}

bool CompactTable::erase(uint64_t hash) {
  Bucket& b = buckets_[bucket_of(hash)];
  const uint64_t tag = tag_of(hash);
  const uint32_t pos = lower_bound(b, tag);
  if (pos == b.count || tag_at(b, pos) != tag) return false;
  uint8_t* at = b.data + size_t{pos} * kEntryBytes;
  std::memmove(at, at + kEntryBytes, size_t{b.count - pos - 1} * kEntryBytes);
  --b.count;
  --size_;
  if (b.count == 0) {
    release(b);
  } else if (b.capacity > b.count + b.count / 4 + 4) {
    reserve(b, b.count + b.count / 8);  // give back what a wave of deletes left
  }
  return true;
}

uint64_t CompactTable::walk_from(uint64_t from, size_t max, std::vector<Named>* out) const {
  uint64_t bi = bucket_of(from);
  uint32_t pos = lower_bound(buckets_[bi], tag_of(from));
  for (size_t taken = 0; bi < buckets_.size(); ++bi, pos = 0) {
    const Bucket& b = buckets_[bi];
    for (; pos < b.count; ++pos) {
      const uint64_t tag = tag_at(b, pos);
      if (taken == max) return ident_at(bi, tag);
      out->push_back({ident_at(bi, tag), decode(b.data + size_t{pos} * kEntryBytes)});
      ++taken;
    }
  }
  return 0;
}

std::optional<CompactTable::Named> CompactTable::pick(uint64_t seed) const {
  if (size_ == 0) return std::nullopt;
  const size_t start = seed & (buckets_.size() - 1);
  for (size_t i = 0; i < buckets_.size(); ++i) {
    const size_t bi = (start + i) & (buckets_.size() - 1);
    const Bucket& b = buckets_[bi];
    if (b.count == 0) continue;
    const uint32_t pos = static_cast<uint32_t>((seed >> 32) % b.count);
    return Named{ident_at(bi, tag_at(b, pos)), decode(b.data + size_t{pos} * kEntryBytes)};
  }
  return std::nullopt;
}

void CompactTable::clear() {
  for (Bucket& b : buckets_) {
    if (b.data != nullptr) release(b);
  }
  size_ = 0;
}

std::span<const uint8_t> CompactTable::bucket_bytes(size_t bucket) const {
  const Bucket& b = buckets_[bucket];
  return {b.data, size_t{b.count} * kEntryBytes};
}

bool CompactTable::ascending(const uint8_t* entries, uint32_t count) {
  for (uint32_t i = 1; i < count; ++i) {
    if (load_le(entries + size_t{i - 1} * kEntryBytes, 5) >=
        load_le(entries + size_t{i} * kEntryBytes, 5))
      return false;
  }
  return true;
}

bool CompactTable::load_bucket(size_t bucket, std::span<const uint8_t> bytes,
                               uint64_t* max_version) {
  if (bytes.size() % kEntryBytes != 0) return false;
  const auto count = static_cast<uint32_t>(bytes.size() / kEntryBytes);
  return load_bucket(
      bucket, count,
      [&](uint8_t* dst, size_t n) {
        std::memcpy(dst, bytes.data(), n);
        return true;
      },
      max_version);
}

bool CompactTable::load_bucket(size_t bucket, uint32_t count,
                               absl::FunctionRef<bool(uint8_t*, size_t)> fill,
                               uint64_t* max_version) {
  if (count == 0) return true;
  Bucket& b = buckets_[bucket];
  const size_t bytes = size_t{count} * kEntryBytes;
  if (b.count != 0) {
    // Entries there already (put back one by one): merge, newer version first.
    std::vector<uint8_t> image(bytes);
    if (!fill(image.data(), bytes) || !ascending(image.data(), count)) return false;
    for (uint32_t i = 0; i < count; ++i) {
      const uint8_t* p = image.data() + size_t{i} * kEntryBytes;
      const uint64_t hash = ident_at(bucket, load_le(p, 5));
      const Entry e = decode(p);
      std::optional<Entry> there = find(hash);
      if (!there || there->version < e.version) put(hash, e);
      *max_version = std::max(*max_version, e.version);
    }
    return true;
  }
  reserve(b, count);
  if (!fill(b.data, bytes) || !ascending(b.data, count)) {
    release(b);
    return false;
  }
  for (uint32_t i = 0; i < count; ++i)
    *max_version = std::max(*max_version, decode(b.data + size_t{i} * kEntryBytes).version);
  b.count = count;
  size_ += count;
  return true;
}

}  // namespace tierkv::flash
