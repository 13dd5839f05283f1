// Writes the seed corpus of the libFuzzer targets (tests/fuzz/corpus/<target>/): small valid
// inputs made by the project's own writers (save_safetensors, ShardWriter, to_json,
// SentencePieceTokenizer::train) and the test GGUF writer, plus a few hand-written configs
// and texts. Deterministic: re-running it rewrites the same files.
// Usage: fuzz_make_seeds CORPUS_DIR   (scripts/fuzz.sh --make-seeds runs it)
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "core/file_io.h"
#include "core/tensor.h"
#include "data/bpe_tokenizer.h"
#include "data/hf_tokenizer_json.h"
#include "data/tokenizer_file.h"
#include "data/sentencepiece_tokenizer.h"
#include "data/shard.h"
#include "data/spm_tokenizer.h"
#include "tests/gguf_test_writer.h"
#include "train/config.h"
#include "train/formats/safetensors.h"

namespace fs = std::filesystem;
using dark::testing::GgufTestWriter;

namespace {

fs::path g_root;

// A string literal with its embedded NUL bytes (all of it but the terminator).
template <std::size_t N>
std::string bytes_of(const char (&literal)[N]) {
  return std::string(literal, N - 1);
}

void seed(const std::string& target, const std::string& name, const std::string& bytes) {
  const fs::path dir = g_root / target;
  fs::create_directories(dir);
  dark::write_file_atomic(dir / name, bytes);
}

template <class T>
dark::Tensor tensor_of(const std::vector<T>& values, const dark::Shape& shape, dark::DType dtype) {
  dark::Tensor t = dark::Tensor::empty(shape, dtype);
  if (!values.empty()) std::memcpy(t.raw_data(), values.data(), values.size() * sizeof(T));
  return t;
}

void config_seeds() {
  seed("fuzz_config", "empty", "{}");
  seed("fuzz_config", "resolved", dark::train::to_json(dark::train::RunConfig{}).dump(1));
  seed("fuzz_config", "small",
       R"({
  // the tests' tiny model
  "model": {"d_model": 32, "n_layers": 2, "n_heads": 2, "d_ff": 64},
  "attention": {"kind": "darkformer", "darkformer": {"rank": 4}, "layers": {"0": {"kind": "softmax"}}},
  "data": {"seq_len": 16},
  "training": {"steps": 4, "batch_size": 2, "device": "cpu"},
  "optimizer": {"name": "sgd", "momentum": 0.9}, /* sgd only */
  "seed": 7
})");
  seed("fuzz_config", "overrides",
       std::string(R"({"training": {"steps": 10}})") + '\0' +
           "training.steps=200\nattention.darkformer.rank=8\nmodel.mlp=geglu\noutput.dir=runs/x\n"
           "finetune.trainable=[\"all\"]\ntraining.device=cuda:1");
}

void safetensors_seeds() {
  const fs::path dir = g_root / "fuzz_safetensors";
  fs::create_directories(dir);
  dark::formats::TensorMap tensors;
  tensors.emplace("w", tensor_of<float>({1, 2, 3, 4, 5, 6}, {2, 3}, dark::DType::f32));
  tensors.emplace("step", tensor_of<std::int64_t>({42}, {}, dark::DType::i64));
  tensors.emplace("ids", tensor_of<std::int32_t>({7, 8}, {2}, dark::DType::i32));
  tensors.emplace("empty", tensor_of<double>({}, {0, 3}, dark::DType::f64));
  tensors.emplace("h", tensor_of<std::uint16_t>({0x3f80, 0xc000}, {2}, dark::DType::bf16));
  dark::formats::save_safetensors(dir / "mixed.safetensors", tensors, {{"format", "pt"}});
  dark::formats::TensorMap one;
  one.emplace("x", tensor_of<float>({0.5f}, {1}, dark::DType::f32));
  dark::formats::save_safetensors(dir / "one.safetensors", one);
}

