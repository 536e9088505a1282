// The umbrella header: everything a program needs to configure lens and instrument its code.
//
//   #include <nemo/lens/lens.hpp>
//   auto telemetry = nemo::lens::setup_telemetry(nemo::lens::NemoLensConfig::from_env(), rank,
//                                                world_size);
//   if (LENS_GROUP_ENABLED(nemo::lens::SpanGroup::STEP)) { /* per-step detail */ }
//   telemetry.shutdown();
#pragma once

#include "nemo/lens/config.hpp"
#include "nemo/lens/errors.hpp"
#include "nemo/lens/groups.hpp"
#include "nemo/lens/instruments.hpp"
#include "nemo/lens/logs.hpp"
#include "nemo/lens/macros.hpp"
#include "nemo/lens/metrics.hpp"
#include "nemo/lens/propagation.hpp"
#include "nemo/lens/ranks.hpp"
#include "nemo/lens/sampling.hpp"
#include "nemo/lens/semconv.hpp"
#include "nemo/lens/state.hpp"
#include "nemo/lens/strategies.hpp"
#include "nemo/lens/telemetry.hpp"
#include "nemo/lens/telemetry_data.hpp"
#include "nemo/lens/training_metrics.hpp"
#include "nemo/lens/version.hpp"
