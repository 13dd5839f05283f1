// The copy task scored on a model (see copy_eval.h).
#include "train/copy_eval.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/error.h"
#include "train/progress.h"
#include "train/wilson_interval.h"

namespace dark::train {

using nlohmann::json;
using Clock = std::chrono::steady_clock;  // as trainer.cpp: one alias in the unity build

// Helpers, in a namespace of their own (the unity build compiles this file with others).
namespace copy_impl {

constexpr std::int64_t kRowsPerChunk = 256;  // logits rows at once: 256 MiB for a 262k vocabulary

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Sums over tokens and words, and what tables and JSON say about them.
struct Tally {
  std::int64_t tokens = 0, correct_tokens = 0, words = 0, copied_words = 0;
  std::int64_t min_distance = std::numeric_limits<std::int64_t>::max(), max_distance = 0;
  double loss_sum = 0, seconds = 0;
  std::int64_t prompts = 0, max_prompt_tokens = 0;

  void add_token(const CopyToken& t) {
    ++tokens;
    correct_tokens += t.correct ? 1 : 0;
    loss_sum += t.loss;
  }
  void add_word(bool copied, std::int64_t distance) {
    ++words;
    copied_words += copied ? 1 : 0;
    min_distance = std::min(min_distance, distance);
    max_distance = std::max(max_distance, distance);
  }
  void add_trial(const CopyTrial& t) {
    for (const CopyToken& token : t.score.tokens) add_token(token);
    for (std::size_t i = 0; i < t.score.words_copied.size(); ++i)
      add_word(t.score.words_copied[i], t.score.word_distance[i]);
    seconds += t.seconds;
    ++prompts;
    max_prompt_tokens = std::max(max_prompt_tokens, t.tokens);
  }
  double loss() const { return tokens ? loss_sum / static_cast<double>(tokens) : std::nan(""); }
  double token_accuracy() const {
    return tokens ? static_cast<double>(correct_tokens) / static_cast<double>(tokens) : std::nan("");
  }
  double word_accuracy() const {
    return words ? static_cast<double>(copied_words) / static_cast<double>(words) : std::nan("");
  }
  json to_json() const {
    const ProportionInterval ci = wilson_interval(copied_words, words);
    return {{"tokens", tokens},
            {"loss", loss()},
            {"token_accuracy", token_accuracy()},
            {"words", words},
            {"words_copied", copied_words},
            {"word_accuracy", word_accuracy()},
            {"word_accuracy_low", ci.low},
            {"word_accuracy_high", ci.high},
            {"distance_min", words ? json(min_distance) : json(nullptr)},
            {"distance_max", words ? json(max_distance) : json(nullptr)}};
  }
  // "2048 words |  2080-2080  |   2048 |   0.412 |    0.903 | 1380/2048 [0.654, 0.694]"
  std::string row(const std::string& label) const {
    const ProportionInterval ci = wilson_interval(copied_words, words);
    char buf[200];
    std::snprintf(buf, sizeof buf, "%-10s | %5lld-%-5lld | %6lld | %7.3f | %8.3f | %lld/%lld [%.3f, %.3f]\n",
                  label.c_str(), static_cast<long long>(words ? min_distance : 0), static_cast<long long>(max_distance),
                  static_cast<long long>(tokens), loss(), token_accuracy(), static_cast<long long>(copied_words),
                  static_cast<long long>(words), ci.low, ci.high);
    return buf;
  }
};

// Tallies per distance bucket, in increasing order.
std::vector<std::pair<std::string, Tally>> by_bucket(const std::vector<CopyTrial>& trials) {
  std::map<std::int64_t, std::pair<std::string, Tally>> buckets;  // keyed by the bucket's first distance
  const auto key = [](std::int64_t d) {
    return d < 32 ? std::int64_t{0} : std::int64_t{1} << (63 - __builtin_clzll(d));
  };
  for (const CopyTrial& t : trials) {
    for (const CopyToken& token : t.score.tokens) {
      auto& [label, tally] = buckets[key(token.distance)];
      label = copy_distance_bucket(token.distance);
      tally.add_token(token);
    }
    for (std::size_t i = 0; i < t.score.words_copied.size(); ++i) {
      auto& [label, tally] = buckets[key(t.score.word_distance[i])];
      label = copy_distance_bucket(t.score.word_distance[i]);
      tally.add_word(t.score.words_copied[i], t.score.word_distance[i]);
    }
  }
  std::vector<std::pair<std::string, Tally>> out;
  for (auto& [first, entry] : buckets) out.push_back(entry);
  return out;
}

Tally of_length(const std::vector<CopyTrial>& trials, std::int64_t words) {
  Tally t;
  for (const CopyTrial& trial : trials)
    if (trial.words == words) t.add_trial(trial);
  return t;
}

Tally of_all(const std::vector<CopyTrial>& trials) {
  Tally t;
  for (const CopyTrial& trial : trials) t.add_trial(trial);
  return t;
}

}  // namespace copy_impl

std::string copy_distance_bucket(std::int64_t distance) {
  DARK_CHECK(distance >= 0, "copy task: negative distance ", distance);
  if (distance < 32) return "0-31";
  const std::int64_t low = std::int64_t{1} << (63 - __builtin_clzll(static_cast<unsigned long long>(distance)));
  return std::to_string(low) + "-" + std::to_string(2 * low - 1);
}

CopyScore score_copy(nn::CausalLM& model, const data::CopyPrompt& prompt) {
  NoGradGuard no_grad;
  const bool was_training = model.training();
  model.train(false);
  const Device device = model.device();
  const auto T = static_cast<std::int64_t>(prompt.ids.size());
  const std::int64_t V = model.config().vocab_size;
  // Row p - 1 predicts token p: the rows of every word token of the repeat.
  std::vector<std::int64_t> rows, targets;
  CopyScore score;
  for (const data::CopyWord& w : prompt.spans) {
    score.word_distance.push_back(w.distance());
    for (std::int64_t p = w.repeat_begin; p < w.repeat_end; ++p) {
      rows.push_back(p - 1);
      targets.push_back(prompt.ids[static_cast<std::size_t>(p)]);
      score.tokens.push_back({w.distance(), 0.0, false});
    }
  }
  const Tensor hidden = model.final_hidden(Tensor::from_vector(prompt.ids, {1, T}, device));
  const Tensor flat = reshape(hidden, {T, hidden.size(2)});
  const auto n = static_cast<std::int64_t>(rows.size());
  for (std::int64_t start = 0; start < n; start += copy_impl::kRowsPerChunk) {
    const std::int64_t end = std::min(n, start + copy_impl::kRowsPerChunk), count = end - start;
    const std::vector<std::int64_t> chunk_rows(rows.begin() + start, rows.begin() + end);
    std::vector<std::int64_t> picks;  // (row, target) in the flattened (count, V) logits
    for (std::int64_t i = 0; i < count; ++i) picks.push_back(i * V + targets[static_cast<std::size_t>(start + i)]);
    const Tensor logits = model.head_logits(index_select(flat, 0, Tensor::from_vector(chunk_rows, {count}, device)));
    const std::vector<double> lse = logsumexp(logits, {1}).to(DType::f64).to_vector<double>();
    const std::vector<double> target_logit =
        index_select(reshape(logits, {count * V}), 0, Tensor::from_vector(picks, {count}, device))
            .to(DType::f64)
            .to_vector<double>();
    const std::vector<std::int64_t> best = argmax(logits).to_vector<std::int64_t>();
    for (std::int64_t i = 0; i < count; ++i) {
      CopyToken& t = score.tokens[static_cast<std::size_t>(start + i)];
      t.loss = lse[static_cast<std::size_t>(i)] - target_logit[static_cast<std::size_t>(i)];
      t.correct = best[static_cast<std::size_t>(i)] == targets[static_cast<std::size_t>(start + i)];
    }
  }
  std::size_t at = 0;
  for (const data::CopyWord& w : prompt.spans) {
    bool copied = true;
    for (std::int64_t p = w.repeat_begin; p < w.repeat_end; ++p) copied = copied && score.tokens[at++].correct;
    score.words_copied.push_back(copied);
  }
  model.train(was_training);
  return score;
}

CopyReport run_copy(nn::CausalLM& model, const data::Tokenizer& tokenizer, const CopyOptions& o) {
  DARK_CHECK(!o.words.empty(), "copy task: no list lengths given");
  DARK_CHECK(o.trials >= 1, "copy task: trials must be >= 1, got ", o.trials);
  const auto start = Clock::now();
  CopyReport report;
  report.options = o;
  std::int64_t total_words = 0, done_words = 0;
  for (const std::int64_t n : o.words) total_words += n * o.trials;
  spdlog::info("copy task: {} list(s): {} word(s), {} trial(s) each, seed {}",
               o.words.size() * static_cast<std::size_t>(o.trials), json(o.words).dump(), o.trials, o.seed);
  for (const std::int64_t n : o.words) {
    ProgressLog progress(str("copy ", n, " words"), "prompt", "prompts", o.trials);
    for (int trial = 0; trial < o.trials; ++trial) {
      const auto t0 = Clock::now();
      const data::CopyPrompt prompt = data::copy_prompt(tokenizer, o.bos, data::copy_words(o.seed, n, trial));
      CopyTrial t;
      t.words = n;
      t.trial = trial;
      t.tokens = static_cast<std::int64_t>(prompt.ids.size());
      t.score = score_copy(model, prompt);
      t.seconds = copy_impl::seconds_since(t0);
      report.trials.push_back(std::move(t));
      progress.update(trial + 1);
    }
    done_words += n * o.trials;
    const copy_impl::Tally here = copy_impl::of_length(report.trials, n);
    const double elapsed = copy_impl::seconds_since(start);
    spdlog::info(
        "copy task: {} words ({} tokens back, prompts of {} tokens): {}/{} words copied, token accuracy {:.3f}, "
        "loss {:.3f} | {:.2f} s/prompt | {}",
        n, here.max_distance, here.max_prompt_tokens, here.copied_words, here.words, here.token_accuracy(), here.loss(),
        here.seconds / static_cast<double>(here.prompts),
        done_words < total_words ? "ETA " + duration_text(elapsed / static_cast<double>(done_words) *
                                                          static_cast<double>(total_words - done_words))
                                 : "done in " + duration_text(elapsed));
  }
  report.seconds = copy_impl::seconds_since(start);
  return report;
}

json CopyReport::to_json() const {
  json by_words = json::array(), by_distance = json::array(), all = json::array();
  for (const std::int64_t n : options.words) {
    const copy_impl::Tally t = copy_impl::of_length(trials, n);
    json row = t.to_json();
    row["list_words"] = n;
    row["prompt_tokens_max"] = t.max_prompt_tokens;
    row["seconds_per_prompt"] = t.prompts ? t.seconds / static_cast<double>(t.prompts) : 0.0;
    by_words.push_back(row);
  }
  for (const auto& [label, tally] : copy_impl::by_bucket(trials)) {
    json row = tally.to_json();
    row["bucket"] = label;
    by_distance.push_back(row);
  }
  for (const CopyTrial& t : trials) {
    copy_impl::Tally one;
    one.add_trial(t);
    json row = one.to_json();
    row["list_words"] = t.words;
    row["trial"] = t.trial;
    row["prompt_tokens"] = t.tokens;
    row["seconds"] = t.seconds;
    all.push_back(row);
  }
  json out = {
      {"task", "copy"},
      {"format",
       "Here is a list of words: w1 ... wn / The same list again: w1 ... wn (data/copy_prompt.h), teacher forcing"},
      {"list_words", options.words},
      {"trials_per_length", options.trials},
      {"seed", options.seed},
      {"bos", options.bos},
      {"interval", "95% Wilson score interval of the words copied"}};
  out["overall"] = copy_impl::of_all(trials).to_json();
  out["by_list_words"] = by_words;
  out["by_distance"] = by_distance;
  out["seconds"] = seconds;
  out["trials"] = all;
  return out;
}

json CopyReport::metrics() const {
  json by_words = json::object();
  for (const std::int64_t n : options.words) {
    const copy_impl::Tally t = copy_impl::of_length(trials, n);
    by_words[std::to_string(n)] = {{"word_accuracy", t.word_accuracy()},
                                   {"token_accuracy", t.token_accuracy()},
                                   {"loss", t.loss()},
                                   {"distance", t.max_distance}};
  }
  const copy_impl::Tally all = copy_impl::of_all(trials);
  return {{"word_accuracy", all.word_accuracy()},
          {"token_accuracy", all.token_accuracy()},
          {"loss", all.loss()},
          {"by_words", by_words}};
}

std::string CopyReport::table() const {
  const std::string header =
      "           | distance    | tokens |    loss | token acc | words copied [95% Wilson interval]\n";
  std::string out =
      "copy task: the repeat of a random word list, teacher forcing; distance = tokens back to the word's "
      "first occurrence\n\nby list length (words)\n" +
      header;
  for (const std::int64_t n : options.words) out += copy_impl::of_length(trials, n).row(std::to_string(n) + " words");
  out += copy_impl::of_all(trials).row("all");
  out += "\nby distance (tokens)\n" + header;
  for (const auto& [label, tally] : copy_impl::by_bucket(trials)) out += tally.row(label);
  return out;
}

}  // namespace dark::train
