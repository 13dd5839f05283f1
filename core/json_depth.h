// A nesting limit for JSON read from files. nlohmann's parser itself is iterative, but
// dump(), comparison and every walk over a document recurse once per level, so a document
// of a few hundred thousand "[" overflows the stack as soon as anything looks at it (an
// error message printing it, say). Readers of untrusted JSON (run configs, safetensors
// headers) pass json_depth_limit() to nlohmann::json::parse: a deeper document makes the
// parse throw dark::Error "JSON nested deeper than 64 levels", which the reader prefixes
// with what it was reading. Real documents nest a few levels.
#pragma once
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace dark {

inline constexpr int kMaxJsonDepth = 64;

// Json: nlohmann::json, or nlohmann::ordered_json for a reader that keeps the file's key order.
template <class Json = nlohmann::json>
typename Json::parser_callback_t json_depth_limit() {
  return [](int depth, typename Json::parse_event_t event, Json&) {
    if ((event == Json::parse_event_t::object_start || event == Json::parse_event_t::array_start) &&
        depth >= kMaxJsonDepth)
      throw Error(str("JSON nested deeper than ", kMaxJsonDepth, " levels"));
    return true;
  };
}

}  // namespace dark
