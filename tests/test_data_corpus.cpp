// Corpus builder: source resolution (files, folders, globs), the stable hash split, SPDX
// line removal, UTF-8 validation / replacement, and the errors for missing or empty input;
// the named corpora and a named source's filters (extension, excluded folders).
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

#include "core/error.h"
#include "data/corpus.h"
#include "data/hash.h"
#include "test_util.h"

namespace dark::data {
namespace {

using dark::testing::expect_error;
using dark::testing::TempDir;
using dark::testing::write_text;

std::vector<std::string> keys_of(const std::vector<CorpusFile>& files) {
  std::vector<std::string> keys;
  for (const auto& f : files) keys.push_back(f.key);
  return keys;
}

TEST(DataCorpus, Fnv1a64KnownValues) {
  // Published FNV-1a 64 test vectors.
  EXPECT_EQ(fnv1a64(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(fnv1a64("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(fnv1a64("foobar"), 0x85944171f73967e8ull);
}

TEST(DataCorpus, SplitIsTheHashRuleAndStable) {
  // The rule, recomputed independently: val iff FNV-1a64(key) % 1000 < val_fraction * 1000.
  int val = 0;
  for (int i = 0; i < 20000; ++i) {
    const std::string key = "dir/file" + std::to_string(i) + ".rst.txt";
    const bool expected = fnv1a64(key) % 1000 < 50;
    ASSERT_EQ(is_validation_key(key, 0.05), expected) << key;
    val += expected;
  }
  EXPECT_NEAR(val / 20000.0, 0.05, 0.01);
  EXPECT_FALSE(is_validation_key("anything", 0.0));
}

TEST(DataCorpus, FolderSourcesKeysAndSplitDoNotDependOnOtherFiles) {
  TempDir tmp;
  for (int i = 0; i < 40; ++i) write_text(tmp / ("docs/sub/f" + std::to_string(i) + ".txt"), "text\n");
  write_text(tmp / "docs/.hidden/skip.txt", "x\n");
  const Corpus a = Corpus::resolve("", {tmp / "docs"}, 0.2);
  ASSERT_EQ(a.files().size(), 40u);
  EXPECT_TRUE(std::is_sorted(a.files().begin(), a.files().end(),
                             [](const CorpusFile& x, const CorpusFile& y) { return x.key < y.key; }));
  for (const auto& f : a.files()) {
    EXPECT_TRUE(f.key.starts_with("sub/f")) << f.key;  // relative to the folder given
    EXPECT_EQ(f.split == Split::val, is_validation_key(f.key, 0.2)) << f.key;
  }
  // Adding files moves no existing file between splits.
  for (int i = 40; i < 60; ++i) write_text(tmp / ("docs/sub/f" + std::to_string(i) + ".txt"), "more\n");
  const Corpus b = Corpus::resolve("", {tmp / "docs"}, 0.2);
  ASSERT_EQ(b.files().size(), 60u);
  for (const auto& f : a.files()) {
    const auto it = std::find_if(b.files().begin(), b.files().end(), [&](const CorpusFile& g) { return g.key == f.key; });
    ASSERT_NE(it, b.files().end());
    EXPECT_EQ(it->split, f.split);
  }
  EXPECT_NE(a.fingerprint(), b.fingerprint());
  EXPECT_EQ(b.fingerprint(), Corpus::resolve("", {tmp / "docs"}, 0.2).fingerprint());
  EXPECT_NE(b.fingerprint(), Corpus::resolve("", {tmp / "docs"}, 0.3).fingerprint());
}

TEST(DataCorpus, FilesAndGlobs) {
  TempDir tmp;
  write_text(tmp / "a/one.txt", "1\n");
  write_text(tmp / "a/two.txt", "2\n");
  write_text(tmp / "a/three.md", "3\n");
  write_text(tmp / "a/b/four.txt", "4\n");
  const Corpus single = Corpus::resolve("", {tmp / "a/one.txt"}, 0.02);
  ASSERT_EQ(single.files().size(), 1u);
  EXPECT_EQ(single.files()[0].key, "one.txt");
  EXPECT_EQ(single.files()[0].split, Split::train);  // a lone file is always train

  const Corpus glob = Corpus::resolve("", {tmp / "a/*.txt"}, 0.0);
  EXPECT_EQ(keys_of(glob.files()), (std::vector<std::string>{"one.txt", "two.txt"}));
  const Corpus nested = Corpus::resolve("", {tmp / "a/*"}, 0.0);  // folders matched are read recursively
  EXPECT_EQ(keys_of(nested.files()), (std::vector<std::string>{"b/four.txt", "one.txt", "three.md", "two.txt"}));
  // Overlapping sources list a file once.
  const Corpus both = Corpus::resolve("", {tmp / "a/one.txt", tmp / "a/*.txt"}, 0.0);
  EXPECT_EQ(both.files().size(), 2u);
}

TEST(DataCorpus, TinyCorporaGetAFileInEachSplit) {
  TempDir tmp;
  write_text(tmp / "d/x.txt", "x\n");
  write_text(tmp / "d/y.txt", "y\n");
  const Corpus c = Corpus::resolve("", {tmp / "d"}, 0.01);
  EXPECT_EQ(c.files(Split::train).size(), 1u);
  EXPECT_EQ(c.files(Split::val).size(), 1u);
  EXPECT_EQ(Corpus::resolve("", {tmp / "d"}, 0.0).files(Split::val).size(), 0u);
}

TEST(DataCorpus, MissingAndEmptySourcesAreClearErrors) {
  TempDir tmp;
  expect_error([&] { Corpus::resolve("", {tmp / "nope.txt"}, 0.02); }, {"nope.txt", "does not exist"});
  expect_error([&] { Corpus::resolve("", {tmp / "*.rst"}, 0.02); }, {"*.rst", "matches no files"});
  std::filesystem::create_directories(tmp / "empty");
  expect_error([&] { Corpus::resolve("", {tmp / "empty"}, 0.02); }, {"empty", "contains no files"});
  expect_error([&] { Corpus::resolve("nosuchcorpus", {}, 0.02); }, {"nosuchcorpus", "debdocs", "debdocs-python"});
  write_text(tmp / "f.txt", "x");
  expect_error([&] { Corpus::resolve("", {tmp / "f.txt"}, 0.9); }, {"val_fraction", "0.9"});
}

TEST(DataCorpus, SpdxLinesAreDropped) {
  EXPECT_EQ(drop_spdx_lines(".. SPDX-License-Identifier: GPL-2.0\n\nTitle\n=====\n"), "\nTitle\n=====\n");
  EXPECT_EQ(drop_spdx_lines("a\n// SPDX-License-Identifier: MIT\nb\n# SPDX-License-Identifier: X"), "a\nb\n");
  EXPECT_EQ(drop_spdx_lines("no licence here\n"), "no licence here\n");
  EXPECT_EQ(drop_spdx_lines("SPDX-URL: kept\n"), "SPDX-URL: kept\n");
  TempDir tmp;
  write_text(tmp / "doc.rst", ".. SPDX-License-Identifier: GPL-2.0\n\nHello\n");
  const Corpus c = Corpus::resolve("", {tmp / "doc.rst"}, 0.0);
  EXPECT_EQ(read_document(c.files()[0], InvalidUtf8::error), "\nHello\n");
}

TEST(DataCorpus, Utf8Validation) {
  EXPECT_EQ(find_invalid_utf8("plain ascii"), std::string::npos);
  EXPECT_EQ(find_invalid_utf8("h\xC3\xA9llo \xE6\x97\xA5 \xF0\x9F\x98\x80"), std::string::npos);  // é 日 😀
  EXPECT_EQ(find_invalid_utf8("ab\xFF"), 2u);                 // never valid
  EXPECT_EQ(find_invalid_utf8("a\xC3"), 1u);                  // truncated
  EXPECT_EQ(find_invalid_utf8("\x80" "abc"), 0u);             // stray continuation
  EXPECT_EQ(find_invalid_utf8("x\xC0\xAF"), 1u);              // overlong '/'
  EXPECT_EQ(find_invalid_utf8("x\xED\xA0\x80"), 1u);          // UTF-16 surrogate
  EXPECT_EQ(find_invalid_utf8("x\xF4\x90\x80\x80"), 1u);      // > U+10FFFF
  std::size_t n = 0;
  // Maximal subparts: "\xE6\x97" (truncated 3-byte) is one U+FFFD, "\xFF" another.
  EXPECT_EQ(replace_invalid_utf8("a\xE6\x97" "b\xFF" "c", &n), "a\xEF\xBF\xBD" "b\xEF\xBF\xBD" "c");
  EXPECT_EQ(n, 2u);
  EXPECT_EQ(replace_invalid_utf8("ok \xC3\xA9"), "ok \xC3\xA9");
}

TEST(DataCorpus, InvalidUtf8InAFileIsAnErrorOrReplaced) {
  TempDir tmp;
  write_text(tmp / "bad.txt", "line one\nline \xFE two\n");
  const Corpus c = Corpus::resolve("", {tmp / "bad.txt"}, 0.0);
  expect_error([&] { read_document(c.files()[0], InvalidUtf8::error); },
               {"bad.txt", "not valid UTF-8", "0xFE", "offset 14", "line 2", "replace"});
  EXPECT_EQ(read_document(c.files()[0], InvalidUtf8::replace), "line one\nline \xEF\xBF\xBD two\n");
  EXPECT_EQ(parse_invalid_utf8("replace"), InvalidUtf8::replace);
  expect_error([] { parse_invalid_utf8("ignore"); }, {"ignore", "error", "replace"});
}

TEST(DataCorpus, GzipInputIsRejected) {
  TempDir tmp;
  write_text(tmp / "a.txt.gz", std::string("\x1f\x8b\x08\x00rest", 8));
  const Corpus c = Corpus::resolve("", {tmp / "a.txt.gz"}, 0.0);
  expect_error([&] { read_document(c.files()[0], InvalidUtf8::error); }, {"a.txt.gz", "gzip"});
}

TEST(DataCorpus, NamedCorporaDescribeTheirSources) {
  const auto all = named_corpus("debdocs");
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].root, "/usr/share/doc/python3.11/html/_sources");
  EXPECT_EQ(all[1].root, "/usr/share/doc/linux-doc-6.1/html/_sources");
  EXPECT_EQ(all[1].excludes, std::vector<std::string>{"translations"});
  const auto python = named_corpus("debdocs-python");
  ASSERT_EQ(python.size(), 1u);
  EXPECT_EQ(python[0].label, all[0].label);  // same keys, so the same split as in debdocs
  // longdocs: debdocs' two sources unchanged (same keys, so a debdocs validation file stays in
  // validation at any val_fraction >= 0.02) and the standard library's .py files.
  const auto longdocs = named_corpus("longdocs");
  ASSERT_EQ(longdocs.size(), 3u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(longdocs[i].label, all[i].label);
    EXPECT_EQ(longdocs[i].root, all[i].root);
    EXPECT_EQ(longdocs[i].excludes, all[i].excludes);
    EXPECT_EQ(longdocs[i].extension, "");
  }
  EXPECT_EQ(longdocs[2].root, "/usr/lib/python3.11");
  EXPECT_EQ(longdocs[2].extension, ".py");
  EXPECT_EQ(longdocs[2].package, "libpython3.11-stdlib");
  for (const char* other_package : {"distutils", "lib2to3", "venv", "ensurepip", "tkinter", "idlelib", "site-packages"})
    EXPECT_NE(std::find(longdocs[2].excludes.begin(), longdocs[2].excludes.end(), other_package),
              longdocs[2].excludes.end()) << other_package;
  EXPECT_EQ(corpus_names(), (std::vector<std::string>{"debdocs", "debdocs-python", "longdocs"}));
  expect_error([] { named_corpus("longdoc"); }, {"unknown corpus 'longdoc'", "debdocs, debdocs-python, longdocs"});
}

TEST(DataCorpus, NamedSourceFiltersByExtensionAndExcludedFolders) {
  TempDir tmp;
  for (const char* f : {"lib/a.py", "lib/b.txt", "lib/pkg/c.py", "lib/pkg/__pycache__/c.cpython-311.pyc",
                        "lib/pkg/tests/test_c.py", "lib/tests/t.py", "lib/skipped/d.py", "lib/config-3.11-x/e.py",
                        "lib/pkg/config-3.11-y/f.py", "lib/.hidden/g.py", "lib/config-3.12/h.py"})
    write_text(tmp / f, "x = 1\n");
  const NamedSource source{"label", tmp / "lib", {"skipped"}, "some-package", ".py", {"__pycache__", "tests", "config-3.11-*"}};
  std::vector<std::string> keys = keys_of(list_named_source(source, "corpus"));
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(keys, (std::vector<std::string>{"label/a.py", "label/config-3.12/h.py", "label/pkg/c.py"}));
  // Without filters: every non-hidden file.
  const NamedSource all{"label", tmp / "lib", {}, "some-package", "", {}};
  EXPECT_EQ(list_named_source(all, "corpus").size(), 10u);
  const NamedSource missing{"label", tmp / "nothing", {}, "some-package", "", {}};
  expect_error([&] { list_named_source(missing, "corpus"); }, {"corpus 'corpus'", "nothing", "is missing",
                                                              "install the Debian package some-package"});
}

}  // namespace
}  // namespace dark::data
