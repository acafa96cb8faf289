// Preheat jobs with file sources: the object appears whole when every piece
// landed (and the digest matched), in memory and on flash, or larger than
// memory on flash with its first chunks in memory; every failure leaves the previous value and
// nothing partial, also across a restart. HTTP sources are tested over the wire
// (tests/integration/test_preheat.py) against nginx.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <openssl/evp.h>

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <future>
#include <random>
#include <thread>

#include "core/clock.h"
#include "store/flashio/staged_put.h"
#include "store/preheat/preheat_source.h"
#include "store/preheat/preheater.h"
#include "store/store.h"
#include "store/store_tiers.h"
#include "tests/store/store_test_util.h"

namespace tierkv {
namespace {

using testing::TempDir;
using testing::value_for;

constexpr int64_t kChunk = 64 << 10;

std::string sha256_hex(std::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(data.data(), data.size(), digest, &n, EVP_sha256(), nullptr);
  std::string out;
  for (unsigned int i = 0; i < n; ++i) out += fmt::format("{:02x}", digest[i]);
  return out;
}

class PreheatTest : public ::testing::Test {
 protected:
  Config config() const {
    Config c;
    c.memory = 8 << 20;
    c.chunk_size = kChunk;
    c.memory_shards = 4;
    c.active_expire_hz = 0;
    c.flash_path = dir_.file("flash.dat");
    c.flash_size = 96 << 20;
    c.region_size = 1 << 20;
    c.flash_preallocate = false;
    c.preheat_sources = {"file://" + dir_.file("src") + "/"};
    return c;
  }
  std::unique_ptr<Store> open(const Config& c) {
    auto s = Store::open(c);
    EXPECT_TRUE(s) << s.status().to_string();
    return s ? std::move(*s) : nullptr;
  }
  // A store whose preheat workers wait at `workers` (closed here) before
  // each task: jobs stay where they are until the test opens it.
  std::unique_ptr<Store> open_held(const Config& c, testing::PoolGate& workers) {
    workers.set_open(false);
    StoreHooks hooks;
    hooks.before_preheat_job = workers.hook();
    auto s = Store::open(c, nullptr, OpenMode::kWait, std::move(hooks));
    EXPECT_TRUE(s) << s.status().to_string();
    return s ? std::move(*s) : nullptr;
  }
  std::string source_file(const std::string& name, const std::string& content) {
    std::filesystem::create_directories(dir_.file("src"));
    const std::string path = dir_.file("src/" + name);
    std::ofstream(path, std::ios::binary) << content;
    return "file://" + path;
  }
  // A whole-file preheat of `url` into `key`: default pieces, cached, no
  // digest.
  static PreheatRequest whole_file(const std::string& key, const std::string& url,
                                   int64_t ttl_s = 0) {
    return {.key = key,
            .source = url,
            .piece_size = 0,
            .cache = true,
            .sha256 = "",
            .ttl_s = ttl_s,
            .exclusive = nullptr};
  }
  static PreheatJobStatus wait_job(Store& s, uint64_t id) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    for (;;) {
      std::optional<PreheatJobStatus> j = s.preheats().job(id);
      EXPECT_TRUE(j);
      if (!j || (j->state != PreheatState::kQueued && j->state != PreheatState::kRunning) ||
          std::chrono::steady_clock::now() > deadline)
        return j.value_or(PreheatJobStatus{});
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  static std::string value_of(Store& s, std::string_view key) {
    auto v = s.get(key);
    if (!v) return "<" + v.status().to_string() + ">";
    std::string out;
    v->append_to(out);
    return out;
  }
  TempDir dir_;
};

TEST_F(PreheatTest, FileIsLoadedWholeIntoMemoryAndFlash) {
  auto s = open(config());
  const std::string content = value_for(1, 5 * kChunk + 1234);  // a short last chunk
  const std::string url = source_file("model.bin", content);
  auto id = s->preheats().start({.key = "m",
                                 .source = url,
                                 .piece_size = 2 * kChunk,
                                 .cache = true,
                                 .sha256 = sha256_hex(content),
                                 .ttl_s = 0});
  ASSERT_TRUE(id) << id.status().to_string();
  const PreheatJobStatus j = wait_job(*s, *id);
  ASSERT_EQ(j.state, PreheatState::kDone) << j.error;
  EXPECT_EQ(j.bytes_done, content.size());
  EXPECT_EQ(j.bytes_total, content.size());
  EXPECT_EQ(j.pieces_total, 3u);
  EXPECT_EQ(j.pieces_done, 3u);
  EXPECT_TRUE(j.cached);
  std::optional<ObjectResidency> r = s->residency("m");
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->in_memory);
  for (const ChunkResidency& c : r->chunks) EXPECT_TRUE(c.in_memory && c.on_flash) << c.index;
  EXPECT_EQ(value_of(*s, "m"), content);
}

// Reads of ranges that start and end at, before and after chunk
// boundaries, and across the memory / flash boundary of a partly resident
// object, each against the bytes it must return.
void expect_every_range(Store& s, std::string_view key, const std::string& content, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::pair<uint64_t, uint64_t>> ranges = {{0, content.size()}};
  for (uint64_t b = 0; b <= content.size(); b += kChunk) {
    for (int64_t d : {-1, 0, 1}) {
      const int64_t at = static_cast<int64_t>(b) + d;
      if (at < 0 || at >= static_cast<int64_t>(content.size())) continue;
      ranges.push_back({static_cast<uint64_t>(at), 1 + rng() % (3 * kChunk)});
    }
  }
  for (int i = 0; i < 40; ++i) ranges.push_back({rng() % content.size(), rng() % (8 * kChunk)});
  for (auto [off, len] : ranges) {
    auto got = s.get(key, off, len);
    ASSERT_TRUE(got) << off << "+" << len << ": " << got.status().to_string();
    std::string bytes;
    got->append_to(bytes);
    ASSERT_EQ(bytes, content.substr(off, len)) << off << "+" << len;
  }
}

TEST_F(PreheatTest, LargerThanMemoryIsHeldInPartAndReadWholeAcrossRestart) {
  const Config c = config();
  const std::string content = value_for(2, 12 << 20);  // 12 MiB, memory is 8
  const std::string url = source_file("big.bin", content);
  {
    auto s = open(c);
    ASSERT_TRUE(s->put("big", "old value").is_ok());
    auto id = s->preheats().start(
        {.key = "big", .source = url, .piece_size = 0, .cache = true, .sha256 = "", .ttl_s = 0});
    ASSERT_TRUE(id);
    const PreheatJobStatus j = wait_job(*s, *id);
    ASSERT_EQ(j.state, PreheatState::kDone) << j.error;
    EXPECT_TRUE(j.cached);
    EXPECT_EQ(j.piece_size, uint64_t{4} << 20);  // the default rule's floor
    // Memory holds the object's first chunks, up to large-value-memory-
    // fraction of its budget; flash holds every chunk.
    std::optional<ObjectResidency> r = s->residency("big");
    ASSERT_TRUE(r);
    EXPECT_TRUE(r->in_memory);
    ASSERT_EQ(r->chunks.size(), content.size() / kChunk);
    uint64_t in_memory = 0;
    bool hole_seen = false;
    for (const ChunkResidency& ch : r->chunks) {
      EXPECT_TRUE(ch.on_flash) << ch.index;
      if (ch.in_memory) {
        EXPECT_FALSE(hole_seen) << "chunk " << ch.index << " in memory after a hole";
        in_memory += ch.size;
      }
      hole_seen |= !ch.in_memory;
    }
    EXPECT_GT(in_memory, uint64_t{2} << 20);
    EXPECT_LE(in_memory, uint64_t{4} << 20);
    EXPECT_LE(s->stats().memory.used_bytes, s->stats().memory.budget_bytes);
    const uint64_t flash_reads = s->stats().flash_hits;
    EXPECT_EQ(value_of(*s, "big"), content);
    EXPECT_EQ(s->stats().flash_hits, flash_reads + 1);  // one read, from both tiers
    expect_every_range(*s, "big", content, 7);
    ASSERT_TRUE(s->close_cleanly().is_ok());
  }
  auto s = open(c);
  EXPECT_EQ(value_of(*s, "big"), content);
  expect_every_range(*s, "big", content, 8);
}

// A part near half of memory: promoting the whole object needs the room its
// own chunks hold. The promotion lets them go and reads them from flash
// (before, it pinned them first and so never found room).
TEST_F(PreheatTest, APartNearHalfOfMemoryIsPromotedWhole) {
  auto s = open(config());
  const std::string content = value_for(3, 6 << 20);  // 6 MiB, memory is 8
  const std::string url = source_file("half.bin", content);
  auto id = s->preheats().start(
      {.key = "half", .source = url, .piece_size = 0, .cache = true, .sha256 = "", .ttl_s = 0});
  ASSERT_TRUE(id);
  ASSERT_EQ(wait_job(*s, *id).state, PreheatState::kDone);
  auto held = [&] {
    const std::optional<ObjectResidency> r = s->residency("half");
    uint64_t n = 0;
    if (r)
      for (const ChunkResidency& ch : r->chunks) n += ch.in_memory ? 1 : 0;
    return n;
  };
  const uint64_t chunks = content.size() / kChunk;
  ASSERT_GT(held(), 0u);
  ASSERT_LT(held(), chunks);  // held in part: over large-value-memory-fraction
  auto fetched = std::make_shared<std::promise<Status>>();
  const std::string_view keys[] = {"half"};
  s->fetch(keys, [fetched](Status st) { fetched->set_value(std::move(st)); });
  auto done = fetched->get_future();
  ASSERT_EQ(done.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  const Status st = done.get();
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  EXPECT_EQ(held(), chunks);
  EXPECT_TRUE(StoreTiers::memory(*s).contains("half"));
  EXPECT_EQ(value_of(*s, "half"), content);
  EXPECT_LE(s->stats().memory.used_bytes, s->stats().memory.budget_bytes);
}

// Holes only: promoting an object memory holds in part reads from flash
// just the chunks memory lacks; the resident ones are kept, not read again.
TEST_F(PreheatTest, APromotionOfAnObjectHeldInPartReadsOnlyItsHoles) {
  Config c = config();
  c.large_value_memory_fraction = 0.25;  // 2 MiB of a 4 MiB object stay
  auto s = open(c);
  const std::string content = value_for(5, 4 << 20);
  auto id = s->preheats().start(whole_file("part", source_file("part.bin", content)));
  ASSERT_TRUE(id);
  ASSERT_EQ(wait_job(*s, *id).state, PreheatState::kDone);
  std::optional<ObjectResidency> r = s->residency("part");
  ASSERT_TRUE(r);
  uint64_t held = 0;
  for (const ChunkResidency& ch : r->chunks) held += ch.in_memory ? 1 : 0;
  const uint64_t chunks = content.size() / kChunk;
  ASSERT_GT(held, 0u);
  ASSERT_LT(held, chunks);
  Counter& device_reads = s->metrics().counter("tierkv_flash_reads_total", "");
  const uint64_t before = device_reads.value();
  auto fetched = std::make_shared<std::promise<Status>>();
  const std::string_view keys[] = {"part"};
  s->fetch(keys, [fetched](Status st) { fetched->set_value(std::move(st)); });
  auto done = fetched->get_future();
  ASSERT_EQ(done.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  const Status st = done.get();
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  EXPECT_EQ(device_reads.value() - before, chunks - held) << "only the holes are read";
  EXPECT_TRUE(StoreTiers::memory(*s).contains("part"));
  EXPECT_EQ(value_of(*s, "part"), content);
}

// A FIFO (or any other non-regular file) under an allowed folder is refused
// at once: opening it never blocks a worker, and the job fails with a clear
// error instead of hanging until SHUTDOWN. A symlink to a file, or to a
// folder on the way, is refused.
TEST_F(PreheatTest, AFifoOrASymlinkSourceFailsAtOnce) {
  auto s = open(config());
  std::filesystem::create_directories(dir_.file("src"));
  const std::string fifo = dir_.file("src/pipe");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string target = source_file("real.bin", "bytes");
  ASSERT_EQ(::symlink(dir_.file("src/real.bin").c_str(), dir_.file("src/link.bin").c_str()), 0);
  // A symlinked folder on the way, even one that stays inside: openat2
  // follows no symlink at all below the allowed folder.
  std::filesystem::create_directories(dir_.file("src/realdir"));
  std::ofstream(dir_.file("src/realdir/x.bin"), std::ios::binary) << "x";
  std::filesystem::create_directory_symlink(dir_.file("src/realdir"), dir_.file("src/linkdir"));
  for (const auto& [name, error] :
       {std::pair{"pipe", "not a regular file"}, std::pair{"link.bin", "symbolic link"},
        std::pair{"linkdir/x.bin", "symbolic link"}}) {
    auto id =
        s->preheats().start(whole_file(name, "file://" + dir_.file(std::string("src/") + name)));
    ASSERT_TRUE(id) << id.status().to_string();
    const PreheatJobStatus j = wait_job(*s, *id);
    EXPECT_EQ(j.state, PreheatState::kFailed) << name;
    EXPECT_NE(j.error.find(error), std::string::npos) << j.error;
    EXPECT_FALSE(s->exists(name));
  }
}

// A job that does not end when cancelled (here: its worker is held before
// it can look) does not stop a clean shutdown: close_cleanly() waits
// shutdown-timeout-ms, then writes memory to flash anyway and says so.
TEST_F(PreheatTest, AStuckJobDoesNotKeepMemoryFromFlashAtShutdown) {
  Config c = config();
  c.shutdown_timeout_ms = 200;
  testing::PoolGate workers;
  auto opened = open_held(c, workers);
  ASSERT_TRUE(opened);
  Store& s = *opened;
  auto id = s.preheats().start(whole_file("stuck", source_file("stuck.bin", "bytes")));
  ASSERT_TRUE(id);
  ASSERT_TRUE(s.put("dirty", value_for(7, 3 * kChunk)).is_ok());
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(s.close_cleanly().is_ok());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));
  EXPECT_TRUE(s.preheats().stuck());
  std::optional<ObjectResidency> r = s.residency("dirty");
  ASSERT_TRUE(r);
  for (const ChunkResidency& ch : r->chunks) EXPECT_TRUE(ch.on_flash) << ch.index;
  workers.set_open(true);
  EXPECT_EQ(wait_job(s, *id).state, PreheatState::kCancelled);
}

// A job is checked again when it starts, not only when it is queued: a
// folder swapped for a symlink out of the allowed folder meanwhile is not
// followed, and a source that CONFIG SET preheat-sources no longer allows
// fails the job.
TEST_F(PreheatTest, AQueuedJobIsCheckedAgainWhenItStarts) {
  const Config narrowed = config();  // src/ only
  Config c = narrowed;
  c.preheat_sources.push_back("file://" + dir_.file("src2") + "/");
  testing::PoolGate workers;
  auto opened = open_held(c, workers);
  ASSERT_TRUE(opened);
  Store& s = *opened;
  std::filesystem::create_directories(dir_.file("src/sub"));
  std::filesystem::create_directories(dir_.file("outside"));
  std::ofstream(dir_.file("src/sub/f.bin"), std::ios::binary) << "inside";
  std::ofstream(dir_.file("outside/f.bin"), std::ios::binary) << "outside";
  std::filesystem::create_directories(dir_.file("src2"));
  std::ofstream(dir_.file("src2/g.bin"), std::ios::binary) << "dropped";
  auto swapped = s.preheats().start(whole_file("swapped", "file://" + dir_.file("src/sub/f.bin")));
  auto dropped = s.preheats().start(whole_file("dropped", "file://" + dir_.file("src2/g.bin")));
  ASSERT_TRUE(swapped && dropped);
  std::filesystem::rename(dir_.file("src/sub"), dir_.file("src/sub_old"));
  std::filesystem::create_directory_symlink(dir_.file("outside"), dir_.file("src/sub"));
  ASSERT_TRUE(s.apply_config(ConfigApply::kPreheat, narrowed).is_ok());
  workers.set_open(true);
  const PreheatJobStatus a = wait_job(s, *swapped);
  EXPECT_EQ(a.state, PreheatState::kFailed) << "followed the swapped-in symlink";
  EXPECT_FALSE(s.exists("swapped"));
  const PreheatJobStatus b = wait_job(s, *dropped);
  EXPECT_EQ(b.state, PreheatState::kFailed);
  EXPECT_NE(b.error.find("not allowed"), std::string::npos) << b.error;
  EXPECT_FALSE(s.exists("dropped"));
}

// preheat-max-queued: past it a preheat is refused with Busy at once; the
// jobs already queued are untouched and run once workers are free.
TEST_F(PreheatTest, JobsPastTheQueueCapAreRefusedBusy) {
  Config c = config();
  c.preheat_max_jobs = 1;
  c.preheat_max_queued = 2;
  testing::PoolGate workers;  // the running job stays running
  auto opened = open_held(c, workers);
  ASSERT_TRUE(opened);
  Store& s = *opened;
  const std::string url = source_file("q.bin", "queued bytes");
  auto preheat = [&](const std::string& key) { return s.preheats().start(whole_file(key, url)); };
  std::vector<uint64_t> ids;
  for (const char* key : {"run", "q1", "q2"}) {
    auto id = preheat(key);
    ASSERT_TRUE(id) << key << ": " << id.status().to_string();
    ids.push_back(*id);
  }
  auto refused = preheat("q3");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.status().code(), StatusCode::kBusy);
  EXPECT_NE(refused.status().message().find("preheat-max-queued"), std::string::npos);
  workers.set_open(true);
  for (uint64_t id : ids) EXPECT_EQ(wait_job(s, id).state, PreheatState::kDone);
  EXPECT_TRUE(preheat("q3"));
}

// TTL runs from publish, not from the job's start: a job slower than its
// TTL still publishes a live key (here a lane is held longer than the TTL;
// the key then lives 2 s more, room for a loaded machine to look).
TEST_F(PreheatTest, TheTtlRunsFromPublish) {
  std::atomic<int> jobs{0};
  StoreHooks hooks;
  hooks.before_preheat_job = [&jobs] {
    if (jobs.fetch_add(1) == 1) std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  };
  auto opened = Store::open(config(), nullptr, OpenMode::kWait, std::move(hooks));
  ASSERT_TRUE(opened) << opened.status().to_string();
  Store& s = **opened;
  auto id =
      s.preheats().start(whole_file("ttl", source_file("ttl.bin", "short-lived"), /*ttl_s=*/2));
  ASSERT_TRUE(id);
  const int64_t started_ms = unix_time_ms();
  ASSERT_EQ(wait_job(s, *id).state, PreheatState::kDone);
  ASSERT_GE(unix_time_ms() - started_ms, 2000) << "the job was not held past its TTL";
  std::optional<ObjectInfo> info = s.stat("ttl");
  ASSERT_TRUE(info) << "published already expired";
  EXPECT_GT(info->expire_at_ms, started_ms + 2000);
}

// preheat-buffer caps the piece buffers of all jobs: with room for one piece
// and 4 lanes per job, every job still ends right, with a digest too (the
// piece the digest waits for goes past the cap: the room may be held by
// pieces waiting for it), and gives its room back, also when it fails.
// PIECE past the cap is refused. (That lanes wait for room is shown over
// the wire, with a source that holds its reply: test_preheat.py.)
TEST_F(PreheatTest, PieceBuffersStayWithinPreheatBuffer) {
  Config c = config();
  c.preheat_buffer = kChunk;
  c.preheat_pieces_inflight = 4;
  auto s = open(c);
  Gauge& used = s->metrics().gauge("tierkv_preheat_buffer_used_bytes", "");
  const std::string plain = value_for(11, 8 * kChunk + 5);
  const std::string hashed = value_for(12, 8 * kChunk + 7);
  auto request = [&](const std::string& key, const std::string& content, bool digest) {
    return PreheatRequest{.key = key,
                          .source = source_file(key + ".bin", content),
                          .piece_size = kChunk,
                          .cache = true,
                          .sha256 = digest ? sha256_hex(content) : "",
                          .ttl_s = 0,
                          .exclusive = nullptr};
  };
  auto a = s->preheats().start(request("plain", plain, false));
  auto b = s->preheats().start(request("hashed", hashed, true));
  ASSERT_TRUE(a && b);
  EXPECT_EQ(wait_job(*s, *a).state, PreheatState::kDone);
  EXPECT_EQ(wait_job(*s, *b).state, PreheatState::kDone);
  EXPECT_EQ(value_of(*s, "plain"), plain);
  EXPECT_EQ(value_of(*s, "hashed"), hashed);
  EXPECT_EQ(used.value(), 0) << "piece buffers outlived their jobs";

  PreheatRequest too_big = request("big", plain, false);
  too_big.piece_size = 2 * kChunk;
  auto refused = s->preheats().start(too_big);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.status().message().find("preheat-buffer"), std::string::npos)
      << refused.status().to_string();

