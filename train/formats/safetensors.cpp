// safetensors writer and validating reader. See safetensors.h for the format and the order
// tensors are written in.
#include "train/formats/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/file_io.h"
#include "core/json_depth.h"
#include "data/gguf.h"

namespace dark::formats {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; this code copies host bytes as they are");

namespace {

using nlohmann::json;

// The reference implementation rejects headers above 100 MB; so do we.
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;
constexpr const char* kMetadataKey = "__metadata__";

// Position of our dtypes in the reference implementation's Dtype enum, which is declared in
// increasing alignment; the writer sorts by it, descending, then by name.
int dtype_rank(DType dtype) {
  switch (dtype) {
    case DType::bf16: return 0;
    case DType::i32: return 1;
    case DType::f32: return 2;
    case DType::f64: return 3;
    case DType::i64: return 4;
  }
  return -1;
}

// Our dtype for a format name; false for names darkformer does not hold.
bool dtype_from_name(const std::string& name, DType& out) {
  for (const DType d : {DType::f32, DType::f64, DType::bf16, DType::i32, DType::i64}) {
    if (name == safetensors_dtype_name(d)) {
      out = d;
      return true;
    }
  }
  return false;
}

// JSON string literal, escaped as serde_json does (which nlohmann's dump matches).
std::string quoted(const std::string& text, const char* what) {
  try {
    return json(text).dump();
  } catch (const json::exception&) {
    throw Error(str("safetensors: ", what, " \"", text, "\" is not valid UTF-8"));
  }
}

struct PlannedTensor {
  const std::string* name;
  const Tensor* tensor;
  std::uint64_t bytes;
};

// The writer's order: dtype alignment descending, then name ascending (bytewise).
std::vector<PlannedTensor> plan(const TensorMap& tensors) {
  std::vector<PlannedTensor> out;
  out.reserve(tensors.size());
  for (const auto& [name, tensor] : tensors) {
    DARK_CHECK(!name.empty(), "safetensors: a tensor has an empty name");
    DARK_CHECK(name != kMetadataKey, "safetensors: \"", kMetadataKey,
               "\" is reserved and cannot name a tensor");
    DARK_CHECK(tensor.defined(), "safetensors: tensor \"", name, "\" is undefined");
    out.push_back({&name, &tensor, static_cast<std::uint64_t>(tensor.numel()) * dtype_size(tensor.dtype())});
  }
  std::stable_sort(out.begin(), out.end(), [](const PlannedTensor& a, const PlannedTensor& b) {
    const int ra = dtype_rank(a.tensor->dtype()), rb = dtype_rank(b.tensor->dtype());
    if (ra != rb) return ra > rb;
    return *a.name < *b.name;
  });
  return out;
}

std::string header_for(const std::vector<PlannedTensor>& planned, const SafetensorsMetadata& metadata) {
  std::string h = "{";
  bool first = true;
  if (!metadata.empty()) {
    h += "\"__metadata__\":{";
    for (const auto& [key, value] : metadata) {
      if (!first) h += ',';
      first = false;
      h += quoted(key, "metadata key") + ":" + quoted(value, "metadata value");
    }
    h += '}';
    first = false;
  }
  std::uint64_t offset = 0;
  for (const PlannedTensor& p : planned) {
    if (!first) h += ',';
    first = false;
    h += quoted(*p.name, "tensor name");
    h += ":{\"dtype\":\"";
    h += safetensors_dtype_name(p.tensor->dtype());
    h += "\",\"shape\":[";
    const Shape& shape = p.tensor->shape();
    for (std::size_t i = 0; i < shape.size(); ++i) {
      if (i > 0) h += ',';
      h += std::to_string(shape[i]);
    }
    h += "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(offset + p.bytes) + "]}";
    offset += p.bytes;
  }
  h += '}';
  h.append((8 - h.size() % 8) % 8, ' ');
  return h;
}

// ---- reader helpers ----
struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  std::uint64_t begin, end;
  bool f16 = false;  // stored as IEEE half: read into an f32 tensor (we hold no f16)
};


[[noreturn]] void fail(const std::string& source, const std::string& message) {
  throw Error(str("safetensors: ", source, ": ", message));
}

[[noreturn]] void fail_tensor(const std::string& source, const std::string& name,
                              const std::string& message) {
  throw Error(str("safetensors: ", source, ": tensor \"", name, "\": ", message));
}

