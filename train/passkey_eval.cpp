// Passkey retrieval scored on a model (see passkey_eval.h).
#include "train/passkey_eval.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/error.h"
#include "train/progress.h"
#include "train/wilson_interval.h"

namespace dark::train {

using nlohmann::json;
using Clock = std::chrono::steady_clock;  // as trainer.cpp: one alias in the unity build

// Helpers, in a namespace of their own (the unity build compiles this file with others).
namespace passkey_impl {

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// "0.25", "1", "512": numbers as keys and table labels.
std::string number_label(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// The greedy token of each of `rows` (N, d_model) final hidden rows, lowest id on ties (as
// nn::sample_token at temperature 0).
std::vector<std::int64_t> greedy_tokens(nn::CausalLM& model, const Tensor& rows) {
  return argmax(model.head_logits(rows)).to_vector<std::int64_t>();
}

// The last row of a (1, T, d_model) hidden state, as (1, d_model).
Tensor last_row(const Tensor& hidden) {
  const std::int64_t T = hidden.size(1);
  return reshape(core::slice(hidden, 1, T - 1, T).contiguous(), {1, hidden.size(2)});
}

// Correct trials, trials, and what the tables and JSON say about them.
struct Tally {
  std::int64_t correct = 0, trials = 0;
  std::int64_t min_tokens = std::numeric_limits<std::int64_t>::max(), max_tokens = 0;
  double seconds = 0;
  void add(const PasskeyTrial& t) {
    correct += t.answer.verdict.correct ? 1 : 0;
    ++trials;
    min_tokens = std::min(min_tokens, t.tokens);
    max_tokens = std::max(max_tokens, t.tokens);
    seconds += t.seconds;
  }
  double accuracy() const { return trials ? static_cast<double>(correct) / static_cast<double>(trials) : 0.0; }
  json to_json() const {
    const ProportionInterval ci = wilson_interval(correct, trials);
    return {{"correct", correct}, {"trials", trials}, {"accuracy", accuracy()}, {"low", ci.low}, {"high", ci.high}};
  }
  // "4/5 [0.38, 0.96]"
  std::string text() const {
    const ProportionInterval ci = wilson_interval(correct, trials);
    char buf[64];
    std::snprintf(buf, sizeof buf, "%lld/%lld [%.2f, %.2f]", static_cast<long long>(correct),
                  static_cast<long long>(trials), ci.low, ci.high);
    return buf;
  }
};

template <class Keep>
Tally tally(const std::vector<PasskeyTrial>& trials, Keep keep) {
  Tally t;
  for (const PasskeyTrial& trial : trials)
    if (keep(trial)) t.add(trial);
  return t;
}

std::string padded(const std::string& s, std::size_t width) {
  return s.size() >= width ? s : s + std::string(width - s.size(), ' ');
}

}  // namespace passkey_impl

PasskeyVerdict judge_passkey_answer(std::string_view text, std::int32_t key, bool complete) {
  constexpr std::string_view kDigits = "0123456789";
  const std::size_t begin = text.find_first_of(kDigits);
  if (begin == std::string_view::npos) return {complete, false, ""};
  const std::size_t end = text.find_first_not_of(kDigits, begin);
  const std::string run(text.substr(begin, end == std::string_view::npos ? std::string_view::npos : end - begin));
  const std::string value = run.substr(std::min(run.find_first_not_of('0'), run.size()));  // leading zeros aside
  const std::string expected = std::to_string(key);
  const bool equal = value == expected;
  // Further digits can only lengthen the run: it can still become N only while N begins with it.
  if (end != std::string_view::npos || complete || !expected.starts_with(value)) return {true, equal, run};
  return {false, false, run};
}

PasskeyAnswer passkey_answer(nn::CausalLM& model, const data::Tokenizer& tokenizer, const data::PasskeyPrompt& prompt,
                             int new_tokens) {
  DARK_CHECK(new_tokens >= 1, "passkey: new_tokens must be >= 1, got ", new_tokens);
  DARK_CHECK(!prompt.ids.empty(), "passkey: the prompt is empty");
  NoGradGuard no_grad;
  const bool was_training = model.training();
  model.train(false);
  const Device device = model.device();
  const std::int32_t eos = tokenizer.eos_id();
  PasskeyAnswer a;
  bool complete = false;
  const auto take = [&](std::int32_t token) {
    a.tokens.push_back(token);
    complete = token == eos || static_cast<int>(a.tokens.size()) >= new_tokens;
    a.text = tokenizer.decode(a.tokens);
    a.verdict = judge_passkey_answer(a.text, prompt.key, complete);
  };

  // 1. Teacher forcing: the prompt and the expected answer but its last token, one forward;
  // rows T-1 .. T-1+k predict the answer's k tokens and the one after.
  const std::vector<std::int32_t>& answer = prompt.answer;
  const auto k =
      static_cast<std::int64_t>(std::min<std::size_t>(answer.size(), static_cast<std::size_t>(new_tokens) - 1));
  std::vector<std::int32_t> forced = prompt.ids;
  forced.insert(forced.end(), answer.begin(), answer.begin() + k);
  const auto T = static_cast<std::int64_t>(prompt.ids.size());
  const Tensor hidden = model.final_hidden(Tensor::from_vector(forced, {1, T + k}, device));
  const Tensor rows = reshape(core::slice(hidden, 1, T - 1, T + k).contiguous(), {k + 1, hidden.size(2)});
  const std::vector<std::int64_t> greedy = passkey_impl::greedy_tokens(model, rows);
  for (std::int64_t i = 0; i <= k; ++i) {
    take(static_cast<std::int32_t>(greedy[static_cast<std::size_t>(i)]));
    // Past a token that differs from the answer, the forced rows no longer follow greedy decoding.
    if (a.verdict.decided || complete || i == k || a.tokens.back() != answer[static_cast<std::size_t>(i)]) break;
  }

  // 3. Greedy decoding from where the forced rows stop, one row of logits per step.
  if (!a.verdict.decided) {
    a.decoded = true;
    nn::DecodeCache cache;
    std::vector<std::int32_t> pending = prompt.ids;
    pending.insert(pending.end(), a.tokens.begin(), a.tokens.end());
    while (!a.verdict.decided) {
      const Tensor h = model.decode_hidden(
          Tensor::from_vector(pending, {1, static_cast<std::int64_t>(pending.size())}, device), cache);
      take(static_cast<std::int32_t>(passkey_impl::greedy_tokens(model, passkey_impl::last_row(h))[0]));
      pending = {a.tokens.back()};
    }
  }
  model.train(was_training);
  return a;
}

PasskeyReport run_passkey(nn::CausalLM& model, const data::Tokenizer& tokenizer, const PasskeyOptions& o) {
  DARK_CHECK(!o.lengths.empty(), "passkey: no lengths given");
  DARK_CHECK(o.trials >= 1, "passkey: trials must be >= 1, got ", o.trials);
  const std::vector<double> depths = data::passkey_depths(o.depths);
  const auto start = Clock::now();
  PasskeyReport report;
  report.options = o;
  const std::int64_t per_length = static_cast<std::int64_t>(depths.size()) * o.trials;
  std::int64_t total_tokens = 0;
  for (const std::int64_t length : o.lengths) total_tokens += length * per_length;
  spdlog::info("passkey: {} prompt(s): lengths {}, {} depth(s) x {} trial(s) each, seed {}",
               per_length * static_cast<std::int64_t>(o.lengths.size()), json(o.lengths).dump(), depths.size(),
               o.trials, o.seed);
  std::int64_t done_tokens = 0;
  for (const std::int64_t length : o.lengths) {
    ProgressLog progress(str("passkey ", length), "prompt", "prompts", per_length);
    std::int64_t done = 0;
    for (const double depth : depths)
      for (int trial = 0; trial < o.trials; ++trial) {
        const auto t0 = Clock::now();
        PasskeyTrial t;
        t.length = length;
        t.depth = depth;
        t.trial = trial;
        t.key = data::passkey_of(o.seed, length, depth, trial);
        const data::PasskeyPrompt prompt = data::passkey_prompt(tokenizer, o.bos, length, depth, t.key);
        t.tokens = static_cast<std::int64_t>(prompt.ids.size());
        t.needle_token = prompt.needle_token;
        t.answer = passkey_answer(model, tokenizer, prompt, o.new_tokens);
        t.seconds = passkey_impl::seconds_since(t0);
        report.trials.push_back(std::move(t));
        progress.update(++done);
      }
    done_tokens += length * per_length;
    const passkey_impl::Tally here =
        passkey_impl::tally(report.trials, [&](const PasskeyTrial& t) { return t.length == length; });
    const double elapsed = passkey_impl::seconds_since(start);
    spdlog::info("passkey: length {} ({}-{} tokens): {} correct | {:.2f} s/prompt | {}", length, here.min_tokens,
                 here.max_tokens, here.text(), here.seconds / static_cast<double>(here.trials),
                 done_tokens < total_tokens ? "ETA " + duration_text(elapsed / static_cast<double>(done_tokens) *
                                                                     static_cast<double>(total_tokens - done_tokens))
                                            : "done in " + duration_text(elapsed));
  }
  report.seconds = passkey_impl::seconds_since(start);
  return report;
}

json PasskeyReport::to_json() const {
  const std::vector<double> depths = data::passkey_depths(options.depths);
  json by_length = json::array(), by_depth = json::array(), cells = json::array(), all = json::array();
  for (const std::int64_t length : options.lengths) {
    const passkey_impl::Tally t =
        passkey_impl::tally(trials, [&](const PasskeyTrial& x) { return x.length == length; });
    json row = t.to_json();
    row["length"] = length;
    row["tokens_min"] = t.min_tokens;
    row["tokens_max"] = t.max_tokens;
    row["seconds_per_prompt"] = t.trials ? t.seconds / static_cast<double>(t.trials) : 0.0;
    by_length.push_back(row);
    for (const double depth : depths) {
      json cell = passkey_impl::tally(trials, [&](const PasskeyTrial& x) {
                    return x.length == length && x.depth == depth;
                  }).to_json();
      cell["length"] = length;
      cell["depth"] = depth;
      cells.push_back(cell);
    }
  }
  for (const double depth : depths) {
    json row = passkey_impl::tally(trials, [&](const PasskeyTrial& x) { return x.depth == depth; }).to_json();
    row["depth"] = depth;
    by_depth.push_back(row);
  }
  std::int64_t decoded = 0;
  for (const PasskeyTrial& t : trials) {
    decoded += t.answer.decoded ? 1 : 0;
    all.push_back({{"length", t.length},
                   {"tokens", t.tokens},
                   {"depth", t.depth},
                   {"trial", t.trial},
                   {"key", t.key},
                   {"needle_token", t.needle_token},
                   {"correct", t.answer.verdict.correct},
                   {"answer", t.answer.text},
                   {"decoded", t.answer.decoded},
                   {"seconds", t.seconds}});
  }
  json out = {{"task", "passkey"},
              {"format", "Landmark Attention passkey retrieval (data/passkey_prompt.h), greedy decoding"},
              {"lengths", options.lengths},
              {"depths", depths},
              {"trials_per_cell", options.trials},
              {"seed", options.seed},
              {"bos", options.bos},
              {"new_tokens", options.new_tokens},
              {"interval", "95% Wilson score interval"}};
  out["overall"] = passkey_impl::tally(trials, [](const PasskeyTrial&) { return true; }).to_json();
  out["by_length"] = by_length;
  out["by_depth"] = by_depth;
  out["cells"] = cells;
  out["decoded_trials"] = decoded;  // trials whose answer needed incremental decoding
  out["seconds"] = seconds;
  out["trials"] = all;
  return out;
}

json PasskeyReport::metrics() const {
  json by_length = json::object(), by_depth = json::object();
  for (const std::int64_t length : options.lengths)
    by_length[std::to_string(length)] =
        passkey_impl::tally(trials, [&](const PasskeyTrial& x) { return x.length == length; }).accuracy();
  for (const double depth : data::passkey_depths(options.depths))
    by_depth[passkey_impl::number_label(depth)] =
        passkey_impl::tally(trials, [&](const PasskeyTrial& x) { return x.depth == depth; }).accuracy();
  return {{"accuracy", passkey_impl::tally(trials, [](const PasskeyTrial&) { return true; }).accuracy()},
          {"by_length", by_length},
          {"by_depth", by_depth}};
}

std::string PasskeyReport::table() const {
  const std::vector<double> depths = data::passkey_depths(options.depths);
  constexpr std::size_t kCell = 18;
  std::string out = "passkey retrieval: correct/trials [95% Wilson interval], greedy decoding\n\n";
  out += passkey_impl::padded("length \\ depth", 16);
  for (const double d : depths) out += " | " + passkey_impl::padded(passkey_impl::number_label(d), kCell);
  out += " | all\n";
  for (const std::int64_t length : options.lengths) {
    out += passkey_impl::padded(std::to_string(length), 16);
    for (const double d : depths)
      out += " | " +
             passkey_impl::padded(
                 passkey_impl::tally(trials, [&](const PasskeyTrial& x) { return x.length == length && x.depth == d; })
                     .text(),
                 kCell);
    out += " | " + passkey_impl::tally(trials, [&](const PasskeyTrial& x) { return x.length == length; }).text() + "\n";
  }
  out += passkey_impl::padded("all", 16);
  for (const double d : depths)
    out += " | " + passkey_impl::padded(
                       passkey_impl::tally(trials, [&](const PasskeyTrial& x) { return x.depth == d; }).text(), kCell);
  out += " | " + passkey_impl::tally(trials, [](const PasskeyTrial&) { return true; }).text() + "\n\n";
  out += "length | prompt tokens | accuracy | 95% interval | s/prompt\n";
  for (const std::int64_t length : options.lengths) {
    const passkey_impl::Tally t =
        passkey_impl::tally(trials, [&](const PasskeyTrial& x) { return x.length == length; });
    const ProportionInterval ci = wilson_interval(t.correct, t.trials);
    char buf[160];
    std::snprintf(buf, sizeof buf, "%6lld | %6lld-%-6lld | %8.3f | [%.2f, %.2f] | %.2f\n",
                  static_cast<long long>(length), static_cast<long long>(t.min_tokens),
                  static_cast<long long>(t.max_tokens), t.accuracy(), ci.low, ci.high,
                  t.trials ? t.seconds / static_cast<double>(t.trials) : 0.0);
    out += buf;
  }
  return out;
}

}  // namespace dark::train
