#include "store/preheat/preheat_jobs.h"

#include "store/preheat/preheat_source.h"
#include "store/preheat/preheater.h"

namespace tierkv {

namespace {

Status no_flash() {
  return Status::unavailable("preheat needs the flash tier (flash-size > 0)");
}

}  // namespace

Result<uint64_t> PreheatJobs::start(PreheatRequest request) {
  Preheater* p = preheater();
  if (!p) return no_flash();
  TIERKV_RETURN_IF_ERROR(check_key_(request.key));
  return p->start(std::move(request));
}

std::optional<PreheatJobStatus> PreheatJobs::job(uint64_t id) const {
  Preheater* p = preheater();
  return p ? p->job(id) : std::nullopt;
}

std::vector<PreheatJobStatus> PreheatJobs::jobs(uint64_t first_id, size_t count,
                                                uint64_t* next_id) const {
  if (next_id) *next_id = 0;
  Preheater* p = preheater();
  return p ? p->jobs(first_id, count, next_id) : std::vector<PreheatJobStatus>{};
}

Status PreheatJobs::cancel(uint64_t id) {
  Preheater* p = preheater();
  return p ? p->cancel(id) : Status::not_found("no such preheat job");
}

Result<std::vector<uint64_t>> PreheatJobs::start_folder(const std::string& key_prefix,
                                                        const std::string& dir_url,
                                                        const PreheatRequest& options) {
  Preheater* p = preheater();
  if (!p) return no_flash();
  // The folder itself must be allowed; each file is checked again.
  if (!p->allowed(dir_url)) {
    return Status::invalid_argument("preheat source not allowed by preheat-sources: " + dir_url);
  }
  Result<std::vector<std::string>> files = list_source_dir(dir_url, p->max_files());
  if (!files) return files.status();
  std::vector<uint64_t> ids;
  for (const std::string& file : *files) {
    PreheatRequest r = options;
    r.key = key_prefix + file;
    r.source = dir_url + file;
    Result<uint64_t> id = start(std::move(r));
    if (!id) {
      for (uint64_t started : ids) (void)cancel(started);
      return id.status();
    }
    ids.push_back(*id);
  }
  return ids;
}

void PreheatJobs::start_folder_async(std::string key_prefix, std::string dir_url,
                                     PreheatRequest options,
                                     std::function<void(Result<std::vector<uint64_t>>)> done) {
  Preheater* p = preheater();
  if (!p) return done(no_flash());
  p->run_task([this, key_prefix = std::move(key_prefix), dir_url = std::move(dir_url),
               options = std::move(options), done = std::move(done)](bool run) {
    done(run ? start_folder(key_prefix, dir_url, options)
             : Result<std::vector<uint64_t>>(Status::unavailable("the server is shutting down")));
  });
}

}  // namespace tierkv
