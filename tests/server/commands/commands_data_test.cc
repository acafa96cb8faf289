// Data command handlers (strings, keys, TIER.*) driven directly: exact RESP bytes.
#include <gtest/gtest.h>

#include <chrono>
#include <set>
#include <string>
#include <thread>

#include "core/clock.h"
#include "tests/server/commands/command_harness.h"

namespace tierkv::server {
namespace {

using namespace std::string_literals;

struct ScanReply {
  std::string cursor;
  std::vector<std::string> keys;
};

// Parses "*2 $cursor *n $key..." (RESP2).
ScanReply parse_scan(const std::string& out) {
  size_t pos = 0;
  auto line = [&] {
    size_t end = out.find("\r\n", pos);
    std::string l = out.substr(pos, end - pos);
    pos = end + 2;
    return l;
  };
  auto bulk_string = [&] {
    size_t len = std::stoul(line().substr(1));
    std::string b = out.substr(pos, len);
    pos += len + 2;
    return b;
  };
  ScanReply r;
  EXPECT_EQ(line(), "*2");
  r.cursor = bulk_string();
  int n = std::stoi(line().substr(1));
  for (int i = 0; i < n; ++i) r.keys.push_back(bulk_string());
  EXPECT_EQ(pos, out.size());
  return r;
}

class DataCommandsTest : public ::testing::Test {
 protected:
  std::string run(const std::vector<std::string>& args) { return h_.run(args); }
  CommandHarness h_;
};

TEST_F(DataCommandsTest, GetSetBinarySafe) {
  EXPECT_EQ(run({"GET", "k"}), kNull);
  std::string key = "k\0\xff"s, value = "\0v\xff\r\n"s;
  EXPECT_EQ(run({"SET", key, value}), kOk);
  EXPECT_EQ(run({"GET", key}), bulk(value));
  EXPECT_EQ(run({"SET", "e", ""}), kOk);
  EXPECT_EQ(run({"GET", "e"}), "$0\r\n\r\n");
  EXPECT_EQ(run({"STRLEN", key}), integer(5));
  EXPECT_EQ(run({"get"}), err("ERR wrong number of arguments for 'get' command"));
}

TEST_F(DataCommandsTest, SetConditionsAndGet) {
  EXPECT_EQ(run({"SET", "k", "1", "XX"}), kNull);
  EXPECT_EQ(run({"SET", "k", "1", "NX"}), kOk);
  EXPECT_EQ(run({"SET", "k", "2", "NX"}), kNull);
  EXPECT_EQ(run({"SET", "k", "3", "NX", "GET"}), bulk("1"));
  EXPECT_EQ(run({"SET", "k", "4", "xx", "get"}), bulk("1"));
  EXPECT_EQ(run({"GET", "k"}), bulk("4"));
  EXPECT_EQ(run({"SET", "k", "v", "NX", "XX"}), err("ERR syntax error"));
  EXPECT_EQ(run({"SET", "k", "v", "EX", "1", "PX", "1"}), err("ERR syntax error"));
  EXPECT_EQ(run({"SET", "k", "v", "KEEPTTL", "EX", "1"}), err("ERR syntax error"));
  EXPECT_EQ(run({"SET", "k", "v", "EX"}), err("ERR syntax error"));
  EXPECT_EQ(run({"SET", "k", "v", "EX", "abc", "NX", "XX"}), err("ERR syntax error"));
  EXPECT_EQ(run({"SET", "k", "v", "EX", "abc"}),
            err("ERR value is not an integer or out of range"));
  EXPECT_EQ(run({"SET", "k", "v", "EX", "0"}), err("ERR invalid expire time in 'set' command"));
  EXPECT_EQ(run({"SET", "k", "v", "EX", "9223372036854775"}),
            err("ERR invalid expire time in 'set' command"));
  EXPECT_EQ(run({"SET", "k", "v", "PX", "9223372036854775807"}),
            err("ERR invalid expire time in 'set' command"));
  EXPECT_EQ(run({"GET", "k"}), bulk("4"));
}

TEST_F(DataCommandsTest, SetExpiryAndKeepTtl) {
  EXPECT_EQ(run({"SET", "k", "v", "EX", "100"}), kOk);
  EXPECT_EQ(run({"TTL", "k"}), integer(100));
  EXPECT_EQ(run({"SET", "k", "w", "KEEPTTL"}), kOk);
  EXPECT_EQ(run({"TTL", "k"}), integer(100));
  EXPECT_EQ(run({"SET", "k", "x"}), kOk);
  EXPECT_EQ(run({"TTL", "k"}), integer(-1));
  EXPECT_EQ(run({"SET", "k", "v", "PX", "30"}), kOk);
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  EXPECT_EQ(run({"GET", "k"}), kNull);
  EXPECT_EQ(run({"TTL", "k"}), integer(-2));
  EXPECT_EQ(run({"SET", "k", "v", "EXAT", "1"}), kOk);
  EXPECT_EQ(run({"EXISTS", "k"}), integer(0));
}

TEST_F(DataCommandsTest, StreamedSetCommitsTheWriter) {
  std::string value(200 * 1024, 'z');
  value[123456] = '\0';
  Result<ObjectWriter> w = h_.store().begin_put("big", value.size());
  ASSERT_TRUE(w.is_ok());
  ASSERT_TRUE(w->append(value));
  EXPECT_EQ(h_.run({"SET", "big", "", "GET"}, Proto::kResp2, &*w, 2), kNull);
  EXPECT_EQ(run({"GET", "big"}), bulk(value));
  EXPECT_EQ(run({"STRLEN", "big"}), integer(static_cast<int64_t>(value.size())));
  // With NX on a present key the streamed value is dropped.
  Result<ObjectWriter> w2 = h_.store().begin_put("big", 3);
  ASSERT_TRUE(w2.is_ok());
  ASSERT_TRUE(w2->append("abc"));
  EXPECT_EQ(h_.run({"SET", "big", "", "NX"}, Proto::kResp2, &*w2, 2), kNull);
  EXPECT_EQ(run({"STRLEN", "big"}), integer(static_cast<int64_t>(value.size())));
}

TEST_F(DataCommandsTest, GetSetGetDelGetEx) {
  EXPECT_EQ(run({"GETSET", "k", "1"}), kNull);
  EXPECT_EQ(run({"EXPIRE", "k", "100"}), integer(1));
  EXPECT_EQ(run({"GETSET", "k", "2"}), bulk("1"));
  EXPECT_EQ(run({"TTL", "k"}), integer(-1));
  EXPECT_EQ(run({"GETEX", "k", "EX", "50"}), bulk("2"));
  EXPECT_EQ(run({"TTL", "k"}), integer(50));
  EXPECT_EQ(run({"GETEX", "k", "PERSIST"}), bulk("2"));
  EXPECT_EQ(run({"TTL", "k"}), integer(-1));
  EXPECT_EQ(run({"GETEX", "k", "PERSIST", "EX", "1"}), err("ERR syntax error"));
  EXPECT_EQ(run({"GETEX", "k", "PX", "0"}), err("ERR invalid expire time in 'getex' command"));
  EXPECT_EQ(run({"GETEX", "k", "EXAT", "1"}), bulk("2"));
  EXPECT_EQ(run({"EXISTS", "k"}), integer(0));
  EXPECT_EQ(h_.store().size(), 0u);
  EXPECT_EQ(run({"SET", "d", "v"}), kOk);
  EXPECT_EQ(run({"GETDEL", "d"}), bulk("v"));
  EXPECT_EQ(run({"GETDEL", "d"}), kNull);
  EXPECT_EQ(h_.store().size(), 0u);  // no placeholder left behind
}

TEST_F(DataCommandsTest, MultiKey) {
  EXPECT_EQ(run({"MSET", "a", "1", "b", "2"}), kOk);
  EXPECT_EQ(run({"MGET", "a", "x", "b"}), cat("*3\r\n", bulk("1"), kNull, bulk("2")));
  EXPECT_EQ(run({"MSET", "a", "1", "b"}), err("ERR wrong number of arguments for 'mset' command"));
  EXPECT_EQ(run({"MSETNX", "a", "9", "c", "3"}), integer(0));
  EXPECT_EQ(run({"EXISTS", "c"}), integer(0));
  EXPECT_EQ(run({"MSETNX", "c", "1", "d", "2", "c", "3"}), integer(1));
  EXPECT_EQ(run({"MGET", "c", "d"}), cat("*2\r\n", bulk("3"), bulk("2")));
}

TEST_F(DataCommandsTest, RangesAcrossChunks) {
  // 64 KiB chunks: patch and append right at the boundaries.
  std::string v(150 * 1024, 'a');
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<char>('a' + i % 26);
  EXPECT_EQ(run({"SET", "k", v}), kOk);
  EXPECT_EQ(run({"GETRANGE", "k", "65530", "65545"}), bulk(v.substr(65530, 16)));
  EXPECT_EQ(run({"GETRANGE", "k", "-10", "-1"}), bulk(v.substr(v.size() - 10)));
  EXPECT_EQ(run({"SETRANGE", "k", "65534", "XYZW"}), integer(static_cast<int64_t>(v.size())));
  v.replace(65534, 4, "XYZW");
  EXPECT_EQ(run({"APPEND", "k", "tail"}), integer(static_cast<int64_t>(v.size() + 4)));
  v += "tail";
  EXPECT_EQ(run({"GET", "k"}), bulk(v));
  EXPECT_EQ(run({"SETRANGE", "n", "3", "x"}), integer(4));
  EXPECT_EQ(run({"GET", "n"}), bulk("\0\0\0x"s));
  EXPECT_EQ(run({"SETRANGE", "n", "-1", "x"}), err("ERR offset is out of range"));
  EXPECT_EQ(run({"SETRANGE", "n", "1099511627776", "x"}),
            err("ERR string exceeds maximum allowed size (proto-max-bulk-len)"));
  EXPECT_EQ(run({"SETRANGE", "none", "5", ""}), integer(0));
  EXPECT_EQ(run({"EXISTS", "none"}), integer(0));
}

TEST_F(DataCommandsTest, GetRangeClamping) {
  EXPECT_EQ(run({"SET", "k", "Hello"}), kOk);
  EXPECT_EQ(run({"GETRANGE", "k", "0", "-1"}), bulk("Hello"));
  EXPECT_EQ(run({"GETRANGE", "k", "-100", "1"}), bulk("He"));
  EXPECT_EQ(run({"GETRANGE", "k", "3", "1"}), bulk(""));
  EXPECT_EQ(run({"GETRANGE", "k", "-1", "-3"}), bulk(""));
  EXPECT_EQ(run({"GETRANGE", "k", "4", "100"}), bulk("o"));
  EXPECT_EQ(run({"GETRANGE", "k", "5", "100"}), bulk(""));
  EXPECT_EQ(run({"GETRANGE", "k", "-100", "-50"}), bulk("H"));  // Redis clamps both to 0
  EXPECT_EQ(run({"GETRANGE", "missing", "0", "-1"}), bulk(""));
}

TEST_F(DataCommandsTest, Counters) {
  EXPECT_EQ(run({"INCR", "n"}), integer(1));
  EXPECT_EQ(run({"INCRBY", "n", "-11"}), integer(-10));
  EXPECT_EQ(run({"DECRBY", "n", "5"}), integer(-15));
  EXPECT_EQ(run({"SET", "n", "9223372036854775807"}), kOk);
  EXPECT_EQ(run({"INCR", "n"}), err("ERR increment or decrement would overflow"));
  EXPECT_EQ(run({"DECRBY", "n", "-9223372036854775808"}), err("ERR decrement would overflow"));
  EXPECT_EQ(run({"SET", "s", " 1"}), kOk);
  EXPECT_EQ(run({"INCR", "s"}), err("ERR value is not an integer or out of range"));
  EXPECT_EQ(run({"SET", "t", "5", "EX", "100"}), kOk);
  EXPECT_EQ(run({"INCR", "t"}), integer(6));
  EXPECT_EQ(run({"TTL", "t"}), integer(100));
}

TEST_F(DataCommandsTest, IncrByFloatFormatsLikeRedis) {
  EXPECT_EQ(run({"INCRBYFLOAT", "f", "10.5"}), bulk("10.5"));
  EXPECT_EQ(run({"INCRBYFLOAT", "f", "0.1"}), bulk("10.6"));
  // Redis shows long double's representation error here too.
  EXPECT_EQ(run({"INCRBYFLOAT", "f", "5.0e3"}), bulk("5010.60000000000000009"));
  EXPECT_EQ(run({"INCRBYFLOAT", "f", "-5010.6"}), bulk("0"));
  EXPECT_EQ(run({"INCRBYFLOAT", "f", "abc"}), err("ERR value is not a valid float"));
  EXPECT_EQ(run({"INCRBYFLOAT", "f", "inf"}), err("ERR increment would produce NaN or Infinity"));
  EXPECT_EQ(run({"SET", "x", "abc"}), kOk);
  EXPECT_EQ(run({"INCRBYFLOAT", "x", "1"}), err("ERR value is not a valid float"));
}

TEST_F(DataCommandsTest, KeySpace) {
  EXPECT_EQ(run({"MSET", "a", "1", "b", "2", "c", "3"}), kOk);
  EXPECT_EQ(run({"EXISTS", "a", "a", "z"}), integer(2));
  EXPECT_EQ(run({"TOUCH", "a", "z"}), integer(1));
  EXPECT_EQ(run({"TYPE", "a"}), "+string\r\n");
  EXPECT_EQ(run({"TYPE", "z"}), "+none\r\n");
  EXPECT_EQ(run({"DEL", "a", "a", "z"}), integer(1));
  EXPECT_EQ(run({"UNLINK", "b"}), integer(1));
  EXPECT_EQ(run({"KEYS", "*"}), cat("*1\r\n", bulk("c")));
  EXPECT_EQ(run({"RANDOMKEY"}), bulk("c"));
  EXPECT_EQ(run({"DEL", "c"}), integer(1));
  EXPECT_EQ(run({"RANDOMKEY"}), kNull);
  EXPECT_EQ(run({"KEYS", "*"}), "*0\r\n");
}

TEST_F(DataCommandsTest, ExpireOptions) {
  EXPECT_EQ(run({"SET", "k", "v"}), kOk);
  EXPECT_EQ(run({"EXPIRE", "k", "100", "XX"}), integer(0));
  EXPECT_EQ(run({"EXPIRE", "k", "100", "GT"}), integer(0));
  EXPECT_EQ(run({"EXPIRE", "k", "100", "NX"}), integer(1));
  EXPECT_EQ(run({"EXPIRE", "k", "50", "GT"}), integer(0));
  EXPECT_EQ(run({"EXPIRE", "k", "50", "LT"}), integer(1));
  EXPECT_EQ(run({"TTL", "k"}), integer(50));
  EXPECT_EQ(run({"PEXPIRE", "k", "10", "FOO"}), err("ERR Unsupported option FOO"));
  EXPECT_EQ(run({"EXPIRE", "k", "10", "NX", "LT"}),
            err("ERR NX and XX, GT or LT options at the same time are not compatible"));
  EXPECT_EQ(run({"EXPIRE", "k", "10", "GT", "LT"}),
            err("ERR GT and LT options at the same time are not compatible"));
  EXPECT_EQ(run({"EXPIRE", "k", "99999999999999999"}),
            err("ERR invalid expire time in 'expire' command"));
  EXPECT_EQ(run({"PERSIST", "k"}), integer(1));
  EXPECT_EQ(run({"PERSIST", "k"}), integer(0));
  EXPECT_EQ(run({"PEXPIREAT", "k", std::to_string(unix_time_ms() + 100000)}), integer(1));
  EXPECT_EQ(run({"TTL", "k"}), integer(100));
  EXPECT_EQ(run({"EXPIRE", "k", "-1"}), integer(1));
  EXPECT_EQ(run({"EXISTS", "k"}), integer(0));
  EXPECT_EQ(run({"EXPIRE", "k", "10"}), integer(0));
}

TEST_F(DataCommandsTest, ScanVisitsEveryKeyOnce) {
  std::set<std::string> expected;
  for (int i = 0; i < 500; ++i) {
    std::string k = cat("key:", std::to_string(i));
    ASSERT_TRUE(h_.store().put(k, "v").is_ok());
    expected.insert(k);
  }
  std::set<std::string> seen;
  std::string cursor = "0";
  int calls = 0;
  do {
    ASSERT_LT(++calls, 1000);
    ScanReply page = parse_scan(run({"SCAN", cursor, "COUNT", "7"}));
    cursor = page.cursor;
    for (const std::string& k : page.keys) EXPECT_TRUE(seen.insert(k).second) << k;
  } while (cursor != "0");
  EXPECT_EQ(seen, expected);
  EXPECT_EQ(run({"SCAN", "abc"}), err("ERR invalid cursor"));
  EXPECT_EQ(run({"SCAN", "0", "COUNT", "0"}), err("ERR syntax error"));
  EXPECT_EQ(run({"SCAN", "0", "TYPE", "hash"}).substr(0, 4), "*2\r\n");
}

TEST_F(DataCommandsTest, TierStatMapInBothProtocols) {
  EXPECT_EQ(run({"TIER.STAT", "k"}), kNull);
  ASSERT_TRUE(h_.store().put("k", std::string(70 * 1024, 'x')).is_ok());
  uint64_t version = h_.store().stat("k")->version;
  // Memory only (no flash tier): every chunk is in memory and dirty.
  auto chunk = [](int index, int bytes, std::string_view map_head, std::string_view t,
                  std::string_view f) {
    return cat(map_head, bulk("index"), integer(index), bulk("bytes"), integer(bytes),
               bulk("residency"), bulk("memory"), bulk("dirty"), t, bulk("pins"), integer(0),
               bulk("leased"), f, bulk("use_once"), f);
  };
  std::string resp2 =
      cat("*12\r\n", bulk("size"), integer(70 * 1024), bulk("version"),
          integer(static_cast<int64_t>(version)), bulk("chunks"), integer(2), bulk("ttl_ms"),
          integer(-1), bulk("state"), bulk("dirty"), bulk("chunk_residency"), "*2\r\n",
          chunk(0, 65536, "*14\r\n", ":1\r\n", ":0\r\n"),
          chunk(1, 6144, "*14\r\n", ":1\r\n", ":0\r\n"));
  EXPECT_EQ(run({"TIER.STAT", "k"}), resp2);
  std::string resp3 = h_.run({"tier.stat", "k"}, Proto::kResp3);
  EXPECT_EQ(resp3.substr(0, 4), "%6\r\n");
  EXPECT_NE(resp3.find(chunk(1, 6144, "%7\r\n", "#t\r\n", "#f\r\n")), std::string::npos);
  EXPECT_EQ(h_.run({"TIER.STAT", "nope"}, Proto::kResp3), "_\r\n");
}

TEST_F(DataCommandsTest, TierExists) {
  EXPECT_EQ(run({"MSET", "a", "1", "b", "2"}), kOk);
  EXPECT_EQ(run({"TIER.EXISTS", "a", "b", "z", "a"}), integer(3));
  EXPECT_EQ(run({"TIER.EXISTS", "a", "b", "PREFETCH"}), integer(2));
  EXPECT_EQ(run({"TIER.EXISTS", "PREFETCH"}), integer(0));
  EXPECT_EQ(run({"TIER.EXISTS"}), err("ERR wrong number of arguments for 'tier.exists' command"));
}

}  // namespace
}  // namespace tierkv::server
