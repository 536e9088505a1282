// The OTLP/HTTP transport: one libcurl easy handle, reused so the connection stays open between
// batches, driven only from the pipeline's exporter thread.
#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <ctime>
#include <mutex>
#include <string>

#include "export/otlp.hpp"
#include "nemo/lens/version.hpp"
#include "strings.hpp"

namespace nemo::lens::detail {

namespace {

using Clock = std::chrono::steady_clock;

constexpr std::size_t kMaxResponseBody = 64 * 1024;  // enough for any partial-success message

void global_init() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

struct Response {
  std::string body;
  std::string retry_after;
};

std::size_t on_body(char* data, std::size_t size, std::size_t n, void* user) {
  auto* r = static_cast<Response*>(user);
  const std::size_t bytes = size * n;
  if (r->body.size() < kMaxResponseBody) {
    r->body.append(data, std::min(bytes, kMaxResponseBody - r->body.size()));
  }
  return bytes;
}

std::size_t on_header(char* data, std::size_t size, std::size_t n, void* user) {
  auto* r = static_cast<Response*>(user);
  const std::string_view line(data, size * n);
  const auto colon = line.find(':');
  if (colon != std::string_view::npos && to_lower(trim(line.substr(0, colon))) == "retry-after") {
    r->retry_after = std::string(trim(line.substr(colon + 1)));
  }
  return size * n;
}

// Retry-After: delay-seconds or an HTTP-date (RFC 9110 10.2.3).
std::optional<std::chrono::milliseconds> parse_retry_after(const std::string& v) {
  if (v.empty()) return std::nullopt;
  if (std::all_of(v.begin(), v.end(), [](unsigned char c) { return std::isdigit(c); })) {
    if (v.size() > 9) return std::chrono::milliseconds(std::chrono::hours(24));
    return std::chrono::seconds(std::stol(v));
  }
  const std::time_t when = curl_getdate(v.c_str(), nullptr);
  if (when < 0) return std::nullopt;
  const std::time_t now = std::time(nullptr);
  return std::chrono::seconds(when > now ? when - now : 0);
}

class HttpTransport final : public OtlpTransport {
 public:
  explicit HttpTransport(const OtlpSettings& s) : url_(s.endpoint) {
    global_init();
    curl_ = curl_easy_init();
    multi_ = curl_multi_init();
    if (curl_ == nullptr || multi_ == nullptr) {
      curl_easy_cleanup(curl_);
      curl_multi_cleanup(multi_);
      throw std::bad_alloc();
    }
    const bool json = s.protocol == OtlpProtocol::kHttpJson;
    headers_ = curl_slist_append(headers_, json ? "Content-Type: application/json"
                                                : "Content-Type: application/x-protobuf");
    if (s.gzip) headers_ = curl_slist_append(headers_, "Content-Encoding: gzip");
    headers_ = curl_slist_append(headers_, "Expect:");  // no 100-continue round trip
    for (const auto& [name, value] : s.headers) {
      headers_ = curl_slist_append(headers_, (name + ": " + value).c_str());
    }
    json_ = json;
    curl_easy_setopt(curl_, CURLOPT_URL, url_.c_str());
    curl_easy_setopt(curl_, CURLOPT_HTTPHEADER, headers_);
    curl_easy_setopt(curl_, CURLOPT_USERAGENT, "nemo-lens-cpp/" NEMO_LENS_VERSION_STRING);
    curl_easy_setopt(curl_, CURLOPT_NOSIGNAL, 1L);  // no SIGALRM in a library's thread
    curl_easy_setopt(curl_, CURLOPT_POST, 1L);
    curl_easy_setopt(curl_, CURLOPT_WRITEFUNCTION, &on_body);
    curl_easy_setopt(curl_, CURLOPT_HEADERFUNCTION, &on_header);
    curl_easy_setopt(curl_, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(curl_, CURLOPT_FOLLOWLOCATION, 0L);
    if (!s.certificate.empty()) curl_easy_setopt(curl_, CURLOPT_CAINFO, s.certificate.c_str());
    if (!s.client_certificate.empty()) {
      curl_easy_setopt(curl_, CURLOPT_SSLCERT, s.client_certificate.c_str());
    }
    if (!s.client_key.empty()) curl_easy_setopt(curl_, CURLOPT_SSLKEY, s.client_key.c_str());
  }

  ~HttpTransport() override {
    curl_multi_cleanup(multi_);
    curl_easy_cleanup(curl_);
    curl_slist_free_all(headers_);
  }

  HttpTransport(const HttpTransport&) = delete;
  HttpTransport& operator=(const HttpTransport&) = delete;

  const std::string& target() const noexcept override { return url_; }

  AttemptResult send(std::string_view body, Clock::time_point deadline) noexcept override {
    AttemptResult result;
    try {
      Response response;
      const auto remaining =
          std::chrono::duration_cast<std::chrono::milliseconds>(cap(deadline) - Clock::now());
      if (remaining.count() <= 0) return AttemptResult::timed_out();
      curl_easy_setopt(curl_, CURLOPT_POSTFIELDS, body.data());
      curl_easy_setopt(curl_, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
      curl_easy_setopt(curl_, CURLOPT_WRITEDATA, &response);
      curl_easy_setopt(curl_, CURLOPT_HEADERDATA, &response);
      curl_easy_setopt(curl_, CURLOPT_TIMEOUT_MS, static_cast<long>(remaining.count()));
      curl_easy_setopt(curl_, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(remaining.count()));
      const CURLcode rc = perform(deadline);
      if (rc != CURLE_OK) return transport_failure(rc);
      long status = 0;
      curl_easy_getinfo(curl_, CURLINFO_RESPONSE_CODE, &status);
      if (status >= 200 && status < 300) {
        result.kind = AttemptResult::Kind::kSuccess;
        result.partial = json_ ? parse_partial_success_json(response.body)
                               : parse_partial_success_proto(response.body);
        return result;
      }
      const bool retryable = status == 429 || status == 502 || status == 503 || status == 504;
      result.kind = retryable ? AttemptResult::Kind::kRetryable : AttemptResult::Kind::kPermanent;
      result.failure_kind = "HTTP " + std::to_string(status);
      result.detail = "HTTP status " + std::to_string(status) + excerpt(response.body);
      if (retryable) result.retry_after = parse_retry_after(response.retry_after);
    } catch (...) {
      return AttemptResult::out_of_memory();
    }
    return result;
  }

 private:
  // Runs the transfer on the multi handle, so that interrupt_by() can wake the wait
  // (curl_multi_wakeup) and end the transfer at once rather than at libcurl's next timeout.
  CURLcode perform(Clock::time_point deadline) {
    if (curl_multi_add_handle(multi_, curl_) != CURLM_OK) return CURLE_FAILED_INIT;
    CURLcode rc = CURLE_OPERATION_TIMEDOUT;
    for (;;) {
      int running = 0;
      if (curl_multi_perform(multi_, &running) != CURLM_OK) {
        rc = CURLE_FAILED_INIT;
        break;
      }
      if (running == 0) {
        int queued = 0;
        while (CURLMsg* msg = curl_multi_info_read(multi_, &queued)) {
          if (msg->msg == CURLMSG_DONE) rc = msg->data.result;
        }
        break;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(cap(deadline) - Clock::now());
      if (left.count() <= 0) {
        rc = CURLE_ABORTED_BY_CALLBACK;
        break;
      }
      curl_multi_poll(multi_, nullptr, 0, static_cast<int>(std::min<std::int64_t>(left.count(), 1000)),
                      nullptr);
    }
    curl_multi_remove_handle(multi_, curl_);
    return rc;
  }

  void on_interrupt() noexcept override { curl_multi_wakeup(multi_); }

  // The start of a response body that is text, for messages (protobuf Status bodies are skipped).
  static std::string excerpt(const std::string& body) {
    if (body.empty()) return "";
    const std::string_view head = std::string_view(body).substr(0, 200);
    for (unsigned char c : head) {
      if (c < 0x20 && c != '\t') return "";
    }
    return ": " + std::string(head);
  }

  AttemptResult transport_failure(CURLcode rc) const {
    AttemptResult r;
    // Failures to connect or of a connection (the receiver is down, restarting or overloaded) are
    // retryable; TLS, URL and protocol errors are not.
    switch (rc) {
      case CURLE_COULDNT_CONNECT:
      case CURLE_COULDNT_RESOLVE_HOST:
      case CURLE_SEND_ERROR:
      case CURLE_RECV_ERROR:
      case CURLE_GOT_NOTHING:
      case CURLE_PARTIAL_FILE:
        r.kind = AttemptResult::Kind::kRetryable;
        break;
      case CURLE_OPERATION_TIMEDOUT:
      case CURLE_ABORTED_BY_CALLBACK:
        return AttemptResult::timed_out();  // the deadline is spent: nothing left to retry
      default:
        r.kind = AttemptResult::Kind::kPermanent;
    }
    r.failure_kind = curl_easy_strerror(rc);
    r.detail = curl_easy_strerror(rc);
    return r;
  }

  std::string url_;
  CURL* curl_ = nullptr;
  CURLM* multi_ = nullptr;
  curl_slist* headers_ = nullptr;
  bool json_ = false;
};

}  // namespace

std::unique_ptr<OtlpTransport> make_http_transport(const OtlpSettings& settings) {
  return std::make_unique<HttpTransport>(settings);
}

}  // namespace nemo::lens::detail
