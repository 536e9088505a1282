// The checks of a span site's attribute keys, made once per site and pipeline (SiteKeys).
#include <cstring>

#include "tracing/engine.hpp"
#include "tracing/read_only_memory.hpp"

namespace nemo::lens::detail {

void check_site_keys(const SpanSite& site, const Pipeline& p, std::span<const Attribute> attributes,
                     bool own_site) noexcept {
  using T = AttributeArg::Type;
  SiteKeys* keys = nullptr;
  try {
    keys = new SiteKeys();
  } catch (...) {
    return;  // out of memory: checked key by key, as before
  }
  keys->pipeline = &p;
  // Strings that fit a slot must need no cut, and every attribute must get a slot.
  bool ok = attributes.size() <= p.inline_room &&
            p.limits.attribute_value_length >= InlineAttribute::kStringCapacity;
  bool by_address = own_site;
  for (std::size_t i = 0; ok && i < attributes.size(); ++i) {
    const std::string_view key = attributes[i].key;
    const T type = attributes[i].value.type();
    ok = key.size() <= InlineAttribute::kKeyCapacity && !p.redacted(key) &&
         (type == T::kBool || type == T::kInt || type == T::kDouble || type == T::kString);
    for (std::size_t j = 0; ok && j < i; ++j) ok = key != attributes[j].key;
    if (!ok) break;
    SiteKeys::Key& k = keys->keys[i];
    k.data = key.data();
    k.type = type;
    k.slot.key_size = static_cast<std::uint8_t>(key.size());
    k.slot.type = type == T::kBool  ? InlineAttribute::kBool
                  : type == T::kInt ? InlineAttribute::kInt
                  : type == T::kDouble ? InlineAttribute::kDouble
                                       : InlineAttribute::kString;
    std::memcpy(k.slot.key, key.data(), key.size());
    by_address = by_address && in_read_only_memory(key.data(), key.size());
  }
  if (ok) keys->count = static_cast<std::uint32_t>(attributes.size());
  // The slots past the list get an address no key of a caller has: a start with more attributes
  // than were checked fails at the first of them (try_start_site_record() compares no count).
  static const char unused_key = 0;
  for (std::size_t i = attributes.size(); i < SpanRecord::kInlineAttributes; ++i) {
    keys->keys[i].data = &unused_key;
  }
  keys->by_address = by_address;
  if (ok && by_address) keys->checked_by_address = &p;
  // Publish, unless another thread published the keys for `p` first. Release pairs with
  // site_keys()' acquire: the keys are complete before they are seen.
  const void* old = site.keys.load(std::memory_order_acquire);
  do {
    if (old != nullptr && static_cast<const SiteKeys*>(old)->pipeline == &p) {
      delete keys;
      return;
    }
    keys->previous = static_cast<const SiteKeys*>(old);
  } while (!site.keys.compare_exchange_weak(old, keys, std::memory_order_acq_rel,
                                            std::memory_order_acquire));
}

}  // namespace nemo::lens::detail
