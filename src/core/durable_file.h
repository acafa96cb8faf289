// Small files that must survive a crash whole: written to a temporary file
// beside the target, fsynced, renamed over it, and the directory fsynced.
// A reader sees the old contents or the new, never a mix.
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"

namespace tierkv {

Status write_file_durably(const std::string& path, std::string_view contents);
// NotFound if there is no file at `path`.
Result<std::string> read_small_file(const std::string& path, size_t max_bytes = 16 << 20);

}  // namespace tierkv
