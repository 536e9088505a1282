// NVTX ranges for lens spans (see ranges.hpp). The only file that includes the NVTX headers.
#include "nvtx/ranges.hpp"

#include <mutex>
#include <string>

#include "nemo/lens/span.hpp"
#include "strings.hpp"
#include "tracing/engine.hpp"

#if defined(NEMO_LENS_HAVE_NVTX)
#include <nvtx3/nvToolsExt.h>
#endif

namespace nemo::lens::detail {

#if defined(NEMO_LENS_HAVE_NVTX)

namespace {

constexpr std::uint32_t kMaxCategories = 4096;  // the interned group table's capacity

nvtxDomainHandle_t domain() noexcept {
  static const nvtxDomainHandle_t d = nvtxDomainCreateA("nemo.lens");
  return d;
}

// A stable colour per group: its name's hash picks one of twelve well-separated hues.
std::uint32_t group_colour(std::string_view group) noexcept {
  static constexpr std::uint32_t kPalette[] = {0xFF76B900, 0xFF1F77B4, 0xFFFF7F0E, 0xFFD62728,
                                               0xFF9467BD, 0xFF8C564B, 0xFFE377C2, 0xFF17BECF,
                                               0xFFBCBD22, 0xFF7F7F7F, 0xFF2CA02C, 0xFFAEC7E8};
  return kPalette[hash_short_string(group) % (sizeof(kPalette) / sizeof(kPalette[0]))];
}

// Names category `index + 1` after `group` the first time a range of that group opens.
void name_category(std::uint32_t index, std::string_view group) noexcept {
  static constinit std::atomic<bool> named[kMaxCategories] = {};
  // Acquire pairs with the release below, after the name was given.
  if (index >= kMaxCategories || named[index].load(std::memory_order_acquire)) return;
  static constinit std::mutex mu;
  try {
    std::lock_guard lock(mu);
    if (named[index].load(std::memory_order_relaxed)) return;  // the mutex orders it
    nvtxDomainNameCategoryA(domain(), index + 1, std::string(group).c_str());
    named[index].store(true, std::memory_order_release);
  } catch (...) {
    // Out of memory: the category stays unnamed.
  }
}

// The site's name registered with the domain, cached on the site.
nvtxStringHandle_t registered_name(const SpanSite& site) noexcept {
  // Acquire pairs with the release below: a handle read is one the tool returned.
  if (const void* h = site.nvtx_name.load(std::memory_order_acquire)) {
    return static_cast<nvtxStringHandle_t>(const_cast<void*>(h));
  }
  nvtxStringHandle_t h = nullptr;
  try {
    h = nvtxDomainRegisterStringA(domain(), std::string(site.name).c_str());
  } catch (...) {
    return nullptr;
  }
  const void* expected = nullptr;
  // Two threads registering at once both get a valid handle; the first one stays cached.
  if (!site.nvtx_name.compare_exchange_strong(expected, h, std::memory_order_release,
                                              std::memory_order_acquire)) {
    return static_cast<nvtxStringHandle_t>(const_cast<void*>(expected));
  }
  return h;
}

// Requires ts.mu, on ts's thread. Pops the ranges on top of the stack that were closed already.
void pop_closed_locked(ThreadState& ts) noexcept {
  NvtxStack& s = ts.nvtx;
  while (s.depth > 0 && s.closed[s.depth - 1]) {
    nvtxDomainRangePop(domain());
    --s.depth;
  }
}

}  // namespace

std::uint32_t nvtx_open(ThreadState& ts, const SpanSite& site, std::uint32_t group_index) noexcept {
  nvtxEventAttributes_t a{};
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.category = group_index < kMaxCategories ? group_index + 1 : 0;  // 0: no category
  a.colorType = NVTX_COLOR_ARGB;
  a.color = group_colour(site.gate.group);
  if (nvtxStringHandle_t name = registered_name(site)) {
    a.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
    a.message.registered = name;
  }
  name_category(group_index, site.gate.group);
  std::lock_guard lock(ts.mu);
  pop_closed_locked(ts);  // closed from another thread since this thread's last range
  NvtxStack& s = ts.nvtx;
  if (s.depth >= NvtxStack::kCapacity) return 0;
  nvtxDomainRangePushEx(domain(), &a);
  s.closed[s.depth] = false;
  return ++s.depth;
}

void nvtx_close_locked(ThreadState& owner, std::uint32_t handle) noexcept {
  NvtxStack& s = owner.nvtx;
  if (handle == 0 || handle > s.depth) return;
  s.closed[handle - 1] = true;
  // Only the owner pops its ranges; another thread's close is picked up at the owner's next range.
  // (Acquiring a state here could wait for owner.mu, which the caller holds.)
  if (this_thread_state_if_any() == &owner) pop_closed_locked(owner);
}

#else  // no NVTX: nvtx_emits() is always false, so nothing below is ever called.

std::uint32_t nvtx_open(ThreadState&, const SpanSite&, std::uint32_t) noexcept { return 0; }
void nvtx_close_locked(ThreadState&, std::uint32_t) noexcept {}

#endif

void nvtx_close(ThreadState& owner, std::uint32_t handle) noexcept {
  std::lock_guard lock(owner.mu);
  nvtx_close_locked(owner, handle);
}

}  // namespace nemo::lens::detail
