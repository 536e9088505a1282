// lens' side of the JS interop test (tests/js/interop.js): W3C Trace Context and Baggage through
// lens' propagation API, and a child process that continues its parent's trace through the
// environment carriers.
//
//   w3c_peer relay    one JSON object a line on stdin: {"carrier": {headers}, "context":
//                     {"trace_id", "span_id", "flags", "trace_state", "baggage": [[k, v]...]}}.
//                     Answers one line each: {"extracted": what extract_context() read from the
//                     carrier (same fields), "injected": the headers inject_context() writes for
//                     the given context}.
//   w3c_peer child    set up from the environment (TRACEPARENT, TRACESTATE, BAGGAGE, the OTLP
//                     variables), ends one root span named "lens-child" and prints
//                     {"trace_id", "span_id", "environment": child_environment()} of that span.
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "nemo/lens/lens.hpp"

namespace lens = nemo::lens;
using Json = nlohmann::ordered_json;

namespace {

Json context_json(const lens::SpanContext& ctx, const lens::Baggage& baggage) {
  Json out = Json::object();
  if (ctx.is_valid()) {
    out["trace_id"] = ctx.trace_id.to_hex();
    out["span_id"] = ctx.span_id.to_hex();
    out["flags"] = ctx.trace_flags;
    out["trace_state"] = ctx.trace_state;
  }
  out["baggage"] = Json::array();
  for (const auto& [key, value] : baggage) out["baggage"].push_back(Json::array({key, value}));
  return out;
}

int relay() {
  for (std::string line; std::getline(std::cin, line);) {
    const Json in = Json::parse(line);
    lens::Carrier carrier;
    for (const auto& [name, value] : in.at("carrier").items()) {
      carrier[name] = value.get<std::string>();
    }
    const lens::ExtractedContext extracted = lens::extract_context(carrier);

    const Json& c = in.at("context");
    lens::SpanContext ctx;
    if (auto id = lens::TraceId::from_hex(c.at("trace_id").get<std::string>())) ctx.trace_id = *id;
    if (auto id = lens::SpanId::from_hex(c.at("span_id").get<std::string>())) ctx.span_id = *id;
    ctx.trace_flags = c.at("flags").get<std::uint8_t>();
    ctx.trace_state = c.at("trace_state").get<std::string>();
    lens::Baggage baggage;
    for (const Json& kv : c.at("baggage")) {
      baggage.emplace_back(kv.at(0).get<std::string>(), kv.at(1).get<std::string>());
    }
    lens::Carrier injected;
    lens::inject_context(ctx, injected, baggage);

    Json out = Json::object();
    out["extracted"] = context_json(extracted.context, extracted.baggage);
    out["injected"] = Json::object();
    for (const auto& [name, value] : injected) out["injected"][name] = value;
    std::cout << out.dump() << '\n' << std::flush;
  }
  return 0;
}

int child() {
  lens::NemoLensConfig config = lens::NemoLensConfig::from_env();
  config.enabled = true;
  config.service_name = "lens-js-child";
  lens::TelemetryHandle handle = lens::setup_telemetry(config);
  Json out = Json::object();
  {
    lens::Span span = lens::span_cm("lens-child");
    const lens::SpanContext ctx = span.context();
    out["trace_id"] = ctx.trace_id.to_hex();
    out["span_id"] = ctx.span_id.to_hex();
    out["environment"] = Json::object();
    for (const auto& [name, value] : lens::child_environment()) out["environment"][name] = value;
  }
  const bool flushed = handle.force_flush(std::chrono::seconds(10));
  handle.shutdown(std::chrono::seconds(10));
  out["flushed"] = flushed;
  std::cout << out.dump() << '\n';
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc == 2 ? argv[1] : "";
  try {
    if (mode == "relay") return relay();
    if (mode == "child") return child();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "w3c_peer %s: %s\n", mode.c_str(), e.what());
    return 1;
  }
  std::fprintf(stderr, "usage: w3c_peer relay|child\n");
  return 2;
}
