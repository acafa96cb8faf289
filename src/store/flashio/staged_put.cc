#include "store/flashio/staged_put.h"

#include <chrono>
#include <cstring>
#include <thread>

#include "core/hash.h"
#include "core/mutex.h"

namespace tierkv {

namespace {
// How long a chunk waits for room in flash's write queue before the put
// gives up with Busy: the queue drains at device speed, so this is only
// reached when the device has stopped.
constexpr auto kQueueWait = std::chrono::seconds(30);
}  // namespace

// What the flash callbacks report; shared, so that a callback landing after
// the put is gone has somewhere to write.
struct StagedPut::Landing {
  Mutex mu;
  CondVar cv;
  uint32_t landed ABSL_GUARDED_BY(mu) = 0;
  Status first_error ABSL_GUARDED_BY(mu);
};

StagedPut::StagedPut(flash::FlashTier::StagedObject object, memory::MemoryTier& memory,
                     KeyLocks& locks, std::string key, uint64_t size, uint64_t version,
                     const StagedPutOptions& options)
    : object_(std::move(object)),
      memory_(memory),
      locks_(locks),
      key_(std::move(key)),
      size_(size),
      version_(version),
      chunk_size_(memory.chunk_size()),
      chunk_count_(object_.chunk_count()),
      options_(options),
      landing_(std::make_shared<Landing>()) {
  if (!options.cache_in_memory) return;
  // Room only from what can go without waiting: a preheat must not stall
  // on offloads that themselves need the pool it runs on.
  memory::MemoryTier::NoWaitScope no_wait;
  const int64_t cap = options.memory_cap_bytes > 0 ? options.memory_cap_bytes : INT64_MAX;
  Result<memory::ObjectWriter> copy = Status::out_of_memory("over the cap");
  if (static_cast<int64_t>(memory_.charge_for_object(key_.size(), size_)) <= cap)
    copy = memory_.prepare(key_, size_);
  // Too large, or no room for all of it: memory takes what fits, from the
  // front, and readers take the rest from flash.
  if (!copy) copy = memory_.prepare_partial(key_, size_, cap);
  if (!copy) return;
  copy_.emplace(std::move(*copy));
  for (size_t i = 0; i < copy_->chunk_count(); ++i) cached_bytes_ += copy_->chunk_length(i);
}

StagedPut::~StagedPut() = default;

Status StagedPut::write(uint64_t offset, std::string_view bytes) {
  if (offset % chunk_size_ != 0 || offset + bytes.size() > size_) {
    return Status::invalid_argument("staged put: a piece must start on a chunk boundary");
  }
  const bool reaches_end = offset + bytes.size() == size_;
  if (!reaches_end && bytes.size() % chunk_size_ != 0) {
    return Status::invalid_argument("staged put: a piece must be whole chunks");
  }
  for (uint64_t done = 0; done < bytes.size(); done += chunk_size_) {
    const auto index = static_cast<uint32_t>((offset + done) / chunk_size_);
    const std::string_view data = bytes.substr(done, chunk_size_);
    if (char* to = copy_ ? copy_->chunk_data(index) : nullptr)
      std::memcpy(to, data.data(), data.size());
    if (index + 1 == chunk_count_) {
      MutexLock lock(last_mu_);
      last_chunk_.assign(data);
      have_last_ = true;
      continue;
    }
    TIERKV_RETURN_IF_ERROR(queue_chunk(index, data));
  }
  return Status::ok();
}

Status StagedPut::queue_chunk(uint32_t index, std::string_view data) {
  const auto deadline = std::chrono::steady_clock::now() + kQueueWait;
  for (;;) {
    Status st = try_queue_chunk(index, data);
    if (st.code() != StatusCode::kBusy) return st;
    if (std::chrono::steady_clock::now() > deadline) return st;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

Status StagedPut::try_queue_chunk(uint32_t index, std::string_view data) {
  std::shared_ptr<Landing> landing = landing_;
  return object_.write_chunk(index, data, [landing](Status s) {
    MutexLock lock(landing->mu);
    if (s.is_ok()) {
      ++landing->landed;
    } else if (landing->first_error.is_ok()) {
      landing->first_error = std::move(s);
    }
    landing->cv.notify_all();
  });
}

Status StagedPut::wait_for_landing(uint32_t chunks) {
  MutexLock lock(landing_->mu);
  while (landing_->landed < chunks && landing_->first_error.is_ok())
    landing_->cv.wait(landing_->mu);
  return landing_->first_error;
}

void StagedPut::set_expiry(int64_t expire_at_ms) {
  options_.expire_at_ms = expire_at_ms;
  object_.set_expiry(expire_at_ms);
}

Result<memory::WriteResult> StagedPut::commit(const ExclusiveRunner& exclusive) {
  TIERKV_RETURN_IF_ERROR(await_body());
  Result<memory::WriteResult> r = Status::ok();
  TIERKV_RETURN_IF_ERROR(run_exclusive(exclusive, [&] {
    Status queued = try_write_last();
    if (queued.code() == StatusCode::kBusy) return true;
    r = queued.is_ok() ? await_last() : Result<memory::WriteResult>(queued);
    return false;
  }));
  return r;
}

Status StagedPut::await_body() {
  {
    MutexLock lock(last_mu_);
    if (size_ == 0) have_last_ = true;  // its one chunk is empty
    if (!have_last_)
      return Status::invalid_argument("staged put: the object's end was not written");
  }
  TIERKV_RETURN_IF_ERROR(wait_for_landing(chunk_count_ - 1));
  if (object_.chunks_landed() + 1 < chunk_count_) {
    return Status::invalid_argument("staged put: not every chunk was written");
  }
  return Status::ok();
}

Status StagedPut::try_write_last() {
  MutexLock lock(last_mu_);  // its callback takes only the landing's lock
  return try_queue_chunk(chunk_count_ - 1, last_chunk_);
}

Result<memory::WriteResult> StagedPut::await_last() {
  TIERKV_RETURN_IF_ERROR(wait_for_landing(chunk_count_));
  // Visible now: a watcher of the absent key must see it came (and went).
  memory_.note_created(key_);
  MutexLock lock(locks_.for_hash(hash64(key_)));
  TIERKV_RETURN_IF_ERROR(publish_locked());
  return memory::WriteResult{.written = true, .version = version_, .previous = std::nullopt};
}

Status StagedPut::run_exclusive(const ExclusiveRunner& exclusive,
                                absl::FunctionRef<bool()> last_step) {
  const auto deadline = std::chrono::steady_clock::now() + kQueueWait;
  for (;;) {
    bool busy = false;
    if (exclusive) {
      TIERKV_RETURN_IF_ERROR(exclusive([&] { busy = last_step(); }));
    } else {
      busy = last_step();
    }
    if (!busy) return Status::ok();
    if (std::chrono::steady_clock::now() > deadline) {
      return Status::busy("flash's write queue stayed full; try again");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

// The object is on flash, indexed; memory may still hold an older version
// of the key, which would shadow it.
Status StagedPut::publish_locked() {
  if (std::optional<memory::ObjectInfo> in_memory = memory_.stat(key_)) {
    if (in_memory->version > version_) {
      return Status::conflict("the key was written while the staged put ran");
    }
    memory_.remove(key_, in_memory->version);
  }
  if (!copy_) return Status::ok();
  memory::MemoryTier::NoWaitScope no_wait;
  copy_->advance(size_ - copy_->filled());
  // A failure here only loses the memory copy: flash has the object.
  (void)memory_.install_copy(std::move(*copy_), version_, options_.expire_at_ms);
  copy_.reset();
  return Status::ok();
}

}  // namespace tierkv
