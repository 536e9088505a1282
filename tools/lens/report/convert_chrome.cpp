#include "report/convert_chrome.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <tuple>

#include "common/json_output.hpp"
#include "nemo/lens/semconv.hpp"
#include "report/report_builder.hpp"
#include "report/report_output.hpp"

namespace nemo::lens::cli {
namespace {

std::string hex16(std::uint64_t v) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) out[static_cast<std::size_t>(i)] = kHex[v & 0xf];
  return out;
}

}  // namespace

std::string micros_text(std::uint64_t ns) {
  std::string out = std::to_string(ns / 1000);
  std::uint64_t frac = ns % 1000;
  if (frac == 0) return out;
  std::string digits = std::to_string(frac);
  digits.insert(0, 3 - digits.size(), '0');
  while (digits.back() == '0') digits.pop_back();
  return out + "." + digits;
}

ChromeTraceWriter::ChromeTraceWriter(std::FILE* out, std::string path)
    : out_(out), path_(std::move(path)) {
  std::fputs("{\"traceEvents\":[", out_);
}

void ChromeTraceWriter::write_event(const std::string& json) {
  if (!first_)
    std::fputs(",\n", out_);
  else
    std::fputs("\n", out_);
  first_ = false;
  std::fwrite(json.data(), 1, json.size(), out_);
  ++events_;
}

void ChromeTraceWriter::name_process(std::int64_t pid, bool known_rank) {
  if (!processes_.insert(pid).second) return;
  const std::string name = known_rank ? "rank " + std::to_string(pid) : "rank unknown";
  write_event("{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" + std::to_string(pid) +
              ",\"tid\":0,\"args\":{\"name\":" + json_string(name) + "}}");
  write_event("{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":" + std::to_string(pid) +
              ",\"tid\":0,\"args\":{\"sort_index\":" + std::to_string(pid) + "}}");
}

void ChromeTraceWriter::write_counters() {
  for (const MetricRow& m : metrics_.finish()) {
    // Metrics without dl.rank (a service.instance.id only) share the unknown rank's process.
    const std::int64_t pid = m.rank.value_or(kUnknownRankPid);
    name_process(pid, m.rank.has_value());
    const bool distribution = m.type == MetricType::kHistogram ||
                              m.type == MetricType::kExponentialHistogram ||
                              m.type == MetricType::kSummary;
    for (const TimeSeries& series : m.timeseries) {
      // One track per series: Perfetto keys counter tracks by process and name.
      std::string name = m.name;
      if (!series.attributes.empty()) name += " {" + series.attributes + "}";
      const std::string head = "{\"name\":" + json_string(name) +
                               ",\"cat\":\"metric\",\"ph\":\"C\",\"pid\":" + std::to_string(pid) +
                               ",\"tid\":0,\"ts\":";
      for (const SeriesPoint& p : series.points) {
        if (p.time_ns == 0) continue;  // no timeUnixNano: a counter at 1970 would stretch the view
        nlohmann::ordered_json args = nlohmann::ordered_json::object();
        if (distribution) {
          // Counters are numbers: an interval without an estimate has no p50 or p95 arg.
          args["count"] = p.count;
          if (p.p50 && std::isfinite(*p.p50)) args["p50"] = *p.p50;
          if (p.p95 && std::isfinite(*p.p95)) args["p95"] = *p.p95;
        } else if (p.is_int) {
          args["value"] = p.int_value;
        } else if (std::isfinite(p.value)) {
          args["value"] = p.value;
        } else {
          continue;  // NaN and infinities are no counter value
        }
        write_event(head + micros_text(p.time_ns) + ",\"args\":" + dump_json(args) + "}");
        ++counters_;
      }
    }
  }
}

std::uint32_t ChromeTraceWriter::name_id(std::string_view group, std::string_view name) {
  std::string key;
  key.reserve(group.size() + 1 + name.size());
  key.append(group).append(1, '\x1f').append(name);
  const auto [it, inserted] = name_ids_.try_emplace(std::move(key), names_.size());
  if (inserted) names_.emplace_back(std::string(group), std::string(name));
  return it->second;
}

void ChromeTraceWriter::write_gpu_tracks() {
  if (!any_gpu_) return;  // nothing to read back
  struct Leaf {
    SpanFacts span;
    GpuFacts gpu;
  };
  std::vector<Leaf> leaves;
  std::vector<std::uint64_t> lane_ends;
  spill_.for_each_trace([&](std::span<SpanFacts> trace) {
    leaves.clear();
    for_each_gpu_leaf(trace, [&](const SpanFacts& span, const GpuFacts& gpu) {
      if (gpu.has_interval) leaves.push_back({span, gpu});
    });
    // Within the trace, each interval on the first track free at its start: a track's events
    // never overlap (viewers expect a thread's slices to nest).
    std::sort(leaves.begin(), leaves.end(), [](const Leaf& a, const Leaf& b) {
      return std::tie(a.gpu.start_ns, b.gpu.end_ns, a.span.span_id) <
             std::tie(b.gpu.start_ns, a.gpu.end_ns, b.span.span_id);
    });
    lane_ends.clear();
    for (const Leaf& leaf : leaves) {
      std::size_t lane = 0;
      while (lane < lane_ends.size() && lane_ends[lane] > leaf.gpu.start_ns) ++lane;
      if (lane == lane_ends.size()) lane_ends.push_back(0);
      lane_ends[lane] = leaf.gpu.end_ns;
      const std::int64_t pid = leaf.span.rank;
      const std::int64_t tid = kGpuTid - static_cast<std::int64_t>(lane);
      const std::string ids = "\"pid\":" + std::to_string(pid) + ",\"tid\":" + std::to_string(tid);
      if (threads_.insert({pid, tid}).second) {
        const std::string name = lane == 0 ? "GPU" : "GPU " + std::to_string(lane + 1);
        write_event("{\"name\":\"thread_name\",\"ph\":\"M\"," + ids +
                    ",\"args\":{\"name\":" + json_string(name) + "}}");
      }
      const auto& [group, name] = names_[leaf.span.name_id];
      nlohmann::ordered_json args = nlohmann::ordered_json::object();
      if (leaf.gpu.has_busy) args[std::string(kGpuBusyKey)] = leaf.gpu.busy_ns;
      if (leaf.gpu.has_kernels) args[std::string(kGpuKernelsKey)] = leaf.gpu.kernels;
      args["span_id"] = hex16(leaf.span.span_id);
      write_event("{\"name\":" + json_string(name) + ",\"cat\":" + json_string(group) +
                  ",\"ph\":\"X\"," + ids + ",\"ts\":" + micros_text(leaf.gpu.start_ns) +
                  ",\"dur\":" + micros_text(leaf.gpu.end_ns - leaf.gpu.start_ns) +
                  ",\"args\":" + dump_json(args) + "}");
      ++gpu_events_;
    }
  });
}

