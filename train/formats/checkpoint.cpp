// Atomic, verified checkpoints. See checkpoint.h for the layout and the invariants.
#include "train/formats/checkpoint.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>  // renameat2, RENAME_EXCHANGE (glibc >= 2.28)
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <memory>
#include <system_error>

#include "core/file_io.h"
#include "core/json_depth.h"

namespace dark::formats {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kFormatName = "darkformer-checkpoint";
constexpr const char* kModelFile = "model.safetensors";
constexpr const char* kOptimizerFile = "optimizer.safetensors";
// Non-trained attention state (the variance-optimal proposal); written only when non-empty.
constexpr const char* kAttentionFile = "attention.safetensors";
constexpr const char* kStateFile = "state.json";
constexpr const char* kReservedKeys[] = {"format", "format_version", "step", "files"};

// std::filesystem calls that report through error_code, turned into dark::Error.
void check_fs(const std::error_code& ec, const char* call, const fs::path& path) {
  if (ec) throw Error(str(call, "(", path.string(), "): ", ec.message()));
}

// Parses "step_<digits>" (at least 8 digits, nothing after); -1 otherwise.
std::int64_t parse_checkpoint_name(const std::string& name) {
  constexpr std::string_view prefix = "step_";
  if (name.size() < prefix.size() + 8 || name.compare(0, prefix.size(), prefix) != 0) return -1;
  const char* begin = name.data() + prefix.size();
  const char* end = name.data() + name.size();
  if (!std::all_of(begin, end, [](char c) { return c >= '0' && c <= '9'; })) return -1;
  std::int64_t step = -1;
  const auto [ptr, ec] = std::from_chars(begin, end, step);
  return ec == std::errc() && ptr == end ? step : -1;
}

// The pid in "<name>.tmp-<pid>", "<name>.old-<pid>" or "<name>.deleting-<pid>"; -1 otherwise.
long scratch_owner(const std::string& name) {
  for (const std::string_view tag : {".tmp-", ".old-", ".deleting-"}) {
    const std::size_t at = name.rfind(tag);
    if (at == std::string::npos || parse_checkpoint_name(name.substr(0, at)) < 0) continue;
    long pid = -1;
    const char* begin = name.data() + at + tag.size();
    const char* end = name.data() + name.size();
    const auto [ptr, ec] = std::from_chars(begin, end, pid);
    if (ec == std::errc() && ptr == end && pid > 0) return pid;
  }
  return -1;
}

bool process_alive(long pid) {
  return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
}

void remove_tree(const fs::path& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
  check_fs(ec, "remove_all", path);
}

void rename_path(const fs::path& from, const fs::path& to) {
  DARK_IO_CHECK(::rename(from.c_str(), to.c_str()) == 0, "rename", from);
}

// Puts the complete directory `staged` at `final_path`, atomically, also when a checkpoint of
// the same step already exists (then the two are exchanged and the old one removed).
void publish(const fs::path& staged, const fs::path& final_path) {
  std::error_code ec;
  if (!fs::exists(final_path, ec)) {
    rename_path(staged, final_path);
    return;
  }
  if (::renameat2(AT_FDCWD, staged.c_str(), AT_FDCWD, final_path.c_str(), RENAME_EXCHANGE) == 0) {
    remove_tree(staged);  // now holds the replaced checkpoint
    return;
  }
  // A file system without RENAME_EXCHANGE: move the old one aside first. In between, the
  // step is briefly absent and latest_checkpoint() would return the one before it.
  DARK_IO_CHECK(errno == EINVAL || errno == ENOSYS || errno == ENOTSUP, "renameat2", staged);
  fs::path aside = final_path;
  aside += ".old-" + std::to_string(::getpid());
  rename_path(final_path, aside);
  rename_path(staged, final_path);
  remove_tree(aside);
}

// A file name CheckpointData::files may use: plain, and none of the checkpoint's own.
void check_extra_file_name(const std::string& label, const std::string& name) {
  const bool plain = !name.empty() && name[0] != '.' &&
                     std::all_of(name.begin(), name.end(), [](char c) {
                       return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
                     });
  DARK_CHECK(plain, label, ": file name \"", name, "\" is not a plain file name");
  for (const char* own : {kModelFile, kOptimizerFile, kAttentionFile, kStateFile})
    DARK_CHECK(name != own, label, ": file name \"", name, "\" is the checkpoint's own");
}

json file_record(const fs::path& path) {
  std::error_code ec;
  const auto bytes = fs::file_size(path, ec);
  check_fs(ec, "file_size", path);
  return json{{"bytes", bytes}, {"sha256", sha256_file(path)}};
}

// Deletes complete checkpoints beyond the newest keep_last (never `keep`) and scratch
// directories whose process is gone. A checkpoint is renamed out of the step_<digits>
// namespace before its files go, so a crash mid-delete cannot leave a damaged "complete" one.
void prune(const fs::path& run_dir, const fs::path& checkpoints, int keep_last, const fs::path& keep) {
  bool changed = false;
  if (keep_last > 0) {
    const std::vector<CheckpointEntry> complete = list_checkpoints(run_dir);
    int kept = 1;  // `keep` itself
    for (auto it = complete.rbegin(); it != complete.rend(); ++it) {
      if (it->path.filename() == keep.filename()) continue;
      if (kept < keep_last) {
        ++kept;
        continue;
      }
      fs::path doomed = it->path;
      doomed += ".deleting-" + std::to_string(::getpid());
      rename_path(it->path, doomed);
      remove_tree(doomed);
      changed = true;
    }
  }
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(checkpoints, ec)) {
    const long owner = scratch_owner(entry.path().filename().string());
    if (owner < 0 || (owner != ::getpid() && process_alive(owner))) continue;
    remove_tree(entry.path());
    changed = true;
  }
  check_fs(ec, "directory_iterator", checkpoints);
  if (changed) fsync_directory(checkpoints);
}

}  // namespace

