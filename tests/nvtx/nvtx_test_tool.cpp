// A test NVTX tool: loaded by NVTX through NVTX_INJECTION64_PATH, as Nsight Systems' own is, it
// takes over the NVTX calls of every NVTX copy in the process and appends one line per call to the
// file named by LENS_NVTX_TOOL_LOG (when it is unset, each call returns at once):
//
//   domain <domain> <name>                          nvtxDomainCreateA
//   category <domain> <category> <name>             nvtxDomainNameCategoryA
//   string <domain> <string> <text>                 nvtxDomainRegisterStringA
//   push <tid> <domain> <category> <colour> <message>   nvtxDomainRangePushEx (and
//   nvtxRangePushEx/A) pop <tid> <domain>                              nvtxDomainRangePop (and
//   nvtxRangePop) start <tid> <domain> <range> <category> <message>   nvtxDomainRangeStartEx end
//   <tid> <domain> <range>                      nvtxDomainRangeEnd
//
// <message> is s<string> for a registered string, a:<text> for an ASCII one, - for none; domains,
// strings and ranges are numbered from 1 in the order the tool hands them out (domain 0: the
// default domain); <colour> is hexadecimal ARGB, - when none is given.
#include <fcntl.h>
#include <nvtx3/nvToolsExt.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

namespace {

std::mutex g_mu;
std::uint64_t g_next_domain = 1, g_next_string = 1;
std::atomic<std::uint64_t> g_next_range{1};

long tid() { return static_cast<long>(::syscall(SYS_gettid)); }

// The log, opened on the first call; -1 without one. Without a log every callback returns at once,
// so that a benchmark measures the caller's side of NVTX.
int log_fd() {
  static const int fd = [] {
    const char* path = std::getenv("LENS_NVTX_TOOL_LOG");
    return path != nullptr ? ::open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644) : -1;
  }();
  return fd;
}

bool logging() { return log_fd() >= 0; }

void write_line(const std::string& line) {
  const std::string out = line + "\n";
  (void)!::write(log_fd(), out.data(), out.size());  // one write per line: O_APPEND keeps it whole
}

std::uint64_t id_of(const void* handle) { return reinterpret_cast<std::uintptr_t>(handle); }

std::string message_of(const nvtxEventAttributes_t* a) {
  if (a == nullptr) return "-";
  switch (a->messageType) {
    case NVTX_MESSAGE_TYPE_REGISTERED:
      return "s" + std::to_string(id_of(a->message.registered));
    case NVTX_MESSAGE_TYPE_ASCII:
      return std::string("a:") + (a->message.ascii != nullptr ? a->message.ascii : "");
    default:
      return "-";
  }
}

std::string colour_of(const nvtxEventAttributes_t* a) {
  if (a == nullptr || a->colorType != NVTX_COLOR_ARGB) return "-";
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08x", a->color);
  return buf;
}

std::string category_of(const nvtxEventAttributes_t* a) {
  return std::to_string(a != nullptr ? a->category : 0);
}

nvtxDomainHandle_t NVTX_API domain_create(const char* name) {
  std::uint64_t id;
  {
    std::lock_guard lock(g_mu);
    id = g_next_domain++;
  }
  if (logging()) write_line("domain " + std::to_string(id) + " " + name);
  return reinterpret_cast<nvtxDomainHandle_t>(static_cast<std::uintptr_t>(id));
}

void NVTX_API name_category(nvtxDomainHandle_t d, std::uint32_t category, const char* name) {
  if (!logging()) return;
  write_line("category " + std::to_string(id_of(d)) + " " + std::to_string(category) + " " + name);
}

nvtxStringHandle_t NVTX_API register_string(nvtxDomainHandle_t d, const char* text) {
  std::uint64_t id;
  {
    std::lock_guard lock(g_mu);
    id = g_next_string++;
  }
  if (logging()) {
    write_line("string " + std::to_string(id_of(d)) + " " + std::to_string(id) + " " + text);
  }
  return reinterpret_cast<nvtxStringHandle_t>(static_cast<std::uintptr_t>(id));
}

int NVTX_API domain_push(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
  if (!logging()) return 0;
  write_line("push " + std::to_string(tid()) + " " + std::to_string(id_of(d)) + " " +
             category_of(a) + " " + colour_of(a) + " " + message_of(a));
  return 0;
}

int NVTX_API domain_pop(nvtxDomainHandle_t d) {
  if (!logging()) return 0;
  write_line("pop " + std::to_string(tid()) + " " + std::to_string(id_of(d)));
  return 0;
}

nvtxRangeId_t NVTX_API domain_start(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
  const std::uint64_t id = g_next_range.fetch_add(1);
  if (!logging()) return id;
  write_line("start " + std::to_string(tid()) + " " + std::to_string(id_of(d)) + " " +
             std::to_string(id) + " " + category_of(a) + " " + message_of(a));
  return id;
}

void NVTX_API domain_end(nvtxDomainHandle_t d, nvtxRangeId_t id) {
  if (!logging()) return;
  write_line("end " + std::to_string(tid()) + " " + std::to_string(id_of(d)) + " " +
             std::to_string(id));
}

// The default domain's calls, so that a stray nvtxRangePush* shows up too.
int NVTX_API push_ex(const nvtxEventAttributes_t* a) { return domain_push(nullptr, a); }
int NVTX_API push_a(const char* text) {
  if (!logging()) return 0;
  write_line("push " + std::to_string(tid()) + " 0 0 - a:" + text);
  return 0;
}
int NVTX_API pop() { return domain_pop(nullptr); }

template <class F>
void put(NvtxFunctionTable table, unsigned size, unsigned id, F* f) {
  if (id < size && table[id] != nullptr) *table[id] = reinterpret_cast<NvtxFunctionPointer>(f);
}

}  // namespace

extern "C" NVTX_DYNAMIC_EXPORT int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_table) {
  const auto* callbacks =
      static_cast<const NvtxExportTableCallbacks*>(get_table(NVTX_ETID_CALLBACKS));
  if (callbacks == nullptr) return 0;
  NvtxFunctionTable core = nullptr, core2 = nullptr;
  unsigned core_size = 0, core2_size = 0;
  if (!callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &core, &core_size) ||
      !callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &core2, &core2_size)) {
    return 0;
  }
  put(core, core_size, NVTX_CBID_CORE_RangePushEx, push_ex);
  put(core, core_size, NVTX_CBID_CORE_RangePushA, push_a);
  put(core, core_size, NVTX_CBID_CORE_RangePop, pop);
  put(core2, core2_size, NVTX_CBID_CORE2_DomainCreateA, domain_create);
  put(core2, core2_size, NVTX_CBID_CORE2_DomainNameCategoryA, name_category);
  put(core2, core2_size, NVTX_CBID_CORE2_DomainRegisterStringA, register_string);
  put(core2, core2_size, NVTX_CBID_CORE2_DomainRangePushEx, domain_push);
  put(core2, core2_size, NVTX_CBID_CORE2_DomainRangePop, domain_pop);
  put(core2, core2_size, NVTX_CBID_CORE2_DomainRangeStartEx, domain_start);
  put(core2, core2_size, NVTX_CBID_CORE2_DomainRangeEnd, domain_end);
  return 1;
}
