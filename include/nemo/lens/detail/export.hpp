// Symbol visibility for the compiled library. The library is built with hidden visibility; only
// names marked NEMO_LENS_API are exported. Internal; not part of the documented API.
#pragma once

#if defined(NEMO_LENS_STATIC) || !defined(__GNUC__)
#define NEMO_LENS_API
#else
#define NEMO_LENS_API __attribute__((visibility("default")))
#endif

#if defined(__GNUC__)
#define NEMO_LENS_LIKELY(x) __builtin_expect(!!(x), 1)
#define NEMO_LENS_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define NEMO_LENS_LIKELY(x) (x)
#define NEMO_LENS_UNLIKELY(x) (x)
#endif
