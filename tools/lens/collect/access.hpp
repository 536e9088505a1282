// Who may write to `lens collect`: an optional shared token (OTLP/HTTP `Authorization: Bearer`,
// gRPC `authorization` metadata) and optional TLS for both listeners.
#pragma once

#include <string>
#include <string_view>

namespace nemo::lens::cli {

/// The token and the TLS certificate of a receiver. All empty: anyone may write, in clear text.
struct ReceiverAccess {
  /// The shared token; empty when none is required.
  std::string token;
  /// PEM certificate (chain) and private key; both empty for plain HTTP and insecure gRPC.
  std::string cert_pem, key_pem;

  bool tls() const { return !cert_pem.empty(); }
};

/// Whether `authorization` (an HTTP Authorization header or the gRPC metadata value; null when
/// absent) is "Bearer <token>": the scheme in any case, then one or more spaces. The token is
/// compared in constant time (SHA-256 digests compared with CRYPTO_memcmp), so the time taken
/// tells nothing about how much of a guess was right.
bool bearer_matches(const char* authorization, std::string_view token);

/// What a refused writer is told.
inline constexpr std::string_view kUnauthenticatedMessage =
    "lens collect requires a token: send 'Authorization: Bearer <token>' "
    "(OTEL_EXPORTER_OTLP_HEADERS=Authorization=Bearer%20<token>)";

/// Reads the token `lens collect` was told about: from the file `file` (surrounding whitespace
/// and the final newline removed) or from the environment variable `variable`, never from the
/// command line, where `ps` shows it. Throws UsageError naming the option when the file cannot be
/// read, the variable is unset, or the token is empty or holds whitespace or control characters.
std::string read_token(const std::string* file, const std::string* variable);

/// Reads a PEM file for --tls-cert or --tls-key (named `option`). Throws UsageError naming it.
std::string read_pem(const std::string& path, std::string_view option);

/// Checks, before anything listens, that `cert_pem` (from --tls-cert `cert_path`) starts with a
/// certificate and that `key_pem` (from --tls-key `key_path`) is an unencrypted private key whose
/// public half is the certificate's. Throws UsageError saying which of these fails, so that a
/// wrong pair is not taken for a port in use.
void check_key_pair(const std::string& cert_pem, const std::string& cert_path,
                    const std::string& key_pem, const std::string& key_path);

}  // namespace nemo::lens::cli
