#include "store/preheat/preheat_source.h"

#include "core/curl_handle.h"
#include "core/mutex.h"

#include <curl/curl.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

namespace tierkv {

namespace {

constexpr std::string_view kFileScheme = "file://";

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

bool is_http(std::string_view url) {
  return starts_with(url, "http://") || starts_with(url, "https://");
}

std::string errno_text(const std::string& what) {
  return what + ": " + std::strerror(errno);
}

// --- file:// ---

std::string file_validator(const struct stat& st) {
  return std::to_string(st.st_size) + ":" + std::to_string(st.st_mtim.tv_sec) + "." +
         std::to_string(st.st_mtim.tv_nsec) + ":" + std::to_string(st.st_ino);
}

std::string resolved_file_path(std::string_view url);

// Opens `path` below `root` (a directory) without following any symlink
// on the way and without leaving it (openat2 RESOLVE_BENEATH |
// RESOLVE_NO_SYMLINKS): a folder swapped for a symlink after the allowlist
// was checked is refused, not followed. -1 with errno ENOSYS where the
// kernel has no openat2, or EXDEV if `path` is not under `root`.
int open_beneath(const std::string& root, const std::string& path, int flags) {
  std::string dir = root;
  if (!dir.ends_with('/')) dir += '/';
  if (!starts_with(path, dir)) {
    errno = EXDEV;
    return -1;
  }
  const int dir_fd = ::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) return -1;
  struct open_how how {};
  how.flags = static_cast<uint64_t>(flags);
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  const std::string relative = path.substr(dir.size());
  const int fd =
      static_cast<int>(::syscall(SYS_openat2, dir_fd, relative.c_str(), &how, sizeof how));
  const int saved = errno;
  ::close(dir_fd);
  errno = saved;
  return fd;
}

// The file a descriptor names, as the kernel resolved it.
std::string fd_path(int fd) {
  std::error_code ec;
  std::filesystem::path p =
      std::filesystem::read_symlink("/proc/self/fd/" + std::to_string(fd), ec);
  return ec ? std::string() : p.string();
}

// Opens the file of a file:// URL that `allowed` admits: beneath the
// allowed folder it names, or (no openat2, or a prefix that names a file)
// without following a final symlink; either way the file opened must itself
// be allowed, whatever changed since the job was queued.
int open_allowed(const std::string& path, const std::vector<std::string>& allowed, int flags) {
  int fd = -1;
  errno = EXDEV;
  for (const std::string& prefix : allowed) {
    if (!starts_with(prefix, "file://") || !prefix.ends_with('/')) continue;
    for (const std::string& root : {prefix.substr(7), resolved_file_path(prefix)}) {
      fd = open_beneath(root, path, flags);
      if (fd >= 0 || (errno != EXDEV && errno != ENOSYS)) break;
    }
    if (fd >= 0 || (errno != EXDEV && errno != ENOSYS)) break;
  }
  if (fd < 0 && (errno == EXDEV || errno == ENOSYS)) fd = ::open(path.c_str(), flags | O_NOFOLLOW);
  if (fd < 0) return -1;
  if (!source_allowed("file://" + fd_path(fd), allowed)) {
    ::close(fd);
    errno = EACCES;
    return -1;
  }
  return fd;
}

class FileSource final : public PreheatSource {
 public:
  static Result<std::unique_ptr<PreheatSource>> open(const std::string& path,
                                                     const std::vector<std::string>& allowed) {
    // Non-blocking: opening a FIFO (or a device) must not hang a worker
    // before the type check below refuses it.
    const int fd = open_allowed(path, allowed, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
      if (errno == ENOENT) return Status::not_found("no such file: " + path);
      if (errno == ELOOP) return Status::invalid_argument("a symbolic link on the way to " + path);
      if (errno == EACCES || errno == EXDEV)
        return Status::invalid_argument("preheat source not allowed by preheat-sources: " + path);
      return Status::io_error(errno_text("cannot open " + path));
    }
    auto source = std::unique_ptr<FileSource>(new FileSource(fd, path));
    struct stat st {};
    if (::fstat(fd, &st) != 0) return Status::io_error(errno_text("cannot stat " + path));
    if (!S_ISREG(st.st_mode)) return Status::invalid_argument("not a regular file: " + path);
    source->info_ = {static_cast<uint64_t>(st.st_size), file_validator(st)};
    return std::unique_ptr<PreheatSource>(std::move(source));
  }
  ~FileSource() override { ::close(fd_); }

