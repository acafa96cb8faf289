// FlashCopy: RENAME and COPY of flash-only values, flash to flash. The
// contract: the destination gets the source's bytes whole and its expiry;
// a rename is atomic for anyone who runs under the same exclusion as the
// copy's end (the server's network threads); a source overwritten during
// the copy never yields a mix of versions; conditions are judged at the
// end. Run under ThreadSanitizer with the other *_concurrent tests.
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <random>
#include <shared_mutex>
#include <thread>

#include "store/flashio/flash_value_sink.h"
#include "store/store.h"
#include "tests/store/stream/stream_test_util.h"

namespace tierkv {
namespace {

using testing::kChunk;
using testing::TempDir;
using testing::value_for;

constexpr size_t kSize = testing::kLargeValue;  // larger than half of memory

Config small_tiered(const TempDir& dir) {
  return testing::large_value_config(dir);
}

std::string tagged(char tag) {
  return testing::tagged_large_value(tag);
}

// Writes `value` past memory, as a large SET does.
void put_on_flash(Store& s, const std::string& key, const std::string& value,
                  int64_t expire_at_ms = 0) {
  Result<std::unique_ptr<FlashValueSink>> sink = s.begin_flash_value(key, value.size());
  ASSERT_TRUE(sink) << sink.status().to_string();
  size_t at = 0;
  while (at < value.size()) {
    if ((*sink)->paused()) {
      auto room = std::make_shared<std::promise<void>>();
      auto ready = room->get_future();
      (*sink)->when_room([room] { room->set_value(); });
      ready.wait();
    }
    auto [dst, space] = (*sink)->next_writable();
    size_t n = std::min(space, value.size() - at);
    std::memcpy(dst, value.data() + at, n);
    (*sink)->advance(n);
    at += n;
  }
  auto done = std::make_shared<std::promise<Result<memory::WriteResult>>>();
  auto answer = done->get_future();
  (*sink)->finish({.expire_at_ms = expire_at_ms},
                  [done](Result<memory::WriteResult> r) { done->set_value(std::move(r)); });
  Result<memory::WriteResult> r = answer.get();
  ASSERT_TRUE(r && r->written) << (r ? "not written" : r.status().to_string());
}

std::optional<std::string> read(Store& s, const std::string& key) {
  Result<ObjectView> v = s.get(key);
  if (!v) return std::nullopt;
  std::string out;
  v->append_to(out);
  return out;
}

class FlashCopyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto opened = Store::open(small_tiered(dir_));
    ASSERT_TRUE(opened) << opened.status().to_string();
    store_ = std::move(*opened);
  }
  Result<FlashCopyOutcome> copy(FlashCopyRequest request) {
    auto done = std::make_shared<std::promise<Result<FlashCopyOutcome>>>();
    auto answer = done->get_future();
    store_->copy_on_flash(
        std::move(request),
        [this](absl::FunctionRef<void()> fn) {
          std::unique_lock all(gate_);
          fn();
          return Status::ok();
        },
        [done](Result<FlashCopyOutcome> r) { done->set_value(std::move(r)); });
    return answer.get();
  }

  TempDir dir_;
  std::unique_ptr<Store> store_;
  std::shared_mutex gate_;  // as the server's ExecGate: readers shared
};

TEST_F(FlashCopyTest, CopiesBytesAndExpiryAndJudgesConditions) {
  Store& s = *store_;
  const int64_t deadline = int64_t{4} << 40;
  put_on_flash(s, "src", tagged('A'), deadline);
  put_on_flash(s, "taken", tagged('B'));
  ASSERT_TRUE(s.needs_flash("src"));

  auto r = copy({.source = "src", .destination = "taken", .if_absent = true});
  ASSERT_TRUE(r) << r.status().to_string();
  EXPECT_EQ(*r, FlashCopyOutcome::kDestinationExists);
  EXPECT_EQ(read(s, "taken"), tagged('B'));

  r = copy({.source = "src", .destination = "dup"});
  ASSERT_TRUE(r && *r == FlashCopyOutcome::kCopied);
  EXPECT_EQ(read(s, "dup"), tagged('A'));
  EXPECT_EQ(s.stat("dup")->expire_at_ms, deadline);
  EXPECT_TRUE(s.needs_flash("dup")) << "the copy went through memory";

  r = copy({.source = "src", .destination = "taken", .remove_source = true});
  ASSERT_TRUE(r && *r == FlashCopyOutcome::kCopied);
  EXPECT_FALSE(read(s, "src"));
  EXPECT_EQ(read(s, "taken"), tagged('A'));
  EXPECT_EQ(s.stat("taken")->expire_at_ms, deadline);

  r = copy({.source = "src", .destination = "x", .remove_source = true});
  ASSERT_TRUE(r);
  EXPECT_EQ(*r, FlashCopyOutcome::kNoSource);
  EXPECT_FALSE(read(s, "x"));
}

