// MQAR recall accuracy (see mqar_eval.h).
#include "train/mqar_eval.h"

#include <fmt/format.h>

#include <algorithm>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "train/evaluate.h"

namespace dark::train {

namespace {
// Upper ends of the distance buckets (the last one open).
constexpr std::int64_t kBucketEnds[] = {16, 32, 64, 128, 256, 512, 1024, 2048, 4096};

nlohmann::json count_json(const MqarCount& c) {
  return {{"accuracy", c.accuracy()}, {"queries", c.queries}, {"correct", c.correct}};
}
}  // namespace

const std::vector<std::string>& mqar_distance_buckets() {
  static const std::vector<std::string> names = {"1-16",    "17-32",   "33-64", "65-128", "129-256",
                                                 "257-512", "513-1K",  "1K-2K", "2K-4K",  "4K+"};
  return names;
}

int mqar_distance_bucket(std::int64_t distance) {
  DARK_CHECK(distance >= 1, "mqar: a query-key distance is >= 1, got ", distance);
  int b = 0;
  for (const std::int64_t end : kBucketEnds) {
    if (distance <= end) return b;
    ++b;
  }
  return b;
}

MqarReport evaluate_mqar(nn::CausalLM& model, const data::MqarValidationSet& val, dist::Communicator* comm) {
  NoGradGuard no_grad;
  const EvalMode eval_mode(model);
  const std::vector<std::int64_t>& pairs = val.config().pairs;
  const std::size_t kinds = pairs.size(), buckets = mqar_distance_buckets().size();
  // Counts, queries then correct: per pairs count, then per distance bucket.
  std::vector<double> counts(2 * (kinds + buckets), 0.0);
  const int rank = comm ? comm->rank() : 0, world = comm ? comm->world_size() : 1;
  const std::int64_t d_model = model.config().d_model;
  for (std::int64_t b = rank; b < val.num_batches(); b += world) {
    const Tensor tokens = val.batch(b);
    const std::vector<const data::MqarSequence*> rows = val.sequences(b);
    const std::int64_t B = tokens.size(0), T = tokens.size(1) - 1;
    // The hidden state at each query key (input position = the value's position - 1).
    std::vector<std::int64_t> where;
    for (std::int64_t r = 0; r < B; ++r)
      for (const data::MqarTarget& t : rows[r]->targets) where.push_back(r * T + t.position - 1);
    if (where.empty()) continue;
    const Tensor inputs = core::slice(tokens, 1, 0, T).contiguous();
    const Tensor hidden = reshape(model.final_hidden(inputs), {B * T, d_model});
    const Tensor index = Tensor::from_vector(where, {static_cast<std::int64_t>(where.size())}).to(hidden.device());
    const Tensor picked = index_select(hidden, 0, index).contiguous();
    const std::vector<std::int64_t> predicted = argmax(model.head_logits(picked)).to(DType::i64).to_vector<std::int64_t>();
    std::size_t i = 0;
    for (std::int64_t r = 0; r < B; ++r) {
      const std::size_t kind = static_cast<std::size_t>(
          std::find(pairs.begin(), pairs.end(), rows[r]->pairs) - pairs.begin());
      for (const data::MqarTarget& t : rows[r]->targets) {
        const double hit = predicted[i++] == t.value ? 1.0 : 0.0;
        const std::size_t bucket = kinds + static_cast<std::size_t>(mqar_distance_bucket(t.distance));
        counts[kind] += 1, counts[kinds + buckets + kind] += hit;
        counts[bucket] += 1, counts[kinds + buckets + bucket] += hit;
      }
    }
  }
  if (comm && world > 1) {
    const Tensor sums = Tensor::from_vector(counts, {static_cast<std::int64_t>(counts.size())}).to(comm->device());
    comm->all_reduce(sums, dist::ReduceOp::sum);
    counts = sums.to_vector<double>();
  }
  MqarReport report;
  const auto take = [&](std::size_t slot, std::string name) {
    MqarCount c{std::move(name), static_cast<std::int64_t>(counts[slot]),
                static_cast<std::int64_t>(counts[kinds + buckets + slot])};
    return c;
  };
  for (std::size_t k = 0; k < kinds; ++k) {
    report.by_pairs.push_back(take(k, std::to_string(pairs[k])));
    report.all.queries += report.by_pairs.back().queries;
    report.all.correct += report.by_pairs.back().correct;
  }
  for (std::size_t d = 0; d < buckets; ++d) {
    MqarCount c = take(kinds + d, mqar_distance_buckets()[d]);
    if (c.queries > 0) report.by_distance.push_back(std::move(c));
  }
  return report;
}

nlohmann::json mqar_json(const MqarReport& report) {
  nlohmann::json j = count_json(report.all);
  j["by_pairs"] = nlohmann::json::object();
  for (const MqarCount& c : report.by_pairs) j["by_pairs"][c.name] = count_json(c);
  j["by_distance"] = nlohmann::json::object();
  for (const MqarCount& c : report.by_distance) j["by_distance"][c.name] = count_json(c);
  return j;
}

nlohmann::json mqar_file_json(const MqarReport& report, std::int64_t step) {
  nlohmann::json j = {{"task", "mqar"}, {"step", step}};
  j.update(count_json(report.all));
  j["by_pairs"] = nlohmann::json::array();
  for (const MqarCount& c : report.by_pairs) {
    nlohmann::json e = {{"pairs", std::stoll(c.name)}};
    e.update(count_json(c));
    j["by_pairs"].push_back(e);
  }
  j["by_distance"] = nlohmann::json::array();
  for (const MqarCount& c : report.by_distance) {
    nlohmann::json e = {{"distance", c.name}};
    e.update(count_json(c));
    j["by_distance"].push_back(e);
  }
  return j;
}

std::string mqar_table(const MqarReport& report, const std::string& indent) {
  std::string out;
  const auto line = [&](const std::string& label, const MqarCount& c) {
    out += fmt::format("{}{:<18} {:.3f} ({} / {})\n", indent, label, c.accuracy(), c.correct, c.queries);
  };
  line("all queries", report.all);
  for (const MqarCount& c : report.by_pairs) line("pairs " + c.name, c);
  for (const MqarCount& c : report.by_distance) line("distance " + c.name, c);
  return out;
}

}  // namespace dark::train