std::string offsets_str(std::uint64_t begin, std::uint64_t end) {
  return str("[", begin, ", ", end, "]");
}

Entry parse_entry(const std::string& source, const std::string& name, const json& info) {
  if (!info.is_object()) fail_tensor(source, name, str("expected an object, got ", info.dump()));
  Entry e{name, DType::f32, {}, 0, 0};
  const auto dtype_it = info.find("dtype");
  if (dtype_it == info.end() || !dtype_it->is_string()) {
    fail_tensor(source, name, "missing or non-string \"dtype\"");
  }
  const std::string dtype_name = dtype_it->get<std::string>();
  e.f16 = dtype_name == "F16";
  if (!e.f16 && !dtype_from_name(dtype_name, e.dtype)) {
    fail_tensor(source, name, str("dtype \"", dtype_name, "\" is not one of F32, F64, F16, BF16, I32, I64"));
  }
  const auto shape_it = info.find("shape");
  if (shape_it == info.end() || !shape_it->is_array()) {
    fail_tensor(source, name, "missing or non-array \"shape\"");
  }
  for (const json& d : *shape_it) {
    if (!d.is_number_unsigned() ||
        d.get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      fail_tensor(source, name, str("shape ", shape_it->dump(), " must hold non-negative integers"));
    }
    e.shape.push_back(d.get<std::int64_t>());
  }
  const auto offsets_it = info.find("data_offsets");
  if (offsets_it == info.end() || !offsets_it->is_array() || offsets_it->size() != 2 ||
      !(*offsets_it)[0].is_number_unsigned() || !(*offsets_it)[1].is_number_unsigned()) {
    fail_tensor(source, name, "\"data_offsets\" must be two non-negative integers [begin, end]");
  }
  e.begin = (*offsets_it)[0].get<std::uint64_t>();
  e.end = (*offsets_it)[1].get<std::uint64_t>();
  return e;
}

}  // namespace

const char* safetensors_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "F32";
    case DType::f64: return "F64";
    case DType::bf16: return "BF16";
    case DType::i32: return "I32";
    case DType::i64: return "I64";
  }
  return "?";
}

std::string safetensors_header(const TensorMap& tensors, const SafetensorsMetadata& metadata) {
  return header_for(plan(tensors), metadata);
}

void save_safetensors(const std::filesystem::path& path, const TensorMap& tensors,
                      const SafetensorsMetadata& metadata) {
  const std::vector<PlannedTensor> planned = plan(tensors);
  const std::string header = header_for(planned, metadata);
  std::uint8_t length[8];
  for (int i = 0; i < 8; ++i)
    length[i] = static_cast<std::uint8_t>(static_cast<std::uint64_t>(header.size()) >> (8 * i));
  AtomicFileWriter out(path);
  out.write(length, sizeof length);
  out.write(header);
  for (const PlannedTensor& p : planned) {
    if (p.bytes == 0) continue;
    const Tensor host = p.tensor->to(Device::cpu()).contiguous();
    out.write(host.raw_data(), p.bytes);
  }
  out.commit();
}

SafetensorsContents load_safetensors(const std::filesystem::path& path) {
  const MappedFile file(path);
  return parse_safetensors(file.data(), file.size(), path.string());
}

