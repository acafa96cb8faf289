#include "server/net/transport.h"

#include <algorithm>

namespace tierkv::server {
namespace {

constexpr size_t kRecordBytes = 16 * 1024;  // TLS's largest record payload

}  // namespace

asio::const_buffer Transport::tls_record(const std::vector<asio::const_buffer>& buffers) {
  size_t first = 0;
  while (first < buffers.size() && buffers[first].size() == 0) ++first;
  if (first == buffers.size()) return {};
  if (buffers[first].size() >= kRecordBytes) return buffers[first];
  scratch_.clear();
  for (size_t i = first; i < buffers.size() && scratch_.size() < kRecordBytes; ++i) {
    const size_t take = std::min(buffers[i].size(), kRecordBytes - scratch_.size());
    scratch_.append(static_cast<const char*>(buffers[i].data()), take);
  }
  return asio::buffer(scratch_);
}

}  // namespace tierkv::server