  Status read(uint64_t offset, std::span<char> out, std::stop_token stop) override {
    size_t done = 0;
    while (done < out.size()) {
      if (stop.stop_requested()) return Status::unavailable("cancelled");
      const ssize_t n =
          ::pread(fd_, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return Status::io_error(errno_text("read of " + path_));
      if (n == 0) return Status::conflict("source changed: " + path_ + " got shorter");
      done += static_cast<size_t>(n);
    }
    // After the read: a change while it ran shows in the mtime.
    struct stat st {};
    if (::fstat(fd_, &st) != 0) return Status::io_error(errno_text("cannot stat " + path_));
    if (file_validator(st) != info_.validator) return Status::conflict("source changed: " + path_);
    return Status::ok();
  }

 private:
  FileSource(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_;
  std::string path_;
};

// --- http(s):// ---

// What one HTTP exchange gathered.
struct HttpReply {
  long code = 0;
  std::string etag, last_modified, content_range;
  std::span<char> out;  // body destination (GET)
  size_t received = 0;
  bool overflow = false;
};

std::string trim(std::string_view v) {
  while (!v.empty() && (v.back() == '\r' || v.back() == '\n' || v.back() == ' '))
    v.remove_suffix(1);
  while (!v.empty() && v.front() == ' ') v.remove_prefix(1);
  return std::string(v);
}

size_t on_header(char* data, size_t size, size_t n, void* user) {
  auto& reply = *static_cast<HttpReply*>(user);
  const std::string_view line(data, size * n);
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos) return size * n;
  std::string name(line.substr(0, colon));
  std::transform(name.begin(), name.end(), name.begin(), ::tolower);
  const std::string value = trim(line.substr(colon + 1));
  if (name == "etag") reply.etag = value;
  if (name == "last-modified") reply.last_modified = value;
  if (name == "content-range") reply.content_range = value;
  return size * n;
}

size_t on_body(char* data, size_t size, size_t n, void* user) {
  auto& reply = *static_cast<HttpReply*>(user);
  const size_t bytes = size * n;
  if (reply.received + bytes > reply.out.size()) {
    reply.overflow = true;
    return 0;  // aborts the transfer
  }
  std::memcpy(reply.out.data() + reply.received, data, bytes);
  reply.received += bytes;
  return bytes;
}

std::string validator_of(const HttpReply& r) {
  if (!r.etag.empty()) return "etag:" + r.etag;
  if (!r.last_modified.empty()) return "last-modified:" + r.last_modified;
  return "";
}

class HttpSource final : public PreheatSource {
 public:
  static Result<std::unique_ptr<PreheatSource>> open(const std::string& url, std::stop_token stop) {
    auto source = std::unique_ptr<HttpSource>(new HttpSource(url));
    CurlHandle h;
    HttpReply reply;
    source->prepare(h.get(), reply);
    watch_stop(h.get(), stop);
    curl_easy_setopt(h.get(), CURLOPT_NOBODY, 1L);
    const CURLcode rc = curl_easy_perform(h.get());
    if (rc == CURLE_ABORTED_BY_CALLBACK) return Status::unavailable("cancelled");
    if (rc != CURLE_OK) return Status::io_error(url + ": " + curl_easy_strerror(rc));
    curl_easy_getinfo(h.get(), CURLINFO_RESPONSE_CODE, &reply.code);
    if (reply.code == 404) return Status::not_found(url + ": HTTP 404");
    if (reply.code != 200) {
      return Status::io_error(url + ": HTTP " + std::to_string(reply.code));
    }
    curl_off_t length = -1;
    curl_easy_getinfo(h.get(), CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length);
    if (length < 0) return Status::invalid_argument(url + ": the server gives no length");
    source->info_ = {static_cast<uint64_t>(length), validator_of(reply)};
    return std::unique_ptr<PreheatSource>(std::move(source));
  }