void ChromeTraceWriter::add(const ParsedRequest& request) {
  if (!request.metrics.empty()) metrics_.add(request);
  for (const LogEntry& log : request.logs) {
    if (log.time_ns == 0) continue;  // no time: no place on the timeline
    const SpanResource& resource = request.resources[log.resource];
    const std::int64_t pid = resource.rank.value_or(kUnknownRankPid);
    name_process(pid, resource.rank.has_value());
    nlohmann::ordered_json args = {{"body", log.body}, {"severity_number", log.severity_number}};
    // A process-scoped instant: a marker across the rank's tracks, its message in args.
    write_event("{\"name\":" + json_string(log.severity_text.empty() ? "log" : log.severity_text) +
                ",\"cat\":\"log\",\"ph\":\"i\",\"s\":\"p\",\"pid\":" + std::to_string(pid) +
                ",\"tid\":0,\"ts\":" + micros_text(log.time_ns) + ",\"args\":" + dump_json(args) +
                "}");
  }
  for (const SpanRecord& span : request.spans()) {
    const SpanResource& resource = request.resources[span.resource];
    const std::int64_t pid = resource.rank.value_or(kUnknownRankPid);
    // A kernel span goes on its GPU stream's track ("GPU stream N"), where its kernels nest.
    const std::int64_t tid = span.gpu_kernel ? kGpuStreamTid - span.gpu_stream % kGpuStreams
                                             : span.thread_id.value_or(0);
    const std::string ids = "\"pid\":" + std::to_string(pid) + ",\"tid\":" + std::to_string(tid);
    name_process(pid, resource.rank.has_value());
    if (threads_.insert({pid, tid}).second) {
      const std::string name = span.gpu_kernel  ? "GPU stream " + std::to_string(span.gpu_stream)
                               : span.thread_id ? "thread " + std::to_string(tid)
                                                : "thread unknown";
      write_event("{\"name\":\"thread_name\",\"ph\":\"M\"," + ids +
                  ",\"args\":{\"name\":" + json_string(name) + "}}");
    }
    const std::string_view group =
        span.has_group && !span.group.empty() ? std::string_view(span.group) : kNoGroup;
    // A span the flight recorder captured is in a second category too, to filter on.
    const std::string category = json_string(
        span.capture_reason.empty() ? std::string(group) : std::string(group) + ",captured");
    // Kept for the GPU tracks (the leaves need each trace whole).
    const SpanFacts facts{pid,           span.trace_key, span.span_id, span.parent_span_id,
                          span.start_ns, span.end_ns,    tid,          name_id(group, span.name)};
    spill_.add(facts);
    if (span.gpu.timed()) {
      any_gpu_ = true;
      spill_.add(gpu_facts(facts, gpu_facts_of(span.gpu)));
    }

    nlohmann::ordered_json args = span.attributes;
    args["trace_id"] = span.trace_id;
    args["span_id"] = hex16(span.span_id);
    if (span.parent_span_id != 0) args["parent_span_id"] = hex16(span.parent_span_id);
    if (span.status_code == 2) {
      args["status"] = "error";
      if (!span.status_message.empty()) args["status_message"] = span.status_message;
    }
    if (!resource.instance_id.empty())
      args[std::string(semconv::kServiceInstanceId)] = resource.instance_id;
    buffer_ = "{\"name\":" + json_string(span.name) + ",\"cat\":" + category + ",\"ph\":\"X\"," +
              ids + ",\"ts\":" + micros_text(span.start_ns) +
              ",\"dur\":" + micros_text(span.duration_ns()) + ",\"args\":" + dump_json(args) + "}";
    write_event(buffer_);
    ++spans_;
    for (const SpanEventRecord& event : span.events) {
      buffer_ = "{\"name\":" + json_string(event.name) + ",\"cat\":" + category +
                ",\"ph\":\"i\",\"s\":\"t\"," + ids + ",\"ts\":" + micros_text(event.time_ns) +
                ",\"args\":" + dump_json(event.attributes) + "}";
      write_event(buffer_);
    }
  }
}

void ChromeTraceWriter::finish() {
  write_gpu_tracks();
  write_counters();
  std::fputs("\n],\"displayTimeUnit\":\"ms\",\"otherData\":{\"generator\":\"lens convert\"}}\n",
             out_);
  if (std::fflush(out_) != 0 || std::ferror(out_)) {
    throw FileError("cannot write '" + path_ + "': " + std::strerror(errno));
  }
}

}  // namespace nemo::lens::cli
