// Test helper for tests/reference/check_hf_tokenizer.py: our ids for a list of strings.
//   hf_encode KIND MODEL STRINGS.json   (KIND and MODEL as load_tokenizer takes them: byte "",
//                                        sentencepiece FILE.model, gguf FILE.gguf, hf tokenizer.json)
//   hf_encode --data DIR STRINGS.json   (the tokenizer of a prepared data folder, as trained on)
// STRINGS.json is a JSON list of strings; prints {"bos_id", "eos_id", "kind", "ids": [[...]],
// "decoded": [[...]]} (decoded: the bytes of our decode of each string's ids).
#include <cstdio>
#include <exception>
#include <nlohmann/json.hpp>

#include "core/file_io.h"
#include "data/prepare.h"
#include "data/tokenizer.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: hf_encode KIND MODEL STRINGS.json | hf_encode --data DIR STRINGS.json\n");
    return 2;
  }
  try {
    const std::string a = argv[1], b = argv[2];
    std::shared_ptr<const dark::data::Tokenizer> tok =
        a == "--data" ? dark::data::open_prepared(b).tokenizer : dark::data::load_tokenizer(a, b);
    const nlohmann::json strings = nlohmann::json::parse(dark::read_file(argv[3]));
    nlohmann::json out = {{"kind", tok->kind()}, {"bos_id", tok->bos_id()}, {"eos_id", tok->eos_id()},
                          {"ids", nlohmann::json::array()}, {"decoded", nlohmann::json::array()}};
    for (const auto& s : strings) {
      const std::vector<std::int32_t> ids = tok->encode(s.get<std::string>());
      out["ids"].push_back(ids);
      const std::string text = tok->decode(ids);
      std::vector<int> bytes;
      for (const unsigned char c : text) bytes.push_back(c);
      out["decoded"].push_back(bytes);
    }
    std::printf("%s\n", out.dump().c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hf_encode: %s\n", e.what());
    return 1;
  }
}
