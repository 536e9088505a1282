// ReceiverAccess helpers (see access.hpp).
#include "collect/access.hpp"

#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "common/cli.hpp"
#include "strings.hpp"

namespace nemo::lens::cli {

namespace {

constexpr std::size_t kMaxToken = 4096;           // bytes: what an HTTP header carries safely
constexpr std::size_t kMaxTokenFile = 64 * 1024;  // the file, whitespace included
constexpr std::size_t kMaxPemFile = 1024 * 1024;  // a certificate chain or a key

struct Digest {
  unsigned char bytes[EVP_MAX_MD_SIZE] = {};
  unsigned int size = 0;
};

Digest sha256(std::string_view data) {
  Digest d;
  if (EVP_Digest(data.data(), data.size(), d.bytes, &d.size, EVP_sha256(), nullptr) != 1)
    d.size = 0;
  return d;
}

// The whole of the regular file `path` that `option` names, at most `max_bytes`; throws
// UsageError naming both when it cannot be read, is not a regular file (a directory, a device such
// as /dev/zero, a FIFO) or is larger.
std::string read_option_file(const std::string& path, std::string_view option,
                             std::size_t max_bytes) {
  const std::string what = std::string(option) + " '" + path + "'";
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec) throw UsageError("cannot read " + what + ": " + ec.message());
  if (!std::filesystem::is_regular_file(status)) {
    throw UsageError(what + " is not a regular file" +
                     (std::filesystem::is_directory(status) ? " (a directory)" : ""));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError("cannot read " + what + ": " + std::strerror(errno));
  std::string text(max_bytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<std::size_t>(in.gcount()));
  if (text.size() > max_bytes) {
    throw UsageError(what + " is larger than " + std::to_string(max_bytes) + " bytes");
  }
  return text;
}

}  // namespace

bool bearer_matches(const char* authorization, std::string_view token) {
  if (authorization == nullptr || token.empty()) return false;
  std::string_view value(authorization);
  // RFC 6750: "Bearer" 1*SP token; the field value's trailing whitespace is not part of it.
  while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
  constexpr std::string_view kScheme = "bearer";
  if (value.size() <= kScheme.size() ||
      detail::to_lower(value.substr(0, kScheme.size())) != kScheme ||
      value[kScheme.size()] != ' ') {
    return false;
  }
  value.remove_prefix(kScheme.size());
  while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  // Digests of equal size whatever the lengths: neither the length nor the content of a wrong
  // guess changes the time the comparison takes.
  const Digest given = sha256(value);
  const Digest wanted = sha256(token);
  return given.size != 0 && given.size == wanted.size &&
         CRYPTO_memcmp(given.bytes, wanted.bytes, wanted.size) == 0;
}

std::string read_token(const std::string* file, const std::string* variable) {
  if (file != nullptr && variable != nullptr) {
    throw UsageError("give one of --token-file and --token-env, not both");
  }
  std::string token;
  std::string origin;
  if (file != nullptr) {
    token = std::string(detail::trim(read_option_file(*file, "--token-file", kMaxTokenFile)));
    origin = "--token-file '" + *file + "'";
  } else if (variable != nullptr) {
    const char* value = std::getenv(variable->c_str());
    if (value == nullptr) {
      throw UsageError("--token-env " + *variable + ": the environment variable " + *variable +
                       " is not set");
    }
    token = value;
    origin = "--token-env " + *variable;
  } else {
    return {};
  }
  if (token.empty()) throw UsageError(origin + " holds an empty token");
  if (token.size() > kMaxToken) {
    throw UsageError(origin + ": the token is " + std::to_string(token.size()) +
                     " bytes; at most " + std::to_string(kMaxToken));
  }
  for (const unsigned char c : token) {
    if (c <= 0x20 || c >= 0x7f) {
      throw UsageError(origin +
                       ": the token holds whitespace, a control character or a byte beyond "
                       "ASCII; use printable ASCII characters only");
    }
  }
  return token;
}

std::string read_pem(const std::string& path, std::string_view option) {
  std::string pem = read_option_file(path, option, kMaxPemFile);
  if (pem.find("-----BEGIN ") == std::string::npos) {
    throw UsageError(std::string(option) + " '" + path +
                     "' is not a PEM file (no -----BEGIN line)");
  }
  return pem;
}

void check_key_pair(const std::string& cert_pem, const std::string& cert_path,
                    const std::string& key_pem, const std::string& key_path) {
  // A password callback that declines: OpenSSL would otherwise prompt on the terminal for the
  // passphrase of an encrypted key, which neither libmicrohttpd nor gRPC can use.
  auto no_password = [](char*, int, int, void*) { return 0; };
  BIO* cert_bio = BIO_new_mem_buf(cert_pem.data(), static_cast<int>(cert_pem.size()));
  X509* cert =
      cert_bio == nullptr ? nullptr : PEM_read_bio_X509(cert_bio, nullptr, no_password, nullptr);
  BIO_free(cert_bio);
  BIO* key_bio = BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size()));
  EVP_PKEY* key = key_bio == nullptr
                      ? nullptr
                      : PEM_read_bio_PrivateKey(key_bio, nullptr, no_password, nullptr);
  BIO_free(key_bio);
  const bool match = cert != nullptr && key != nullptr && X509_check_private_key(cert, key) == 1;
  ERR_clear_error();  // the reasons are told below; leave no error queued for the TLS libraries
  X509_free(cert);
  EVP_PKEY_free(key);
  if (cert == nullptr) {
    throw UsageError("--tls-cert '" + cert_path +
                     "' does not start with a PEM certificate (-----BEGIN CERTIFICATE-----) that "
                     "OpenSSL can read");
  }
  if (key == nullptr) {
    throw UsageError(
        "--tls-key '" + key_path +
        "' is not an unencrypted PEM private key (-----BEGIN PRIVATE KEY-----, or RSA/EC "
        "PRIVATE KEY) that OpenSSL can read");
  }
  if (!match) {
    throw UsageError("--tls-key '" + key_path + "' is not the private key of --tls-cert '" +
                     cert_path + "': the certificate holds another public key");
  }
}

}  // namespace nemo::lens::cli
