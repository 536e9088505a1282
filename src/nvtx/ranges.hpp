// NVTX ranges for lens spans (docs/nvtx.md). Internal.
//
// Under an NVTX tool (Nsight Systems), every span site of an enabled span group opens a range in
// the NVTX domain "nemo.lens": named by the span name (a string registered once per site), in the
// category named after the group, with a colour fixed by the group's name. Ranges follow the span
// groups on every rank, exporting or not.
//
// Ranges are push/pop ranges on the thread that started the span. A span that ends while spans it
// encloses are still open, or that ends on another thread, cannot be popped in order: its range is
// marked closed and popped as soon as everything above it on its thread has ended (the enclosing
// ranges never close early, so the nesting stays intact; only that span's range ends late).
#pragma once

#include <cstdint>

namespace nemo::lens::detail {

struct SpanSite;
struct ThreadState;

/// Opens a push range for a span of `site`, whose group has index `group_index` in the interned
/// table, on the calling thread, whose state is `ts`. Returns the range's handle for
/// nvtx_close(), 0 when no range was opened (the thread's range stack is full). Takes ts.mu.
std::uint32_t nvtx_open(ThreadState& ts, const SpanSite& site, std::uint32_t group_index) noexcept;
/// Closes range `handle` (non-zero) opened on `owner`'s thread, from any thread. Takes owner.mu.
void nvtx_close(ThreadState& owner, std::uint32_t handle) noexcept;
/// As nvtx_close(), with owner.mu held.
void nvtx_close_locked(ThreadState& owner, std::uint32_t handle) noexcept;

}  // namespace nemo::lens::detail
