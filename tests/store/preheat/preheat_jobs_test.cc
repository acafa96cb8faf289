// PreheatJobs, Store's one handle to preheat: before a preheater is attached
// (no flash, or a background load still opening it) every start is
// Unavailable and nothing is found; once attached, a job's key is checked
// first (max-key-size), then the preheater's own rules (the allowlist).
#include "store/preheat/preheat_jobs.h"

#include <gtest/gtest.h>

#include <string>

#include "core/metrics.h"
#include "store/preheat/preheater.h"

namespace tierkv {
namespace {

PreheatRequest request(std::string key) {
  PreheatRequest r;
  r.key = std::move(key);
  r.source = "file:///x";
  return r;
}

Status at_most_8_bytes(std::string_view key) {
  return key.size() > 8 ? Status::too_large("key too long") : Status::ok();
}

TEST(PreheatJobsTest, UnattachedRefusesEveryStartAndFindsNothing) {
  PreheatJobs jobs(at_most_8_bytes);
  EXPECT_EQ(jobs.start(request("k")).status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(jobs.start_folder("p/", "file:///d/", {}).status().code(), StatusCode::kUnavailable);
  Status async = Status::ok();
  jobs.start_folder_async("p/", "file:///d/", {},
                          [&](Result<std::vector<uint64_t>> r) { async = r.status(); });
  EXPECT_EQ(async.code(), StatusCode::kUnavailable);  // at once, on this thread
  EXPECT_FALSE(jobs.job(1));
  uint64_t next = 7;
  EXPECT_TRUE(jobs.jobs(0, 10, &next).empty());
  EXPECT_EQ(next, 0u);
  EXPECT_EQ(jobs.cancel(1).code(), StatusCode::kNotFound);
  EXPECT_FALSE(jobs.stuck());
  jobs.mark_stuck();
  EXPECT_TRUE(jobs.stuck());
}

TEST(PreheatJobsTest, AttachedChecksTheKeyThenThePreheatersRules) {
  MetricsRegistry metrics;
  Preheater preheater(
      1,
      [](const std::string&, uint64_t, const StagedPutOptions&)
          -> Result<std::unique_ptr<StagedPut>> { return Status::unavailable("no flash here"); },
      metrics, 1 << 20);
  PreheatJobs jobs(at_most_8_bytes);
  jobs.attach(&preheater);
  EXPECT_EQ(jobs.start(request("a-long-key")).status().code(), StatusCode::kTooLarge);
  // The allowlist is empty: no source is allowed.
  EXPECT_EQ(jobs.start(request("k")).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(jobs.start_folder("p/", "file:///d/", {}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_FALSE(jobs.job(1));
  EXPECT_EQ(jobs.cancel(1).code(), StatusCode::kNotFound);
  jobs.attach(nullptr);  // as ~Store does before the preheater goes
  EXPECT_EQ(jobs.start(request("k")).status().code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace tierkv
