// make_exporter: the built-in exporter NemoLensConfig::exporter names.
#include <cstdio>
#include <memory>
#include <string>

#include "export/exporters.hpp"
#include "export/otlp.hpp"
#include "nemo/lens/errors.hpp"
#include "strings.hpp"

namespace nemo::lens::detail {

namespace {

// Where config.exporter came from: the variable, when the configuration was read from one and
// still holds its value, or the field.
std::string exporter_origin(const NemoLensConfig& config, const std::string& value) {
  auto variable = config.env_variable("EXPORTER");
  auto env_value = config.env("EXPORTER");
  if (variable && env_value && to_lower(trim(*env_value)) == value) return *variable;
  return "NemoLensConfig::exporter";
}

}  // namespace

std::shared_ptr<SpanExporter> make_exporter(const NemoLensConfig& config, int rank) {
  const std::string value = to_lower(trim(config.exporter));
  if (value == "console") return std::make_shared<ConsoleSpanExporter>(stdout);
  if (value == "file") {
    return std::make_shared<FileSpanExporter>(export_path(config, rank),
                                              export_path_origin(config));
  }
  if (value == "otlp") return make_otlp_exporter(config);
  // "Unknown exporter type" is NeMo Lens' phrase: its callers match on it.
  throw ConfigError("Invalid value for " + exporter_origin(config, value) + ": '" +
                    config.exporter + "': Unknown exporter type. Valid exporters: " +
                    quoted_list({"console", "file", "otlp"}) + ".");
}

}  // namespace nemo::lens::detail