std::string gguf_with_tensors() {
  GgufTestWriter w(3);
  w.kv<std::uint32_t>("general.alignment", dark::testing::kGgufU32, 32);
  w.kv_string("general.architecture", "llama");
  w.kv<std::uint8_t>("u8", dark::testing::kGgufU8, 7);
  w.kv<std::int16_t>("i16", dark::testing::kGgufI16, -3);
  w.kv<std::uint64_t>("u64", dark::testing::kGgufU64, 1ull << 40);
  w.kv<double>("f64", dark::testing::kGgufF64, 0.25);
  w.kv<float>("f32", dark::testing::kGgufF32, 1.5f);
  w.kv<std::uint8_t>("flag", dark::testing::kGgufBool, 1);
  w.kv_raw("ints", dark::testing::kGgufArray, GgufTestWriter::array_payload<std::int32_t>(dark::testing::kGgufI32, {1, -2, 3}));
  w.kv_raw("names", dark::testing::kGgufArray, GgufTestWriter::string_array_payload({"a", "bc", ""}));
  w.kv_raw("nested", dark::testing::kGgufArray,
           GgufTestWriter::nested_array_payload({GgufTestWriter::array_payload<float>(dark::testing::kGgufF32, {1.f}),
                                                 GgufTestWriter::array_payload<float>(dark::testing::kGgufF32, {})}));
  std::string f32(4 * 8, '\0');
  for (int i = 0; i < 8; ++i) {
    const float v = 0.5f * static_cast<float>(i);
    std::memcpy(f32.data() + 4 * i, &v, 4);
  }
  w.tensor("f32", {4, 2}, 0, f32);
  w.tensor("f16", {2}, 1, bytes_of("\x00\x3c\x00\xc0"));
  std::string q8(34, '\x01');  // Q8_0: f16 scale + 32 int8
  q8[0] = '\x00';
  q8[1] = '\x3c';
  w.tensor("q8_0", {32}, 8, q8);
  std::string q4(18, '\x5a');  // Q4_0: f16 scale + 16 bytes of nibbles
  q4[0] = '\x00';
  q4[1] = '\x38';
  w.tensor("q4_0", {32}, 2, q4);
  return w.build().bytes;
}

// A GGUF file holding only a tokenizer: byte pieces, two merges, the specials (eos_token_id
// as a u32, or as the u64 `eos_u64` when given).
std::string gguf_tokenizer(const std::string& pre, bool with_types, std::uint64_t eos_u64 = 0) {
  std::vector<std::string> tokens = {"<|endoftext|>", "<|im_start|>"};
  for (int b = 0; b < 256; ++b) tokens.push_back(dark::data::BpeTokenizer::byte_encode(std::string(1, char(b))));
  tokens.push_back("he");
  tokens.push_back("Ġt");
  GgufTestWriter w(3);
  w.kv_string("tokenizer.ggml.model", "gpt2");
  w.kv_string("tokenizer.ggml.pre", pre);
  w.kv_raw("tokenizer.ggml.tokens", dark::testing::kGgufArray, GgufTestWriter::string_array_payload(tokens));
  w.kv_raw("tokenizer.ggml.merges", dark::testing::kGgufArray, GgufTestWriter::string_array_payload({"h e", "Ġ t"}));
  if (with_types) {
    std::vector<std::int32_t> types(tokens.size(), 1);
    types[0] = types[1] = 3;
    w.kv_raw("tokenizer.ggml.token_type", dark::testing::kGgufArray,
             GgufTestWriter::array_payload<std::int32_t>(dark::testing::kGgufI32, types));
  }
  if (eos_u64 != 0) {
    w.kv<std::uint64_t>("tokenizer.ggml.eos_token_id", dark::testing::kGgufU64, eos_u64);
  } else {
    w.kv<std::uint32_t>("tokenizer.ggml.eos_token_id", dark::testing::kGgufU32, 0);
  }
  w.kv<std::uint32_t>("tokenizer.ggml.bos_token_id", dark::testing::kGgufU32, 1);
  w.kv<std::uint8_t>("tokenizer.ggml.add_bos_token", dark::testing::kGgufBool, 0);
  return w.build().bytes;
}

