// The words the copy task (data/copy_prompt.h) draws its random lists from: 4096 common
// lower-case English words (3 to 10 letters a-z, no names, no vulgarity), most frequent first,
// compiled in so that a seed gives the same lists on every machine. How they were chosen and
// how to regenerate them: scripts/make_common_words.py.
#pragma once
#include <array>
#include <cstddef>
#include <string_view>

namespace dark::data {

inline constexpr std::size_t kCommonWordCount = 4096;

const std::array<std::string_view, kCommonWordCount>& common_words();

}  // namespace dark::data
