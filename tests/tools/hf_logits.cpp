// Test helper for tests/reference/check_hf_export_kinds.py: our logits for token ids, to
// compare with an export-hf folder's model in transformers.
//   hf_logits CHECKPOINT IDS OUT   (IDS: comma-separated token ids of one sequence)
// Loads the run as `darkformer eval` does (the checkpoint's weights, its features' redraw
// epoch), runs one forward pass on the CPU in the run's dtype and writes the logits (T x vocab)
// to OUT as little-endian float32; prints "T V".
#include <cstdio>
#include <exception>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/grad_mode.h"
#include "core/file_io.h"
#include "nn/init.h"
#include "train/config.h"
#include "train/formats/checkpoint.h"
#include "train/model_builder.h"
#include "train/training_run.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: hf_logits CHECKPOINT IDS OUT\n");
    return 2;
  }
  try {
    using namespace dark;
    const auto dir = formats::find_checkpoint(argv[1]);
    formats::CheckpointData checkpoint = formats::load_checkpoint(dir, {.optimizer = false});
    nlohmann::json config_json = checkpoint.state.at("config");
    config_json["training"]["device"] = "cpu";
    const train::RunConfig config = train::parse_config(config_json);
    std::unique_ptr<nn::CausalLM> model;
    {
      const nn::SkipInitialisation loaded_next;
      model = train::build_model(config);
    }
    train::load_trained_state(*model, checkpoint, config, dir.string());
    model->train(false);
    std::vector<std::int32_t> ids;
    std::stringstream in(argv[2]);
    for (std::string item; std::getline(in, item, ',');) ids.push_back(std::stoi(item));
    const std::int64_t len = static_cast<std::int64_t>(ids.size());
    NoGradGuard no_grad;
    const Tensor logits = model->forward(Tensor::from_vector(ids, {1, len})).to(DType::f32).contiguous();
    const std::vector<float> values = logits.to_vector<float>();
    write_file_atomic(argv[3], std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float)));
    std::printf("%lld %lld\n", static_cast<long long>(len), static_cast<long long>(logits.size(2)));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hf_logits: %s\n", e.what());
    return 1;
  }
}