  Status read(uint64_t offset, std::span<char> out, std::stop_token stop) override {
    if (out.empty()) return Status::ok();
    // A handle keeps its connection: pieces reuse them instead of opening
    // a TCP connection (and a TLS session) each.
    std::unique_ptr<CurlHandle> handle = take_handle();
    CurlHandle& h = *handle;
    const Status st = read_with(h, offset, out, stop);
    if (st.is_ok()) give_back(std::move(handle));
    return st;
  }

 private:
  Status read_with(CurlHandle& h, uint64_t offset, std::span<char> out, std::stop_token& stop) {
    HttpReply reply;
    reply.out = out;
    prepare(h.get(), reply);
    watch_stop(h.get(), stop);
    const std::string range =
        std::to_string(offset) + "-" + std::to_string(offset + out.size() - 1);
    curl_easy_setopt(h.get(), CURLOPT_RANGE, range.c_str());
    curl_easy_setopt(h.get(), CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h.get(), CURLOPT_WRITEDATA, &reply);
    const CURLcode rc = curl_easy_perform(h.get());
    curl_easy_getinfo(h.get(), CURLINFO_RESPONSE_CODE, &reply.code);
    if (rc == CURLE_ABORTED_BY_CALLBACK) return Status::unavailable("cancelled");
    if (reply.overflow) return Status::conflict("source changed: " + url_ + " sent too much");
    if (rc != CURLE_OK) return Status::io_error(url_ + ": " + curl_easy_strerror(rc));
    if (reply.code == 404) return Status::not_found(url_ + ": HTTP 404");
    const bool whole = offset == 0 && out.size() == info_.length;
    if (reply.code != 206 && !(reply.code == 200 && whole)) {
      return Status::io_error(url_ + ": HTTP " + std::to_string(reply.code) + " for a range");
    }
    // A 206 must be the range asked for, of an object of the length
    // opened: a shifted range would put bytes at the wrong offset.
    const std::string expected =
        fmt::format("bytes {}-{}/{}", offset, offset + out.size() - 1, info_.length);
    const bool range_ok = reply.code == 200 || reply.content_range == expected;
    if (validator_of(reply) != info_.validator || !range_ok) {
      return Status::conflict("source changed: " + url_);
    }
    if (reply.received != out.size()) return Status::io_error(url_ + ": short read");
    return Status::ok();
  }

  std::unique_ptr<CurlHandle> take_handle() {
    MutexLock lock(handles_mu_);
    if (handles_.empty()) return std::make_unique<CurlHandle>();
    std::unique_ptr<CurlHandle> h = std::move(handles_.back());
    handles_.pop_back();
    return h;
  }
  void give_back(std::unique_ptr<CurlHandle> h) {
    MutexLock lock(handles_mu_);
    handles_.push_back(std::move(h));
  }

  explicit HttpSource(std::string url) : url_(std::move(url)) {}

  void prepare(CURL* curl, HttpReply& reply) const {
    curl_easy_setopt(curl, CURLOPT_URL, url_.c_str());
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    // Redirects could leave the allowlisted prefix.
    curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, 10L);
    // A server that stops sending: under 1 KiB/s for 20 s ends the request.
    curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1024L);
    curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME, 20L);
    curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(curl, CURLOPT_HEADERDATA, &reply);
  }

  std::string url_;
  Mutex handles_mu_;
  // idle, connected
  std::vector<std::unique_ptr<CurlHandle>> handles_ ABSL_GUARDED_BY(handles_mu_);
};

