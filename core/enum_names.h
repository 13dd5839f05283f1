// How an enumeration is spelled in config files, metadata and messages. Each layer that owns
// an enumeration specialises EnumNames beside it, once:
//
//   template <> struct EnumNames<attention::Kind> {
//     static constexpr std::array<std::pair<attention::Kind, std::string_view>, 4> table{...};
//   };
//
// and then enum_name(), parse_enum() and enum_choices() work everywhere, so the spelling of
// a value has exactly one definition (the config schema, meta.json and error messages all read
// it from here). Table order is documentation order.
#pragma once
#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "core/error.h"

namespace dark {

template <class E>
struct EnumNames;

template <class E>
concept NamedEnum = requires { EnumNames<E>::table; };

// "swiglu" for nn::MlpKind::swiglu, and so on.
template <NamedEnum E>
constexpr std::string_view enum_name(E value) {
  for (const auto& [v, name] : EnumNames<E>::table)
    if (v == value) return name;
  return "?";
}

// Every spelling, joined by `separator` ("softmax, performer, lfk, darkformer").
template <NamedEnum E>
std::string enum_choices(std::string_view separator = ", ") {
  std::string out;
  for (const auto& [value, name] : EnumNames<E>::table) {
    if (!out.empty()) out += separator;
    out += name;
  }
  return out;
}

// The value spelled `name`, or nothing.
template <NamedEnum E>
constexpr std::optional<E> find_enum(std::string_view name) {
  for (const auto& [value, spelling] : EnumNames<E>::table)
    if (spelling == name) return value;
  return std::nullopt;
}

// The value spelled `name`; otherwise an error "WHAT 'name' is not one of a, b, c".
template <NamedEnum E>
E parse_enum(std::string_view name, std::string_view what) {
  if (const std::optional<E> value = find_enum<E>(name)) return *value;
  throw Error(str(what, " '", name, "' is not one of ", enum_choices<E>()));
}

}  // namespace dark