std::string checkpoint_name(std::int64_t step) {
  DARK_CHECK(step >= 0, "checkpoint: step must be non-negative, got ", step);
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "step_%08lld", static_cast<long long>(step));
  return buffer;
}

fs::path save_checkpoint(const fs::path& run_dir, const CheckpointData& data, int keep_last) {
  const std::string name = checkpoint_name(data.step);
  DARK_CHECK(data.state.is_object(), "checkpoint ", name, ": state must be a JSON object, got ",
             data.state.type_name());
  for (const char* key : kReservedKeys) {
    DARK_CHECK(!data.state.contains(key), "checkpoint ", name, ": state key \"", key,
               "\" is reserved for the checkpoint format");
  }
  const fs::path checkpoints = run_dir / "checkpoints";
  std::error_code ec;
  fs::create_directories(checkpoints, ec);
  check_fs(ec, "create_directories", checkpoints);

  const fs::path final_path = checkpoints / name;
  fs::path staged = final_path;
  staged += ".tmp-" + std::to_string(::getpid());
  remove_tree(staged);
  fs::create_directory(staged, ec);
  check_fs(ec, "create_directory", staged);
  // Removes the staging directory if anything below throws.
  const auto cleanup = [](const fs::path* p) {
    std::error_code ignored;
    fs::remove_all(*p, ignored);
  };
  std::unique_ptr<const fs::path, decltype(cleanup)> guard(&staged, cleanup);

  save_safetensors(staged / kModelFile, data.model, {{"format", "pt"}});
  save_safetensors(staged / kOptimizerFile, data.optimizer);
  json state = data.state;
  state["format"] = kFormatName;
  state["format_version"] = kCheckpointFormatVersion;
  state["step"] = data.step;
  state["files"] = {{kModelFile, file_record(staged / kModelFile)},
                    {kOptimizerFile, file_record(staged / kOptimizerFile)}};
  if (!data.attention.empty()) {
    save_safetensors(staged / kAttentionFile, data.attention);
    state["files"][kAttentionFile] = file_record(staged / kAttentionFile);
  }
  for (const auto& [file, bytes] : data.files) {
    check_extra_file_name("checkpoint " + name, file);
    write_file_atomic(staged / file, bytes);
    state["files"][file] = file_record(staged / file);
  }
  std::string state_text;
  try {
    state_text = state.dump(2) + "\n";
  } catch (const json::exception& e) {
    throw Error(str("checkpoint ", name, ": state cannot be written as JSON: ", e.what()));
  }
  write_file_atomic(staged / kStateFile, state_text);  // also fsyncs the staging directory
  publish(staged, final_path);
  guard.release();
  fsync_directory(checkpoints);
  prune(run_dir, checkpoints, keep_last, final_path);
  return final_path;
}

