#include "report/span_spill.hpp"

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <tuple>
#include <utility>

#include "common/span_reader.hpp"

namespace nemo::lens::cli {

namespace {

// TMPDIR as given (a bad one fails at the first file, with its name), else /tmp.
std::string temp_directory() {
  const char* dir = std::getenv("TMPDIR");
  return dir != nullptr && *dir != '\0' ? std::string(dir) : std::string("/tmp");
}

}  // namespace

SpanSpill::~SpanSpill() {
  for (std::FILE* f : files_) {
    if (f != nullptr) std::fclose(f);
  }
}

std::size_t SpanSpill::bucket_of(const SpanFacts& facts, std::uint64_t level) {
  std::uint64_t h = facts.trace_key ^
                    (static_cast<std::uint64_t>(facts.rank) * 0x9E3779B97F4A7C15ull) ^
                    (level * 0xD6E8FEB86659FD93ull);
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 32;
  return static_cast<std::size_t>(h % kBuckets);
}

std::vector<std::FILE*> SpanSpill::make_files() {
  if (directory_.empty()) directory_ = temp_directory();
  std::vector<std::FILE*> files;
  files.reserve(kBuckets);
  for (std::size_t i = 0; i < kBuckets; ++i) {
    std::string path = directory_ + "/lens-report-XXXXXX";
    const int fd = ::mkstemp(path.data());
    std::FILE* f = fd < 0 ? nullptr : ::fdopen(fd, "w+b");
    if (f == nullptr) {
      const int err = errno;
      if (fd >= 0) ::close(fd);
      for (std::FILE* made : files) std::fclose(made);
      throw FileError("cannot make a temporary file in '" + directory_ +
                      "' (TMPDIR) for the step analysis: " + std::strerror(err));
    }
    ::unlink(path.c_str());  // gone when closed, whatever happens
    files.push_back(f);
  }
  return files;
}

void SpanSpill::add(const SpanFacts& facts) {
  ++spans_;
  if (files_.empty()) {
    memory_.push_back(facts);
    if (memory_.size() <= in_memory_) return;
    files_ = make_files();
    for (const SpanFacts& kept : memory_) write(files_[bucket_of(kept, 0)], kept);
    memory_.clear();
    memory_.shrink_to_fit();
    return;
  }
  write(files_[bucket_of(facts, 0)], facts);
}

void SpanSpill::write(std::FILE* file, const SpanFacts& facts) {
  if (std::fwrite(&facts, sizeof facts, 1, file) != 1) {
    throw FileError("cannot write a temporary file in '" + directory_ +
                    "' (TMPDIR) for the step analysis: " + std::strerror(errno));
  }
}

void SpanSpill::each_trace(std::vector<SpanFacts>& spans,
                           const std::function<void(std::span<SpanFacts>)>& fn) {
  std::sort(spans.begin(), spans.end(), [](const SpanFacts& a, const SpanFacts& b) {
    return std::tie(a.rank, a.trace_key) < std::tie(b.rank, b.trace_key);
  });
  for (std::size_t begin = 0; begin < spans.size();) {
    std::size_t end = begin + 1;
    while (end < spans.size() && spans[end].rank == spans[begin].rank &&
           spans[end].trace_key == spans[begin].trace_key) {
      ++end;
    }
    fn(std::span<SpanFacts>(spans.data() + begin, end - begin));
    begin = end;
  }
}

void SpanSpill::drain(std::FILE* file, std::uint64_t level,
                      const std::function<void(std::span<SpanFacts>)>& fn) {
  auto fail = [&](const char* what) {
    const int err = errno;
    std::fclose(file);
    throw FileError(std::string("cannot ") + what + " a temporary file in '" + directory_ +
                    "': " + std::strerror(err));
  };
  const long bytes = std::ftell(file);
  if (bytes < 0 || std::fseek(file, 0, SEEK_SET) != 0) fail("read back");
  const std::size_t count = static_cast<std::size_t>(bytes) / sizeof(SpanFacts);
  std::vector<SpanFacts> spans;
  if (count <= in_memory_ || level >= 4) {
    spans.resize(count);
    if (count > 0 && std::fread(spans.data(), sizeof(SpanFacts), count, file) != count) {
      fail("read back");
    }
    std::fclose(file);
    each_trace(spans, fn);
    return;
  }
  // Too many for memory: split by another hash, unless the file is one trace.
  std::vector<std::FILE*> parts = make_files();
  std::vector<std::uint64_t> sizes(kBuckets, 0);
  bool one_trace = true;
  SpanFacts first{};
  spans.resize(4096);
  for (std::size_t done = 0; done < count;) {
    const std::size_t n = std::min(spans.size(), count - done);
    if (std::fread(spans.data(), sizeof(SpanFacts), n, file) != n) {
      for (std::FILE* p : parts) std::fclose(p);
      fail("read back");
    }
    if (done == 0) first = spans[0];
    for (std::size_t i = 0; i < n; ++i) {
      one_trace = one_trace && spans[i].rank == first.rank && spans[i].trace_key == first.trace_key;
      const std::size_t b = bucket_of(spans[i], level + 1);
      write(parts[b], spans[i]);
      ++sizes[b];
    }
    done += n;
  }
  std::fclose(file);
  spans = {};
  for (std::size_t b = 0; b < kBuckets; ++b) {
    std::FILE* part = std::exchange(parts[b], nullptr);
    if (sizes[b] == 0) {
      std::fclose(part);
      continue;
    }
    try {
      drain(part, one_trace ? 4 : level + 1, fn);  // one trace cannot be split: read it whole
    } catch (...) {
      for (std::FILE* rest : parts) {
        if (rest != nullptr) std::fclose(rest);
      }
      throw;
    }
  }
}

void SpanSpill::for_each_trace(const std::function<void(std::span<SpanFacts>)>& fn) {
  if (files_.empty()) {
    each_trace(memory_, fn);
    memory_.clear();
    memory_.shrink_to_fit();
    return;
  }
  std::vector<std::FILE*> files = std::move(files_);
  files_.clear();
  for (std::size_t i = 0; i < files.size(); ++i) {
    std::FILE* f = std::exchange(files[i], nullptr);
    try {
      drain(f, 0, fn);
    } catch (...) {
      for (std::FILE* rest : files) {
        if (rest != nullptr) std::fclose(rest);
      }
      throw;
    }
  }
}

}  // namespace nemo::lens::cli
