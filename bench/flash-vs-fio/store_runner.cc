#include "store_runner.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <thread>

#include "core/clock.h"
#include "flash/record.h"
#include "store/store_tiers.h"

namespace tierkv::bench {
namespace {

// One read in flight: the first 8 bytes gathered across pieces, and the
// byte count, until on_done.
struct StoreRead {
  uint64_t issued_ns = 0;
  uint64_t expected_tag = 0;
  uint64_t bytes = 0;
  unsigned char head[8] = {};
};

class StoreReader : public RandomReader {
 public:
  StoreReader(Store& store, const FillSpec& fill, const ReadSpec& spec)
      : RandomReader(fill, spec), store_(store) {}

 protected:
  Status start_read(uint64_t id, uint32_t /*chunk*/, uint64_t issued_ns) override {
    const std::string key = object_key(id, fill_.key_length);
    auto read = std::make_shared<StoreRead>();
    read->issued_ns = issued_ns;
    read->expected_tag = chunk_tag(id, 0);
    FlashReadCallbacks callbacks{
        .on_piece =
            [read](ValuePiece piece) {
              if (read->bytes < sizeof(read->head)) {
                const size_t n = std::min(piece.bytes.size(), sizeof(read->head) - read->bytes);
                std::memcpy(read->head + read->bytes, piece.bytes.data(), n);
              }
              read->bytes += piece.bytes.size();
            },
        .on_done = [this, read](Status st) { done(*read, st.is_ok()); }};
    ReadStart start =
        store_.read(key, 0, std::numeric_limits<uint64_t>::max(), std::move(callbacks));
    if (start.where == ReadStart::Where::kAbsent) return Status::not_found("absent");
    if (start.where == ReadStart::Where::kMemory) {
      // Not expected (memory is emptied after the fill), but counted.
      read->bytes = start.view.length();
      if (start.view.segment_count() > 0) {
        const std::string_view first = start.view.segment(0);
        std::memcpy(read->head, first.data(), std::min(first.size(), sizeof(read->head)));
      }
      finish(issued_ns, read->bytes, check(*read), true);
    }
    return Status::ok();
  }
  uint64_t device_bytes_per_read() const override {
    return fill_.chunks_per_object * flash::record_size(fill_.key_length, fill_.chunk_size);
  }

 private:
  bool check(const StoreRead& read) const {
    uint64_t tag = 0;
    std::memcpy(&tag, read.head, sizeof(tag));
    return read.bytes == fill_.object_size() && tag == read.expected_tag;
  }
  void done(const StoreRead& read, bool ok) {
    finish(read.issued_ns, read.bytes, ok && check(read));
  }

  Store& store_;
};

}  // namespace

Result<FillResult> fill_store(Store& store, const FillSpec& spec) {
  FillResult result;
  std::string value;
  const uint64_t start = mono_ns();
  for (uint64_t id = 0; id < spec.objects; ++id) {
    const std::string key = object_key(id, spec.key_length);
    fill_object(value, spec, id);
    // A put may give up while offloads drain (OutOfMemory after
    // offload-wait-ms): retry, within a bound.
    for (int attempt = 0;; ++attempt) {
      Result<WriteResult> put = store.put(key, value);
      if (put.is_ok()) break;
      if (attempt >= 100) return put.status();
      ++result.busy_retries;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  if (Status st = store.persist_all(); !st.is_ok()) return st;
  StoreTiers::flash(store)->flush();
  StoreTiers::memory(store).clear();
  result.seconds = double(mono_ns() - start) / 1e9;
  result.objects = spec.objects;
  result.chunks = spec.objects * spec.chunks_per_object;
  result.payload_bytes = spec.objects * spec.object_size();
  result.write_errors = store.stats().memory.offload_dropped;
  const flash::FlashStats fs = StoreTiers::flash(store)->stats();
  if (fs.objects != spec.objects || fs.chunks != result.chunks)
    return Status::io_error("after the fill, flash holds " + std::to_string(fs.objects) +
                            " objects / " + std::to_string(fs.chunks) + " chunks, expected " +
                            std::to_string(spec.objects) + " / " + std::to_string(result.chunks));
  return result;
}

ReadResult random_store_reads(Store& store, const FillSpec& fill, const ReadSpec& spec) {
  StoreReader reader(store, fill, spec);
  return reader.run();
}

}  // namespace tierkv::bench