CheckpointData load_checkpoint(const fs::path& checkpoint_dir, CheckpointParts parts) {
  fs::path dir = checkpoint_dir.lexically_normal();
  if (dir.filename().empty()) dir = dir.parent_path();  // "…/step_00000100/"
  const std::string label = "checkpoint " + dir.filename().string();
  std::error_code ec;
  DARK_CHECK(fs::is_directory(dir, ec), label, ": ", dir.string(), " is not a directory");
  DARK_CHECK(fs::is_regular_file(dir / kStateFile, ec), label, ": ", kStateFile,
             " is missing (incomplete checkpoint?)");

  json state;
  try {
    state = json::parse(read_file(dir / kStateFile), json_depth_limit());
  } catch (const json::exception& e) {
    throw Error(str(label, ": ", kStateFile, " is not valid JSON: ", e.what()));
  } catch (const Error& e) {
    throw Error(str(label, ": ", kStateFile, ": ", e.what()));
  }
  DARK_CHECK(state.is_object() && state.contains("format") && state["format"] == kFormatName, label, ": ", kStateFile,
             " does not describe a darkformer checkpoint (\"format\" is not \"", kFormatName, "\")");
  const json& version = state["format_version"];
  DARK_CHECK(version.is_number_integer(), label, ": ", kStateFile,
             ": \"format_version\" is missing or not an integer");
  DARK_CHECK(version.get<std::int64_t>() == kCheckpointFormatVersion, label, ": format version ",
             version.dump(), " is not supported (this build reads version ", kCheckpointFormatVersion, ")");
  DARK_CHECK(state["step"].is_number_integer() && state["step"].get<std::int64_t>() >= 0, label, ": ",
             kStateFile, ": \"step\" is missing or not a non-negative integer");
  const json& files = state["files"];
  DARK_CHECK(files.is_object(), label, ": ", kStateFile, ": \"files\" is missing");

  // Map and verify every file before parsing any.
  std::vector<std::unique_ptr<MappedFile>> mapped;
  const bool has_attention = files.contains(kAttentionFile);
  std::vector<std::string> names = {kModelFile, kOptimizerFile};
  if (has_attention) names.push_back(kAttentionFile);
  for (const auto& entry : files.items()) {
    const std::string& file = entry.key();
    if (std::find(names.begin(), names.end(), file) != names.end()) continue;
    check_extra_file_name(label, file);
    names.push_back(file);
  }
  for (const std::string& file : names) {
    if (file == kOptimizerFile && !parts.optimizer) {  // a placeholder keeps the files' positions
      mapped.push_back(nullptr);
      continue;
    }
    const json& record = files.contains(file) ? files[file] : json();
    DARK_CHECK(record.is_object() && record.contains("sha256") && record["sha256"].is_string() &&
                   record.contains("bytes") && record["bytes"].is_number_unsigned(),
               label, ": ", kStateFile, ": no size and checksum for ", file);
    DARK_CHECK(fs::is_regular_file(dir / file, ec), label, ": ", file, " is missing");
    mapped.push_back(std::make_unique<MappedFile>(dir / file));
    const MappedFile& m = *mapped.back();
    const auto expected_bytes = record["bytes"].get<std::uint64_t>();
    DARK_CHECK(m.size() == expected_bytes, label, ": ", file, " is ", m.size(), " bytes, expected ",
               expected_bytes, " (file truncated or corrupted?)");
    DARK_CHECK(sha256_hex(m.data(), m.size()) == record["sha256"].get<std::string>(), label, ": ", file,
               " checksum mismatch (file corrupted?)");
  }

  CheckpointData out;
  out.step = state["step"].get<std::int64_t>();
  out.model = parse_safetensors(mapped[0]->data(), mapped[0]->size(), (dir / kModelFile).string()).tensors;
  if (parts.optimizer)
    out.optimizer = parse_safetensors(mapped[1]->data(), mapped[1]->size(), (dir / kOptimizerFile).string()).tensors;
  if (has_attention)
    out.attention = parse_safetensors(mapped[2]->data(), mapped[2]->size(), (dir / kAttentionFile).string()).tensors;
  for (std::size_t i = has_attention ? 3 : 2; i < names.size(); ++i)
    out.files[names[i]] = mapped[i]->size() ? std::string(reinterpret_cast<const char*>(mapped[i]->data()), mapped[i]->size())
                                            : std::string();
  for (const char* key : kReservedKeys) state.erase(key);
  out.state = std::move(state);
  return out;
}

std::vector<CheckpointEntry> list_checkpoints(const fs::path& run_dir) {
  std::vector<CheckpointEntry> out;
  const fs::path checkpoints = run_dir / "checkpoints";
  std::error_code ec;
  if (!fs::is_directory(checkpoints, ec)) return out;
  for (const auto& entry : fs::directory_iterator(checkpoints, ec)) {
    const std::int64_t step = parse_checkpoint_name(entry.path().filename().string());
    std::error_code entry_ec;
    if (step < 0 || !entry.is_directory(entry_ec) ||
        !fs::is_regular_file(entry.path() / kStateFile, entry_ec))
      continue;
    out.push_back({step, entry.path()});
  }
  check_fs(ec, "directory_iterator", checkpoints);
  std::sort(out.begin(), out.end(),
            [](const CheckpointEntry& a, const CheckpointEntry& b) { return a.step < b.step; });
  return out;
}

std::optional<fs::path> latest_checkpoint(const fs::path& run_dir) {
  const std::vector<CheckpointEntry> all = list_checkpoints(run_dir);
  if (all.empty()) return std::nullopt;
  return all.back().path;
}

fs::path find_checkpoint(const fs::path& path) {
  DARK_CHECK(fs::exists(path), "checkpoint ", path.string(), " does not exist");
  if (fs::exists(path / "state.json")) return path;
  const auto latest = latest_checkpoint(path);
  DARK_CHECK(latest.has_value(), path.string(), " is neither a checkpoint nor a run folder with checkpoints");
  return *latest;
}

}  // namespace dark::formats
