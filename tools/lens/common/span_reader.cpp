// Reading OTLP JSON Lines: the input files, their lines, and the threads that parse them in
// chunks and hand the requests on in input order. What one line holds is read by reader/:
// span_lines (the SAX pass: spans, resources, a captured resourceMetrics) and metric_lines.
#include "common/span_reader.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

#include "common/reader/metric_lines.hpp"
#include "common/reader/span_lines.hpp"

namespace nemo::lens::cli {

// ---- InputFile ----

InputFile::InputFile(std::string path) : path_(std::move(path)) {
  if (path_ == "-") {
    stream_ = stdin;
    return;
  }
  stream_ = std::fopen(path_.c_str(), "rb");
  if (stream_ == nullptr) {
    throw FileError("cannot open '" + path_ + "': " + std::strerror(errno));
  }
  struct stat st {};
  if (fstat(fileno(stream_), &st) == 0 && S_ISDIR(st.st_mode)) {
    std::fclose(stream_);
    stream_ = nullptr;
    throw FileError("cannot read '" + path_ + "': it is a directory");
  }
}

InputFile::InputFile(InputFile&& other) noexcept
    : path_(std::move(other.path_)), stream_(std::exchange(other.stream_, nullptr)) {}

InputFile::~InputFile() {
  if (stream_ != nullptr && stream_ != stdin) std::fclose(stream_);
}

namespace {

using ojson = nlohmann::ordered_json;

// ---- lines ----

// Splits a stream into lines without a limit on their number: one buffer, grown up to the
// longest line (at most kMaxLineBytes; longer lines are reported as too long and skipped).
class LineSplitter {
 public:
  LineSplitter(std::FILE* stream, const std::string& path) : stream_(stream), path_(path) {
    buffer_.resize(std::size_t{1} << 20);
  }

  // The next line, without its '\n' and a trailing '\r'; false at the end of the input.
  // `too_long` tells that the line was longer than the limit (its text is then empty).
  bool next(std::string_view& line, bool& too_long) {
    too_long = false;
    for (;;) {
      const char* base = buffer_.data();
      if (const void* nl = std::memchr(base + begin_, '\n', end_ - begin_)) {
        const std::size_t at = static_cast<std::size_t>(static_cast<const char*>(nl) - base);
        line = std::string_view(base + begin_, at - begin_);
        begin_ = at + 1;
        if (discarding_) {
          discarding_ = false;
          too_long = true;
          line = {};
        }
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        return true;
      }
      if (eof_) {
        if (begin_ == end_ && !discarding_) return false;
        line = std::string_view(base + begin_, end_ - begin_);
        begin_ = end_;
        if (discarding_) {
          discarding_ = false;
          too_long = true;
          line = {};
        }
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        return true;
      }
      if (begin_ > 0) {
        std::memmove(buffer_.data(), buffer_.data() + begin_, end_ - begin_);
        end_ -= begin_;
        begin_ = 0;
      }
      if (end_ == buffer_.size()) {
        if (buffer_.size() >= SpanLineReader::kMaxLineBytes) {
          discarding_ = true;  // keep reading to the end of this line, dropping its text
          end_ = 0;
        } else {
          buffer_.resize(std::min(buffer_.size() * 2, SpanLineReader::kMaxLineBytes));
        }
      }
      const std::size_t n = std::fread(buffer_.data() + end_, 1, buffer_.size() - end_, stream_);
      end_ += n;
      if (n == 0) {
        if (std::ferror(stream_)) {
          throw FileError("cannot read '" + path_ + "': " + std::strerror(errno));
        }
        eof_ = true;
      }
    }
  }

