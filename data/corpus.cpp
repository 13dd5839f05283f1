// Corpus resolution, the hash split, and document reading (SPDX lines, UTF-8 policy).
#include "data/corpus.h"

#include <glob.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>

#include <spdlog/spdlog.h>

#include "core/error.h"
#include "core/file_io.h"
#include "data/hash.h"

namespace dark::data {
namespace fs = std::filesystem;

namespace {

constexpr std::string_view kSpdxMarker = "SPDX-License-Identifier";

bool has_wildcard(const std::string& s) { return s.find_first_of("*?[{") != std::string::npos; }

bool is_hidden(const fs::path& relative) {
  for (const auto& part : relative) {
    const std::string name = part.string();
    if (name.size() > 1 && name[0] == '.' && name != "..") return true;
  }
  return false;
}

// The folder part of a glob pattern before its first wildcard component.
fs::path glob_root(const std::string& pattern) {
  fs::path root;
  for (const auto& part : fs::path(pattern)) {
    if (has_wildcard(part.string())) break;
    root /= part;
  }
  return root.empty() ? fs::path(".") : root;
}

std::string join_key(const std::string& label, const fs::path& relative) {
  const std::string rel = relative.generic_string();
  return label.empty() ? rel : label + "/" + rel;
}

// Whether the last component of `relative` is `name`, or starts with it less its final '*'.
bool folder_name_matches(const fs::path& relative, const std::string& name) {
  const std::string last = relative.filename().string();
  return name.ends_with('*') ? last.starts_with(std::string_view(name).substr(0, name.size() - 1)) : last == name;
}

// What a folder source keeps: every non-hidden regular file, less the excluded sub-folders
// (relative paths, or folder names at any depth) and the files without the extension.
struct FolderFilter {
  std::vector<std::string> excludes;
  std::vector<std::string> excluded_folder_names;
  std::string extension;
};

// Adds the files under `root` (recursively) that `filter` keeps.
void add_folder(const fs::path& root, const std::string& label, const FolderFilter& filter,
                std::vector<CorpusFile>& out) {
  std::error_code ec;
  fs::recursive_directory_iterator it(root, ec), end;
  DARK_CHECK(!ec, "corpus: cannot list folder ", root.string(), ": ", ec.message());
  for (; it != end; it.increment(ec)) {
    DARK_CHECK(!ec, "corpus: cannot list folder ", root.string(), ": ", ec.message());
    const fs::path relative = it->path().lexically_relative(root);
    const std::string rel = relative.generic_string();
    const bool directory = it->is_directory();
    bool excluded = is_hidden(relative);
    for (const auto& ex : filter.excludes) excluded = excluded || rel == ex || rel.starts_with(ex + "/");
    if (directory)
      for (const auto& name : filter.excluded_folder_names) excluded = excluded || folder_name_matches(relative, name);
    if (excluded) {
      if (directory) it.disable_recursion_pending();
      continue;
    }
    if (!it->is_regular_file()) continue;
    if (!filter.extension.empty() && !rel.ends_with(filter.extension)) continue;
    out.push_back({it->path().string(), join_key(label, relative), static_cast<std::uint64_t>(it->file_size()),
                   Split::train});
  }
}

void add_source(const std::string& source, std::vector<CorpusFile>& out) {
  std::error_code ec;
  const fs::path path(source);
  if (fs::is_directory(path, ec)) {
    const std::size_t before = out.size();
    add_folder(path, "", FolderFilter{}, out);
    DARK_CHECK(out.size() > before, "corpus: folder '", source, "' contains no files");
    return;
  }
  if (fs::is_regular_file(path, ec)) {
    out.push_back({source, path.filename().string(), static_cast<std::uint64_t>(fs::file_size(path)),
                   Split::train});
    return;
  }
  DARK_CHECK(!fs::exists(path, ec) || has_wildcard(source), "corpus: source '", source,
             "' is neither a file nor a folder");
  DARK_CHECK(has_wildcard(source), "corpus: source '", source, "' does not exist");
  glob_t matches{};
  const int rc = ::glob(source.c_str(), GLOB_BRACE | GLOB_TILDE, nullptr, &matches);
  std::vector<std::string> paths(matches.gl_pathv, matches.gl_pathv + matches.gl_pathc);
  ::globfree(&matches);
  DARK_CHECK(rc == 0 || rc == GLOB_NOMATCH, "corpus: cannot expand pattern '", source, "' (glob error ", rc, ")");
  DARK_CHECK(!paths.empty(), "corpus: pattern '", source, "' matches no files");
  const fs::path root = glob_root(source);
  const std::size_t before = out.size();
  for (const auto& p : paths) {
    if (fs::is_directory(p, ec)) {
      std::vector<CorpusFile> inner;
      add_folder(p, "", FolderFilter{}, inner);
      const fs::path prefix = fs::path(p).lexically_relative(root);
      for (auto& f : inner) f.key = join_key(prefix.generic_string(), fs::path(f.key));
      out.insert(out.end(), inner.begin(), inner.end());
    } else if (fs::is_regular_file(p, ec)) {
      out.push_back({p, fs::path(p).lexically_relative(root).generic_string(),
                     static_cast<std::uint64_t>(fs::file_size(p)), Split::train});
    }
  }
  DARK_CHECK(out.size() > before, "corpus: pattern '", source, "' matches no files");
}

std::uint64_t split_hash(std::string_view key) { return fnv1a64(key) % 1000; }

}  // namespace

const char* split_name(Split split) { return split == Split::train ? "train" : "val"; }

InvalidUtf8 parse_invalid_utf8(const std::string& text) {
  if (text == "error") return InvalidUtf8::error;
  if (text == "replace") return InvalidUtf8::replace;
  throw Error(str("invalid_utf8: unknown value '", text, "' (allowed: \"error\", \"replace\")"));
}

std::vector<std::string> corpus_names() { return {"debdocs", "debdocs-python", "longdocs"}; }

std::vector<NamedSource> named_corpus(const std::string& name) {
  const NamedSource python{"python3.11", "/usr/share/doc/python3.11/html/_sources", {}, "python3.11-doc", "", {}};
  const NamedSource linux{"linux-doc-6.1", "/usr/share/doc/linux-doc-6.1/html/_sources", {"translations"},
                          "linux-doc-6.1", "", {}};
  // The standard library as libpython3.11-minimal and libpython3.11-stdlib install it, the same
  // on every machine: the folders that other Debian packages add to /usr/lib/python3.11 are left
  // out (distutils: python3-distutils, lib2to3: python3-lib2to3, venv and ensurepip:
  // python3.11-venv, tkinter and idlelib: python3-tk and idle-python3.11, test and every tests
  // folder: libpython3.11-testsuite, config-3.11-*: libpython3.11-dev, site- and dist-packages:
  // third-party modules), and so are encodings/ (generated codec tables) and pydoc_data/ (the
  // language reference's text again, which python3.11-doc's pages hold).
  const NamedSource stdlib{"python3.11-lib",
                           "/usr/lib/python3.11",
                           {"distutils", "lib2to3", "venv", "ensurepip", "tkinter", "idlelib", "turtledemo",
                            "site-packages", "dist-packages", "encodings", "pydoc_data"},
                           "libpython3.11-stdlib",
                           ".py",
                           {"__pycache__", "test", "tests", "idle_test", "config-3.11-*"}};
  if (name == "debdocs") return {python, linux};
  if (name == "debdocs-python") return {python};
  if (name == "longdocs") return {python, linux, stdlib};
  std::string known;
  for (const auto& n : corpus_names()) known += (known.empty() ? "" : ", ") + n;
  throw Error(str("corpus: unknown corpus '", name, "' (known: ", known,
                  "; or give sources: files, folders or glob patterns)"));
}

std::vector<CorpusFile> list_named_source(const NamedSource& source, const std::string& corpus) {
  std::error_code ec;
  DARK_CHECK(fs::is_directory(source.root, ec), "corpus '", corpus, "': folder ", source.root,
             " is missing; install the Debian package ", source.package, " (scripts/install-deps.sh)");
  std::vector<CorpusFile> files;
  add_folder(source.root, source.label, {source.excludes, source.excluded_folder_names, source.extension}, files);
  return files;
}

bool is_validation_key(std::string_view key, double val_fraction) {
  const auto threshold = static_cast<std::uint64_t>(std::llround(val_fraction * 1000.0));
  return split_hash(key) < threshold;
}

Corpus Corpus::resolve(const std::string& corpus, const std::vector<std::string>& sources, double val_fraction) {
  DARK_CHECK(val_fraction >= 0.0 && val_fraction <= 0.5, "corpus: val_fraction must be in [0, 0.5], got ",
             val_fraction);
  Corpus result;
  result.val_fraction_ = val_fraction;
  std::vector<CorpusFile> files;
  if (!sources.empty()) {
    for (const auto& s : sources) {
      add_source(s, files);
      result.description_ += (result.description_.empty() ? "" : ",") + s;
    }
  } else {
    for (const auto& src : named_corpus(corpus)) {
      const std::vector<CorpusFile> listed = list_named_source(src, corpus);
      files.insert(files.end(), listed.begin(), listed.end());
    }
    result.description_ = corpus;
  }
  DARK_CHECK(!files.empty(), "corpus '", result.description_, "' has no files");

  // One entry per file, in key order.
  std::sort(files.begin(), files.end(), [](const CorpusFile& a, const CorpusFile& b) {
    return a.key != b.key ? a.key < b.key : a.path < b.path;
  });
  std::set<std::string> seen;
  for (auto& f : files) {
    std::error_code ec;
    const fs::path canonical = fs::weakly_canonical(f.path, ec);
    if (!seen.insert(ec ? f.path : canonical.string()).second) continue;
    f.split = is_validation_key(f.key, val_fraction) ? Split::val : Split::train;
    result.files_.push_back(std::move(f));
  }

  // Tiny corpora: make sure both splits get a file when that is possible.
  auto count = [&](Split s) {
    return std::count_if(result.files_.begin(), result.files_.end(), [&](const CorpusFile& f) { return f.split == s; });
  };
  if (result.files_.size() == 1) result.files_[0].split = Split::train;
  if (val_fraction > 0 && result.files_.size() >= 2) {
    auto by_hash = [](const CorpusFile& a, const CorpusFile& b) {
      const auto ha = split_hash(a.key), hb = split_hash(b.key);
      return ha != hb ? ha < hb : a.key < b.key;
    };
    if (count(Split::val) == 0)
      std::min_element(result.files_.begin(), result.files_.end(), by_hash)->split = Split::val;
    if (count(Split::train) == 0)
      std::max_element(result.files_.begin(), result.files_.end(), by_hash)->split = Split::train;
  }
  return result;
}

std::vector<CorpusFile> Corpus::files(Split split) const {
  std::vector<CorpusFile> out;
  for (const auto& f : files_)
    if (f.split == split) out.push_back(f);
  return out;
}

std::uint64_t Corpus::total_bytes() const {
  std::uint64_t total = 0;
  for (const auto& f : files_) total += f.bytes;
  return total;
}

std::string Corpus::fingerprint() const {
  std::uint64_t h = kFnvOffset;
  for (const auto& f : files_) h = fnv1a64(str(f.key, '\0', f.bytes, '\0', split_name(f.split), '\n'), h);
  return hex64(h);
}

std::string drop_spdx_lines(std::string_view text) {
  if (text.find(kSpdxMarker) == std::string_view::npos) return std::string(text);
  std::string out;
  out.reserve(text.size());
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    end = end == std::string_view::npos ? text.size() : end + 1;
    const std::string_view line = text.substr(start, end - start);
    if (line.find(kSpdxMarker) == std::string_view::npos) out.append(line);
    start = end;
  }
  return out;
}