TEST_F(FlashCopyTest, RenamesAreAtomicForReadersUnderTheGate) {
  Store& s = *store_;
  put_on_flash(s, "a", tagged('A'));
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> checks{0}, bad{0};
  std::vector<std::thread> readers;
  for (int i = 0; i < 2; ++i) {
    readers.emplace_back([&] {
      while (!stop.load()) {
        std::shared_lock command(gate_);
        int present = int{s.exists("a")} + int{s.exists("b")};
        checks.fetch_add(1);
        if (present != 1) bad.fetch_add(1);
      }
    });
  }
  const char* names[] = {"a", "b"};
  for (int i = 0; i < 6; ++i) {
    auto r =
        copy({.source = names[i % 2], .destination = names[(i + 1) % 2], .remove_source = true});
    ASSERT_TRUE(r && *r == FlashCopyOutcome::kCopied) << i;
  }
  stop.store(true);
  for (auto& t : readers) t.join();
  EXPECT_EQ(bad.load(), 0u) << "of " << checks.load() << " checks";
  EXPECT_EQ(read(s, "a"), tagged('A'));
  EXPECT_FALSE(read(s, "b"));
}

TEST_F(FlashCopyTest, ASourceOverwrittenMeanwhileNeverYieldsAMix) {
  Store& s = *store_;
  const std::vector<std::string> values = {tagged('A'), tagged('B'), tagged('C')};
  put_on_flash(s, "src", values[0]);
  std::atomic<bool> stop{false};
  // A pause between rewrites leaves copies room to finish: a source
  // rewritten faster than it can be copied makes every try start again,
  // and the copy answers Busy (checked above: never a mix).
  std::thread writer([&] {
    for (int i = 1; !stop.load() && i < 40; ++i) {
      put_on_flash(s, "src", values[i % 3]);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  // While the source is rewritten a copy may also find a version in
  // memory that flash does not hold yet (kSourceInMemory); whatever it
  // answers, a copy it made is one whole value.
  for (int i = 0; i < 6; ++i) {
    auto r = copy({.source = "src", .destination = "dst"});
    if (!r) {
      EXPECT_EQ(r.status().code(), StatusCode::kBusy) << r.status().to_string();
      continue;
    }
    if (*r == FlashCopyOutcome::kSourceInMemory) continue;
    ASSERT_EQ(*r, FlashCopyOutcome::kCopied);
    std::optional<std::string> got = read(s, "dst");
    ASSERT_TRUE(got);
    EXPECT_NE(std::find(values.begin(), values.end(), *got), values.end()) << "a torn copy";
  }
  stop.store(true);
  writer.join();
  // The source at rest on flash: the copy is made, and is its last value.
  const std::optional<std::string> last = read(s, "src");
  ASSERT_TRUE(last);
  auto r = copy({.source = "src", .destination = "dst"});
  ASSERT_TRUE(r) << r.status().to_string();
  if (*r == FlashCopyOutcome::kSourceInMemory) {  // the read above promoted it
    ASSERT_TRUE(s.persist_all().is_ok());
    r = copy({.source = "src", .destination = "dst"});
    ASSERT_TRUE(r) << r.status().to_string();
  }
  ASSERT_EQ(*r, FlashCopyOutcome::kCopied);
  EXPECT_EQ(read(s, "dst"), last);
}

}  // namespace
}  // namespace tierkv