  PreheatRequest wrong = request("wrong", hashed, true);
  wrong.sha256 = std::string(64, 'b');
  auto failed = s->preheats().start(wrong);
  ASSERT_TRUE(failed);
  EXPECT_EQ(wait_job(*s, *failed).state, PreheatState::kFailed);
  EXPECT_EQ(used.value(), 0);
}

// large-value-memory-fraction 0 allows no memory copy: CACHE yes then
// leaves the object on flash only (a cap of 0 once meant "no cap").
TEST_F(PreheatTest, AMemoryFractionOfZeroKeepsNothingInMemory) {
  Config c = config();
  c.large_value_memory_fraction = 0;
  auto s = open(c);
  const std::string content = value_for(4, 3 * kChunk + 5);
  auto id = s->preheats().start({.key = "z",
                                 .source = source_file("z.bin", content),
                                 .piece_size = 0,
                                 .cache = true,
                                 .sha256 = "",
                                 .ttl_s = 0});
  ASSERT_TRUE(id);
  ASSERT_EQ(wait_job(*s, *id).state, PreheatState::kDone);
  std::optional<ObjectResidency> r = s->residency("z");
  ASSERT_TRUE(r);
  for (const ChunkResidency& ch : r->chunks) {
    EXPECT_FALSE(ch.in_memory) << ch.index;
    EXPECT_TRUE(ch.on_flash) << ch.index;
  }
  EXPECT_EQ(value_of(*s, "z"), content);
}

