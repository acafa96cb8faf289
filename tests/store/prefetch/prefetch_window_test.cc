// PrefetchWindow: prefetches are skipped only while the learnt share of a
// promotion that reads find done is below min_share, after enough samples,
// and one in kExploreEvery still goes so the share can recover.
#include "store/prefetch/prefetch_window.h"

#include <gtest/gtest.h>

namespace tierkv {
namespace {

constexpr uint64_t kMs = 1000 * 1000;

// `n` promotions of `promotion_ms` each, every one read `gap_ms` after its
// probe (early if the gap is shorter than the promotion).
void feed(PrefetchWindow& w, int n, uint64_t promotion_ms, uint64_t gap_ms, uint64_t& served) {
  for (int i = 0; i < n; ++i) {
    w.observe_promotion(promotion_ms * kMs);
    if (gap_ms < promotion_ms) w.observe_early_read(gap_ms * kMs, true);
    w.observe_served_reads(++served);
  }
}

int skips_of(PrefetchWindow& w, int asks) {
  int skipped = 0;
  for (int i = 0; i < asks; ++i) skipped += w.skip() ? 1 : 0;
  return skipped;
}

TEST(PrefetchWindowTest, NothingIsSkippedBeforeEnoughSamples) {
  PrefetchWindow w(0.2);
  uint64_t served = 0;
  feed(w, PrefetchWindow::kMinSamples - 1, 10, 0, served);
  EXPECT_EQ(skips_of(w, 16), 0);
}

TEST(PrefetchWindowTest, ReadsRightBehindTheirProbesSkipAllButTheExplorers) {
  PrefetchWindow w(0.2);
  uint64_t served = 0;
  feed(w, 32, 10, 0, served);  // every read came at once
  EXPECT_LT(w.hidden_share(), 0.05);
  EXPECT_EQ(w.promotion_ns(), 10 * kMs);
  EXPECT_EQ(skips_of(w, 8 * PrefetchWindow::kExploreEvery),
            7 * PrefetchWindow::kExploreEvery);  // one in kExploreEvery goes
}

TEST(PrefetchWindowTest, ReadsAfterTheInstallNeverSkip) {
  PrefetchWindow w(0.2);
  uint64_t served = 0;
  feed(w, 32, 10, 50, served);  // read 50 ms after the probe: installed by then
  EXPECT_DOUBLE_EQ(w.hidden_share(), 1.0);
  EXPECT_EQ(skips_of(w, 64), 0);
}

TEST(PrefetchWindowTest, ReadsHalfWayThroughAreAPartialWin) {
  PrefetchWindow w(0.2);
  uint64_t served = 0;
  feed(w, 32, 10, 5, served);
  EXPECT_NEAR(w.hidden_share(), 0.5, 0.01);
  EXPECT_EQ(skips_of(w, 64), 0);
}

TEST(PrefetchWindowTest, TheShareRecoversOnceProbesMoveAhead) {
  PrefetchWindow w(0.2);
  uint64_t served = 0;
  feed(w, 32, 10, 0, served);
  ASSERT_GT(skips_of(w, 16), 0);
  feed(w, 32, 10, 50, served);  // the explorers now find their reads late
  EXPECT_GT(w.hidden_share(), 0.9);
  EXPECT_EQ(skips_of(w, 64), 0);
}

TEST(PrefetchWindowTest, AMinShareOfZeroNeverSkips) {
  PrefetchWindow w(0.2);
  uint64_t served = 0;
  feed(w, 32, 10, 0, served);
  w.set_min_share(0);
  EXPECT_EQ(skips_of(w, 64), 0);
}

TEST(PrefetchWindowTest, AnEarlyReadReportedBeforeTheTierCountsItIsNotLate) {
  PrefetchWindow w(0.2);
  uint64_t served = 0;
  feed(w, 8, 10, 0, served);
  const double before = w.hidden_share();
  // The early report leads the tier's count: the difference must not fold
  // in as a late read, now or once the count catches up.
  w.observe_promotion(10 * kMs);
  w.observe_early_read(0, true);
  w.observe_served_reads(served);
  w.observe_served_reads(++served);
  EXPECT_LE(w.hidden_share(), before);
}

}  // namespace
}  // namespace tierkv