// A small SentencePiece-style vocabulary (tokenizer.ggml.model "llama"): specials, a
// user-defined "\n" and two-space token, the 256 byte tokens and a few scored pieces.
dark::data::SpmVocab small_spm_vocab() {
  dark::data::SpmVocab v;
  auto add = [&](const std::string& t, float score, int type) {
    v.tokens.push_back(t);
    v.scores.push_back(score);
    v.token_types.push_back(type);
  };
  add("<pad>", 0, 3);
  add("<eos>", 0, 3);
  add("<bos>", 0, 3);
  add("<unk>", 0, 2);
  add("\n", 0, 4);
  add("  ", 0, 4);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    add(name, 0, 6);
  }
  const char* pieces[] = {"\xe2\x96\x81", "h", "e", "l", "o", "he", "ll", "hell", "hello", "\xe2\x96\x81hello", "x", "42"};
  float score = -1;
  for (const char* p : pieces) add(p, score -= 0.5f, 1);
  v.pad_id = 0;
  v.eos_id = 1;
  v.bos_id = 2;
  v.unk_id = 3;
  return v;
}

std::string gguf_spm_tokenizer() {
  const dark::data::SpmVocab v = small_spm_vocab();
  GgufTestWriter w(3);
  w.kv_string("tokenizer.ggml.model", "llama");
  w.kv_string("tokenizer.ggml.pre", "default");
  w.kv_raw("tokenizer.ggml.tokens", dark::testing::kGgufArray, GgufTestWriter::string_array_payload(v.tokens));
  w.kv_raw("tokenizer.ggml.scores", dark::testing::kGgufArray,
           GgufTestWriter::array_payload<float>(dark::testing::kGgufF32, v.scores));
  w.kv_raw("tokenizer.ggml.token_type", dark::testing::kGgufArray,
           GgufTestWriter::array_payload<std::int32_t>(dark::testing::kGgufI32, v.token_types));
  w.kv<std::uint32_t>("tokenizer.ggml.bos_token_id", dark::testing::kGgufU32, 2);
  w.kv<std::uint32_t>("tokenizer.ggml.eos_token_id", dark::testing::kGgufU32, 1);
  w.kv<std::uint32_t>("tokenizer.ggml.unknown_token_id", dark::testing::kGgufU32, 3);
  w.kv<std::uint8_t>("tokenizer.ggml.add_bos_token", dark::testing::kGgufBool, 1);
  w.kv<std::uint8_t>("tokenizer.ggml.add_space_prefix", dark::testing::kGgufBool, 0);
  return w.build().bytes;
}

void gguf_seeds() {
  seed("fuzz_gguf", "tensors.gguf", gguf_with_tensors());
  seed("fuzz_gguf", "tokenizer.gguf", gguf_tokenizer("smollm", true));
  GgufTestWriter v2(2);
  v2.kv_string("general.name", "v2");
  seed("fuzz_gguf", "v2.gguf", v2.build().bytes);
  seed("fuzz_bpe_gguf", "smollm.gguf", gguf_tokenizer("smollm", true));
  seed("fuzz_bpe_gguf", "gpt2.gguf", gguf_tokenizer("gpt2", false));
  // Once accepted as eos id 0 (cut to int32); tests/test_bpe_tokenizer.cpp has its test.
  seed("fuzz_bpe_gguf", "regression-eos-id-above-int32.gguf", gguf_tokenizer("gpt2", false, std::uint64_t{1} << 32));
  seed("fuzz_bpe_gguf", "spm.gguf", gguf_spm_tokenizer());
}

