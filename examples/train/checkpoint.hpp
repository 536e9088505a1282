// Checkpoints of the training demo: the model's parameters, Adam's state and the step count, in
// one binary file per save (`step_00000020.ckpt`), written atomically (temporary file, fsync,
// rename) so that a crash never leaves a half-written checkpoint under a checkpoint's name.
//
//   lens_train::TrainingState state = ...;
//   const std::vector<std::byte> bytes = lens_train::encode_checkpoint(state);
//   lens_train::write_file_atomically(dir / lens_train::checkpoint_file_name(state.step), bytes);
//   if (auto latest = lens_train::find_latest_checkpoint(dir)) {
//     state = lens_train::decode_checkpoint(lens_train::read_file(*latest));
//   }
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace lens_train {

/// A checkpoint that cannot be read, written or used.
class CheckpointError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Everything needed to continue a run exactly where it stopped.
struct TrainingState {
  std::int64_t step = 0;   // steps completed
  std::uint64_t seed = 0;  // the run's --seed: it defines the task, so a resume must match
  std::vector<int> dims;   // layer widths of the model
  std::vector<float> parameters;
  std::vector<float> adam_m;  // Adam's first moment, one per parameter
  std::vector<float> adam_v;  // Adam's second moment
  std::int64_t adam_steps = 0;
};

/// The file format (native byte order): "LENSCKPT", version, step, seed, dims, the three float
/// arrays, Adam's step count, and an FNV-1a checksum of everything before it.
std::vector<std::byte> encode_checkpoint(const TrainingState& state);

/// Parses encode_checkpoint()'s output. Throws CheckpointError for a truncated, corrupt or
/// inconsistent file.
TrainingState decode_checkpoint(std::span<const std::byte> bytes);

/// The file name of the checkpoint after `step` steps, e.g. "step_00000020.ckpt".
std::string checkpoint_file_name(std::int64_t step);

/// The checkpoint of the highest step in `dir`; nothing when there is none or `dir` does not
/// exist. Temporary files of an interrupted save are ignored.
std::optional<std::filesystem::path> find_latest_checkpoint(const std::filesystem::path& dir);

/// Writes `bytes` to `path` so that `path` holds either its old contents or all of the new ones:
/// a temporary file next to it, fsync, rename over `path`, fsync of the directory. Creates the
/// directory. Throws CheckpointError naming the path and the system error.
void write_file_atomically(const std::filesystem::path& path, std::span<const std::byte> bytes);

/// The whole contents of `path`. Throws CheckpointError naming the path.
std::vector<std::byte> read_file(const std::filesystem::path& path);

/// FNV-1a over raw bytes: the checkpoint checksum, also used to compare parameters across ranks.
std::uint64_t fnv1a(std::span<const std::byte> bytes) noexcept;

}  // namespace lens_train
