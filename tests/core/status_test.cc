#include "core/status.h"

#include <gtest/gtest.h>

#include <memory>

namespace tierkv {
namespace {

TEST(StatusTest, DefaultIsOk) {
  Status s;
  EXPECT_TRUE(s.is_ok());
  EXPECT_TRUE(static_cast<bool>(s));
  EXPECT_EQ(s.code(), StatusCode::kOk);
  EXPECT_EQ(s.to_string(), "OK");
}

TEST(StatusTest, FactoriesSetCodeAndMessage) {
  EXPECT_EQ(Status::not_found().code(), StatusCode::kNotFound);
  EXPECT_EQ(Status::too_large("big").code(), StatusCode::kTooLarge);
  EXPECT_EQ(Status::out_of_memory("full").message(), "full");
  Status s = Status::busy("try later");
  EXPECT_FALSE(s.is_ok());
  EXPECT_FALSE(static_cast<bool>(s));
  EXPECT_EQ(s.to_string(), "BUSY: try later");
}

TEST(StatusTest, EveryCodeHasANameAndRedisPrefix) {
  EXPECT_EQ(status_code_name(StatusCode::kInvalidArgument), "INVALID_ARGUMENT");
  EXPECT_EQ(status_code_name(StatusCode::kInternal), "INTERNAL");
  EXPECT_EQ(error_prefix(StatusCode::kOutOfMemory), "OOM");
  EXPECT_EQ(error_prefix(StatusCode::kWrongType), "WRONGTYPE");
  EXPECT_EQ(error_prefix(StatusCode::kBusy), "BUSY");
  EXPECT_EQ(error_prefix(StatusCode::kIOError), "IOERR");
  EXPECT_EQ(error_prefix(StatusCode::kCorruption), "IOERR");
  EXPECT_EQ(error_prefix(StatusCode::kNotFound), "ERR");
  EXPECT_EQ(error_prefix(StatusCode::kTooLarge), "ERR");
  for (int c = 0; c <= static_cast<int>(StatusCode::kInternal); ++c)
    EXPECT_NE(status_code_name(static_cast<StatusCode>(c)), "UNKNOWN") << c;
}

TEST(ResultTest, HoldsValue) {
  Result<int> r = 42;
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(*r, 42);
  EXPECT_EQ(r.value(), 42);
  EXPECT_TRUE(r.status().is_ok());
}

TEST(ResultTest, HoldsStatus) {
  Result<std::string> r = Status::not_found("no key");
  ASSERT_FALSE(r.is_ok());
  EXPECT_FALSE(static_cast<bool>(r));
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(r.status().message(), "no key");
}

TEST(ResultTest, MoveOnlyValue) {
  Result<std::unique_ptr<int>> r = std::make_unique<int>(7);
  ASSERT_TRUE(r);
  std::unique_ptr<int> p = std::move(r).value();
  EXPECT_EQ(*p, 7);
}

TEST(ResultTest, ArrowReachesMembers) {
  Result<std::string> r = std::string("abc");
  EXPECT_EQ(r->size(), 3u);
}

Status fails_at(int step, int at, int* reached) {
  for (int i = 0; i < step; ++i) {
    TIERKV_RETURN_IF_ERROR(i == at ? Status::io_error("step failed") : Status::ok());
    *reached = i;
  }
  return Status::ok();
}

TEST(StatusTest, ReturnIfErrorStopsAtFirstFailure) {
  int reached = -1;
  EXPECT_TRUE(fails_at(3, 99, &reached).is_ok());
  EXPECT_EQ(reached, 2);
  reached = -1;
  Status s = fails_at(5, 2, &reached);
  EXPECT_EQ(s.code(), StatusCode::kIOError);
  EXPECT_EQ(reached, 1);
}

}  // namespace
}  // namespace tierkv
