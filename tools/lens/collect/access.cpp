// ReceiverAccess helpers (see access.hpp).
#include "collect/access.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/cli.hpp"
#include "strings.hpp"

namespace nemo::lens::cli {

namespace {

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

// The whole of the file `path` that `option` names; throws UsageError naming both when it cannot
// be read.
std::string read_option_file(const std::string& path, std::string_view option) {
  std::ifstream in(path);
  if (!in) {
    throw UsageError("cannot read " + std::string(option) + " '" + path +
                     "': " + std::strerror(errno));
  }
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

bool bearer_matches(const char* authorization, std::string_view token) {
  if (authorization == nullptr || token.empty()) return false;
  std::string_view value(authorization);
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
    token = std::string(detail::trim(read_option_file(*file, "--token-file")));
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
  for (const unsigned char c : token) {
    if (c <= 0x20 || c == 0x7f) {
      throw UsageError(origin +
                       ": the token holds whitespace or a control character; "
                       "use printable characters only");
    }
  }
  return token;
}

std::string read_pem(const std::string& path, std::string_view option) {
  std::string pem = read_option_file(path, option);
  if (pem.find("-----BEGIN ") == std::string::npos) {
    throw UsageError(std::string(option) + " '" + path +
                     "' is not a PEM file (no -----BEGIN line)");
  }
  return pem;
}

}  // namespace nemo::lens::cli
