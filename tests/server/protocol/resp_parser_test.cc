#include "server/protocol/resp_parser.h"

#include <gtest/gtest.h>

// GCC 12 reports a false -Wrestrict on "literal" + std::string (GCC PR 105329).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wrestrict"
#endif

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "store/store.h"

namespace tierkv::server {
namespace {

using Args = std::vector<std::string>;

void feed(RespParser& p, std::string_view data) {
  while (!data.empty()) {
    std::span<char> span = p.prepare();
    size_t n = std::min(span.size(), data.size());
    std::memcpy(span.data(), data.data(), n);
    p.commit(n);
    data.remove_prefix(n);
  }
}

struct Drained {
  std::vector<Args> commands;
  std::string error;
};

// Runs next() until it needs more input; large values are buffered.
void drain(RespParser& p, Drained& out) {
  for (;;) {
    switch (p.next()) {
      case RespParser::Event::kNeedMore:
        return;
      case RespParser::Event::kLargeValue:
        p.buffer();
        break;
      case RespParser::Event::kError:
        out.error = p.error();
        return;
      case RespParser::Event::kCommand:
        out.commands.emplace_back(p.argv().begin(), p.argv().end());
        break;
    }
  }
}

Drained parse_all(std::string_view data, RespParser::Limits limits = {}) {
  RespParser p;
  p.set_limits(limits);
  feed(p, data);
  Drained d;
  drain(p, d);
  return d;
}

// Feeds one byte at a time, parsing after each: every split point is hit.
Drained parse_bytewise(std::string_view data) {
  RespParser p;
  Drained d;
  for (char c : data) {
    feed(p, std::string_view(&c, 1));
    drain(p, d);
    if (!d.error.empty()) break;
  }
  return d;
}

std::string multibulk(const Args& args) {
  std::string out = "*" + std::to_string(args.size()) + "\r\n";
  for (const std::string& a : args) out += "$" + std::to_string(a.size()) + "\r\n" + a + "\r\n";
  return out;
}

TEST(RespParserTest, MultibulkCommand) {
  Drained d = parse_all(multibulk({"SET", "key", "value"}));
  ASSERT_EQ(d.commands.size(), 1u);
  EXPECT_EQ(d.commands[0], (Args{"SET", "key", "value"}));
  EXPECT_TRUE(d.error.empty());
}

TEST(RespParserTest, BinarySafeArguments) {
  std::string bin("a\0b\r\nc", 6);
  Drained d = parse_all(multibulk({"SET", bin, ""}));
  ASSERT_EQ(d.commands.size(), 1u);
  EXPECT_EQ(d.commands[0][1], bin);
  EXPECT_EQ(d.commands[0][2], "");
}

TEST(RespParserTest, PipelineOfManyCommandsInOneBuffer) {
  std::string data;
  for (int i = 0; i < 1000; ++i) data += multibulk({"GET", "k" + std::to_string(i)});
  Drained d = parse_all(data);
  ASSERT_EQ(d.commands.size(), 1000u);
  EXPECT_EQ(d.commands[999], (Args{"GET", "k999"}));
}

TEST(RespParserTest, EveryByteSplitGivesTheSameCommands) {
  std::string data = multibulk({"SET", "key", std::string(300, 'x')}) + "PING\r\n" +
                     multibulk({"ECHO", ""}) + "set a \"b c\"\n";
  Drained whole = parse_all(data);
  Drained bytewise = parse_bytewise(data);
  ASSERT_EQ(whole.commands.size(), 4u);
  EXPECT_EQ(whole.commands, bytewise.commands);
  EXPECT_EQ(whole.commands[3], (Args{"set", "a", "b c"}));
}

TEST(RespParserTest, InlineCommandsAndQuoting) {
  Drained d = parse_all("PING\r\nset k v\nECHO \"a\\x41\\n\" 'it\\'s'\r\n\r\n   \r\nGET x\r\n");
  ASSERT_EQ(d.commands.size(), 4u);
  EXPECT_EQ(d.commands[0], (Args{"PING"}));
  EXPECT_EQ(d.commands[1], (Args{"set", "k", "v"}));
  EXPECT_EQ(d.commands[2], (Args{"ECHO", "aA\n", "it's"}));
  EXPECT_EQ(d.commands[3], (Args{"GET", "x"}));
}

TEST(RespParserTest, EmptyMultibulkIsSkipped) {
  Drained d = parse_all("*0\r\n*-1\r\n" + multibulk({"PING"}));
  ASSERT_EQ(d.commands.size(), 1u);
  EXPECT_EQ(d.commands[0], (Args{"PING"}));
}

TEST(RespParserTest, ProtocolErrorsUseRedisTexts) {
  EXPECT_EQ(parse_all("*abc\r\n").error, "ERR Protocol error: invalid multibulk length");
  EXPECT_EQ(parse_all("*1\r\n$-3\r\n").error, "ERR Protocol error: invalid bulk length");
  EXPECT_EQ(parse_all("*1\r\n$x\r\n").error, "ERR Protocol error: invalid bulk length");
  EXPECT_EQ(parse_all("*1\r\nfoo\r\n").error, "ERR Protocol error: expected '$', got 'f'");
  EXPECT_EQ(parse_all("SET a \"b\r\n").error, "ERR Protocol error: unbalanced quotes in request");
  EXPECT_EQ(parse_all("SET a \"b\"c\r\n").error,
            "ERR Protocol error: unbalanced quotes in request");
  EXPECT_EQ(parse_all(std::string(70 * 1024, 'a')).error,
            "ERR Protocol error: too big inline request");
  EXPECT_EQ(parse_all("*" + std::string(70 * 1024, '1')).error,
            "ERR Protocol error: too big mbulk count string");
  EXPECT_EQ(parse_all("*1\r\n$" + std::string(70 * 1024, '1')).error,
            "ERR Protocol error: too big bulk count string");
}

TEST(RespParserTest, CommandsBeforeAnErrorStillComeOut) {
  Drained d = parse_all(multibulk({"PING"}) + "*1\r\n!\r\n");
  ASSERT_EQ(d.commands.size(), 1u);
  EXPECT_EQ(d.error, "ERR Protocol error: expected '$', got '!'");
}

TEST(RespParserTest, ConfiguredLimits) {
  RespParser::Limits small;
  small.max_bulk_len = 10;
  small.max_multibulk_args = 3;
  small.max_inline_len = 16;
  EXPECT_EQ(parse_all(multibulk({"SET", "k", std::string(11, 'v')}), small).error,
            "ERR Protocol error: invalid bulk length");
  EXPECT_TRUE(parse_all(multibulk({"SET", "k", std::string(10, 'v')}), small).error.empty());
  EXPECT_EQ(parse_all(multibulk({"A", "B", "C", "D"}), small).error,
            "ERR Protocol error: invalid multibulk length");
  EXPECT_EQ(parse_all(std::string(17, 'a'), small).error,
            "ERR Protocol error: too big inline request");
}

TEST(RespParserTest, UnauthenticatedClientsGetSmallLimits) {
  RespParser::Limits unauth;
  unauth.unauthenticated = true;
  EXPECT_EQ(parse_all("*11\r\n", unauth).error,
            "ERR Protocol error: unauthenticated multibulk length");
  EXPECT_EQ(parse_all("*2\r\n$4\r\nAUTH\r\n$16385\r\n", unauth).error,
            "ERR Protocol error: unauthenticated bulk length");
  EXPECT_TRUE(parse_all(multibulk({"AUTH", "secret"}), unauth).error.empty());
}

TEST(RespParserTest, LargeArgumentBufferedWhenNotStreamed) {
  std::string big(200 * 1024, 'z');
  Drained d = parse_bytewise(multibulk({"ECHO", big}));
  ASSERT_EQ(d.commands.size(), 1u);
  EXPECT_EQ(d.commands[0][1], big);
}

TEST(RespParserTest, BufferShrinksAfterALargeArgument) {
  RespParser p;
  feed(p, multibulk({"ECHO", std::string(1 << 20, 'q')}));
  Drained d;
  drain(p, d);
  ASSERT_EQ(d.commands.size(), 1u);
  EXPECT_GE(p.capacity(), size_t{1} << 20);
  p.prepare();
  EXPECT_LE(p.capacity(), size_t{64} << 10);
}

TEST(RespParserTest, AnnouncedHugeBulkIsNotAllocatedUpFront) {
  RespParser p;
  feed(p, "*2\r\n$4\r\nECHO\r\n$500000000\r\n" + std::string(100, 'x'));
  Drained d;
  drain(p, d);
  EXPECT_TRUE(d.commands.empty());
  EXPECT_TRUE(d.error.empty());
  std::span<char> room = p.prepare();
  EXPECT_LE(room.size(), size_t{2} << 20);
  EXPECT_LE(p.capacity(), size_t{4} << 20);
}

class StreamingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Config c;
    c.flash_size = 0;  // memory only: no flash file in the working directory
    c.memory = int64_t{64} << 20;
    c.chunk_size = 64 << 10;
    auto s = Store::open(c);
    ASSERT_TRUE(s.is_ok()) << s.status().to_string();
    store_ = std::move(s).value();
  }
  std::unique_ptr<Store> store_;
};

