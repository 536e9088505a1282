// Test helper: a small job of three ranks as OTLP JSON Lines files, with known step durations,
// for the `lens report` / `lens convert` tests and the HTML test.
//
// Every step of d ms starting at t (ms) holds: get_batch (data_loading) [t, t+10],
// forward_backward [t+10, t+d-20] with two microbatch halves, optimizer_step (optimizer)
// [t+d-20, t+d-5]; steps are children of the rank's "pretrain" job span and 10 ms apart.
//   rank 0 (rank0.jsonl): steps of 100, 100, 100 ms; its job span is truncated; a
//          save_checkpoint span without a group [330, 340]; an event on its first
//          forward_backward; array and double attributes on its first optimizer_step.
//   rank 1 (rank1.jsonl): steps of 100, 110, 90 ms (the second has status error), then a blank
//          line and three malformed lines: line 3 (cut JSON), line 7 (a bad spanId), line 8 (the
//          last line, cut without a newline, as a crash leaves it).
//   rank 2 (rank2-a.jsonl: steps 1-2, rank2-b.jsonl: step 3 and the job): steps of 150 ms,
//          50 % above the others (a straggler at the default 20 %). Its first step holds a
//          nested step-group span, zero_grad [t+145, t+148], which is not a top-level step. Its
//          last optimizer_step comes in a later line than its parent step.
#pragma once

#include <string>
#include <vector>

#include "otlp_lines.hpp"

namespace report_test {

inline constexpr std::uint64_t kT0 = 1'718'000'000'000'000'000ull;
inline constexpr std::uint64_t kMs = 1'000'000;

struct Fixture {
  std::vector<std::string> files;  // rank0, rank1, rank2-a, rank2-b
};

/// The spans of one step of `d` ms at `t` ms (children first, the step last), ids from `id`.
inline std::vector<SpanSpec> step_spans(std::uint64_t& id, std::uint64_t job_id, std::uint64_t t,
                                        std::uint64_t d, std::int64_t tid, std::int64_t iteration) {
  const std::uint64_t step_id = id++, fb_id = id++;
  const std::uint64_t s = kT0 + t * kMs;
  const std::vector<Attr> it = {{"iteration", iteration}};
  const std::uint64_t fb_end = s + (d - 20) * kMs, half = (fb_end - (s + 10 * kMs)) / 2;
  return {
      make_span(id++, step_id, "get_batch", "data_loading", s, s + 10 * kMs, tid, it),
      make_span(id++, fb_id, "microbatch", "microbatch", s + 10 * kMs, s + 10 * kMs + half, tid),
      make_span(id++, fb_id, "microbatch", "microbatch", s + 10 * kMs + half, fb_end, tid),
      make_span(fb_id, step_id, "forward_backward", "forward_backward", s + 10 * kMs, fb_end, tid,
                it),
      make_span(id++, step_id, "optimizer_step", "optimizer", fb_end, s + (d - 5) * kMs, tid, it),
      make_span(step_id, job_id, "train_step", "step", s, s + d * kMs, tid, it),
  };
}

inline Fixture write_fixture(const std::string& dir) {
  Fixture f;
  // Rank 0.
  {
    std::uint64_t id = 0x100;
    const std::uint64_t job = id++;
    const auto resource = rank_resource(0);
    std::string text;
    std::uint64_t t = 0;
    for (int i = 0; i < 3; ++i) {
      std::vector<SpanSpec> spans = step_spans(id, job, t, 100, 11, i);
      if (i == 0) {
        spans[3].events.push_back({"loss_scale_update",
                                   kT0 + 50 * kMs,
                                   {{"scale", 1024.0}, {"reason", std::string("overflow")}}});
        spans[4].attributes.push_back({"lr", 0.0003});
        spans[4].attributes.push_back(
            {"shapes",
             RawAnyValue{R"({"arrayValue":{"values":[{"intValue":"4"},{"stringValue":"x"}]}})"}});
        spans[4].attributes.push_back(
            {"opts",
             RawAnyValue{
                 R"({"kvlistValue":{"values":[{"key":"fused","value":{"boolValue":true}}]}})"}});
      }
      text += request_line(resource, spans) + "\n";
      t += 110;
    }
    SpanSpec save =
        make_span(id++, job, "save_checkpoint", "", kT0 + 330 * kMs, kT0 + 340 * kMs, 11);
    SpanSpec pretrain = make_span(job, 0, "pretrain", "job", kT0, kT0 + 345 * kMs, 11);
    pretrain.truncated = true;
    text += request_line(resource, {save, pretrain}) + "\n";
    f.files.push_back(dir + "/rank0.jsonl");
    write_file(f.files.back(), text);
  }
  // Rank 1, with malformed lines.
  {
    std::uint64_t id = 0x200;
    const std::uint64_t job = id++;
    const auto resource = rank_resource(1);
    std::vector<std::string> lines;
    std::uint64_t t = 0;
    const std::uint64_t durations[] = {100, 110, 90};
    for (int i = 0; i < 3; ++i) {
      std::vector<SpanSpec> spans = step_spans(id, job, t, durations[i], 21, i);
      if (i == 1) {
        spans[5].status_code = 2;
        spans[5].status_message = "nan loss";
      }
      lines.push_back(request_line(resource, spans));
      t += durations[i] + 10;
    }
    lines.insert(lines.begin() + 2, R"({"resourceSpans":[{"resource":{"attributes":[)");
    lines.push_back("");
    lines.push_back(
        request_line(resource, {make_span(job, 0, "pretrain", "job", kT0, kT0 + 330 * kMs, 21)}));
    std::string bad_id =
        request_line(resource, {make_span(0x2ff, 0, "orphan", "step", kT0, kT0 + kMs, 21)});
    bad_id.replace(bad_id.find("00000000000002ff"), 16, "not-a-span-id!!!");
    lines.push_back(bad_id);
    const std::string cut = request_line(resource, step_spans(id, job, 400, 100, 21, 9));
    lines.push_back(cut.substr(0, cut.size() / 2));
    std::string text;
    for (std::size_t i = 0; i < lines.size(); ++i)
      text += lines[i] + (i + 1 < lines.size() ? "\n" : "");
    f.files.push_back(dir + "/rank1.jsonl");
    write_file(f.files.back(), text);
  }
  // Rank 2, the straggler, in two files.
  {
    std::uint64_t id = 0x300;
    const std::uint64_t job = id++;
    const auto resource = rank_resource(2);
    std::string a, b;
    std::uint64_t t = 0;
    for (int i = 0; i < 3; ++i) {
      std::vector<SpanSpec> spans = step_spans(id, job, t, 150, 31, i);
      if (i == 0) {  // a step-group span inside the step: not a top-level step
        const std::uint64_t s = kT0 + t * kMs;
        spans.insert(spans.end() - 1, make_span(id++, spans.back().span_id, "zero_grad", "step",
                                                s + 145 * kMs, s + 148 * kMs, 31));
      }
      if (i < 2) {
        a += request_line(resource, spans) + "\n";
      } else {
        const SpanSpec optimizer = spans[4];
        spans.erase(spans.begin() + 4);
        b += request_line(resource, spans) + "\n";
        b += request_line(resource, {optimizer, make_span(job, 0, "pretrain", "job", kT0,
                                                          kT0 + 500 * kMs, 31)}) +
             "\n";
      }
      t += 160;
    }
    f.files.push_back(dir + "/rank2-a.jsonl");
    write_file(f.files.back(), a);
    f.files.push_back(dir + "/rank2-b.jsonl");
    write_file(f.files.back(), b);
  }
  return f;
}

}  // namespace report_test
