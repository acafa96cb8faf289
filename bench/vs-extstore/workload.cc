#include "workload.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "fmt/format.h"

namespace tierkv::bench {
namespace {

uint64_t mix64(uint64_t x) {  // splitmix64's finalizer
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

void put_u64(char* dst, uint64_t v) {
  for (int i = 0; i < 8; ++i) dst[i] = static_cast<char>(v >> (8 * i));
}

uint64_t get_u64(const char* src) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{static_cast<unsigned char>(src[i])} << (8 * i);
  return v;
}

}  // namespace

ZipfianChooser::ZipfianChooser(size_t keys, double theta, uint64_t seed)
    : cdf_(keys), id_of_rank_(keys) {
  double sum = 0;
  for (size_t r = 0; r < keys; ++r) {
    sum += 1.0 / std::pow(static_cast<double>(r + 1), theta);
    cdf_[r] = sum;
  }
  for (double& c : cdf_) c /= sum;
  cdf_.back() = 1.0;
  for (size_t r = 0; r < keys; ++r) id_of_rank_[r] = static_cast<uint32_t>(r);
  std::mt19937_64 rng(mix64(seed ^ 0x5a17));
  std::shuffle(id_of_rank_.begin(), id_of_rank_.end(), rng);
}

size_t ZipfianChooser::next(std::mt19937_64& rng) const {
  double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
  size_t rank = static_cast<size_t>(std::lower_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin());
  return id_of_rank_[std::min(rank, id_of_rank_.size() - 1)];
}

KeySpace::KeySpace(size_t keys, size_t min_value, size_t max_value, uint64_t seed)
    : names_(keys),
      sizes_(keys),
      versions_(new std::atomic<uint64_t>[keys]),
      pool_offsets_(size_t{1} << 20) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<size_t> size_dist(min_value, max_value);
  for (size_t id = 0; id < keys; ++id) {
    names_[id] = fmt::format("vsx:{:08d}", id);
    sizes_[id] = static_cast<uint32_t>(size_dist(rng));
    versions_[id].store(0, std::memory_order_relaxed);
  }
  // Random bytes do not compress, so neither server gains from compression.
  pool_.resize(pool_offsets_ + max_value);
  for (size_t i = 0; i + 8 <= pool_.size(); i += 8) put_u64(pool_.data() + i, rng());
}

uint64_t KeySpace::mean_value_size() const {
  uint64_t total = 0;
  for (uint32_t s : sizes_) total += s;
  return sizes_.empty() ? 0 : total / sizes_.size();
}

std::string_view KeySpace::body(size_t id, uint64_t version) const {
  size_t offset = mix64(id * 0x9E3779B97F4A7C15ULL ^ mix64(version)) % pool_offsets_;
  return std::string_view(pool_).substr(offset, sizes_[id] - kHeadSize);
}

ValueParts KeySpace::value(size_t id, uint64_t version, char (&head)[kHeadSize]) const {
  put_u64(head, id);
  put_u64(head + 8, version);
  return ValueParts{std::string_view(head, kHeadSize), body(id, version)};
}

bool KeySpace::verify(size_t id, std::string_view bytes) const {
  if (bytes.size() != sizes_[id]) return false;
  if (get_u64(bytes.data()) != id) return false;
  uint64_t version = get_u64(bytes.data() + 8);
  if (version > current_version(id)) return false;
  std::string_view expected = body(id, version);
  return std::memcmp(bytes.data() + kHeadSize, expected.data(), expected.size()) == 0;
}

}  // namespace tierkv::bench
