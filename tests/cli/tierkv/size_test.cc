// tierkv size's reading of INFO sizing: the points parse, the size for a
// target is interpolated between the points around it (never below the
// first point that reaches it), and the caveats (few reads, a working set
// still growing, sizes known only to within the sample's error) appear when
// they apply.
#include <gtest/gtest.h>

#include "cli/tierkv/size.h"

namespace tierkv::cli {
namespace {

constexpr std::string_view kInfo =
    "# Sizing\r\n"
    "mrc_enabled:1\r\n"
    "mrc_sample_rate:0.010000\r\n"
    "mrc_sampled_reads:50000\r\n"
    "mrc_memory_0.5x:size=500,miss_ratio=0.6000,filled=1\r\n"
    "mrc_memory_1x:size=1000,miss_ratio=0.4000,filled=1\r\n"
    "mrc_memory_2x:size=2000,miss_ratio=0.2000,filled=1,size_error=0.0870\r\n"
    "mrc_tiered_1x:size=5000,miss_ratio=0.1000,filled=0\r\n";

TEST(SizeTest, ParsesTheSection) {
  std::optional<SizingReport> r = parse_sizing(kInfo);
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->enabled);
  EXPECT_DOUBLE_EQ(r->sample_rate, 0.01);
  EXPECT_DOUBLE_EQ(r->sampled_reads, 50000);
  ASSERT_EQ(r->memory.size(), 3u);
  EXPECT_DOUBLE_EQ(r->memory[1].scale, 1);
  EXPECT_DOUBLE_EQ(r->memory[1].size_bytes, 1000);
  EXPECT_DOUBLE_EQ(r->memory[1].miss_ratio, 0.4);
  EXPECT_DOUBLE_EQ(r->memory[1].size_error, 0);
  EXPECT_DOUBLE_EQ(r->memory[2].size_error, 0.087);
  ASSERT_EQ(r->tiered.size(), 1u);
  EXPECT_FALSE(r->tiered[0].filled);
  EXPECT_FALSE(parse_sizing("# Server\r\nredis_version:7\r\n"));
}

TEST(SizeTest, InterpolatesTheSizeForATarget) {
  const SizingReport r = *parse_sizing(kInfo);
  // Hit ratio 0.7 is halfway between 1x (0.6) and 2x (0.8).
  EXPECT_DOUBLE_EQ(*size_for_hit_ratio(r.memory, 0.7), 1500);
  EXPECT_DOUBLE_EQ(*size_for_hit_ratio(r.memory, 0.3), 500);  // the first point reaches it
  EXPECT_FALSE(size_for_hit_ratio(r.memory, 0.95));
}

TEST(SizeTest, SaysWhatTheCurvesCannotKnow) {
  SizingReport r = *parse_sizing(kInfo);
  std::string text = render_sizing(r, 0.7);
  EXPECT_NE(text.find("memory: 1.46 KiB reaches a hit ratio of 0.700"), std::string::npos) << text;
  EXPECT_NE(text.find("no model of the largest size has had to evict"), std::string::npos);
  EXPECT_EQ(text.find("only 50000 sampled reads"), std::string::npos);
  EXPECT_NE(text.find("to within +-9%"), std::string::npos) << text;
  r.sampled_reads = 10;
  r.tiered.back().filled = true;
  r.memory.back().size_error = 0;
  text = render_sizing(r, 0);
  EXPECT_NE(text.find("only 10 sampled reads"), std::string::npos) << text;
  EXPECT_EQ(text.find("has had to evict"), std::string::npos);
  EXPECT_EQ(text.find("to within"), std::string::npos);
}

}  // namespace
}  // namespace tierkv::cli
