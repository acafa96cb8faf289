#include "store/flash_reader.h"

#include <fmt/format.h>

#include <absl/container/inlined_vector.h>

#include <cstring>
#include <mutex>
#include <vector>

namespace tierkv {

struct FlashReader::Op {
  std::mutex mu;
  std::string key;
  uint64_t version = 0;
  uint64_t object_size = 0;
  uint64_t chunk_size = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
  uint32_t first = 0;  // first chunk of the range
  absl::InlinedVector<std::shared_ptr<const flash::FlashChunk>, 1> arrived;
  // A one-chunk read keeps its chunk here, and pieces share the op's
  // ownership: one allocation fewer on the most common read.
  std::optional<flash::FlashChunk> single;
  size_t next = 0;       // next chunk (relative to first) to hand out
  size_t completed = 0;  // chunks whose read finished, well or not
  Status error;
  FlashReadCallbacks callbacks;
  std::optional<memory::ObjectWriter> copy;
  OnCopied on_copied;

  uint64_t expected_length(uint32_t index) const {
    uint64_t start = index * chunk_size;
    return std::min(chunk_size, object_size - std::min(object_size, start));
  }
  // The part of chunk `index` inside the requested range.
  std::string_view slice(uint32_t index, std::string_view data) const {
    uint64_t start = index * chunk_size;
    uint64_t from = offset > start ? offset - start : 0;
    uint64_t end = std::min<uint64_t>(offset + length - start, data.size());
    return data.substr(from, end - from);
  }
};

void FlashReader::start(std::string_view key, const flash::FlashObjectSummary& info,
                        uint64_t offset, uint64_t length, FlashReadCallbacks callbacks,
                        std::optional<memory::ObjectWriter> copy, OnCopied on_copied) {
  auto op = std::make_shared<Op>();
  op->key.assign(key);
  op->version = info.version;
  op->object_size = info.object_size;
  op->chunk_size = chunk_size_;
  op->offset = offset;
  op->length = length;
  op->callbacks = std::move(callbacks);
  op->copy = std::move(copy);
  op->on_copied = std::move(on_copied);
  if (length == 0 && !op->copy) {
    op->callbacks.on_done(Status::ok());
    return;
  }
  uint32_t first = static_cast<uint32_t>(offset / chunk_size_);
  uint32_t last = length == 0 ? first : static_cast<uint32_t>((offset + length - 1) / chunk_size_);
  op->first = first;
  op->arrived.resize(last - first + 1);
  absl::InlinedVector<uint32_t, 4> indexes;
  for (uint32_t i = first; i <= last; ++i) indexes.push_back(i);
  flash_.read_chunks(op->key, indexes, info.version,
                     [op](uint32_t index, Result<flash::FlashChunk> chunk) {
                       on_chunk(op, index, std::move(chunk));
                     });
}

void FlashReader::on_chunk(const std::shared_ptr<Op>& op, uint32_t index,
                           Result<flash::FlashChunk> chunk) {
  std::unique_lock lock(op->mu);
  if (chunk && chunk->data().size() != op->expected_length(index))
    chunk =
        Status::corruption(fmt::format("chunk {} of '{}' has {} bytes, expected {}", index, op->key,
                                       chunk->data().size(), op->expected_length(index)));
  if (!chunk) {
    if (op->error.is_ok()) op->error = chunk.status();
  } else if (op->error.is_ok()) {
    std::shared_ptr<const flash::FlashChunk> held;
    if (op->arrived.size() == 1) {
      op->single.emplace(std::move(*chunk));
      held = std::shared_ptr<const flash::FlashChunk>(op, &*op->single);
    } else {
      held = std::make_shared<const flash::FlashChunk>(std::move(*chunk));
    }
    if (op->copy) {
      std::memcpy(op->copy->chunk_data(index), held->data().data(), held->data().size());
      op->copy->advance(held->data().size());
    }
    op->arrived[index - op->first] = std::move(held);
    // Pieces go out under the op's lock: completions may run on several
    // threads, and the order of delivery is the point.
    while (op->next < op->arrived.size() && op->arrived[op->next]) {
      auto& c = op->arrived[op->next];
      std::string_view piece = op->slice(op->first + static_cast<uint32_t>(op->next), c->data());
      if (!piece.empty()) op->callbacks.on_piece(ValuePiece{piece, c});
      c.reset();
      ++op->next;
    }
  }
  if (++op->completed < op->arrived.size()) return;
  Status result = op->error;
  lock.unlock();
  op->callbacks.on_done(result);
  if (op->copy) op->on_copied(std::move(*op->copy), result);
}

}  // namespace tierkv
