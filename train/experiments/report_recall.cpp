// The recall tasks in sweep summaries and reports (see report_recall.h).
#include "train/experiments/report_recall.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>

#include "core/error.h"
#include "core/file_io.h"
#include "train/metrics/paired_stats.h"
#include "train/wilson_interval.h"

namespace dark::experiments {
namespace fs = std::filesystem;
using nlohmann::json;

// Helpers, in a namespace of their own (the unity build compiles this file with others).
namespace recall_report {

// A point's passkey.json or copy.json; null when it has none. A file that is there but is not
// such a report is an error naming it.
json task_file(const json& row, const char* name, const char* task) {
  const fs::path path = fs::path(row.value("dir", "")) / name;
  if (!fs::exists(path)) return nullptr;
  json doc = json::parse(read_file(path), nullptr, /*allow_exceptions=*/false);
  DARK_CHECK(doc.is_object() && doc.value("task", "") == task, "report: ", path.string(), ": not a ", task,
             " report (a JSON object with \"task\": \"", task, "\")");
  return doc;
}

// One number per point for a column: successes and trials (pooled over a cell) and the point's
// own value (its mean over seeds).
struct Count {
  double successes = 0, trials = 0;
  bool present = false;
};

std::string fixed(double v, const char* format) {
  if (!std::isfinite(v)) return "–";
  char buf[48];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

// "8/10 = 0.80 [0.49, 0.94]", and " (0.80 ± 0.10 over seeds)" with several points.
std::string count_cell(const std::vector<Count>& counts) {
  double k = 0, n = 0;
  std::vector<double> shares;
  for (const Count& c : counts)
    if (c.present && c.trials > 0) k += c.successes, n += c.trials, shares.push_back(c.successes / c.trials);
  if (n == 0) return "–";
  const train::ProportionInterval ci = train::wilson_interval(std::llround(k), std::llround(n));
  std::string out = str(std::llround(k), "/", std::llround(n), " = ", fixed(k / n, "%.2f"), " [", fixed(ci.low, "%.2f"),
                        ", ", fixed(ci.high, "%.2f"), "]");
  if (shares.size() >= 2) {
    const metrics::Replicates r = metrics::summarize(shares);
    out += str(" (", fixed(r.mean, "%.2f"), " ± ", fixed(r.sd, "%.2f"), ")");
  }
  return out;
}

// "2.31", or "2.31 ± 0.05" over several points.
std::string mean_cell(const std::vector<double>& values) {
  const metrics::Replicates r = metrics::summarize(values);
  if (r.n == 0) return "–";
  if (r.n == 1) return fixed(r.mean, "%.3g");
  return fixed(r.mean, "%.3g") + " ± " + fixed(r.sd, "%.2g");
}

struct Row {
  std::string label, method, group;
};

// One row per (group, method) in grid order.
std::vector<Row> rows_of(const ReportData& d) {
  std::vector<Row> rows;
  for (const std::string& g : d.groups)
    for (const std::string& m : d.methods) {
      const bool any = std::any_of(d.points.begin(), d.points.end(),
                                   [&](const ReportPoint& p) { return p.method == m && p.group == g; });
      if (any) rows.push_back({g.empty() ? m : str(m, " (", g, ")"), m, g});
    }
  return rows;
}

// A Markdown table: one row per (group, method), one column per key, each cell from the points
// in it (their documents, null where a point has none).
std::string table(const ReportData& d, const std::vector<json>& docs, const std::string& corner,
                  const std::vector<std::pair<std::string, std::string>>& columns,
                  const std::function<std::string(const std::vector<const json*>&, const std::string&)>& cell) {
  std::string out = "| " + corner + " |";
  for (const auto& [key, title] : columns) out += " " + title + " |";
  out += "\n|---|";
  for (std::size_t i = 0; i < columns.size(); ++i) out += "---|";
  out += "\n";
  for (const Row& r : rows_of(d)) {
    std::vector<const json*> in_row;
    for (std::size_t i = 0; i < d.points.size(); ++i)
      if (d.points[i].method == r.method && d.points[i].group == r.group && docs[i].is_object())
        in_row.push_back(&docs[i]);
    if (in_row.empty()) continue;
    out += "| " + r.label + " |";
    for (const auto& [key, title] : columns) out += str(" ", cell(in_row, key), " |");
    out += "\n";
  }
  return out + "\n";
}

// The entry of `list` (an array of objects) whose `field` is `key` (as text); null if none.
const json* entry(const json& doc, const char* list, const char* field, const std::string& key) {
  if (!doc.contains(list) || !doc.at(list).is_array()) return nullptr;
  for (const json& e : doc.at(list))
    if (e.contains(field) && e.at(field).dump() == key) return &e;
  return nullptr;
}

double number(const json* e, const char* field) {
  return e && e->contains(field) && e->at(field).is_number() ? e->at(field).get<double>() : std::nan("");
}

// Paired comparisons by seed of `value` (NaN: none) for every pair of methods in every group and
// every key: rows of a Markdown table.
std::string paired_rows(const ReportData& d, const std::vector<json>& docs, const std::vector<std::string>& keys,
                        const std::string& what, const std::function<double(const json&, const std::string&)>& value,
                        int& identical) {
  std::string rows;
  for (const std::string& group : d.groups)
    for (std::size_t i = 0; i < d.methods.size(); ++i)
      for (std::size_t j = i + 1; j < d.methods.size(); ++j)
        for (const std::string& key : keys) {
          std::vector<double> a, b;
          for (const std::int64_t seed : d.seeds) {
            const json *da = nullptr, *db = nullptr;
            for (std::size_t p = 0; p < d.points.size(); ++p) {
              const ReportPoint& point = d.points[p];
              if (point.group != group || !point.seed || *point.seed != seed || !docs[p].is_object()) continue;
              if (point.method == d.methods[i]) da = &docs[p];
              if (point.method == d.methods[j]) db = &docs[p];
            }
            if (da && db) a.push_back(value(*da, key)), b.push_back(value(*db, key));
          }
          const metrics::PairedDifference diff = metrics::paired_difference(a, b);
          if (diff.n < 2) continue;
          if (diff.mean == 0 && diff.sd == 0) {  // the same for every seed: no row
            ++identical;
            continue;
          }
          const std::string verdict = !diff.distinguishable() ? "not distinguishable"
                                      : diff.mean < 0         ? d.methods[i] + " lower"
                                                              : d.methods[i] + " higher";
          rows += str("| ", group.empty() ? "all" : group, " | ", what, " ", key, " | ", d.methods[i], " − ",
                      d.methods[j], " | ", fixed(diff.mean, "%+.3f"), " | [", fixed(diff.low, "%+.3f"), ", ",
                      fixed(diff.high, "%+.3f"), "] | ", diff.n, " | ", verdict, " |\n");
        }
  return rows;
}

std::string paired_table(const std::string& rows, int identical) {
  const std::string left_out =
      identical ? str(" ", identical, " comparison(s) where both methods gave the same value for every seed are left out.")
                : std::string();
  if (rows.empty()) return identical ? "Paired by seed:" + left_out + "\n\n" : std::string();
  return "Paired by seed (same seed = same data order and initial weights; every point saw the same prompts): the mean "
         "over seeds of the difference, first minus second, with its 95% Student t interval." +
         left_out + "\n\n| group | at | pair | mean difference | 95% interval | seeds | verdict |\n|---|---|---|---|---|---|---|\n" +
         rows + "\n";
}

// The keys of `list`'s entries' `field` over every document, in first-seen order.
std::vector<std::string> keys_of(const std::vector<json>& docs, const char* list, const char* field) {
  std::vector<std::string> keys;
  for (const json& doc : docs)
    if (doc.is_object() && doc.contains(list) && doc.at(list).is_array())
      for (const json& e : doc.at(list))
        if (e.contains(field) && std::find(keys.begin(), keys.end(), e.at(field).dump()) == keys.end())
          keys.push_back(e.at(field).dump());
  return keys;
}

std::string spread_note(const ReportData& d) {
  return d.seeded() ? str(" Several seeds: the trials pooled, and (mean ± sd) of the ", d.seeds.size(), " seeds' own.")
                    : std::string();
}

std::string passkey_section(const ReportData& d, const std::vector<json>& docs) {
  const std::vector<std::string> lengths = keys_of(docs, "by_length", "length");
  std::vector<std::pair<std::string, std::string>> columns;
  for (const std::string& l : lengths) columns.push_back({l, l});
  columns.push_back({"all", "all"});
  const auto cell = [](const std::vector<const json*>& in, const std::string& key) {
    std::vector<Count> counts;
    for (const json* doc : in) {
      const json* e = key == "all" ? (doc->contains("overall") ? &doc->at("overall") : nullptr)
                                   : entry(*doc, "by_length", "length", key);
      counts.push_back({number(e, "correct"), number(e, "trials"), e != nullptr});
    }
    return count_cell(counts);
  };
  std::string out =
      "## Passkey retrieval\n\nFrom each point's `passkey.json` (`evaluation.passkey`; docs/long-context.md): the "
      "Landmark "
      "Attention passkey prompt at each length (tokens), correct when the first number of the greedy continuation is "
      "the "
      "key; correct/trials = accuracy [95% Wilson interval]." +
      spread_note(d) + "\n\n";
  out +=
      table(d, docs, str(d.method_axes.size() == 1 ? axis_leaf(d.method_axes[0]) : std::string("method"), " \\ length"),
            columns, cell);
  if (d.seeded()) {
    int identical = 0;
    const std::string rows = paired_rows(
        d, docs, lengths, "length",
        [](const json& doc, const std::string& key) { return number(entry(doc, "by_length", "length", key), "accuracy"); },
        identical);
    out += paired_table(rows, identical);
  }
  return out;
}

std::string copy_section(const ReportData& d, const std::vector<json>& docs) {
  const std::vector<std::string> lengths = keys_of(docs, "by_list_words", "list_words");
  std::vector<std::pair<std::string, std::string>> columns;
  for (const std::string& n : lengths) {
    double distance = std::nan("");
    for (const json& doc : docs)
      if (doc.is_object())
        distance = std::max(std::isnan(distance) ? 0.0 : distance,
                            number(entry(doc, "by_list_words", "list_words", n), "distance_max"));
    columns.push_back({n, str(n, " words (", fixed(distance, "%.0f"), " tokens back)")});
  }
  const auto words_cell = [](const std::vector<const json*>& in, const std::string& key) {
    std::vector<Count> counts;
    for (const json* doc : in) {
      const json* e = entry(*doc, "by_list_words", "list_words", key);
      counts.push_back({number(e, "words_copied"), number(e, "words"), e != nullptr});
    }
    return count_cell(counts);
  };
  const auto loss_cell = [](const std::vector<const json*>& in, const std::string& key) {
    std::vector<double> values;
    for (const json* doc : in) values.push_back(number(entry(*doc, "by_list_words", "list_words", key), "loss"));
    return mean_cell(values);
  };
  const std::string corner =
      str(d.method_axes.size() == 1 ? axis_leaf(d.method_axes[0]) : std::string("method"), " \\ list");
  std::string out =
      "## Copy task\n\nFrom each point's `copy.json` (`evaluation.copy`; docs/long-context.md): a random list of "
      "words, "
      "then its repeat; on the repeat, by teacher forcing, the words whose every token is the argmax (copied/words = "
      "share "
      "[95% Wilson interval]) and the mean next-token loss (nats), by list length, which sets the distance back to a "
      "word's first occurrence." +
      spread_note(d) + "\n\n**Words copied**\n\n";
  out += table(d, docs, corner, columns, words_cell);
  out += "**Next-token loss on the repeat (nats)**\n\n" + table(d, docs, corner, columns, loss_cell);
  if (d.seeded()) {
    int identical = 0;
    const std::string rows = paired_rows(
        d, docs, lengths, "words",
        [](const json& doc, const std::string& key) {
          return number(entry(doc, "by_list_words", "list_words", key), "word_accuracy");
        },
        identical);
    out += paired_table(rows, identical);
  }
  return out;
}

// Accuracy by method x `list` entry (pairs counts, or distance buckets) and over all queries.
std::string mqar_table(const ReportData& d, const std::vector<json>& docs, const char* list, const char* field,
                       const std::string& corner) {
  const std::vector<std::string> keys = keys_of(docs, list, field);
  std::vector<std::pair<std::string, std::string>> columns;
  for (const std::string& k : keys) {
    const json key = json::parse(k);
    columns.push_back({k, key.is_string() ? key.get<std::string>() : k});
  }
  columns.push_back({"all", "all"});
  const auto cell = [list, field](const std::vector<const json*>& in, const std::string& key) {
    std::vector<Count> counts;
    for (const json* doc : in) {
      const json* e = key == "all" ? doc : entry(*doc, list, field, key);
      counts.push_back({number(e, "correct"), number(e, "queries"), e != nullptr});
    }
    return count_cell(counts);
  };
  return table(d, docs, corner, columns, cell);
}

std::string mqar_section(const ReportData& d, const std::vector<json>& docs) {
  const std::string method = d.method_axes.size() == 1 ? axis_leaf(d.method_axes[0]) : std::string("method");
  std::string out =
      "## Associative recall (MQAR)\n\nFrom each point's `mqar.json` (`data.task` mqar; docs/long-context.md): at "
      "the final evaluation, on the fixed validation sequences, the share of queries whose top-1 next token after the "
      "query key is the key's value; correct/queries = accuracy [95% Wilson interval]." +
      spread_note(d) + "\n\n**By number of key-value pairs**\n\n";
  out += mqar_table(d, docs, "by_pairs", "pairs", method + " \\ pairs");
  out += "**By query-key distance (tokens)**\n\n";
  out += mqar_table(d, docs, "by_distance", "distance", method + " \\ distance");
  if (d.seeded()) {
    int identical = 0;
    const std::string rows = paired_rows(
        d, docs, keys_of(docs, "by_pairs", "pairs"), "pairs",
        [](const json& doc, const std::string& key) { return number(entry(doc, "by_pairs", "pairs", key), "accuracy"); },
        identical);
    out += paired_table(rows, identical);
  }
  return out;
}

}  // namespace recall_report

json recall_summary(const fs::path& point_dir) {
  const json row = {{"dir", point_dir.string()}};
  json out = {{"passkey", nullptr}, {"copy", nullptr}, {"mqar", nullptr}};
  if (const json q = recall_report::task_file(row, "mqar.json", "mqar"); q.is_object()) {
    json by_pairs = json::object();
    for (const json& e : q.value("by_pairs", json::array())) by_pairs[e.at("pairs").dump()] = e.value("accuracy", json());
    out["mqar"] = {{"accuracy", q.value("accuracy", json())}, {"by_pairs", by_pairs}};
  }
  if (const json p = recall_report::task_file(row, "passkey.json", "passkey"); p.is_object()) {
    json by_length = json::object();
    for (const json& e : p.value("by_length", json::array()))
      by_length[e.at("length").dump()] = e.value("accuracy", json());
    out["passkey"] = {{"accuracy", p["overall"].value("accuracy", json())}, {"by_length", by_length}};
  }
  if (const json c = recall_report::task_file(row, "copy.json", "copy"); c.is_object()) {
    json by_words = json::object();
    for (const json& e : c.value("by_list_words", json::array()))
      by_words[e.at("list_words").dump()] = e.value("word_accuracy", json());
    out["copy"] = {{"word_accuracy", c["overall"].value("word_accuracy", json())},
                   {"token_accuracy", c["overall"].value("token_accuracy", json())},
                   {"loss", c["overall"].value("loss", json())},
                   {"by_words", by_words}};
  }
  return out;
}

std::string recall_sections(const ReportData& d) {
  std::vector<json> passkey, copy, mqar;
  for (const ReportPoint& p : d.points) {
    passkey.push_back(recall_report::task_file(p.row, "passkey.json", "passkey"));
    copy.push_back(recall_report::task_file(p.row, "copy.json", "copy"));
    mqar.push_back(recall_report::task_file(p.row, "mqar.json", "mqar"));
  }
  const auto any = [](const std::vector<json>& docs) {
    return std::any_of(docs.begin(), docs.end(), [](const json& j) { return j.is_object(); });
  };
  std::string out;
  if (any(passkey)) out += recall_report::passkey_section(d, passkey);
  if (any(copy)) out += recall_report::copy_section(d, copy);
  if (any(mqar)) out += recall_report::mqar_section(d, mqar);
  return out;
}

}  // namespace dark::experiments
