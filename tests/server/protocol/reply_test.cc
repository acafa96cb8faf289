#include "server/protocol/reply.h"

#include <gtest/gtest.h>

// GCC 12 reports a false -Wrestrict on "literal" + std::string (GCC PR 105329).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wrestrict"
#endif

#include <limits>
#include <string>
#include <vector>

#include "server/commands/command.h"
#include "store/store.h"

namespace tierkv::server {
namespace {

std::string drain(ReplyBuffer& r, size_t step = SIZE_MAX) {
  std::string out;
  while (!r.empty()) {
    std::vector<std::string_view> segs;
    r.gather(segs, 64);
    size_t budget = step;
    size_t taken = 0;
    for (std::string_view s : segs) {
      size_t n = std::min(budget, s.size());
      out.append(s.substr(0, n));
      taken += n;
      budget -= n;
      if (budget == 0) break;
    }
    r.consume(taken);
  }
  return out;
}

TEST(ReplyBufferTest, Resp2Encodings) {
  ReplyBuffer r(Proto::kResp2);
  r.simple("OK");
  r.error("ERR bad\r\nthing");
  r.error(Status::out_of_memory("full"));
  r.integer(-42);
  r.bulk("hi");
  r.null();
  r.null_array();
  r.array(2);
  r.map(1);
  r.set(3);
  r.dbl(1.5);
  r.boolean(true);
  r.verbatim("txt");
  EXPECT_EQ(r.error_count(), 2u);
  EXPECT_EQ(
      drain(r),
      "+OK\r\n-ERR bad  thing\r\n-OOM full\r\n:-42\r\n$2\r\nhi\r\n$-1\r\n*-1\r\n*2\r\n*2\r\n*3\r\n"
      "$3\r\n1.5\r\n:1\r\n$3\r\ntxt\r\n");
}

TEST(ReplyBufferTest, Resp3Encodings) {
  ReplyBuffer r(Proto::kResp3);
  r.null();
  r.null_array();
  r.map(2);
  r.set(1);
  r.dbl(0.1);
  r.dbl(-std::numeric_limits<double>::infinity());
  r.boolean(false);
  r.verbatim("abc");
  EXPECT_EQ(drain(r),
            "_\r\n_\r\n%2\r\n~1\r\n,0.10000000000000001\r\n,-inf\r\n#f\r\n=7\r\ntxt:abc\r\n");
}

TEST(ReplyBufferTest, PartialConsumeKeepsOrder) {
  ReplyBuffer r;
  for (int i = 0; i < 100; ++i) r.integer(i);
  std::string expected;
  for (int i = 0; i < 100; ++i) expected += ":" + std::to_string(i) + "\r\n";
  EXPECT_EQ(drain(r, 7), expected);
  EXPECT_EQ(r.pending_bytes(), 0u);
}

TEST(ReplyBufferTest, LargeValueIsSentFromItsChunks) {
  Config c;
  c.flash_size = 0;  // memory only: no flash file in the working directory
  c.memory = int64_t{64} << 20;
  c.chunk_size = 64 << 10;
  auto store = Store::open(c);
  ASSERT_TRUE(store.is_ok());
  std::string value(200 * 1024 + 3, 'x');
  for (size_t i = 0; i < value.size(); ++i) value[i] = static_cast<char>(i * 7);
  ASSERT_TRUE((*store)->put("k", value).is_ok());
  auto view = (*store)->get("k");
  ASSERT_TRUE(view.is_ok());
  ASSERT_EQ(view->segment_count(), 4u);

  ReplyBuffer r;
  r.bulk(*view);
  std::vector<std::string_view> segs;
  r.gather(segs, 64);
  // Header, four chunk segments pointing into the chunks themselves, CRLF.
  ASSERT_EQ(segs.size(), 6u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(segs[i + 1].data(), view->segment(i).data());
  EXPECT_EQ(r.pending_bytes(), value.size() + 2 + std::to_string(value.size()).size() + 3);
  std::string expected = "$";
  expected.append(std::to_string(value.size())).append("\r\n").append(value).append("\r\n");
  EXPECT_EQ(drain(r, 10000), expected);
}

TEST(ReplyBufferTest, SmallValueIsCopied) {
  Config c;
  c.flash_size = 0;  // memory only: no flash file in the working directory
  auto store = Store::open(c);
  ASSERT_TRUE(store.is_ok());
  ASSERT_TRUE((*store)->put("k", "small").is_ok());
  auto view = (*store)->get("k");
  ReplyBuffer r;
  r.bulk(*view);
  std::vector<std::string_view> segs;
  r.gather(segs, 64);
  EXPECT_EQ(segs.size(), 1u);
  EXPECT_EQ(drain(r), "$5\r\nsmall\r\n");
}

TEST(CommandHelpersTest, ParseInt64LikeString2ll) {
  EXPECT_EQ(parse_int64("0"), 0);
  EXPECT_EQ(parse_int64("-9223372036854775808"), INT64_MIN);
  EXPECT_EQ(parse_int64("9223372036854775807"), INT64_MAX);
  EXPECT_FALSE(parse_int64("9223372036854775808"));
  EXPECT_FALSE(parse_int64("01"));
  EXPECT_FALSE(parse_int64("+1"));
  EXPECT_FALSE(parse_int64("-0"));
  EXPECT_FALSE(parse_int64(" 1"));
  EXPECT_FALSE(parse_int64(""));
}

TEST(CommandHelpersTest, DoublesLikeRedis) {
  EXPECT_EQ(parse_double("1.5"), 1.5);
  EXPECT_FALSE(parse_double("nan"));
  EXPECT_FALSE(parse_double(" 1"));
  EXPECT_FALSE(parse_double("1e999999"));
  EXPECT_EQ(format_double(3.0), "3");
  EXPECT_EQ(format_long_double(10.5L + 0.1L), "10.6");
  EXPECT_EQ(format_long_double(-0.0L), "0");
  EXPECT_EQ(format_long_double(5e3L), "5000");
}

TEST(CommandHelpersTest, ErrorTexts) {
  Invocation inv;
  inv.argv = {"foo", "a", "b"};
  EXPECT_EQ(errors::unknown_command(inv),
            "ERR unknown command 'foo', with args beginning with: 'a' 'b' ");
  EXPECT_EQ(errors::wrong_arity("get"), "ERR wrong number of arguments for 'get' command");
  std::string long_arg(200, 'x');
  inv.argv = {"foo", long_arg, "y"};
  std::string expected = "ERR unknown command 'foo', with args beginning with: '";
  expected.append(128, 'x').append("' ");
  EXPECT_EQ(errors::unknown_command(inv), expected);
}

TEST(CommandTableTest, CaseInsensitiveLookup) {
  CommandTable t;
  t.add({"get", 2, kReadOnly, 1, 1, 1, nullptr, "get"});
  EXPECT_NE(t.find("GET"), nullptr);
  EXPECT_NE(t.find("gEt"), nullptr);
  EXPECT_EQ(t.find("gets"), nullptr);
  EXPECT_EQ(t.find(std::string(100, 'g')), nullptr);
}

TEST(ReplyBufferTest, StreamedBulkSendsLargePiecesInPlace) {
  auto owner = std::make_shared<std::string>(ReplyBuffer::kZeroCopyThreshold, 'p');
  std::weak_ptr<std::string> watch = owner;
  ReplyBuffer r;
  r.simple("before");
  uint64_t length = owner->size() + 3;
  r.bulk_header(length);
  r.bulk_piece(*owner, owner);
  r.bulk_piece("abc", nullptr);  // small: copied
  r.bulk_end();
  owner.reset();
  EXPECT_FALSE(watch.expired()) << "the queued piece keeps its bytes alive";
  std::vector<std::string_view> segs;
  r.gather(segs, 64);
  ASSERT_EQ(segs.size(), 3u);
  EXPECT_EQ(segs[1].data(), watch.lock()->data());
  std::string expected = "+before\r\n$" + std::to_string(length) + "\r\n" +
                         std::string(ReplyBuffer::kZeroCopyThreshold, 'p') + "abc\r\n";
  EXPECT_EQ(drain(r, 4096), expected);
  EXPECT_TRUE(watch.expired()) << "written pieces are released";
}

TEST(ReplyBufferTest, SpliceMovesRepliesAndErrorCounts) {
  ReplyBuffer out, held;
  out.simple("first");
  held.ok();
  held.error("ERR bad");
  out.splice(held);
  EXPECT_TRUE(held.empty());
  EXPECT_EQ(held.error_count(), 0u);
  EXPECT_EQ(out.error_count(), 1u);
  out.integer(3);
  EXPECT_EQ(drain(out), "+first\r\n+OK\r\n-ERR bad\r\n:3\r\n");
}

}  // namespace
}  // namespace tierkv::server