namespace {

// Length of the well-formed UTF-8 sequence at s[0] (valid = true), or of the maximal
// subpart of one that breaks off (valid = false, length >= 1). Unicode Table 3-7.
std::size_t utf8_step(const unsigned char* s, std::size_t n, bool& valid) {
  const unsigned char b = s[0];
  valid = true;
  if (b < 0x80) return 1;
  int need;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b >= 0xC2 && b <= 0xDF) need = 1;
  else if (b == 0xE0) need = 2, lo = 0xA0;
  else if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) need = 2;
  else if (b == 0xED) need = 2, hi = 0x9F;
  else if (b == 0xF0) need = 3, lo = 0x90;
  else if (b >= 0xF1 && b <= 0xF3) need = 3;
  else if (b == 0xF4) need = 3, hi = 0x8F;
  else {
    valid = false;
    return 1;
  }
  std::size_t i = 1;
  for (int k = 0; k < need; ++k, ++i) {
    if (i >= n || s[i] < lo || s[i] > hi) {
      valid = false;
      return i;
    }
    lo = 0x80;
    hi = 0xBF;
  }
  return i;
}

}  // namespace

std::size_t find_invalid_utf8(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t n = text.size();
  std::size_t i = 0;
  while (i < n) {
    if (s[i] < 0x80) {
      ++i;
      continue;
    }
    bool valid;
    const std::size_t len = utf8_step(s + i, n - i, valid);
    if (!valid) return i;
    i += len;
  }
  return std::string_view::npos;
}

