// make_exporter: the built-in exporter NemoLensConfig::exporter names.
#include <cstdio>
#include <memory>
#include <string>

#include "export/exporters.hpp"
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
  const std::string origin = exporter_origin(config, value);
  const bool from_variable = origin != "NemoLensConfig::exporter";
  if (value == "otlp") {
    // The variable to set: the one read, or the primary prefix's when the value came from code
    // (or is the default, "otlp").
    const std::string variable = from_variable ? origin : config.env_prefix + "_EXPORTER";
    std::string message = "The OTLP exporter is not available in this build of lens yet (";
    if (from_variable) {
      message += origin + "='" + std::string(trim(config.exporter)) + "'";
    } else {
      message += "NemoLensConfig::exporter is 'otlp', the default when " + config.env_prefix +
                 "_EXPORTER is unset";
    }
    message += "). Set " + variable + "=console or " + variable + "=file";
    if (!from_variable) message += " (or NemoLensConfig::exporter to \"console\" or \"file\")";
    message += '.';
    throw ConfigError(message);
  }
  throw ConfigError("Invalid value for " + origin + ": '" + config.exporter +
                    "'. Valid exporters: " + quoted_list({"console", "file", "otlp"}) + ".");
}

}  // namespace nemo::lens::detail
