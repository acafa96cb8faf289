#include "core/durable_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/unique_fd.h"

namespace tierkv {
namespace {

Status failed(std::string_view what, const std::string& path) {
  return Status::io_error(std::string(what) + " " + path + ": " + std::strerror(errno));
}

std::string folder_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

Status write_file_durably(const std::string& path, std::string_view contents) {
  const std::string temporary = path + ".tmp";
  {
    UniqueFd fd(::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (fd.get() < 0) return failed("cannot create", temporary);
    for (size_t done = 0; done < contents.size();) {
      const ssize_t n = ::write(fd.get(), contents.data() + done, contents.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return failed("cannot write", temporary);
      done += static_cast<size_t>(n);
    }
    if (::fsync(fd.get()) != 0) return failed("cannot fsync", temporary);
  }
  if (::rename(temporary.c_str(), path.c_str()) != 0) return failed("cannot rename to", path);
  const std::string folder = folder_of(path);
  UniqueFd dir(::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir.get() < 0 || ::fsync(dir.get()) != 0) return failed("cannot fsync", folder);
  return Status::ok();
}

Result<std::string> read_small_file(const std::string& path, size_t max_bytes) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    if (errno == ENOENT) return Status::not_found(path);
    return failed("cannot open", path);
  }
  std::string out;
  char buffer[4096];
  for (;;) {
    const ssize_t n = ::read(fd.get(), buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return failed("cannot read", path);
    if (n == 0) return out;
    out.append(buffer, static_cast<size_t>(n));
    if (out.size() > max_bytes) return Status::too_large(path + ": larger than expected");
  }
}

}  // namespace tierkv