// Streams SET's value into a writer, in pieces, partly from buffered bytes
// and partly via direct reads, then checks the committed value and the
// arguments that followed it.
TEST_F(StreamingTest, ValueGoesStraightIntoTheWriter) {
  std::string value(300 * 1024 + 7, '\0');
  for (size_t i = 0; i < value.size(); ++i) value[i] = static_cast<char>('a' + i % 26);
  std::string wire = multibulk({"SET", "big", value, "EX", "100"}) + multibulk({"PING"});

  RespParser p;
  std::optional<ObjectWriter> writer;
  std::vector<Args> commands;
  size_t pos = 0, direct_bytes = 0;
  Drained d;
  while (pos < wire.size() || commands.size() < 2) {
    for (bool more = true; more;) {
      switch (p.next()) {
        case RespParser::Event::kNeedMore:
          more = false;
          break;
        case RespParser::Event::kError:
          FAIL() << p.error();
        case RespParser::Event::kLargeValue: {
          ASSERT_EQ(p.large_index(), 2u);
          ASSERT_EQ(p.large_length(), value.size());
          auto w = store_->begin_put(p.argv()[1], p.large_length());
          ASSERT_TRUE(w.is_ok());
          writer.emplace(std::move(*w));
          p.stream_into(&*writer);
          break;
        }
        case RespParser::Event::kCommand:
          commands.emplace_back(p.argv().begin(), p.argv().end());
          break;
      }
    }
    if (pos >= wire.size()) break;
    // Uneven read sizes, like a socket.
    size_t chunk = 1000 + (pos % 7) * 3000;
    std::span<char> span = p.wants_direct() ? p.direct_span() : p.prepare();
    size_t n = std::min({chunk, span.size(), wire.size() - pos});
    std::memcpy(span.data(), wire.data() + pos, n);
    if (p.wants_direct()) {
      p.direct_commit(n);
      direct_bytes += n;
    } else {
      p.commit(n);
    }
    pos += n;
  }
  ASSERT_EQ(commands.size(), 2u);
  EXPECT_EQ(commands[0], (Args{"SET", "big", "", "EX", "100"}));
  EXPECT_EQ(commands[1], (Args{"PING"}));
  EXPECT_GT(direct_bytes, value.size() / 2) << "most of the value should skip the buffer";
  EXPECT_LE(p.capacity(), size_t{64} << 10) << "the input buffer never held the value";
  ASSERT_TRUE(writer.has_value());
  EXPECT_EQ(writer->filled(), value.size());
  ASSERT_TRUE(store_->commit(std::move(*writer)).is_ok());
  auto got = store_->get("big");
  ASSERT_TRUE(got.is_ok());
  EXPECT_EQ(got->to_string(), value);
}