TEST_F(PreheatTest, FailuresLeaveThePreviousValueAndNothingPartial) {
  const Config c = config();
  const std::string content = value_for(3, 9 * kChunk);
  const std::string url = source_file("f.bin", content);
  {
    auto s = open(c);
    ASSERT_TRUE(s->put("k", "previous").is_ok());
    // A digest that does not match: every piece landed, and still nothing shows.
    auto bad = s->preheats().start({.key = "k",
                                    .source = url,
                                    .piece_size = kChunk,
                                    .cache = true,
                                    .sha256 = std::string(64, 'a'),
                                    .ttl_s = 0});
    ASSERT_TRUE(bad);
    PreheatJobStatus j = wait_job(*s, *bad);
    EXPECT_EQ(j.state, PreheatState::kFailed);
    EXPECT_NE(j.error.find("digest mismatch"), std::string::npos) << j.error;
    EXPECT_EQ(value_of(*s, "k"), "previous");
    // A missing file.
    auto missing = s->preheats().start({.key = "k",
                                        .source = "file://" + dir_.file("src/none"),
                                        .piece_size = 0,
                                        .cache = true,
                                        .sha256 = "",
                                        .ttl_s = 0});
    ASSERT_TRUE(missing);
    j = wait_job(*s, *missing);
    EXPECT_EQ(j.state, PreheatState::kFailed);
    EXPECT_NE(j.error.find("no such file"), std::string::npos) << j.error;
    // Outside the allowlist, and a path that climbs out of it: refused at once.
    std::ofstream(dir_.file("secret"), std::ios::binary) << "secret";
    for (const std::string& src :
         {"file://" + dir_.file("secret"), "file://" + dir_.file("src/../secret"),
          std::string("file:///etc/passwd")}) {
      auto refused = s->preheats().start(
          {.key = "k", .source = src, .piece_size = 0, .cache = true, .sha256 = "", .ttl_s = 0});
      ASSERT_FALSE(refused) << src;
      EXPECT_NE(refused.status().message().find("not allowed"), std::string::npos);
    }
    EXPECT_EQ(value_of(*s, "k"), "previous");
    ASSERT_TRUE(s->persist_all().is_ok());
  }  // no clean shutdown: the next start scans
  // The failed job's chunks were all on flash but its last: the scan must
  // not bring them together.
  auto s = open(c);
  EXPECT_EQ(value_of(*s, "k"), "previous");
}

