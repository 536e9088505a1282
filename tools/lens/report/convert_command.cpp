// lens convert: OTLP JSON Lines to a Chrome/Perfetto trace file.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "commands.hpp"
#include "common/cli.hpp"
#include "common/input_args.hpp"
#include "common/span_reader.hpp"
#include "report/convert_chrome.hpp"

namespace nemo::lens::cli {
namespace {

constexpr std::string_view kHelp =
    R"help(usage: lens convert --to chrome FILE... -o OUT.json

Converts OTLP JSON Lines (what `lens collect` and the file exporter write; several files, e.g.
one per rank; - is standard input) into a Chrome Trace Event Format file, which the Perfetto UI
(ui.perfetto.dev) and chrome://tracing open:
  - each span is a complete event ("ph":"X"): name, cat = its span group ("(none)" without
    nemo.span.group), ts and dur in microseconds (Unix time), args = its attributes plus
    trace_id, span_id, parent_span_id (and status "error" with its message);
  - each span event is an instant event ("ph":"i", thread scope) with its attributes as args;
  - pid = the rank (dl.rank; 2147483647 when absent), named "rank N"; tid = the thread.id
    attribute (0 when absent), named "thread T";
  - each series of a metric (lines of OTLP metrics, as `lens collect --metrics-out` writes) is
    a counter track ("ph":"C") of its rank's process, named after the metric (and the series'
    attributes): args value (a gauge's value, a sum's total then), or count, p50 and p95 of
    each interval of a histogram;
  - each log record is an instant event of its rank's process ("ph":"i", "s":"p", "cat":"log"),
    named by its severity text, with its body and severity number as args;
  - spans with GPU times (gpu.* attributes): the GPU interval [gpu.start, gpu.end] of each one
    with no GPU-timed descendant is a complete event on its rank's thread "GPU" (tid
    2147483646; intervals that overlap go on "GPU 2", ... below it), args gpu.busy, gpu.kernels.
The input is streamed: span events are written as lines are read; the metrics' points (at most
1024 per series) are kept and written at the end. Malformed lines are skipped and listed on
stderr.

options:
  --to FORMAT        the output format; only chrome
  -o, --output FILE  where to write (- for standard output)
  -h, --help         show this help and exit

exit status: 0 on success (malformed lines included), 2 for a bad command line or a file that
cannot be read or written.
)help";

constexpr FlagSpec kFlags[] = {{"--to", true}, {"-o", true}, {"--output", true}};
constexpr std::size_t kMalformedShown = 20;

int run_convert(std::span<const std::string_view> args) {
  const InputArgs in = split_input_args(args, kFlags);
  const ParsedFlags flags = parse_flags(in.flag_args, kFlags);
  const auto format = flags.value("--to");
  if (!format) throw UsageError("--to FORMAT is required (the only format is chrome)");
  if (*format != "chrome") {
    throw UsageError("invalid value '" + *format + "' for --to: expected chrome");
  }
  const std::string output = flags.value("-o").value_or(flags.value_or("--output", ""));
  if (output.empty()) throw UsageError("-o OUT.json is required");
  if (in.files.empty()) throw UsageError("no input FILE given");

  try {
    std::vector<InputFile> files;  // all opened first: a missing one fails before any output
    files.reserve(in.files.size());
    for (const std::string& path : in.files) files.emplace_back(path);

    std::FILE* out = output == "-" ? stdout : std::fopen(output.c_str(), "wb");
    if (out == nullptr) throw FileError("cannot write '" + output + "': " + std::strerror(errno));
    struct Closer {
      std::FILE* f;
      ~Closer() {
        if (f != stdout) std::fclose(f);
      }
    } closer{out};

    ChromeTraceWriter writer(out, output);
    SpanLineReader reader({.details = true, .metrics = true, .logs = true});
    for (InputFile& file : files) {
      reader.read(
          file, [&](const ParsedRequest& request) { writer.add(request); },
          [&](const MalformedLine& line) {
            if (reader.counts().malformed <= kMalformedShown) {
              std::cerr << "lens convert: skipped " << line.file << ":" << line.line << ": "
                        << line.error << '\n';
            }
          });
    }
    writer.finish();
    if (out != stdout && std::fclose(std::exchange(closer.f, stdout)) != 0) {
      throw FileError("cannot write '" + output + "': " + std::strerror(errno));
    }
    const std::uint64_t malformed = reader.counts().malformed;
    if (malformed > kMalformedShown) {
      std::cerr << "lens convert: skipped " << malformed - kMalformedShown
                << " more malformed lines\n";
    }
    if (malformed > 0) {
      std::cerr << "lens convert: " << writer.spans() << " spans written, " << malformed
                << " malformed line" << (malformed == 1 ? "" : "s") << " skipped\n";
    }
    return 0;
  } catch (const FileError& e) {
    std::cerr << "lens convert: " << e.what() << '\n';
    return 2;
  }
}

}  // namespace

const Command& convert_command() {
  static constexpr Command kCommand{
      "convert", "convert spans to a Chrome/Perfetto trace file (--to chrome)", kHelp, run_convert};
  return kCommand;
}

}  // namespace nemo::lens::cli
