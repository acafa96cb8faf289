// Where a preheat job reads from: a local file (file:///path) or an
// http(s) URL (libcurl, one Range request per piece).
//
// A source is opened once per job: open_source() learns its length and a
// validator (the file's size, mtime and inode; the server's ETag or
// Last-Modified). Every read checks the validator again, so a source that
// changes during the job fails it ("source changed") instead of giving an
// object made of two versions.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace tierkv {

struct SourceInfo {
  uint64_t length = 0;
  std::string validator;  // empty: the source gives none (HTTP without ETag/Last-Modified)
};

class PreheatSource {
 public:
  virtual ~PreheatSource() = default;
  const SourceInfo& info() const { return info_; }
  // Fills `out` with the bytes at `offset`. Thread-safe. IOError for a
  // failure worth retrying; NotFound, Conflict ("source changed") and
  // InvalidArgument are final. A stop requested on `stop` ends the read
  // within about a second, even one a stalled server holds up, with
  // Unavailable ("cancelled").
  virtual Status read(uint64_t offset, std::span<char> out, std::stop_token stop) = 0;

 protected:
  SourceInfo info_;
};

// Opens file:///absolute/path or http(s)://... (anything else:
// InvalidArgument), if the allowlist `allowed` admits it now: a job checks
// again when it starts, since the allowlist or the folders may have changed
// while it was queued. A file is opened beneath its allowed folder without
// following any symlink on the way (openat2), and the file opened must be
// allowed. NotFound for a missing file or an HTTP 404. A stop request ends
// an HTTP open in flight (Unavailable); a file open never blocks.
Result<std::unique_ptr<PreheatSource>> open_source(const std::string& url,
                                                   const std::vector<std::string>& allowed,
                                                   std::stop_token stop = {});

// The allowlist (preheat-sources): true if `url` starts with one of the
// prefixes at a path boundary. file:// URLs are compared after resolving
// the path (symlinks, "..") and http(s) URLs must not contain dot segments,
// so neither can reach outside an allowed prefix.
bool source_allowed(const std::string& url, const std::vector<std::string>& prefixes);

// The files under a file:// directory URL, as paths relative to it, sorted
// (TIER.PREHEAT PREFIX). Symlinks are not followed. InvalidArgument if
// there are more than `max_files` (the walk stops there).
Result<std::vector<std::string>> list_source_dir(const std::string& dir_url, size_t max_files);

}  // namespace tierkv
