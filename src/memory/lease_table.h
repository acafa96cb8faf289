// LeaseTable: when each leased chunk of one shard stops being protected.
// Kept beside the chunks rather than in them: few chunks are ever leased,
// and two fields in every chunk header cost each small key 16 bytes.
// Not thread safe: the shard's lock guards it.
#pragma once

#include <absl/container/flat_hash_map.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tierkv::memory {

struct Chunk;

class LeaseTable {
 public:
  struct Lease {
    Chunk* chunk;
    int64_t until_ms;
  };

  // Starts c's lease, or moves its end if it has one.
  void set(Chunk* c, int64_t until_ms);
  // When c's lease ends; c must hold one.
  int64_t until(const Chunk* c) const;
  // Ends c's lease; c must hold one.
  void remove(const Chunk* c);
  void clear();

  bool empty() const { return leases_.empty(); }
  size_t size() const { return leases_.size(); }
  // The i-th lease in no particular order (i < size()): for sampling.
  const Lease& at(size_t i) const { return leases_[i]; }

 private:
  std::vector<Lease> leases_;
  absl::flat_hash_map<const Chunk*, uint32_t> slot_;  // position in leases_
};

}  // namespace tierkv::memory
