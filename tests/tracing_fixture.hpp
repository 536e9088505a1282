// Test helper: sets up tracing with an in-memory exporter and tears it down.
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "nemo/lens/lens.hpp"
#include "scoped_env.hpp"

namespace lens_test {

/// An enabled configuration that exports on every rank, with every base group on.
inline nemo::lens::NemoLensConfig enabled_config(std::string spec = "all") {
  nemo::lens::NemoLensConfig c;
  c.enabled = true;
  c.export_strategy = "all_ranks";
  c.span_groups = std::move(spec);
  c.exporter = "console";  // tests pass their own exporter through SetupOptions
  return c;
}

/// Enabled, exporting set-up of every base group into an InMemorySpanExporter.
class Tracing : public ::testing::Test {
 protected:
  void SetUp() override { start("all"); }
  void TearDown() override { handle_.shutdown(); }

  /// (Re)starts tracing with `spec` and `options` (the exporter is always memory_).
  void start(const std::string& spec, nemo::lens::SetupOptions options = {}) {
    nemo::lens::NemoLensConfig c = enabled_config(spec);
    options.exporter = memory_;
    options.allow_reinit = true;
    handle_ = nemo::lens::setup_telemetry(c, 0, 1, options);
  }

  /// Every span exported so far (flushes first).
  std::vector<nemo::lens::SpanData> spans() {
    EXPECT_TRUE(handle_.force_flush(std::chrono::seconds(10)));
    return memory_->spans();
  }

  /// The single exported span named `name`; fails the test when there is not exactly one.
  nemo::lens::SpanData only(const std::vector<nemo::lens::SpanData>& all, const std::string& name) {
    const nemo::lens::SpanData* found = nullptr;
    int n = 0;
    for (const auto& s : all) {
      if (s.name == name) {
        found = &s;
        ++n;
      }
    }
    EXPECT_EQ(n, 1) << "spans named " << name;
    return found != nullptr ? *found : nemo::lens::SpanData{};
  }

  ScopedEnv env_;
  std::shared_ptr<nemo::lens::InMemorySpanExporter> memory_ =
      std::make_shared<nemo::lens::InMemorySpanExporter>();
  nemo::lens::TelemetryHandle handle_;
};

}  // namespace lens_test