TEST_F(StreamingTest, DiscardedValueIsSkippedAndArgumentsAfterItSurvive) {
  std::string value(500 * 1024, 'v');
  std::string wire = multibulk({"SET", "k", value, "NX"}) + multibulk({"GET", "k"});
  RespParser p;
  std::vector<Args> commands;
  bool discarded = false;
  for (size_t pos = 0; pos < wire.size();) {
    size_t n = std::min<size_t>(4096, wire.size() - pos);
    feed(p, std::string_view(wire).substr(pos, n));
    pos += n;
    for (bool more = true; more;) {
      switch (p.next()) {
        case RespParser::Event::kNeedMore:
          more = false;
          break;
        case RespParser::Event::kError:
          FAIL() << p.error();
        case RespParser::Event::kLargeValue:
          p.discard();
          discarded = true;
          break;
        case RespParser::Event::kCommand:
          commands.emplace_back(p.argv().begin(), p.argv().end());
          EXPECT_EQ(p.value_discarded(), commands.size() == 1);
          break;
      }
    }
  }
  EXPECT_TRUE(discarded);
  ASSERT_EQ(commands.size(), 2u);
  EXPECT_EQ(commands[0], (Args{"SET", "k", "", "NX"}));
  EXPECT_EQ(commands[1], (Args{"GET", "k"}));
  EXPECT_LE(p.capacity(), size_t{64} << 10);
}

TEST(SplitInlineArgsTest, RedisQuotingRules) {
  std::vector<std::string> out;
  ASSERT_TRUE(split_inline_args("  a  b\t c ", out));
  EXPECT_EQ(out, (Args{"a", "b", "c"}));
  ASSERT_TRUE(split_inline_args("\"\\t\\r\\x4a\\q\" ''", out));
  EXPECT_EQ(out, (Args{"\t\rJq", ""}));
  EXPECT_FALSE(split_inline_args("'abc", out));
  EXPECT_FALSE(split_inline_args("'a'b", out));
  ASSERT_TRUE(split_inline_args("", out));
  EXPECT_TRUE(out.empty());
}

}  // namespace
}  // namespace tierkv::server
