// A text file tokenized into a scratch shard (see text_data.h).
#include "data/text_data.h"

#include "core/error.h"

namespace dark::data {

TextData text_as_data(const std::string& text_file, std::shared_ptr<const Tokenizer> tokenizer, bool bos) {
  const std::string text = read_file(text_file);
  DARK_CHECK(!text.empty(), "--text ", text_file, ": the file is empty");
  std::vector<std::int32_t> ids = encode_prompt(*tokenizer, text, bos);
  ids.push_back(tokenizer->eos_id());

  TextData out;
  out.scratch = std::make_unique<ScratchDirectory>("text");
  const std::string shard = (out.scratch->path() / "text.bin").string();
  ShardWriter writer(shard, tokenizer->hash(), tokenizer->vocab_size());
  writer.append_document(ids);
  const ShardInfo info = writer.finish();
  PreparedData& d = out.data;
  d.dir = out.scratch->path().string();
  d.meta = {{"text", text_file}};
  d.tokenizer = std::move(tokenizer);
  d.train_path = d.val_path = shard;
  d.train_tokens = d.val_tokens = info.num_tokens;
  d.window_bos_id = bos ? d.tokenizer->bos_id() : -1;
  return out;
}

}  // namespace dark::data