TEST_F(PreheatTest, CancelAndAConcurrentWriteWin) {
  Config c = config();
  c.preheat_pieces_inflight = 1;
  const std::string content = value_for(4, 48 << 20);
  const std::string url = source_file("slow.bin", content);
  auto s = open(c);
  ASSERT_TRUE(s->put("k", "previous").is_ok());
  auto id = s->preheats().start(
      {.key = "k", .source = url, .piece_size = kChunk, .cache = false, .sha256 = "", .ttl_s = 0});
  ASSERT_TRUE(id);
  while (s->preheats().job(*id)->bytes_done == 0)
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  ASSERT_TRUE(s->preheats().cancel(*id).is_ok());
  PreheatJobStatus j = wait_job(*s, *id);
  EXPECT_EQ(j.state, PreheatState::kCancelled);
  EXPECT_LT(j.pieces_done, j.pieces_total);
  EXPECT_EQ(value_of(*s, "k"), "previous");
  EXPECT_EQ(s->preheats().cancel(9999).code(), StatusCode::kNotFound);

  // A SET while the job runs is newer than the job's version: it stays.
  id = s->preheats().start(
      {.key = "k", .source = url, .piece_size = kChunk, .cache = false, .sha256 = "", .ttl_s = 0});
  ASSERT_TRUE(id);
  while (s->preheats().job(*id)->bytes_done == 0)
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  ASSERT_TRUE(s->put("k", "written meanwhile").is_ok());
  j = wait_job(*s, *id);
  EXPECT_EQ(j.state, PreheatState::kFailed) << j.error;
  EXPECT_EQ(value_of(*s, "k"), "written meanwhile");
}

