// A Store opened with OpenMode::kBackground while its flash index loads on
// the loader thread: what the header allows meanwhile (loading(),
// load_progress(), stats(), flash_status(), has_flash() and the metrics)
// may be called from any thread throughout the load, and answers as of
// "loading" (no flash figures) until loading() turns false. Run under
// ThreadSanitizer in CI: the loader creates the flash parts that stats()
// reports once loaded.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "core/metrics.h"
#include "store/store.h"
#include "store_test_util.h"

namespace tierkv {
namespace {

using testing::TempDir;
using testing::value_for;

Config flash_config(const TempDir& dir) {
  Config c;
  c.memory = 4 << 20;
  c.chunk_size = 32 << 10;
  c.memory_shards = 4;
  c.active_expire_hz = 0;
  c.flash_path = dir.file("flash.dat");
  c.flash_size = 32 << 20;
  c.region_size = 1 << 20;
  c.flash_preallocate = false;
  return c;
}

TEST(StoreLoadingConcurrentTest, StatsAndMetricsThroughoutABackgroundLoad) {
  TempDir dir;
  const Config c = flash_config(dir);
  constexpr uint64_t kKeys = 200;
  {
    auto first = Store::open(c);
    ASSERT_TRUE(first) << first.status().to_string();
    for (uint64_t i = 0; i < kKeys; ++i)
      ASSERT_TRUE((*first)->put("k" + std::to_string(i), value_for(i, 40000)));
    ASSERT_TRUE((*first)->persist_all().is_ok());
    ASSERT_EQ((*first)->stats().flash.objects, kKeys);
  }
  MetricsRegistry metrics;
  std::atomic<bool> reader_started{false};
  StoreHooks hooks;
  // The load begins only once the reader is reading, so the two overlap.
  hooks.before_load = [&] {
    while (!reader_started.load()) std::this_thread::yield();
  };
  auto opened = Store::open(c, &metrics, OpenMode::kBackground, std::move(hooks));
  ASSERT_TRUE(opened) << opened.status().to_string();
  Store& store = **opened;
  int reads_while_loading = 0;
  bool saw_flash_while_loading = false;
  std::thread reader([&] {
    for (int after = 0; after < 20;) {
      reader_started.store(true);
      const StoreStats st = store.stats();
      const LoadProgress p = store.load_progress();
      const std::string text = metrics.render_prometheus();
      const bool flash = store.has_flash() || store.flash_status().enabled;
      // Loading ends once: still loading now means loading for every read above.
      if (store.loading()) {
        ++reads_while_loading;
        saw_flash_while_loading |= flash || st.flash_read_buffer_limit != 0;
        EXPECT_TRUE(p.loading);
        EXPECT_LE(p.bytes_done, p.bytes_total);  // the total is known before any region is done
      } else {
        ++after;
      }
      EXPECT_FALSE(text.empty());
    }
  });
  reader.join();
  store.wait_loaded();
  EXPECT_GT(reads_while_loading, 0);
  EXPECT_FALSE(saw_flash_while_loading);
  const StoreStats loaded = store.stats();
  EXPECT_GT(loaded.flash_read_buffer_limit, 0);
  EXPECT_TRUE(store.has_flash());
  EXPECT_EQ(loaded.flash.objects, kKeys);
}

}  // namespace
}  // namespace tierkv
