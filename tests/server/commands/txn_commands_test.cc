// MULTI/EXEC/WATCH and RENAME/COPY handlers, driven through the command
// harness with client states that last across commands.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "tests/server/commands/command_harness.h"

namespace tierkv::server {
namespace {

const std::string kQueued = "+QUEUED\r\n";

class TxnCommandsTest : public ::testing::Test {
 protected:
  std::string run(const std::vector<std::string>& args) { return h_.run_as(a_, args); }
  std::string run_b(const std::vector<std::string>& args) { return h_.run_as(b_, args); }
  CommandHarness h_;
  ClientState a_, b_;
};

TEST_F(TxnCommandsTest, QueuesThenRunsInOrder) {
  EXPECT_EQ(run({"MULTI"}), kOk);
  EXPECT_EQ(run({"SET", "k", "1"}), kQueued);
  EXPECT_EQ(run({"INCRBY", "k", "41"}), kQueued);
  EXPECT_EQ(run({"GET", "k"}), kQueued);
  EXPECT_EQ(run_b({"GET", "k"}), kNull);  // nothing ran yet
  EXPECT_EQ(run({"EXEC"}), cat("*3\r\n", kOk, integer(42), bulk("42")));
  EXPECT_FALSE(a_.txn.in_multi);
  EXPECT_EQ(run({"EXEC"}), err("ERR EXEC without MULTI"));
}

TEST_F(TxnCommandsTest, QueuingErrorAbortsAndRunsNothing) {
  EXPECT_EQ(run({"MULTI"}), kOk);
  EXPECT_EQ(run({"SET", "k", "1"}), kQueued);
  EXPECT_EQ(run({"GET"}), err("ERR wrong number of arguments for 'get' command"));
  EXPECT_TRUE(a_.txn.dirty);
  EXPECT_EQ(run({"EXEC"}), err(kExecAbort));
  EXPECT_EQ(run({"EXISTS", "k"}), integer(0));
  EXPECT_FALSE(a_.txn.in_multi);
}

TEST_F(TxnCommandsTest, RuntimeErrorsStayInTheirSlot) {
  EXPECT_EQ(run({"SET", "s", "abc"}), kOk);
  EXPECT_EQ(run({"MULTI"}), kOk);
  EXPECT_EQ(run({"INCR", "s"}), kQueued);
  EXPECT_EQ(run({"SET", "t", "1"}), kQueued);
  EXPECT_EQ(run({"EXEC"}), cat("*2\r\n", err(errors::kNotInteger), kOk));
}

TEST_F(TxnCommandsTest, WatchAbortsOnEveryKindOfChange) {
  const std::vector<std::vector<std::string>> changes = {
      {"SET", "k", "1"},    {"DEL", "k"},         {"EXPIRE", "k", "100"},
      {"APPEND", "k", "x"}, {"RENAME", "k", "z"}, {"MSET", "k", "2", "y", "3"}};
  for (const auto& change : changes) {
    SCOPED_TRACE(change[0]);
    EXPECT_EQ(run({"SET", "k", "1"}), kOk);
    EXPECT_EQ(run({"WATCH", "k"}), kOk);
    run_b(change);
    EXPECT_EQ(run({"MULTI"}), kOk);
    EXPECT_EQ(run({"SET", "done", "1"}), kQueued);
    EXPECT_EQ(run({"EXEC"}), "*-1\r\n");
    EXPECT_TRUE(a_.txn.watched.empty());
    EXPECT_EQ(run({"EXISTS", "done"}), integer(0));
  }
}

TEST_F(TxnCommandsTest, WatchHoldsWhenNothingChanged) {
  EXPECT_EQ(run({"SET", "k", "1"}), kOk);
  EXPECT_EQ(run({"WATCH", "k", "absent"}), kOk);
  EXPECT_EQ(run_b({"GET", "k"}), bulk("1"));
  EXPECT_EQ(run_b({"SETNX", "k", "2"}), integer(0));
  EXPECT_EQ(run_b({"PERSIST", "k"}), integer(0));
  EXPECT_EQ(run({"MULTI"}), kOk);
  EXPECT_EQ(run({"GET", "k"}), kQueued);
  EXPECT_EQ(run({"EXEC"}), cat("*1\r\n", bulk("1")));
}

TEST_F(TxnCommandsTest, WatchedKeyThatExpiresAborts) {
  EXPECT_EQ(run({"SET", "k", "1", "PX", "30"}), kOk);
  EXPECT_EQ(run({"WATCH", "k"}), kOk);
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  EXPECT_EQ(run({"MULTI"}), kOk);
  EXPECT_EQ(run({"EXEC"}), "*-1\r\n");
}

TEST_F(TxnCommandsTest, ControlErrorsAndDiscard) {
  EXPECT_EQ(run({"DISCARD"}), err("ERR DISCARD without MULTI"));
  EXPECT_EQ(run({"MULTI"}), kOk);
  EXPECT_EQ(run({"MULTI"}), err("ERR MULTI calls can not be nested"));
  EXPECT_EQ(run({"WATCH", "k"}), err("ERR WATCH inside MULTI is not allowed"));
  EXPECT_FALSE(a_.txn.dirty);  // as Redis: these do not abort the transaction
  EXPECT_EQ(run({"SET", "k", "1"}), kQueued);
  EXPECT_EQ(run({"DISCARD"}), kOk);
  EXPECT_EQ(run({"EXISTS", "k"}), integer(0));
}

TEST_F(TxnCommandsTest, ValueKeysAreThoseOfReadingCommands) {
  EXPECT_EQ(run({"MULTI"}), kOk);
  run({"SET", "w1", "x"});
  run({"GET", "r1"});
  run({"MGET", "r2", "r1"});
  run({"APPEND", "r3", "x"});
  run({"SET", "r4", "x", "GET"});
  run({"RENAME", "r5", "w2"});
  run({"EXISTS", "w3"});
  std::vector<std::string_view> keys = txn_value_keys(a_.txn);
  EXPECT_EQ(keys, (std::vector<std::string_view>{"r1", "r2", "r3", "r4", "r5"}));
  a_.txn.dirty = true;
  EXPECT_TRUE(txn_value_keys(a_.txn).empty());  // a dirty EXEC fetches nothing
}

TEST_F(TxnCommandsTest, RenameMovesValueAndTtl) {
  EXPECT_EQ(run({"RENAME", "a", "b"}), err("ERR no such key"));
  EXPECT_EQ(run({"SET", "a", "v", "EX", "100"}), kOk);
  EXPECT_EQ(run({"SET", "b", "old"}), kOk);
  EXPECT_EQ(run({"RENAME", "a", "b"}), kOk);
  EXPECT_EQ(run({"GET", "b"}), bulk("v"));
  EXPECT_EQ(run({"TTL", "b"}), integer(100));
  EXPECT_EQ(run({"EXISTS", "a"}), integer(0));
  EXPECT_EQ(run({"RENAME", "b", "b"}), kOk);
  EXPECT_EQ(run({"RENAMENX", "b", "b"}), integer(0));
  EXPECT_EQ(run({"SET", "c", "x"}), kOk);
  EXPECT_EQ(run({"RENAMENX", "b", "c"}), integer(0));
  EXPECT_EQ(run({"RENAMENX", "b", "d"}), integer(1));
  EXPECT_EQ(run({"GET", "d"}), bulk("v"));
}

TEST_F(TxnCommandsTest, CopyOptionsAndTtl) {
  EXPECT_EQ(run({"SET", "s", "v", "PX", "100000"}), kOk);
  EXPECT_EQ(run({"COPY", "s", "s"}), err("ERR source and destination objects are the same"));
  EXPECT_EQ(run({"COPY", "s", "d", "DB", "1"}), err("ERR DB index is out of range"));
  EXPECT_EQ(run({"COPY", "s", "d", "DB", "x"}), err(errors::kNotInteger));
  EXPECT_EQ(run({"COPY", "s", "d", "BOGUS"}), err(errors::kSyntax));
  EXPECT_EQ(run({"COPY", "missing", "d"}), integer(0));
  EXPECT_EQ(run({"COPY", "s", "d", "DB", "0"}), integer(1));
  EXPECT_EQ(run({"COPY", "s", "d"}), integer(0));
  EXPECT_EQ(run({"SET", "s", "w"}), kOk);
  EXPECT_EQ(run({"COPY", "s", "d", "REPLACE"}), integer(1));
  EXPECT_EQ(run({"GET", "d"}), bulk("w"));
  EXPECT_EQ(run({"TTL", "d"}), integer(-1));
  EXPECT_EQ(run({"GET", "s"}), bulk("w"));
}

TEST_F(TxnCommandsTest, RenameOfMultiChunkValue) {
  std::string value(300 * 1024 + 7, 'q');  // several 64 KiB chunks
  value[200000] = 'x';
  ASSERT_TRUE(h_.store().put("big", value).is_ok());
  EXPECT_EQ(run({"RENAME", "big", "moved"}), kOk);
  EXPECT_EQ(run({"GET", "moved"}), bulk(value));
  EXPECT_EQ(run({"COPY", "moved", "copy"}), integer(1));
  EXPECT_EQ(run({"GET", "copy"}), bulk(value));
}

}  // namespace
}  // namespace tierkv::server
