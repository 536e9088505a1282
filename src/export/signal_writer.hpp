// What the built-in metric and log exporters share: encode a batch of one signal, then send it
// over OTLP (with an outage buffer of its own, as the spans have) or write it as one OTLP/JSON
// line, to the destination config.exporter names. Internal.
#pragma once

#include <chrono>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "export/exporters.hpp"
#include "export/otlp.hpp"
#include "nemo/lens/config.hpp"
#include "strings.hpp"

namespace nemo::lens::detail {

// What a built-in exporter of one signal does: encode the batch, then send it over OTLP (protobuf
// or JSON, as the protocol says; through the outage buffer, BufferedDelivery, while the receiver
// is away) or write it as one OTLP/JSON line (file, console).
template <class Data>
class SignalWriter {
 public:
  using Encoder = void (*)(std::string&, std::span<const Data>, const Resource&);
  using Counter = std::size_t (*)(std::span<const Data>);

  SignalWriter(std::unique_ptr<OtlpSender> sender, ExportBufferSettings buffer,
               std::string_view noun, Encoder proto, Encoder json, Counter count)
      : sender_(std::move(sender)),
        delivery_(
            std::make_unique<BufferedDelivery>(*sender_, std::move(buffer), std::string(noun))),
        proto_(proto),
        json_(json),
        count_(count) {}
  SignalWriter(std::unique_ptr<JsonLinesOutput> out, Encoder json, Counter count)
      : out_(std::move(out)), proto_(json), json_(json), count_(count) {}

  /// True when written, sent, or waiting in the outage buffer.
  bool write(std::span<const Data> items, const Resource& resource,
             std::chrono::steady_clock::time_point deadline) noexcept {
    if (items.empty()) return true;
    try {
      buffer_.clear();
      const bool json = !sender_ || sender_->settings().protocol == OtlpProtocol::kHttpJson;
      (json ? json_ : proto_)(buffer_, items, resource);
    } catch (...) {
      return false;
    }
    return delivery_ ? delivery_->deliver(buffer_, buffer_.size(), count_(items), deadline)
                     : out_->write_line(buffer_);
  }
  /// From now on, no send lasts past `deadline` (files and the console are never waited on).
  void interrupt_by(std::chrono::steady_clock::time_point deadline) noexcept {
    if (sender_) sender_->interrupt_by(deadline);
  }
  /// Sends what waits in the outage buffer until `deadline`, then drops (and counts) the rest.
  void shutdown(std::chrono::steady_clock::time_point deadline) noexcept {
    if (delivery_) delivery_->shutdown(deadline);
  }
  /// Waits until nothing waits in the outage buffer, or `deadline`.
  bool flush(std::chrono::steady_clock::time_point deadline) noexcept {
    return delivery_ ? delivery_->flush(deadline) : true;
  }
  DeferredCounts deferred() const noexcept {
    return delivery_ ? delivery_->deferred() : DeferredCounts{};
  }

 private:
  std::unique_ptr<OtlpSender> sender_;
  std::unique_ptr<BufferedDelivery> delivery_;  // with sender_ (which it refers to)
  std::unique_ptr<JsonLinesOutput> out_;
  Encoder proto_, json_;
  Counter count_;
  std::string buffer_;
};

// The writer config.exporter names for a signal.
template <class Data>
SignalWriter<Data> make_writer(const NemoLensConfig& config, int rank, OtlpSignal signal,
                               std::string_view noun, std::string_view path_key,
                               std::string_view default_path, std::string_view what,
                               typename SignalWriter<Data>::Encoder proto,
                               typename SignalWriter<Data>::Encoder json,
                               typename SignalWriter<Data>::Counter count) {
  const std::string value = to_lower(trim(config.exporter));
  if (value == "otlp") {
    return {
        make_otlp_sender(signal, noun), export_buffer_settings(config), noun, proto, json, count};
  }
  if (value == "console") return {std::make_unique<JsonLinesOutput>(stdout), json, count};
  if (value != "file") (void)make_exporter(config, rank);  // throws the exporters' usual error
  const std::string path = rank_path(config, rank, path_key, default_path);
  return {std::make_unique<JsonLinesOutput>(path, what, path_origin(config, path_key)), json,
          count};
}

}  // namespace nemo::lens::detail
