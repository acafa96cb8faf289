// The Store's part of the trust contract: deleted, expired and overwritten
// data never comes back, across the tiers and across restarts. Each test is
// one finding of the trust issue and failed before its fix.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <future>
#include <map>
#include <random>
#include <thread>

#include "core/clock.h"
#include "flash/flash_tier.h"
#include "flash/record.h"
#include "store/store.h"
#include "store/store_tiers.h"
#include "tests/store/store_test_util.h"

namespace tierkv {
namespace {

using testing::TempDir;
using testing::value_for;

// Holds the flash tier's io_uring completion thread (its only one) inside the
// callback of a write of its own. Every write submitted meanwhile reaches the
// device, but lands for the store (indexed, its callback run) only when the
// gate opens: a copy stays "in flight" exactly as long as the test wants.
// With the thread pool another worker would reap the landings, so the tests
// that need it skip there.
class CompletionGate {
 public:
  static bool usable(Store& store) {
    return StoreTiers::flash(store) && StoreTiers::flash(store)->io_backend() == "io_uring";
  }
  explicit CompletionGate(flash::FlashTier& flash) {
    auto entered = std::make_shared<std::promise<void>>();
    std::future<void> in = entered->get_future();
    Status st = flash.write_chunk({.key = "gate", .version = 1, .data = std::string(4096, 'g')},
                                  [entered, opened = opened_](Status) {
                                    entered->set_value();
                                    opened.wait();
                                  });
    EXPECT_TRUE(st.is_ok()) << st.to_string();
    held_ = st.is_ok() && in.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
    EXPECT_TRUE(held_) << "the gate write never landed";
  }
  bool held() const { return held_; }
  void open() {
    if (!open_) release_.set_value();
    open_ = true;
  }
  // However the test leaves its scope: the store's destructor waits for the
  // completion thread.
  ~CompletionGate() { open(); }

 private:
  std::promise<void> release_;
  std::shared_future<void> opened_ = release_.get_future().share();
  bool open_ = false;
  bool held_ = false;
};

// While alive, every write this process makes at or past `limit` bytes into
// any file fails (RLIMIT_FSIZE: EFBIG), as writes to a failing device do;
// SIGXFSZ is ignored meanwhile. The flash log only appends, so a limit at
// its current end fails every later write and none before.
class WritesFailFrom {
 public:
  explicit WritesFailFrom(uint64_t limit) {
    old_handler_ = std::signal(SIGXFSZ, SIG_IGN);
    ::getrlimit(RLIMIT_FSIZE, &old_);
    rlimit now = old_;
    now.rlim_cur = limit;
    ok_ = ::setrlimit(RLIMIT_FSIZE, &now) == 0;
  }
  ~WritesFailFrom() {
    ::setrlimit(RLIMIT_FSIZE, &old_);
    std::signal(SIGXFSZ, old_handler_);
  }
  bool ok() const { return ok_; }

 private:
  rlimit old_{};
  void (*old_handler_)(int) = SIG_DFL;
  bool ok_ = false;
};

class StoreTrustTest : public ::testing::Test {
 protected:
  Config config(OffloadPolicy offload = OffloadPolicy::kOnEvict) const {
    Config c;
    c.memory = 8 << 20;
    c.chunk_size = 64 << 10;
    c.memory_shards = 4;
    c.active_expire_hz = 0;
    c.flash_path = dir_.file("flash.dat");
    c.flash_size = 128 << 20;
    c.region_size = 1 << 20;
    c.flash_preallocate = false;
    c.offload_policy = offload;
    return c;
  }
  std::unique_ptr<Store> open(const Config& c) {
    auto s = Store::open(c);
    EXPECT_TRUE(s) << s.status().to_string();
    return s ? std::move(*s) : nullptr;
  }
  // Pushes everything written so far out of the 8 MiB memory.
  void push_out(Store& store, int round) {
    for (int i = 0; i < 24; ++i)
      ASSERT_TRUE(store.put("filler:" + std::to_string(round) + ":" + std::to_string(i),
                            value_for(i, 1 << 20)));
    StoreTiers::flash(store)->flush();
  }
  void change_expiry_while_the_copy_is_in_flight(int64_t written_with, int64_t changed_to);
  // Clean shutdown and restart, as SHUTDOWN does it.
  std::unique_ptr<Store> restart(std::unique_ptr<Store> store, const Config& c) {
    EXPECT_TRUE(store->close_cleanly().is_ok());
    store.reset();
    return open(c);
  }

