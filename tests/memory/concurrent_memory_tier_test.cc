// Several threads put, overwrite, stream-write, read, remove, lease, expire
// and scan on a small budget, so eviction runs all the time. Every value is
// derived from (key, seed) with the seed in its first 8 bytes: a reader that
// saw a torn or mixed version would find bytes that do not match.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "core/clock.h"
#include "memory/memory_tier.h"
#include "tests/memory/tier_test_util.h"

namespace tierkv::memory {
namespace {

constexpr int kKeys = 96;
constexpr uint32_t kChunk = 4096;

size_t size_for(uint64_t seed) {
  return 8 + seed % (5 * kChunk);
}  // 1..6 chunks

std::string value_for(const std::string& key, uint64_t seed) {
  std::string v(8, '\0');
  std::memcpy(v.data(), &seed, 8);
  v += testing::make_value(key, seed, size_for(seed) - 8);
  return v;
}

// Empty if the bytes are a whole value of `key`, else what is wrong.
std::string check_value(const std::string& key, const std::string& bytes) {
  if (bytes.size() < 8) return "short value";
  uint64_t seed;
  std::memcpy(&seed, bytes.data(), 8);
  if (bytes.size() != size_for(seed)) return "size does not match seed";
  if (bytes != value_for(key, seed)) return "bytes do not match seed (torn or mixed)";
  return "";
}

struct Totals {
  std::atomic<uint64_t> puts{0}, oom{0}, reads{0}, hits{0}, held_checks{0};
  std::atomic<bool> failed{false};
  std::string failure;
  std::mutex mu;
  void fail(const std::string& what) {
    std::lock_guard lock(mu);
    if (!failed.exchange(true)) failure = what;
  }
};

void run(PolicyKind policy, std::chrono::milliseconds duration) {
  MemoryTierOptions o;
  o.budget_bytes = 512 << 10;  // ~45 average objects for 96 keys: constant eviction
  o.chunk_size = kChunk;
  o.shards = 4;
  o.policy = policy;
  o.expected_objects = 4 * kKeys;
  o.lease_max_fraction = 0.25;
  MemoryTier tier(o);
  Totals totals;
  auto deadline = std::chrono::steady_clock::now() + duration;
  auto running = [&] { return std::chrono::steady_clock::now() < deadline && !totals.failed; };

  auto writer = [&](int id) {
    std::mt19937_64 rng(id);
    while (running()) {
      std::string key = testing::key_of(static_cast<int>(rng() % kKeys));
      uint64_t seed = rng();
      std::string v = value_for(key, seed);
      Result<WriteResult> r = Status::internal("unset");
      switch (rng() % 8) {
        case 0:
        case 1: {  // streamed write in uneven pieces
          auto w = tier.prepare(key, v.size());
          if (!w) {
            r = w.status();
            break;
          }
          for (size_t pos = 0; pos < v.size();) {
            size_t n = std::min<size_t>(1 + rng() % 5000, v.size() - pos);
            w->append(std::string_view(v).substr(pos, n));
            pos += n;
          }
          r = tier.publish(std::move(*w));
          break;
        }
        case 2:
        case 3: {  // overwrite returning the replaced version
          r = tier.put(key, v, WriteOptions{.return_previous = true});
          if (r && r->previous) {
            std::string why = check_value(key, r->previous->to_string());
            if (!why.empty()) totals.fail("previous of " + key + ": " + why);
          }
          break;
        }
        case 4:
          r = tier.put(key, v, WriteOptions{.expire_at_ms = unix_time_ms() + int64_t(rng() % 50)});
          break;
        default:
          r = tier.put(key, v, WriteOptions{.use_once = rng() % 8 == 0});
      }
      if (r) {
        totals.puts.fetch_add(1);
      } else if (r.status().code() == StatusCode::kOutOfMemory) {
        totals.oom.fetch_add(1);
      } else {
        totals.fail("put failed: " + r.status().to_string());
      }
      if (tier.used_bytes() > tier.budget_bytes()) totals.fail("used bytes over budget");
    }
  };

  auto reader = [&](int id) {
    std::mt19937_64 rng(100 + id);
    std::vector<std::pair<std::string, ObjectView>> held;
    while (running()) {
      std::string key = testing::key_of(static_cast<int>(rng() % kKeys));
      auto v = tier.get(key, GetOptions{.touch = rng() % 2 == 0});
      totals.reads.fetch_add(1);
      if (!v) continue;
      totals.hits.fetch_add(1);
      std::string why = check_value(key, v->to_string());
      if (!why.empty()) totals.fail("read of " + key + ": " + why);
      // Hold some views across later overwrites and evictions, then recheck.
      if (held.size() < 6) held.emplace_back(key, std::move(*v));
      if (rng() % 16 == 0 && !held.empty()) {
        for (auto& [k, view] : held) {
          std::string why2 = check_value(k, view.to_string());
          if (!why2.empty()) totals.fail("held view of " + k + ": " + why2);
          totals.held_checks.fetch_add(1);
        }
        held.clear();
      }
      if (rng() % 4 == 0) {  // a range across a chunk boundary
        auto whole = tier.get(key);
        if (whole && whole->object_size() > kChunk + 100) {
          std::string all = whole->to_string();
          auto part = tier.get(key, GetOptions{.offset = kChunk - 50, .length = 100});
          if (part && part->version() == whole->version() &&
              part->to_string() != all.substr(kChunk - 50, 100))
            totals.fail("range of " + key + " differs from the whole read");
        }
      }
    }
  };

  auto janitor = [&] {
    std::mt19937_64 rng(7);
    while (running()) {
      // Paced, so that removals and short expiries leave keys to read.
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      std::string key = testing::key_of(static_cast<int>(rng() % kKeys));
      switch (rng() % 6) {
        case 0:
          tier.remove(key);
          break;
        case 1:
          (void)tier.grant_lease(key, int64_t(rng() % 20));
          break;
        case 2:
          tier.set_expiry(key, rng() % 2 ? 0 : unix_time_ms() + 5);
          break;
        case 3:
          tier.expire_cycle(unix_time_ms());
          break;
        case 4: {
          ScanPage p = tier.scan(rng(), 5);
          for (auto& k : p.keys) {
            if (k.rfind("key:", 0) != 0) totals.fail("scan returned a bad key");
          }
          break;
        }
        default:
          (void)tier.stat(key);
          (void)tier.stats();
          (void)tier.random_key();
      }
    }
  };

  std::vector<std::thread> threads;
  threads.emplace_back(writer, 1);
  threads.emplace_back(writer, 2);
  threads.emplace_back(reader, 1);
  threads.emplace_back(reader, 2);
  threads.emplace_back(janitor);
  for (auto& t : threads) t.join();

  ASSERT_FALSE(totals.failed) << totals.failure;
  EXPECT_GT(totals.puts.load(), 100u) << policy_name(policy);
  EXPECT_GT(totals.hits.load(), 10u) << policy_name(policy);
  EXPECT_GT(tier.stats().evicted_objects, 0u);
  EXPECT_LE(tier.used_bytes(), tier.budget_bytes());
  EXPECT_EQ(tier.stats().leased_bytes >= 0, true);
  // Everything is returned: no chunk or object charge leaked.
  tier.clear();
  EXPECT_EQ(tier.used_bytes(), 0) << policy_name(policy);
  EXPECT_EQ(tier.stats().leased_bytes, 0);
  std::printf("%s: puts %lu (oom %lu), reads %lu (hits %lu), held views rechecked %lu\n",
              std::string(policy_name(policy)).c_str(), totals.puts.load(), totals.oom.load(),
              totals.reads.load(), totals.hits.load(), totals.held_checks.load());
}

class ConcurrentMemoryTierTest : public ::testing::TestWithParam<PolicyKind> {};

TEST_P(ConcurrentMemoryTierTest, ReadsAreWholeUnderWritesAndEviction) {
  run(GetParam(), std::chrono::milliseconds(1200));
}

INSTANTIATE_TEST_SUITE_P(All, ConcurrentMemoryTierTest, ::testing::ValuesIn(kAllPolicies),
                         [](const auto& info) { return std::string(policy_name(info.param)); });

}  // namespace
}  // namespace tierkv::memory
