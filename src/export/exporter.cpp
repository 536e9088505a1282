// The exporter interface's out-of-line definitions and InMemorySpanExporter.
#include "nemo/lens/exporter.hpp"

#include <algorithm>
#include <exception>

namespace nemo::lens {

namespace {

const AttributeValue* find_attribute(const std::vector<KeyValue>& attributes,
                                     std::string_view key) noexcept {
  auto it = std::find_if(attributes.begin(), attributes.end(),
                         [key](const KeyValue& kv) { return kv.key == key; });
  return it == attributes.end() ? nullptr : &it->value;
}

}  // namespace

SpanExporter::~SpanExporter() = default;

bool SpanExporter::force_flush(std::chrono::steady_clock::time_point) noexcept { return true; }

void SpanExporter::shutdown(std::chrono::steady_clock::time_point) noexcept {}

std::uint64_t SpanExporter::rejected_spans() const noexcept { return 0; }

const AttributeValue* SpanData::attribute(std::string_view key) const noexcept {
  return find_attribute(attributes, key);
}

const AttributeValue* Resource::attribute(std::string_view key) const noexcept {
  return find_attribute(attributes, key);
}

ExportResult InMemorySpanExporter::export_spans(std::span<const SpanData* const> spans,
                                                const Resource& resource,
                                                std::chrono::steady_clock::time_point) noexcept {
  try {
    std::lock_guard lock(mu_);
    ++calls_;
    // No reserve() to the exact new size here: with one per batch the vector grew by a batch at a
    // time, copying every span kept so far on every export (quadratic).
    for (const SpanData* span : spans) {
      if (span != nullptr) spans_.push_back(*span);
    }
    resource_ = resource;
  } catch (const std::exception&) {
    return ExportResult::kFailure;  // out of memory
  }
  return ExportResult::kSuccess;
}

std::vector<SpanData> InMemorySpanExporter::spans() const {
  std::lock_guard lock(mu_);
  return spans_;
}

Resource InMemorySpanExporter::resource() const {
  std::lock_guard lock(mu_);
  return resource_;
}

std::size_t InMemorySpanExporter::export_calls() const {
  std::lock_guard lock(mu_);
  return calls_;
}

void InMemorySpanExporter::clear() {
  std::lock_guard lock(mu_);
  spans_.clear();
}

}  // namespace nemo::lens
