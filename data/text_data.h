// One text file standing in for prepared data (`darkformer eval --text FILE`, `probe --text
// FILE`): the whole file is tokenized as one document with the given tokenizer into a shard
// in a scratch directory, which serves as both splits. Nothing is written beside the text.
// With bos (the run's rule, prepare.h BosRule) the document starts with bos and so does every
// window the loaders cut from it (window_bos_id).
#pragma once
#include <memory>
#include <string>

#include "core/file_io.h"
#include "data/prepare.h"

namespace dark::data {

struct TextData {
  std::unique_ptr<ScratchDirectory> scratch;  // holds the shard; removed with this object
  PreparedData data;                          // train_path == val_path; meta {"text": path}
};

// Throws naming the file when it cannot be read or is empty, or when bos is asked for and the
// tokenizer has none.
TextData text_as_data(const std::string& text_file, std::shared_ptr<const Tokenizer> tokenizer, bool bos);

}  // namespace dark::data