TEST(PreheatSourceTest, AllowlistMatchesAtPathBoundaries) {
  const std::vector<std::string> allow = {"http://127.0.0.1:8080/models/", "file:///srv/models"};
  EXPECT_TRUE(source_allowed("http://127.0.0.1:8080/models/a.bin", allow));
  EXPECT_FALSE(source_allowed("http://127.0.0.1:8080/models/../admin", allow));
  EXPECT_FALSE(source_allowed("http://127.0.0.1:8080/models/%2e%2e/admin", allow));
  for (const char* tricky :
       {"http://127.0.0.1:8080/models/..;/admin", "http://127.0.0.1:8080/models/.;/a.bin",
        "http://127.0.0.1:8080/models/..%2fadmin", "http://127.0.0.1:8080/models/..%2Fadmin",
        "http://127.0.0.1:8080/models/..%5cadmin", "http://127.0.0.1:8080/models/..\\admin"})
    EXPECT_FALSE(source_allowed(tricky, allow)) << tricky;
  EXPECT_TRUE(source_allowed("http://127.0.0.1:8080/models/a;v=1.bin", allow));
  EXPECT_FALSE(source_allowed("http://127.0.0.1:8080/modelsX/a", allow));
  EXPECT_FALSE(source_allowed("http://127.0.0.1:8080@evil/models/a", allow));
  EXPECT_TRUE(source_allowed("file:///srv/models/x/y.bin", allow));
  EXPECT_FALSE(source_allowed("file:///srv/models-other/y.bin", allow));
  EXPECT_FALSE(source_allowed("file:///srv/models/../secret", allow));
  EXPECT_FALSE(source_allowed("ftp://127.0.0.1:8080/models/a", allow));
  EXPECT_FALSE(source_allowed("http://127.0.0.1:8080/models/a", {}));
}

TEST(PreheatSourceTest, DefaultPieceSizeFollowsTheRule) {
  EXPECT_EQ(default_piece_size(1, 1 << 20), uint64_t{4} << 20);
  // 1.5 GiB / 500 = 3.1 MiB -> 4 MiB; 10 GiB / 500 = 20.5 MiB -> 32 MiB.
  EXPECT_EQ(default_piece_size(uint64_t{3} << 29, 1 << 20), uint64_t{4} << 20);
  EXPECT_EQ(default_piece_size(uint64_t{10} << 30, 1 << 20), uint64_t{32} << 20);
  EXPECT_EQ(default_piece_size(uint64_t{1} << 40, 1 << 20), uint64_t{64} << 20);
  EXPECT_EQ(default_piece_size(1, 64 << 20), uint64_t{64} << 20);  // a multiple of the chunk
}

}  // namespace
}  // namespace tierkv