void tokenizer_seeds() {
  std::vector<std::string> lines;
  const char* words[] = {"the", "model", "def", "return", "x", "=", "42", "é", "日本", "  "};
  for (int i = 0; i < 200; ++i) {
    std::string line;
    for (int k = 0; k < 6; ++k) line += std::string(words[(i * 3 + k * 7 + i * k) % 10]) + " ";
    lines.push_back(line);
  }
  dark::data::SentencePieceOptions options;
  options.vocab_size = 280;
  options.character_coverage = 1.0;
  seed("fuzz_sentencepiece_load", "small.model", dark::data::SentencePieceTokenizer::train(lines, options)->model_bytes());

  const std::string texts[] = {"Hello, world!\n", "  def f(x):\n\treturn x ** 2  # 42\n",
                               "caf\xc3\xa9 \xe2\x82\xac \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80",
                               "<|im_start|>user\nhi<|im_end|>", bytes_of("bad \xff\xfe utf-8 \x00 nul")};
  int n = 0;
  for (const std::string& t : texts) {
    for (char which = 0; which < 4; ++which) seed("fuzz_encode", "text" + std::to_string(n++), std::string(1, which) + t);
  }
  // FuzzedDataProvider inputs: the leading bytes choose the shape, the tail is the text.
  seed("fuzz_bpe_vocab", "bytes_only", bytes_of("\x01\x00\x00\x00") + "the cat");
  seed("fuzz_bpe_vocab", "with_merges", bytes_of("\x01\x03he\x00\x02h e\x01t h\x00") + "hello there 123");
}

// The JSON tokenizer files: a small vocabulary with merges and a special token, as our
// tokenizer.bpe.json (leading byte 0) and as Hugging Face tokenizer.json (leading byte 1);
// the small SentencePiece-style vocabulary as tokenizer.spm.json (leading byte 0).
void tokenizer_file_seeds() {
  dark::data::BpeVocab v;
  v.tokens = {"<|endoftext|>", "<|im_start|>"};
  v.token_types = {3, 4};
  for (int b = 0; b < 256; ++b) {
    v.tokens.push_back(dark::data::BpeTokenizer::byte_encode(std::string(1, static_cast<char>(b))));
    v.token_types.push_back(1);
  }
  v.tokens.insert(v.tokens.end(), {"th", "the"});
  v.token_types.insert(v.token_types.end(), {1, 1});
  v.merges = {"t h", "th e"};
  v.eos_id = 0;
  for (const char* pre : {"gpt2", "smollm"}) {
    v.pre = pre;
    const dark::data::BpeTokenizer t(v);
    seed("fuzz_tokenizer_files", std::string("bpe_") + pre + ".json",
         std::string(1, '\0') + dark::data::tokenizer_file(t)->bytes);
    seed("fuzz_tokenizer_files", std::string("hf_") + pre + ".json", std::string(1, '\1') + dark::data::hf_tokenizer_json(v));
  }
  const dark::data::SpmTokenizer spm(small_spm_vocab());
  seed("fuzz_tokenizer_files", "spm.json", std::string(1, '\0') + dark::data::tokenizer_file(spm)->bytes);
}

void shard_seeds() {
  const fs::path tmp = fs::temp_directory_path() / ("dark-fuzz-seeds-" + std::to_string(::getpid()));
  fs::create_directories(tmp);
  for (const int vocab : {300, 70000}) {
    const fs::path path = tmp / "shard.bin";
    {
      dark::data::ShardWriter w(path.string(), "byte-v1", vocab);
      w.append_document(std::vector<std::int32_t>{1, 2, 3, vocab - 1});
      w.append_document(std::vector<std::int32_t>{0, vocab - 1});
      w.finish();
    }
    const std::string name = vocab < 65536 ? "u16" : "u32";
    seed("fuzz_shard", name, std::string(1, '\0') + dark::read_file(path));
    seed("fuzz_shard", name + "_fixed_checksums", std::string(1, '\3') + dark::read_file(path));
  }
  fs::remove_all(tmp);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_make_seeds CORPUS_DIR\n");
    return 2;
  }
  g_root = argv[1];
  config_seeds();
  safetensors_seeds();
  gguf_seeds();
  tokenizer_seeds();
  tokenizer_file_seeds();
  shard_seeds();
  std::printf("seed corpus written to %s\n", g_root.c_str());
  return 0;
}