namespace {

// The JSON header of a safetensors file (after its 8-byte little-endian length), checked to be
// an object; `header_len` is its length.
json read_header(const std::uint8_t* bytes, std::size_t size, const std::string& source, std::uint64_t& header_len) {
  if (size < 8)
    fail(source, str("file is ", size, " bytes, too short for the 8-byte header length (truncated?)"));
  header_len = 0;
  for (int i = 0; i < 8; ++i) header_len |= static_cast<std::uint64_t>(bytes[i]) << (8 * i);
  if (header_len > kMaxHeaderBytes) {
    fail(source,
         str("header length ", header_len, " exceeds the 100000000-byte limit (not a safetensors file?)"));
  }
  if (header_len > size - 8) {
    fail(source,
         str("header length ", header_len, " runs past the end of the ", size, "-byte file (truncated?)"));
  }
  json header;
  try {
    header = json::parse(bytes + 8, bytes + 8 + header_len, json_depth_limit());
  } catch (const Error& e) {
    fail(source, str("header is not valid JSON: ", e.what()));
  } catch (const json::exception& e) {
    // e.what() reads "[json.exception.parse_error.101] parse error at ..." (or
    // out_of_range.406 "number overflow parsing '1e999'"): drop the tag.
    const std::string what = e.what();
    const std::size_t tag_end = what.find("] ");
    fail(source,
         str("header is not valid JSON: ", tag_end == std::string::npos ? what : what.substr(tag_end + 2)));
  }
  if (!header.is_object()) fail(source, str("header is not a JSON object: ", header.dump().substr(0, 80)));
  return header;
}

// Each tensor's data_offsets lie in the data region and hold exactly its dtype and shape.
void check_entry_sizes(const std::vector<Entry>& entries, std::uint64_t data_size, const std::string& source) {
  for (const Entry& e : entries) {
    if (e.end < e.begin)
      fail_tensor(source, e.name,
                  str("data_offsets ", offsets_str(e.begin, e.end), " end before they begin"));
    if (e.end > data_size) {
      fail_tensor(source, e.name,
                  str("data_offsets ", offsets_str(e.begin, e.end), " run past the ", data_size,
                      "-byte data region (truncated?)"));
    }
    std::uint64_t expected = e.f16 ? 2 : dtype_size(e.dtype);
    for (const std::int64_t d : e.shape) {
      if (__builtin_mul_overflow(expected, static_cast<std::uint64_t>(d), &expected)) {
        fail_tensor(source, e.name, str("shape ", shape_str(e.shape), " overflows"));
      }
    }
    if (expected != e.end - e.begin) {
      fail_tensor(source, e.name,
                  str(e.f16 ? "F16" : safetensors_dtype_name(e.dtype), " ", shape_str(e.shape), " needs ", expected,
                      " bytes but data_offsets ", offsets_str(e.begin, e.end), " hold ", e.end - e.begin));
    }
  }
}

// The tensors, sorted by offset, tile the data region: no overlap, no gap, no trailing bytes.
void check_layout(std::vector<Entry>& entries, std::uint64_t data_size, const std::string& source) {
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  std::uint64_t covered = 0;
  const Entry* previous = nullptr;
  for (const Entry& e : entries) {
    if (e.begin < covered) {
      fail_tensor(source, e.name,
                  str("data_offsets ", offsets_str(e.begin, e.end), " overlap tensor \"", previous->name,
                      "\" ", offsets_str(previous->begin, previous->end)));
    }
    if (e.begin > covered) {
      fail_tensor(source, e.name,
                  str("data_offsets ", offsets_str(e.begin, e.end), " leave a gap: the data before ends at ",
                      covered));
    }
    covered = e.end;
    previous = &e;
  }
  if (covered != data_size) {
    fail(source,
         str("tensors cover ", covered, " bytes of the ", data_size, "-byte data region (trailing bytes)"));
  }
}

}  // namespace

SafetensorsContents parse_safetensors(const std::uint8_t* bytes, std::size_t size,
                                      const std::string& source) {
  std::uint64_t header_len = 0;
  const json header = read_header(bytes, size, source, header_len);

  SafetensorsContents out;
  std::vector<Entry> entries;
  for (const auto& [name, info] : header.items()) {
    if (name == kMetadataKey) {
      if (!info.is_object())
        fail(source, str("\"", kMetadataKey, "\" must be an object of strings, got ", info.dump()));
      for (const auto& [key, value] : info.items()) {
        if (!value.is_string()) {
          fail(source, str("\"", kMetadataKey, "\": \"", key, "\" must be a string, got ", value.dump()));
        }
        out.metadata.emplace(key, value.get<std::string>());
      }
      continue;
    }
    entries.push_back(parse_entry(source, name, info));
  }

  const std::uint64_t data_begin = 8 + header_len;
  const std::uint64_t data_size = size - data_begin;
  check_entry_sizes(entries, data_size, source);
  check_layout(entries, data_size, source);

  for (const Entry& e : entries) {
    Tensor t = Tensor::empty(e.shape, e.dtype, Device::cpu());
    if (e.f16) {  // exact: every half is a float (GGUF's dequantiser, tested bit for bit there)
      data::dequantize(data::GgufType::F16, bytes + data_begin + e.begin, e.end - e.begin, t.numel(), t.data<float>());
    } else if (e.end > e.begin) {
      std::memcpy(t.raw_data(), bytes + data_begin + e.begin, e.end - e.begin);
    }
    out.tensors.emplace(e.name, std::move(t));
  }
  return out;
}

}  // namespace dark::formats