// A path some server or proxy may read as another path than the allowlist
// sees: a dot segment (also encoded, or with a `;` parameter as Tomcat reads
// `..;/`), an encoded slash or backslash, or a backslash.
bool has_dot_segment(std::string_view url) {
  const size_t path = url.find('/', url.find("//") + 2);
  if (path == std::string_view::npos) return false;
  std::string_view p = url.substr(path);
  p = p.substr(0, p.find_first_of("?#"));
  for (std::string_view seg : {"/./", "/../"}) {
    if (p.find(seg) != std::string_view::npos) return true;
  }
  if (p.ends_with("/.") || p.ends_with("/..")) return true;
  for (std::string_view bad : {"%2e", "%2E", "%2f", "%2F", "%5c", "%5C", "\\", "/..;", "/.;"})
    if (p.find(bad) != std::string_view::npos) return true;
  return false;
}

// The path of a file:// URL, resolved (empty if it cannot be).
std::string resolved_file_path(std::string_view url) {
  std::error_code ec;
  std::filesystem::path p = std::filesystem::weakly_canonical(
      std::filesystem::path(std::string(url.substr(kFileScheme.size()))), ec);
  return ec ? std::string() : p.string();
}

bool prefix_at_boundary(std::string_view s, std::string_view prefix) {
  if (prefix.empty() || !starts_with(s, prefix)) return false;
  return prefix.back() == '/' || s.size() == prefix.size() || s[prefix.size()] == '/';
}

}  // namespace

Result<std::unique_ptr<PreheatSource>> open_source(const std::string& url,
                                                   const std::vector<std::string>& allowed,
                                                   std::stop_token stop) {
  if (!source_allowed(url, allowed)) {
    return Status::invalid_argument("preheat source not allowed by preheat-sources: " + url);
  }
  if (starts_with(url, kFileScheme)) {
    const std::string path = url.substr(kFileScheme.size());
    if (path.empty() || path[0] != '/') {
      return Status::invalid_argument("file source needs an absolute path: " + url);
    }
    return FileSource::open(path, allowed);
  }
  if (is_http(url)) return HttpSource::open(url, stop);
  return Status::invalid_argument("unsupported source (file://, http://, https://): " + url);
}

bool source_allowed(const std::string& url, const std::vector<std::string>& prefixes) {
  if (starts_with(url, kFileScheme)) {
    const std::string path = resolved_file_path(url);
    if (path.empty()) return false;
    for (const std::string& prefix : prefixes) {
      if (!starts_with(prefix, kFileScheme)) continue;
      std::string allowed = resolved_file_path(prefix);
      if (prefix.ends_with('/') && !allowed.ends_with('/')) allowed += '/';
      // With a '/' after it, the path also matches the directory itself.
      if (!allowed.empty() && prefix_at_boundary(path + "/", allowed)) return true;
    }
    return false;
  }
  if (!is_http(url) || has_dot_segment(url)) return false;
  for (const std::string& prefix : prefixes) {
    if (is_http(prefix) && prefix_at_boundary(url, prefix)) return true;
  }
  return false;
}

Result<std::vector<std::string>> list_source_dir(const std::string& dir_url, size_t max_files) {
  if (!starts_with(dir_url, kFileScheme)) {
    return Status::invalid_argument("PREFIX needs a file:// directory: " + dir_url);
  }
  const std::filesystem::path dir(dir_url.substr(kFileScheme.size()));
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return Status::not_found("no such directory: " + dir.string());
  }
  std::vector<std::string> files;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_regular_file(ec) && !it->is_symlink(ec)) {
      if (files.size() == max_files) {
        return Status::invalid_argument(fmt::format(
            "more than {} files under {} (preheat-max-files)", max_files, dir.string()));
      }
      files.push_back(std::filesystem::relative(it->path(), dir, ec).string());
    }
  }
  if (ec) return Status::io_error("cannot list " + dir.string() + ": " + ec.message());
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace tierkv