 private:
  std::FILE* stream_;
  const std::string& path_;
  std::vector<char> buffer_;
  std::size_t begin_ = 0;
  std::size_t end_ = 0;
  bool eof_ = false;
  bool discarding_ = false;
};

bool is_blank(std::string_view line) {
  for (char c : line) {
    if (c != ' ' && c != '\t' && c != '\r' && c != '\n') return false;
  }
  return true;
}

}  // namespace

std::string SpanLineReader::parse_line(std::string_view line, ParsedRequest& out) const {
  ojson resource_metrics, resource_logs;
  if (std::string e = reader::read_span_line(line, out, options_.details, options_.metrics,
                                             options_.logs, resource_metrics, resource_logs);
      !e.empty()) {
    return e;
  }
  if (resource_logs.is_array()) {
    try {
      reader::read_logs(resource_logs, out);
    } catch (const std::exception&) {  // out of memory: the records read so far stand
    }
  }
  if (resource_metrics.is_array()) {
    try {
      if (std::string e = reader::read_metrics(resource_metrics, out); !e.empty()) return e;
    } catch (const std::exception& e) {
      return std::string("cannot read the metrics: ") + e.what();
    }
  }
  return {};
}

namespace {

std::string too_long_error() {
  return "the line is longer than " + std::to_string(SpanLineReader::kMaxLineBytes >> 20) + " MiB";
}

// Lines handed to a parsing thread, and what it made of them.
struct Chunk {
  struct Line {
    std::size_t offset;
    std::size_t size;
    std::uint64_t number;
    bool too_long;
  };
  std::uint64_t sequence = 0;
  std::string text;  // the lines' text, back to back
  std::vector<Line> lines;
  std::vector<ParsedRequest> requests;  // requests[i]: lines[i] parsed (reused between chunks)
  std::vector<std::string> errors;      // errors[i]: why lines[i] is malformed, empty if not
};

constexpr std::size_t kChunkBytes = std::size_t{1} << 20;
constexpr std::size_t kChunkLines = 256;

}  // namespace

unsigned SpanLineReader::thread_count() const {
  if (options_.threads != 0) return options_.threads;
  return std::clamp(std::thread::hardware_concurrency(), 1u, 4u);
}

void SpanLineReader::deliver(std::string_view path, std::uint64_t number, std::string& error,
                             const ParsedRequest& request, const RequestCallback& on_request,
                             const MalformedCallback& on_malformed) {
  ++counts_.lines;
  if (!error.empty()) {
    ++counts_.malformed;
    on_malformed(MalformedLine{path, number, std::move(error)});
    return;
  }
  if (request.has_spans) {
    ++counts_.requests;
    counts_.spans += request.span_count;
  }
  if (request.has_metrics) {
    ++counts_.metric_lines;
    counts_.data_points += request.data_points;
  }
  if (request.has_logs) ++counts_.log_lines;
  on_request(request);
}

void SpanLineReader::read(InputFile& file, const RequestCallback& on_request,
                          const MalformedCallback& on_malformed) {
  LineSplitter lines(file.stream(), file.path());
  std::string_view line;
  bool too_long = false;
  std::uint64_t number = 0;
  const unsigned threads = thread_count();
  if (threads <= 1) {
    while (lines.next(line, too_long)) {
      ++number;
      if (!too_long && is_blank(line)) continue;
      std::string error = too_long ? too_long_error() : parse_line(line, request_);
      deliver(file.path(), number, error, request_, on_request, on_malformed);
    }
    return;
  }

  // Parsing threads take chunks of lines; this thread reads the next chunks meanwhile and hands
  // the parsed requests on in input order. At most 2 chunks per thread are in flight.
  std::mutex mutex;
  std::condition_variable work_ready, chunk_done;
  std::deque<Chunk*> todo;
  std::map<std::uint64_t, Chunk*> done;
  bool stop = false;
  std::vector<std::unique_ptr<Chunk>> pool;
  std::vector<Chunk*> free_chunks;
  for (unsigned i = 0; i < 2 * threads; ++i) {
    free_chunks.push_back(pool.emplace_back(std::make_unique<Chunk>()).get());
  }
  auto work = [&] {
    for (;;) {
      Chunk* c = nullptr;
      {
        std::unique_lock lock(mutex);
        work_ready.wait(lock, [&] { return stop || !todo.empty(); });
        if (stop) return;
        c = todo.front();
        todo.pop_front();
      }
      if (c->requests.size() < c->lines.size()) c->requests.resize(c->lines.size());
      c->errors.resize(c->lines.size());
      for (std::size_t i = 0; i < c->lines.size(); ++i) {
        const Chunk::Line& l = c->lines[i];
        c->errors[i] = l.too_long ? too_long_error()
                                  : parse_line(std::string_view(c->text).substr(l.offset, l.size),
                                               c->requests[i]);
      }
      std::lock_guard lock(mutex);
      done.emplace(c->sequence, c);
      chunk_done.notify_all();
    }
  };
  std::vector<std::thread> workers;
  struct Join {  // stops and joins the threads however this function is left
    std::vector<std::thread>& workers;
    std::mutex& mutex;
    bool& stop;
    std::condition_variable& work_ready;
    ~Join() {
      {
        std::lock_guard lock(mutex);
        stop = true;
      }
      work_ready.notify_all();
      for (std::thread& t : workers) t.join();
    }
  } join{workers, mutex, stop, work_ready};
  for (unsigned i = 0; i < threads; ++i) workers.emplace_back(work);

  std::uint64_t submitted = 0, delivered = 0;
  bool end_of_input = false;
  for (;;) {
    while (!end_of_input && !free_chunks.empty()) {
      Chunk* c = free_chunks.back();
      c->text.clear();
      c->lines.clear();
      while (c->text.size() < kChunkBytes && c->lines.size() < kChunkLines) {
        if (!lines.next(line, too_long)) {
          end_of_input = true;
          break;
        }
        ++number;
        if (!too_long && is_blank(line)) continue;
        c->lines.push_back({c->text.size(), line.size(), number, too_long});
        c->text.append(line);
      }
      if (c->lines.empty()) break;
      free_chunks.pop_back();
      c->sequence = submitted++;
      {
        std::lock_guard lock(mutex);
        todo.push_back(c);
      }
      work_ready.notify_one();
    }
    if (delivered == submitted) {
      if (end_of_input) return;
      continue;
    }
    Chunk* c = nullptr;
    {
      std::unique_lock lock(mutex);
      chunk_done.wait(lock, [&] { return done.contains(delivered); });
      auto it = done.find(delivered);
      c = it->second;
      done.erase(it);
    }
    for (std::size_t i = 0; i < c->lines.size(); ++i) {
      deliver(file.path(), c->lines[i].number, c->errors[i], c->requests[i], on_request,
              on_malformed);
    }
    ++delivered;
    free_chunks.push_back(c);
  }
}

}  // namespace nemo::lens::cli
