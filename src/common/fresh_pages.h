// Taking memory back from an I/O that will not finish in time.
//
// A read that the kernel performs into pinned pages (io_uring registered
// buffers) writes those physical pages whenever the device answers, which
// may be long after the caller stopped waiting. Mapping fresh pages over the
// caller's range gives the caller its address range back at once: the late
// transfer lands in the old pages, which the kernel frees when the I/O ends.
// This is only sound for memory nobody else sees through another mapping
// (private, anonymous, not locked): it is checked, not assumed.
#pragma once

#include <cstddef>

namespace kvtier {

// Maps fresh zero-filled pages over [addr, addr + len) when that range is
// page-aligned and lies in one private, anonymous, writable, unlocked
// mapping; returns whether it did. Reads /proc/self/smaps, so it is meant for
// the rare path (a read past its deadline), not for every I/O.
bool replace_with_fresh_pages(std::byte* addr, size_t len);

}  // namespace kvtier
