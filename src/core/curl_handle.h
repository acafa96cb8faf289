// One libcurl easy handle, owned (RAII), with the process-wide curl_global_init
// done once before the first; and watch_stop(), which lets a std::stop_token
// abort the handle's transfer. Used by the preheat HTTP source and the etcd
// client.
#pragma once

#include <curl/curl.h>

#include <mutex>
#include <stop_token>

namespace tierkv {

class CurlHandle {
 public:
  CurlHandle() : curl_(make()) {}
  CurlHandle(const CurlHandle&) = delete;
  CurlHandle& operator=(const CurlHandle&) = delete;
  ~CurlHandle() { curl_easy_cleanup(curl_); }
  CURL* get() const { return curl_; }

 private:
  static CURL* make() {
    static std::once_flag once;
    std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
    return curl_easy_init();
  }
  CURL* curl_;
};

// Makes a stop request abort the handle's transfer. curl calls the progress
// function often while data flows and about once a second while a server
// stalls (connecting included). `stop` must outlive the transfer.
inline void watch_stop(CURL* curl, std::stop_token& stop) {
  curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(
      curl, CURLOPT_XFERINFOFUNCTION,
      +[](void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) -> int {
        return static_cast<std::stop_token*>(user)->stop_requested() ? 1 : 0;
      });
  curl_easy_setopt(curl, CURLOPT_XFERINFODATA, &stop);
}

}  // namespace tierkv
