// The library version, defined once. CMake reads these three macros to version the package.
//
//   #include <nemo/lens/version.hpp>
//   std::printf("lens %s\n", NEMO_LENS_VERSION_STRING);
#pragma once

/// Major version of lens: incremented on incompatible API changes.
#define NEMO_LENS_VERSION_MAJOR 0
/// Minor version of lens: incremented when features are added compatibly.
#define NEMO_LENS_VERSION_MINOR 1
/// Patch version of lens: incremented for fixes.
#define NEMO_LENS_VERSION_PATCH 0

#define NEMO_LENS_DETAIL_STR2(x) #x
#define NEMO_LENS_DETAIL_STR(x) NEMO_LENS_DETAIL_STR2(x)
/// The version as a "MAJOR.MINOR.PATCH" string literal.
#define NEMO_LENS_VERSION_STRING                                             \
  NEMO_LENS_DETAIL_STR(NEMO_LENS_VERSION_MAJOR)                              \
  "." NEMO_LENS_DETAIL_STR(NEMO_LENS_VERSION_MINOR) "." NEMO_LENS_DETAIL_STR( \
      NEMO_LENS_VERSION_PATCH)