  TempDir dir_;
};

// Finding 1 and the first report: an overwrite wrote no tombstone
// and a later DEL found nothing to remove, so the old value came back.
TEST_F(StoreTrustTest, OverwriteThenDeleteStaysDeletedAfterRestart) {
  const Config c = config();
  auto store = open(c);
  ASSERT_TRUE(store->put("k", value_for(1, 4 << 20)));
  ASSERT_TRUE(store->put("kept", value_for(2, 4 << 20)));
  push_out(*store, 0);
  ASSERT_EQ(store->residency("k")->state, "flash");
  ASSERT_TRUE(store->put("k", "small"));
  ASSERT_TRUE(store->put("kept", "new"));
  EXPECT_TRUE(store->remove("k"));
  store = restart(std::move(store), c);
  EXPECT_EQ(store->get("k").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store->get("kept")->to_string(), "new");
  // Overwritten, pushed out again, restarted: still the newest value.
  push_out(*store, 1);
  store = restart(std::move(store), c);
  EXPECT_EQ(store->get("kept")->to_string(), "new");
  EXPECT_EQ(store->get("k").status().code(), StatusCode::kNotFound);
}

// Finding 2: an expiry change while the key's copy is being written must
// reach the flash copy, which otherwise lands with the old expiry and
// serves the key without a TTL once the memory copy is gone.
TEST_F(StoreTrustTest, ExpiryChangedWhileTheCopyIsWrittenReachesFlash) {
  const Config c = config(OffloadPolicy::kWriteThrough);
  auto store = open(c);
  const int64_t later = unix_time_ms() + 3'600'000;
  for (int i = 0; i < 40; ++i) {
    const std::string key = "t" + std::to_string(i);
    ASSERT_TRUE(store->put(key, value_for(i, 256 << 10)));  // its copy starts now
    ASSERT_TRUE(store->set_expiry(key, later + i));
  }
  push_out(*store, 0);
  for (int i = 0; i < 40; ++i) {
    const std::string key = "t" + std::to_string(i);
    std::optional<ObjectResidency> r = store->residency(key);
    ASSERT_TRUE(r) << key;
    EXPECT_EQ(r->expire_at_ms, later + i) << key << " state " << r->state;
  }
  store = restart(std::move(store), c);
  for (int i = 0; i < 40; ++i) {
    const std::string key = "t" + std::to_string(i);
    std::optional<ObjectInfo> info = store->stat(key);
    ASSERT_TRUE(info) << key;
    EXPECT_EQ(info->expire_at_ms, later + i) << key;
  }
}

// Finding 3: v1's write in flight during SET v2 was indexed when it landed;
// once v2 (which never reached flash) expired, GET served v1.
TEST_F(StoreTrustTest, OlderVersionLandingLateIsNeverServed) {
  const Config c = config();
  auto store = open(c);
  const int n = 40;
  std::vector<std::future<Status>> landed;
  for (int i = 0; i < n; ++i) {
    const std::string key = "v" + std::to_string(i);
    Result<WriteResult> v1 = store->put(key, value_for(i, 256 << 10));
    ASSERT_TRUE(v1);
    auto done = std::make_shared<std::promise<Status>>();
    landed.push_back(done->get_future());
    store->persist(key, v1->version, [done](Status s) { done->set_value(s); });  // in flight
    WriteOptions short_ttl;
    short_ttl.expire_at_ms = unix_time_ms() + 150;
    ASSERT_TRUE(store->put(key, "v2", short_ttl));  // stays in memory, dirty
  }
  for (auto& f : landed) EXPECT_TRUE(f.get().is_ok());
  const int64_t deadline = unix_time_ms() + 5000;
  while (unix_time_ms() < deadline) {
    bool any = false;
    for (int i = 0; i < n; ++i) any = any || store->get("v" + std::to_string(i)).is_ok();
    if (!any) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (int i = 0; i < n; ++i) {
    Result<ObjectView> v = store->get("v" + std::to_string(i));
    EXPECT_FALSE(v.is_ok()) << "v" << i << " came back: " << v->to_string().size() << " bytes";
  }
  EXPECT_EQ(store->size(), 0u);
  store = restart(std::move(store), c);
  for (int i = 0; i < n; ++i) EXPECT_FALSE(store->get("v" + std::to_string(i)).is_ok()) << i;
}

// An object that expires in memory while its flash copy carries no expiry
// (written before an EXPIRE reached it) must not come back from flash.
TEST_F(StoreTrustTest, ExpiredInMemoryNeverServedFromFlash) {
  const Config c = config(OffloadPolicy::kWriteThrough);
  auto store = open(c);
  for (int i = 0; i < 40; ++i) {
    const std::string key = "e" + std::to_string(i);
    ASSERT_TRUE(store->put(key, value_for(i, 128 << 10)));
    ASSERT_TRUE(store->set_expiry(key, unix_time_ms() + 100));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  for (int i = 0; i < 40; ++i) EXPECT_FALSE(store->get("e" + std::to_string(i)).is_ok()) << i;
  push_out(*store, 0);
  for (int i = 0; i < 40; ++i) EXPECT_FALSE(store->get("e" + std::to_string(i)).is_ok()) << i;
  store = restart(std::move(store), c);
  for (int i = 0; i < 40; ++i) EXPECT_FALSE(store->get("e" + std::to_string(i)).is_ok()) << i;
}

// Finding 6's race in memory: writers and a remover on the same keys;
// whatever memory holds at the end must be exactly what a restart finds.
// The values are small and stay in memory, so no DEL here writes a
// tombstone: this does not reach the bug itself (it passes without the
// fix); SetPublishedWhileDeleteOfAFlashCopyRunsSurvivesRestart does.
TEST_F(StoreTrustTest, ConcurrentSetSurvivesADeleteItRacedWith) {
  const Config c = config();
  auto store = open(c);
  const int keys = 16, rounds = 2000;
  std::atomic<bool> stop{false};
  std::thread remover([&] {
    std::mt19937 rng(7);
    while (!stop.load()) store->remove("r" + std::to_string(rng() % keys));
  });
  for (int round = 0; round < rounds; ++round) {
    for (int k = 0; k < keys; ++k) {
      ASSERT_TRUE(store->put("r" + std::to_string(k), std::to_string(round)));
    }
  }
  stop = true;
  remover.join();
  std::map<std::string, std::string> expected;
  for (int k = 0; k < keys; ++k) {
    Result<ObjectView> v = store->get("r" + std::to_string(k));
    if (v) expected["r" + std::to_string(k)] = v->to_string();
  }
  store = restart(std::move(store), c);
  for (int k = 0; k < keys; ++k) {
    const std::string key = "r" + std::to_string(k);
    Result<ObjectView> v = store->get(key);
    auto want = expected.find(key);
    if (want == expected.end()) {
      EXPECT_FALSE(v.is_ok()) << key;
    } else {
      ASSERT_TRUE(v.is_ok()) << key << " lost at restart";
      EXPECT_EQ(v->to_string(), want->second) << key;
    }
  }
}

// Finding 6 with the key on flash, so that DEL has a tombstone to write:
// SET of the key is published the moment DEL has taken it out of memory,
// while DEL still chooses the version its tombstone covers. A tombstone up
// to the global newest version covered that SET, which then vanished at the
// restart; it must cover only what DEL removed. Where the SET falls relative
// to that choice is the scheduler's (DEL frees the removed value's 128
// chunks of 4 KiB in between, which leaves the setter a few microseconds);
// the assertions hold wherever it falls, and each of the keys gives the old
// bug another chance to show.
TEST_F(StoreTrustTest, SetPublishedWhileDeleteOfAFlashCopyRunsSurvivesRestart) {
  Config c = config(OffloadPolicy::kWriteThrough);
  c.memory = 64 << 20;
  c.chunk_size = 4096;
  c.flash_size = 512 << 20;  // room for every copy: nothing may be reclaimed
  auto store = open(c);
  constexpr int kRounds = 8, kKeys = 24;
  auto key = [](int i) { return "d" + std::to_string(i); };
  auto fresh = [](int i) { return "fresh-" + std::to_string(i); };
  for (int round = 0; round < kRounds; ++round) {
    const int first = round * kKeys;
    for (int i = first; i < first + kKeys; ++i)
      ASSERT_TRUE(store->put(key(i), value_for(i, 512 << 10)));
    StoreTiers::flash(*store)->flush();
    for (int i = first; i < first + kKeys; ++i) {
      std::optional<ObjectResidency> r = store->residency(key(i));
      ASSERT_TRUE(r) << key(i);
      ASSERT_EQ(r->state, "clean") << key(i) << ": its copy should be on flash";
    }
    for (int i = first; i < first + kKeys; ++i) {
      Result<ObjectWriter> w = store->begin_put(key(i), fresh(i).size());
      ASSERT_TRUE(w) << w.status().to_string();
      w->append(fresh(i));
      std::atomic<bool> spinning{false};
      Result<WriteResult> published = Status::unavailable("the setter did not run");
      std::thread setter([&] {
        spinning = true;
        // Bounded: DEL below takes the key out of memory at once.
        const int64_t deadline = unix_time_ms() + 10'000;
        while (StoreTiers::memory(*store).contains(key(i)) && unix_time_ms() < deadline) {
        }
        published = store->commit(std::move(*w));
      });
      while (!spinning) std::this_thread::yield();
      EXPECT_TRUE(store->remove(key(i)));
      setter.join();
      ASSERT_TRUE(published && published->written) << key(i);
      ASSERT_EQ(store->get(key(i))->to_string(), fresh(i));
    }
  }
  EXPECT_EQ(StoreTiers::flash(*store)->stats().reclaims, 0u);
  // Everything on flash, then a start without the index snapshot: the scan
  // replays every tombstone in the log, so one that covers a SET shows even
  // where that SET's copy landed after it (the live index, and so the
  // snapshot, would still hold the copy then).
  ASSERT_TRUE(store->persist_all().is_ok());
  store.reset();
  store = open(c);
  std::vector<std::string> lost;
  for (int i = 0; i < kRounds * kKeys; ++i) {
    Result<ObjectView> v = store->get(key(i));
    if (!v) {
      lost.push_back(key(i));
      continue;
    }
    EXPECT_EQ(v->to_string(), fresh(i));
  }
  EXPECT_TRUE(lost.empty()) << lost.size() << " of " << kRounds * kKeys
                            << " SETs published during their key's DEL were lost at restart, "
                            << "first " << lost.front();
}

// Finding 2, with the copy in flight for sure (CompletionGate): SET starts
// the write-through copy with one expiry, the expiry changes (PERSIST,
// PEXPIRE, GETEX PX/PERSIST all come down to set_expiry) before the copy
// lands, then a clean restart. The copy carries the old expiry; its landing
// must bring the flash copy in line, or the key comes back with a TTL it no
// longer has (or without the one it has).
void StoreTrustTest::change_expiry_while_the_copy_is_in_flight(int64_t written_with,
                                                               int64_t changed_to) {
  const Config c = config(OffloadPolicy::kWriteThrough);
  auto store = open(c);
  if (!CompletionGate::usable(*store)) GTEST_SKIP() << "needs io_uring (one completion thread)";
  const std::string value = value_for(1, 256 << 10);
  {
    CompletionGate gate(*StoreTiers::flash(*store));
    ASSERT_TRUE(gate.held());
    ASSERT_TRUE(store->put("k", value, WriteOptions{.expire_at_ms = written_with}));
    ASSERT_EQ(store->residency("k")->state, "flushing");  // the copy is on its way
    ASSERT_TRUE(store->set_expiry("k", changed_to));
    gate.open();
  }
  StoreTiers::flash(*store)->flush();
  std::optional<flash::FlashObjectSummary> f = StoreTiers::flash(*store)->summary("k");
  ASSERT_TRUE(f);
  EXPECT_EQ(f->expire_at_ms, changed_to) << "the flash copy kept the expiry it was written with";
  store = restart(std::move(store), c);
  std::optional<ObjectInfo> info = store->stat("k");
  ASSERT_TRUE(info);
  EXPECT_EQ(info->expire_at_ms, changed_to);
  EXPECT_EQ(store->get("k")->to_string(), value);
}

TEST_F(StoreTrustTest, PersistWhileTheCopyIsInFlightSurvivesRestart) {
  change_expiry_while_the_copy_is_in_flight(unix_time_ms() + 3'600'000, 0);
}

TEST_F(StoreTrustTest, NewExpiryWhileTheCopyIsInFlightSurvivesRestart) {
  const int64_t now = unix_time_ms();
  change_expiry_while_the_copy_is_in_flight(now + 3'600'000, now + 7'200'000);
}

TEST_F(StoreTrustTest, FirstExpiryWhileTheCopyIsInFlightSurvivesRestart) {
  change_expiry_while_the_copy_is_in_flight(0, unix_time_ms() + 3'600'000);
}

// Finding 2, SET KEEPTTL: the expiry set while the copy was in flight must
// be the flash copy's once memory has dropped its own, since a SET KEEPTTL
// of a key that only flash holds takes the TTL from there.
TEST_F(StoreTrustTest, KeepTtlTakesTheExpiryChangedWhileTheCopyWasInFlight) {
  const Config c = config(OffloadPolicy::kWriteThrough);
  auto store = open(c);
  if (!CompletionGate::usable(*store)) GTEST_SKIP() << "needs io_uring (one completion thread)";
  const int64_t later = unix_time_ms() + 3'600'000;
  {
    CompletionGate gate(*StoreTiers::flash(*store));
    ASSERT_TRUE(gate.held());
    ASSERT_TRUE(store->put("k", value_for(1, 256 << 10)));  // no TTL; the copy starts
    ASSERT_EQ(store->residency("k")->state, "flushing");
    ASSERT_TRUE(store->set_expiry("k", later));
    gate.open();
  }
  StoreTiers::flash(*store)->flush();
  push_out(*store, 0);
  ASSERT_EQ(store->residency("k")->state, "flash");
  ASSERT_TRUE(store->put("k", "v2", WriteOptions{.keep_ttl = true}));
  EXPECT_EQ(store->stat("k")->expire_at_ms, later) << "KEEPTTL kept the copy's stale TTL";
  store = restart(std::move(store), c);
  ASSERT_TRUE(store->stat("k"));
  EXPECT_EQ(store->stat("k")->expire_at_ms, later);
  EXPECT_EQ(store->get("k")->to_string(), "v2");
}

// Finding 3, when v2's offload fails: v1's copy is in flight (held) when
// SET writes v2; then v2 is evicted and its offload fails (the device
// refuses every write past the log's end). v1, landing late, must not be
// indexed: with v2 gone from both tiers, GET would serve v1, and DBSIZE
// count it.
TEST_F(StoreTrustTest, OlderVersionLandingLateStaysGoneWhenTheNewerOffloadFails) {
  const Config c = config();
  auto store = open(c);
  if (!CompletionGate::usable(*store)) GTEST_SKIP() << "needs io_uring (one completion thread)";
  flash::FlashTier* flash = StoreTiers::flash(*store);
  Counter& write_errors = store->metrics().counter("tierkv_offload_write_errors_total", "");
  const uint64_t errors_before = write_errors.value();
  {
    CompletionGate gate(*flash);
    ASSERT_TRUE(gate.held());
    Result<WriteResult> v1 = store->put("k", value_for(1, 256 << 10));
    ASSERT_TRUE(v1);
    auto landed = std::make_shared<std::promise<Status>>();
    std::future<Status> v1_landed = landed->get_future();
    store->persist("k", v1->version, [landed](Status s) { landed->set_value(s); });
    // One region is open, and its fill ends where the next write goes.
    ASSERT_EQ(flash->stats().regions_used, 1u);
    WritesFailFrom failing(flash::kDataStart + flash->stats().used_bytes);
    ASSERT_TRUE(failing.ok());
    ASSERT_TRUE(store->put("k", value_for(2, 256 << 10)));  // v2, dirty in memory
    gate.open();
    ASSERT_EQ(v1_landed.wait_for(std::chrono::seconds(30)), std::future_status::ready);
    EXPECT_TRUE(v1_landed.get().is_ok());
    // v2 leaves memory by offload, and the offload fails.
    Config tiny = c;
    tiny.memory = 1;
    (void)store->apply_config(ConfigApply::kMemoryBudget, tiny);
    flash->flush();
    ASSERT_TRUE(store->apply_config(ConfigApply::kMemoryBudget, c).is_ok());
    ASSERT_GT(write_errors.value(), errors_before) << "v2's offload did not fail";
    ASSERT_FALSE(StoreTiers::memory(*store).contains("k"));
  }
  Result<ObjectView> v = store->get("k");
  EXPECT_FALSE(v.is_ok()) << "v1 came back: " << v->to_string().size() << " bytes";
  EXPECT_FALSE(flash->lookup("k"));
  EXPECT_EQ(store->size(), 1u);  // the gate's own key
  store = restart(std::move(store), c);
  EXPECT_FALSE(store->get("k").is_ok());
}

// fsync=always: a removal or expiry change reports durable only after its
// record is on the device; a restart after it finds the key gone.
TEST_F(StoreTrustTest, DurableRemovalAndExpiryReportAfterLanding) {
  Config c = config();
  c.flash_fsync = FlashFsync::kAlways;
  auto store = open(c);
  ASSERT_TRUE(store->put("gone", value_for(1, 1 << 20)));
  ASSERT_TRUE(store->put("ttl", value_for(2, 1 << 20)));
  push_out(*store, 0);
  std::promise<Status> removed, expired;
  EXPECT_TRUE(store->remove("gone", std::nullopt, [&](Status s) { removed.set_value(s); }));
  EXPECT_TRUE(
      store->set_expiry("ttl", unix_time_ms() + 60'000, [&](Status s) { expired.set_value(s); }));
  EXPECT_TRUE(removed.get_future().get().is_ok());
  EXPECT_TRUE(expired.get_future().get().is_ok());
  // No clean shutdown: what was reported durable is on the device.
  store.reset();
  store = open(c);
  EXPECT_FALSE(store->get("gone").is_ok());
  ASSERT_TRUE(store->stat("ttl"));
  EXPECT_GT(store->stat("ttl")->expire_at_ms, 0);
}

}  // namespace
}  // namespace tierkv