std::string replace_invalid_utf8(std::string_view text, std::size_t* replaced) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t n = text.size();
  std::string out;
  out.reserve(n);
  std::size_t count = 0, i = 0;
  while (i < n) {
    bool valid;
    const std::size_t len = utf8_step(s + i, n - i, valid);
    if (valid) {
      out.append(text.substr(i, len));
    } else {
      out.append("\xEF\xBF\xBD");
      ++count;
    }
    i += len;
  }
  if (replaced) *replaced = count;
  return out;
}

std::string read_document(const CorpusFile& file, InvalidUtf8 policy) {
  std::string text = read_file(file.path);
  DARK_CHECK(!(text.size() >= 2 && static_cast<unsigned char>(text[0]) == 0x1f &&
               static_cast<unsigned char>(text[1]) == 0x8b),
             "corpus: ", file.path, " is gzip-compressed; decompress it first (the corpus reader takes plain text)");
  const std::size_t bad = find_invalid_utf8(text);
  if (bad == std::string::npos) return drop_spdx_lines(text);
  if (policy == InvalidUtf8::error) {
    const auto line = 1 + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(bad), '\n');
    char byte[8];
    std::snprintf(byte, sizeof byte, "0x%02X", static_cast<unsigned char>(text[bad]));
    throw Error(str("corpus: ", file.path, " is not valid UTF-8: byte ", byte, " at offset ", bad,
                    " (line ", line, "); fix the file, or set invalid_utf8 = "
                    "\"replace\" to substitute U+FFFD"));
  }
  std::size_t replaced = 0;
  text = replace_invalid_utf8(text, &replaced);
  spdlog::warn("data: {}: replaced {} invalid UTF-8 sequence(s) with U+FFFD", file.path, replaced);
  return drop_spdx_lines(text);
}

}  // namespace dark::data
