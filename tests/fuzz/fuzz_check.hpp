// The check the fuzz targets use for their properties: prints the failed condition and where,
// then traps, so that libFuzzer reports a crash and saves the input.
#pragma once

#include <cstdio>

#define LENS_FUZZ_CHECK(condition)                                                               \
  do {                                                                                           \
    if (!(condition)) {                                                                          \
      std::fprintf(stderr, "%s:%d: fuzz property failed: %s\n", __FILE__, __LINE__, #condition); \
      std::fflush(stderr);                                                                       \
      __builtin_trap();                                                                          \
    }                                                                                            \
  } while (false)
