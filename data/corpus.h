// Corpus builder: resolves a named corpus or a list of files / folders / glob patterns into
// a sorted list of documents (one document per file), assigns each to the train or
// validation split by a stable hash of its key, and reads a document as clean UTF-8 text.
//
// Invariants:
// - A file's key is its path relative to its source root ("<label>/<relative path>" for the
//   named corpora, so "debdocs-python" splits its files exactly as "debdocs" does).
// - The split depends only on the key and val_fraction: val iff FNV-1a64(key) % 1000 <
//   round(val_fraction * 1000). Adding or removing other files never moves a file.
// - Files are listed in key order; reading drops every line containing
//   "SPDX-License-Identifier" and checks UTF-8 (error, or U+FFFD replacement on request).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dark::data {

enum class Split { train, val };
const char* split_name(Split split);

// What to do with bytes that are not valid UTF-8 in an input file.
enum class InvalidUtf8 {
  error,    // throw dark::Error naming the file, byte offset and line (default)
  replace,  // replace each maximal invalid subsequence with U+FFFD and log a warning
};
InvalidUtf8 parse_invalid_utf8(const std::string& text);  // "error" | "replace"

struct CorpusFile {
  std::string path;        // where to read it
  std::string key;         // split key: path relative to its source root
  std::uint64_t bytes = 0; // size on disk
  Split split = Split::train;
};

// A source root of a named corpus.
struct NamedSource {
  std::string label;                  // key prefix, e.g. "python3.11"
  std::string root;                   // folder read recursively
  std::vector<std::string> excludes;  // relative sub-folders left out, e.g. "translations"
  std::string package;                // Debian package that installs it
  std::string extension;              // only files whose name ends with it, e.g. ".py"; "" = every file
  std::vector<std::string> excluded_folder_names;  // folders left out at any depth, e.g. "__pycache__";
                                                   // a final '*' matches any ending ("config-3.11-*")
};

// The named corpora:
//   debdocs         python3.11-doc + linux-doc-6.1 reStructuredText sources, without the
//                   kernel's translations/
//   debdocs-python  python3.11-doc only
//   longdocs        debdocs plus the Python standard library's own sources (the .py files
//                   that libpython3.11-minimal and libpython3.11-stdlib install in
//                   /usr/lib/python3.11; folders other packages add there, generated tables
//                   and tests left out), for long-document windows (docs/long-context.md)
std::vector<std::string> corpus_names();
// Throws naming the known corpora when `name` is not one.
std::vector<NamedSource> named_corpus(const std::string& name);
// The files of one named source, keyed "<label>/<path relative to root>", unsorted; throws
// naming the Debian package when the root is missing.
std::vector<CorpusFile> list_named_source(const NamedSource& source, const std::string& corpus);

// True when `key` belongs to the validation split.
bool is_validation_key(std::string_view key, double val_fraction);

class Corpus {
 public:
  // `sources` (files, folders read recursively, or glob patterns) override the named
  // corpus when non-empty. Throws dark::Error for an unknown name, a missing path, a
  // pattern matching nothing, a corpus with no files, or val_fraction outside [0, 0.5].
  // When val_fraction > 0 and the hash puts no file in val (tiny corpora), the file with
  // the smallest hash % 1000 goes to val (and symmetrically for an empty train split), so
  // both splits have a file whenever there are two; a single file is always train.
  static Corpus resolve(const std::string& corpus, const std::vector<std::string>& sources,
                        double val_fraction);

  const std::vector<CorpusFile>& files() const { return files_; }
  std::vector<CorpusFile> files(Split split) const;
  // "debdocs" or the comma-joined sources.
  const std::string& description() const { return description_; }
  double val_fraction() const { return val_fraction_; }
  std::uint64_t total_bytes() const;
  // Hash of every (key, size, split): changes when a file is added, removed or resized.
  std::string fingerprint() const;

 private:
  std::vector<CorpusFile> files_;
  std::string description_;
  double val_fraction_ = 0;
};

// Reads one document: rejects gzip-compressed input, applies the UTF-8 policy to the bytes
// on disk (error offsets are file offsets), then drops SPDX licence lines. May return an
// empty string (an empty file).
std::string read_document(const CorpusFile& file, InvalidUtf8 policy);

// ---- text helpers (exposed for tests) ----
// Removes every line (with its newline) that contains "SPDX-License-Identifier".
std::string drop_spdx_lines(std::string_view text);
// Byte offset of the first invalid UTF-8 sequence (overlong, surrogate, > U+10FFFF,
// truncated, stray continuation), or std::string_view::npos when the text is valid.
std::size_t find_invalid_utf8(std::string_view text);
// Replaces each maximal invalid subsequence with U+FFFD; `replaced` counts them.
std::string replace_invalid_utf8(std::string_view text, std::size_t* replaced = nullptr);

}  // namespace dark::data
