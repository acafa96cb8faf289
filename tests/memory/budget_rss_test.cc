// The budget holds in real memory, not just in the accounting: 1 GiB of
// 64 KiB values through a 256 MiB tier keeps both the tier's accounted bytes
// under the budget and the process RSS under budget * 1.15 + 64 MiB.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "memory/memory_tier.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
// Sanitizer shadow memory and quarantines make RSS measure the sanitizer.
constexpr bool kRssMeaningful = false;
#else
constexpr bool kRssMeaningful = true;
#endif

namespace tierkv::memory {
namespace {

int64_t rss_bytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return -1;
}

TEST(BudgetRssTest, OneGiBThroughA256MiBTier) {
  constexpr int64_t kBudget = int64_t{256} << 20;
  constexpr size_t kValue = 64 << 10;
  constexpr int64_t kTotal = int64_t{1} << 30;
  constexpr int64_t kRssLimit = kBudget * 115 / 100 + (int64_t{64} << 20);
  MemoryTierOptions o;
  o.budget_bytes = kBudget;  // everything else at its default (1 MiB chunks, S3-FIFO)
  MemoryTier tier(o);

  std::string value(kValue, 'v');
  int64_t rss_before = rss_bytes();
  ASSERT_GT(rss_before, 0);
  int64_t peak_used = 0, peak_rss = rss_before;
  int puts = static_cast<int>(kTotal / kValue);
  for (int i = 0; i < puts; ++i) {
    std::memcpy(value.data(), &i, sizeof(i));  // distinct contents too
    std::string key = "budget:" + std::to_string(i);
    auto r = tier.put(key, value);
    ASSERT_TRUE(r) << i << ": " << r.status().to_string();
    int64_t used = tier.used_bytes();
    peak_used = std::max(peak_used, used);
    ASSERT_LE(used, kBudget) << "after put " << i;
    int64_t rss = rss_bytes();
    peak_rss = std::max(peak_rss, rss);
    if (kRssMeaningful) {
      ASSERT_LT(rss, kRssLimit) << "after put " << i;
    }
  }
  MemoryTierStats st = tier.stats();
  // Most of the budget holds values: the charge per object is not inflated.
  EXPECT_GT(static_cast<int64_t>(st.objects * kValue), kBudget * 85 / 100);
  EXPECT_EQ(st.evicted_objects + st.objects, static_cast<uint64_t>(puts));
  std::printf(
      "budget %lld MiB: peak accounted %.2f MiB, peak RSS %.2f MiB (before %.2f MiB, limit %.2f "
      "MiB%s), resident objects %llu (%.2f MiB of values), evicted %llu\n",
      static_cast<long long>(kBudget >> 20), peak_used / 1048576.0, peak_rss / 1048576.0,
      rss_before / 1048576.0, kRssLimit / 1048576.0, kRssMeaningful ? "" : ", not checked",
      static_cast<unsigned long long>(st.objects), st.objects * kValue / 1048576.0,
      static_cast<unsigned long long>(st.evicted_objects));
  tier.clear();
  EXPECT_EQ(tier.used_bytes(), 0);
}

}  // namespace
}  // namespace tierkv::memory
