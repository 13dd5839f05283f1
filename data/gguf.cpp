// GGUF reader. See gguf.h for the layout.
//
// The file is memory-mapped once. open() walks every byte of the header, metadata and
// tensor infos through a bounds-checked cursor, so a corrupt count or length fails before
// anything is allocated for it. Metadata values are not copied: each key remembers where its
// value lies in the mapping and the getters decode it from there on demand, which keeps
// memory proportional to what callers ask for (a 100k-entry vocabulary array costs nothing
// until get_string_array reads it). The tensor type table and the dequantisation kernels
// are in gguf_dequantize.cpp.
#include "data/gguf.h"

#include <bit>
#include <cstdio>
#include <cstring>
#include <limits>
#include <unordered_map>

#include "core/error.h"
#include "core/file_io.h"
#include "data/gguf_bytes.h"

namespace dark::data {

// ============================================================================ parsing

namespace {

using detail::load_u16;
using detail::load_u32;

enum class ValueType : std::uint32_t { u8 = 0, i8, u16, i16, u32, i32, f32, boolean, string, array, u64, i64, f64 };
constexpr std::uint32_t kValueTypeCount = 13;
constexpr int kMaxArrayDepth = 8;
constexpr std::uint64_t kDefaultAlignment = 32;
constexpr std::uint32_t kMaxDims = 4;

const char* value_type_name(ValueType t) {
  static const char* names[] = {"u8",  "i8",   "u16",    "i16",   "u32", "i32", "f32",
                                "bool", "string", "array", "u64", "i64", "f64"};
  return names[static_cast<std::uint32_t>(t)];
}

// Bytes of a fixed-size value; 0 for strings and arrays.
std::uint64_t fixed_size(ValueType t) {
  switch (t) {
    case ValueType::u8: case ValueType::i8: case ValueType::boolean: return 1;
    case ValueType::u16: case ValueType::i16: return 2;
    case ValueType::u32: case ValueType::i32: case ValueType::f32: return 4;
    case ValueType::u64: case ValueType::i64: case ValueType::f64: return 8;
    default: return 0;
  }
}

// The fewest bytes one value of type t occupies: what bounds a count read from the file.
std::uint64_t min_size(ValueType t) {
  if (t == ValueType::string) return 8;
  if (t == ValueType::array) return 12;
  return fixed_size(t);
}

bool is_integer(ValueType t) {
  return fixed_size(t) > 0 && t != ValueType::f32 && t != ValueType::f64 && t != ValueType::boolean;
}

// A bounds-checked little-endian cursor over the mapped file. `context` says what is being
// read ("tensor info #3 'blk.0.attn_q.weight'") for the truncation message.
class Cursor {
 public:
  Cursor(const std::string& path, const std::uint8_t* data, std::uint64_t size, std::uint64_t pos = 0)
      : path_(path), data_(data), size_(size), pos_(pos) {}

  std::uint64_t pos() const { return pos_; }
  std::uint64_t remaining() const { return size_ - pos_; }
  void set_context(std::string context) { context_ = std::move(context); }

  const std::uint8_t* take(std::uint64_t n, const char* what) {
    if (n > remaining())
      throw Error(str(path_, ": truncated file: ", context_, context_.empty() ? "" : ": ", what, " at offset ",
                      pos_, " needs ", n, " bytes but only ", remaining(), " remain (file size ", size_, ")"));
    const std::uint8_t* p = data_ + pos_;
    pos_ += n;
    return p;
  }
  template <class T>
  T read(const char* what) {
    T v;
    std::memcpy(&v, take(sizeof(T), what), sizeof(T));
    return v;
  }
  std::string_view read_string(const char* what) {
    const auto n = read<std::uint64_t>(what);
    return {reinterpret_cast<const char*>(take(n, what)), static_cast<std::size_t>(n)};
  }
  [[noreturn]] void fail(const std::string& problem) const {
    throw Error(str(path_, ": ", context_, context_.empty() ? "" : ": ", problem));
  }
  // Fails unless `count` elements of at least `each` bytes can still fit.
  void check_count(std::uint64_t count, std::uint64_t each, const char* what) {
    if (each > 0 && count > remaining() / each)
      throw Error(str(path_, ": ", context_, context_.empty() ? "" : ": ", what, " ", count, " at offset ", pos_,
                      " cannot fit in the ", remaining(), " bytes left in the file (file size ", size_, ")"));
  }

 private:
  const std::string& path_;
  const std::uint8_t* data_;
  std::uint64_t size_;
  std::uint64_t pos_;
  std::string context_;
};

// Where one metadata value lies in the mapping: `pos` is the first byte of the value (for
// arrays: of the first element, after the element type and count).
struct Value {
  ValueType type = ValueType::u8;
  ValueType elem = ValueType::u8;  // arrays only
  std::uint64_t count = 0;         // arrays only
  std::uint64_t pos = 0;
};

ValueType read_value_type(Cursor& c, const char* what) {
  const auto t = c.read<std::uint32_t>(what);
  if (t >= kValueTypeCount) c.fail(str("unknown value type ", t, " at offset ", c.pos() - 4));
  return static_cast<ValueType>(t);
}

// Moves the cursor over one value of type t, checking every length on the way.
void skip_value(Cursor& c, ValueType t, int depth);

void skip_array_body(Cursor& c, ValueType elem, std::uint64_t count, int depth) {
  c.check_count(count, min_size(elem), "array length");
  if (fixed_size(elem) > 0) {
    c.take(count * fixed_size(elem), "array elements");
    return;
  }
  for (std::uint64_t i = 0; i < count; ++i) skip_value(c, elem, depth);
}

void skip_value(Cursor& c, ValueType t, int depth) {
  if (t == ValueType::string) {
    c.read_string("string");
  } else if (t == ValueType::array) {
    if (depth >= kMaxArrayDepth)
      c.fail(str("arrays nested deeper than ", kMaxArrayDepth, " levels at offset ", c.pos()));
    const ValueType elem = read_value_type(c, "array element type");
    skip_array_body(c, elem, c.read<std::uint64_t>("array length"), depth + 1);
  } else {
    c.take(fixed_size(t), value_type_name(t));
  }
}

// Reads one key's value header and skips its body; the Value points at the body.
Value parse_value(Cursor& c) {
  Value v;
  v.type = read_value_type(c, "value type");
  if (v.type == ValueType::array) {
    v.elem = read_value_type(c, "array element type");
    v.count = c.read<std::uint64_t>("array length");
    v.pos = c.pos();
    skip_array_body(c, v.elem, v.count, 1);
  } else {
    v.pos = c.pos();
    skip_value(c, v.type, 0);
  }
  return v;
}

// A signed value's two's-complement bits, sign-extended to 64.
template <class Signed>
std::uint64_t sign_extend(std::uint64_t raw) {
  return static_cast<std::uint64_t>(static_cast<std::int64_t>(static_cast<Signed>(raw)));
}

// Integer value of type t at p, widened (u64 kept as its bit pattern).
std::uint64_t load_integer_bits(ValueType t, const std::uint8_t* p) {
  switch (t) {
    case ValueType::u8: return p[0];
    case ValueType::i8: return sign_extend<std::int8_t>(p[0]);
    case ValueType::u16: return load_u16(p);
    case ValueType::i16: return sign_extend<std::int16_t>(load_u16(p));
    case ValueType::u32: return load_u32(p);
    case ValueType::i32: return sign_extend<std::int32_t>(load_u32(p));
    default: {
      std::uint64_t v;
      std::memcpy(&v, p, 8);
      return v;
    }
  }
}

double load_real(ValueType t, const std::uint8_t* p) {
  if (t == ValueType::f32) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  double d;
  std::memcpy(&d, p, 8);
  return d;
}

std::string u128_string(unsigned __int128 v) {
  std::string s;
  do {
    s.insert(s.begin(), static_cast<char>('0' + static_cast<int>(v % 10)));
    v /= 10;
  } while (v != 0);
  return s;
}

}  // namespace

struct GgufFile::Impl {
  std::string path;
  std::unique_ptr<MappedFile> file;
  std::uint32_t version = 0;
  std::uint64_t alignment = kDefaultAlignment;
  std::uint64_t data_offset = 0;
  std::vector<std::pair<std::string, Value>> kvs;  // file order
  std::unordered_map<std::string, std::size_t> kv_index;
  std::vector<GgufTensorInfo> tensors;
  std::unordered_map<std::string, std::size_t> tensor_index;

  const std::uint8_t* bytes() const { return file->data(); }
  std::uint64_t size() const { return file->size(); }
  Cursor cursor_at(std::uint64_t pos) const { return Cursor(path, bytes(), size(), pos); }
  std::string where() const { return path + ": "; }

  void parse();
  void parse_header(Cursor& c, std::uint64_t* tensor_count, std::uint64_t* kv_count);
  void parse_metadata(Cursor& c, std::uint64_t kv_count);
  void parse_alignment();
  void parse_tensor_info(Cursor& c, std::uint64_t index);
  void check_tensor_data(const GgufTensorInfo& t) const;

  const Value& value(const std::string& key) const;
  [[noreturn]] void wrong_type(const std::string& key, const char* wanted) const;
  std::int64_t integer_at(const std::string& key, ValueType t, const std::uint8_t* p) const;
  double real_at(const std::string& key, ValueType t, const std::uint8_t* p) const;
  std::string type_name(const Value& v) const;
  std::string describe(const Value& v) const;
};

void GgufFile::Impl::parse_header(Cursor& c, std::uint64_t* tensor_count, std::uint64_t* kv_count) {
  c.set_context("header");
  const std::uint8_t* magic = c.take(4, "magic");
  if (std::memcmp(magic, "GGUF", 4) != 0)
    throw Error(str(where(), "bad magic '", std::string(reinterpret_cast<const char*>(magic), 4),
                    "' (expected 'GGUF'): not a GGUF file"));
  version = c.read<std::uint32_t>("version");
  if (__builtin_bswap32(version) == 2 || __builtin_bswap32(version) == 3)
    throw Error(str(where(), "big-endian GGUF files are not supported"));
  if (version != 2 && version != 3)
    throw Error(str(where(), "GGUF version ", version, " is not supported (only versions 2 and 3)"));
  *tensor_count = c.read<std::uint64_t>("tensor count");
  *kv_count = c.read<std::uint64_t>("metadata key count");
  // 24 bytes: the smallest tensor info (empty name, no dims, type, offset); 13: the smallest
  // key/value (empty key, type, one byte).
  c.check_count(*tensor_count, 24, "tensor count");
  c.check_count(*kv_count, 13, "metadata key count");
}

void GgufFile::Impl::parse_metadata(Cursor& c, std::uint64_t kv_count) {
  kvs.reserve(kv_count);
  for (std::uint64_t i = 0; i < kv_count; ++i) {
    c.set_context(str("metadata key #", i));
    std::string key(c.read_string("key"));
    c.set_context(str("metadata key #", i, " '", key, "'"));
    if (kv_index.count(key)) throw Error(str(where(), "duplicate metadata key '", key, "'"));
    Value v = parse_value(c);
    kv_index.emplace(key, kvs.size());
    kvs.emplace_back(std::move(key), v);
  }
}

void GgufFile::Impl::parse_alignment() {
  const auto it = kv_index.find("general.alignment");
  if (it == kv_index.end()) return;
  const Value& v = kvs[it->second].second;
  if (!is_integer(v.type)) throw Error(str(where(), "general.alignment is ", type_name(v), ", not an integer"));
  const std::int64_t a = integer_at("general.alignment", v.type, bytes() + v.pos);
  // At most 2^31 so that rounding an offset up cannot overflow.
  if (a <= 0 || a > (std::int64_t{1} << 31) || !std::has_single_bit(static_cast<std::uint64_t>(a)))
    throw Error(str(where(), "general.alignment ", a, " is not a power of two in [1, 2^31]"));
  alignment = static_cast<std::uint64_t>(a);
}

void GgufFile::Impl::parse_tensor_info(Cursor& c, std::uint64_t index) {
  c.set_context(str("tensor info #", index));
  GgufTensorInfo t;
  t.name = std::string(c.read_string("name"));
  const std::string label = str("tensor '", t.name, "'");
  c.set_context(str("tensor info #", index, " '", t.name, "'"));
  if (tensor_index.count(t.name)) throw Error(str(where(), "duplicate tensor name '", t.name, "'"));
  const auto n_dims = c.read<std::uint32_t>("n_dims");
  if (n_dims > kMaxDims) throw Error(str(where(), label, " has ", n_dims, " dimensions (at most ", kMaxDims, ")"));
  std::int64_t numel = 1;
  for (std::uint32_t d = 0; d < n_dims; ++d) {
    const auto dim = c.read<std::uint64_t>("dimension");
    if (dim == 0) throw Error(str(where(), label, " has a zero-size dimension ", d));
    if (dim > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) ||
        __builtin_mul_overflow(numel, static_cast<std::int64_t>(dim), &numel))
      throw Error(str(where(), label, ": dimension ", d, " (", dim, ") overflows the element count"));
    t.dims.push_back(static_cast<std::int64_t>(dim));
  }
  const auto type = c.read<std::uint32_t>("type");
  t.type = static_cast<GgufType>(type);
  if (!gguf_type_known(t.type)) throw Error(str(where(), label, " has unknown type ", type));
  const std::int64_t block_size = gguf_block_size(t.type);
  const std::int64_t row = t.dims.empty() ? 1 : t.dims[0];
  if (row % block_size != 0)
    throw Error(str(where(), label, " row length ", row, " is not a multiple of the ", gguf_type_name(t.type),
                    " block size ", block_size));
  std::int64_t bytes_needed;
  if (__builtin_mul_overflow(numel / block_size, gguf_type_bytes(t.type), &bytes_needed))
    throw Error(str(where(), label, ": data size overflows (", numel, " elements of ", gguf_type_name(t.type), ")"));
  t.bytes = static_cast<std::uint64_t>(bytes_needed);
  t.offset = c.read<std::uint64_t>("offset");
  tensor_index.emplace(t.name, tensors.size());
  tensors.push_back(std::move(t));
}

void GgufFile::Impl::check_tensor_data(const GgufTensorInfo& t) const {
  if (t.offset % alignment != 0)
    throw Error(str(where(), "tensor '", t.name, "' offset ", t.offset, " is not a multiple of the alignment ",
                    alignment));
  const unsigned __int128 begin = static_cast<unsigned __int128>(data_offset) + t.offset;
  const unsigned __int128 end = begin + t.bytes;
  if (end > size())
    throw Error(str(where(), "tensor '", t.name, "' data [", u128_string(begin), ", ", u128_string(end),
                    ") lies beyond the end of the file (", size(), " bytes)"));
}

void GgufFile::Impl::parse() {
  Cursor c = cursor_at(0);
  std::uint64_t tensor_count = 0, kv_count = 0;
  parse_header(c, &tensor_count, &kv_count);
  parse_metadata(c, kv_count);
  parse_alignment();
  tensors.reserve(tensor_count);
  for (std::uint64_t i = 0; i < tensor_count; ++i) parse_tensor_info(c, i);
  // Alignment <= 2^31 and pos <= file size, so this cannot overflow.
  data_offset = (c.pos() + alignment - 1) / alignment * alignment;
  for (const auto& t : tensors) check_tensor_data(t);
}

// ---- metadata access ----

const Value& GgufFile::Impl::value(const std::string& key) const {
  const auto it = kv_index.find(key);
  if (it == kv_index.end()) throw Error(str(where(), "metadata key '", key, "' is missing"));
  return kvs[it->second].second;
}

void GgufFile::Impl::wrong_type(const std::string& key, const char* wanted) const {
  throw Error(str(where(), "metadata key '", key, "' is ", type_name(value(key)), ", not ", wanted));
}

std::int64_t GgufFile::Impl::integer_at(const std::string& key, ValueType t, const std::uint8_t* p) const {
  const std::uint64_t bits = load_integer_bits(t, p);
  if (t == ValueType::u64 && bits > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
    throw Error(str(where(), "metadata key '", key, "' value ", bits, " does not fit in int64"));
  return static_cast<std::int64_t>(bits);
}

double GgufFile::Impl::real_at(const std::string& key, ValueType t, const std::uint8_t* p) const {
  if (t == ValueType::f32 || t == ValueType::f64) return load_real(t, p);
  if (t == ValueType::u64) return static_cast<double>(load_integer_bits(t, p));
  return static_cast<double>(integer_at(key, t, p));
}

std::string GgufFile::Impl::type_name(const Value& v) const {
  if (v.type != ValueType::array) return value_type_name(v.type);
  if (v.elem != ValueType::array) return str("array<", value_type_name(v.elem), ">");
  return "array<array>";
}

// ---- describe ----

namespace {

constexpr std::size_t kDescribeChars = 48;
constexpr std::uint64_t kDescribeItems = 3;

std::string quoted(std::string_view s) {
  std::string out = "\"";
  for (std::size_t i = 0; i < s.size() && i < kDescribeChars; ++i) {
    const auto ch = static_cast<unsigned char>(s[i]);
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += static_cast<char>(ch);
    } else if (ch < 0x20 || ch == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", ch);
      out += buf;
    } else {
      out += static_cast<char>(ch);
    }
  }
  if (s.size() > kDescribeChars) out += "...";
  return out + "\"";
}

// One value of type t at the cursor, printed (arrays summarised), cursor moved past it.
std::string describe_at(Cursor& c, ValueType t, int depth) {
  if (t == ValueType::string) return quoted(c.read_string("string"));
  if (t == ValueType::boolean) return c.read<std::uint8_t>("bool") ? "true" : "false";
  if (t == ValueType::f32 || t == ValueType::f64) return str(load_real(t, c.take(fixed_size(t), "real")));
  if (t != ValueType::array) {
    const std::uint64_t bits = load_integer_bits(t, c.take(fixed_size(t), "integer"));
    return t == ValueType::u64 ? str(bits) : str(static_cast<std::int64_t>(bits));
  }
  const ValueType elem = read_value_type(c, "array element type");
  const auto count = c.read<std::uint64_t>("array length");
  std::string out = str("array<", value_type_name(elem), ">[", count, "] [");
  for (std::uint64_t i = 0; i < count; ++i) {
    if (i == kDescribeItems) {
      out += ", ...";
      // Skip the rest without printing it.
      skip_array_body(c, elem, count - i, depth + 1);
      break;
    }
    out += (i ? ", " : "") + describe_at(c, elem, depth + 1);
  }
  return out + "]";
}

}  // namespace

std::string GgufFile::Impl::describe(const Value& v) const {
  Cursor c = cursor_at(v.pos);
  if (v.type != ValueType::array) return describe_at(c, v.type, 0);
  // The array header lies before v.pos: rewind over it (element type u32 + count u64).
  Cursor head = cursor_at(v.pos - 12);
  return describe_at(head, ValueType::array, 0);
}

// ============================================================================ GgufFile

std::int64_t GgufTensorInfo::numel() const {
  std::int64_t n = 1;
  for (const auto d : dims) n *= d;
  return n;
}

GgufFile GgufFile::open(const std::string& path) {
  auto impl = std::make_shared<Impl>();
  impl->path = path;
  try {
    impl->file = std::make_unique<MappedFile>(path);
  } catch (const Error& e) {
    throw Error(str(path, ": cannot open: ", e.what()));
  }
  impl->parse();
  return GgufFile(std::move(impl));
}

std::uint32_t GgufFile::version() const { return impl_->version; }
const std::string& GgufFile::path() const { return impl_->path; }
std::uint64_t GgufFile::data_offset() const { return impl_->data_offset; }
std::uint64_t GgufFile::alignment() const { return impl_->alignment; }

bool GgufFile::has(const std::string& key) const { return impl_->kv_index.count(key) > 0; }

std::string GgufFile::get_string(const std::string& key) const {
  const Value& v = impl_->value(key);
  if (v.type != ValueType::string) impl_->wrong_type(key, "a string");
  Cursor c = impl_->cursor_at(v.pos);
  return std::string(c.read_string("string"));
}

std::int64_t GgufFile::get_int(const std::string& key) const {
  const Value& v = impl_->value(key);
  if (!is_integer(v.type)) impl_->wrong_type(key, "an integer");
  return impl_->integer_at(key, v.type, impl_->bytes() + v.pos);
}

double GgufFile::get_float(const std::string& key) const {
  const Value& v = impl_->value(key);
  if (!is_integer(v.type) && v.type != ValueType::f32 && v.type != ValueType::f64) impl_->wrong_type(key, "a number");
  return impl_->real_at(key, v.type, impl_->bytes() + v.pos);
}

bool GgufFile::get_bool(const std::string& key) const {
  const Value& v = impl_->value(key);
  if (v.type != ValueType::boolean) impl_->wrong_type(key, "a bool");
  return impl_->bytes()[v.pos] != 0;
}

std::vector<std::string> GgufFile::get_string_array(const std::string& key) const {
  const Value& v = impl_->value(key);
  if (v.type != ValueType::array || v.elem != ValueType::string) impl_->wrong_type(key, "array<string>");
  Cursor c = impl_->cursor_at(v.pos);
  std::vector<std::string> out;
  out.reserve(v.count);  // open() checked that count strings fit in the file
  for (std::uint64_t i = 0; i < v.count; ++i) out.emplace_back(c.read_string("string"));
  return out;
}

std::vector<std::int64_t> GgufFile::get_int_array(const std::string& key) const {
  const Value& v = impl_->value(key);
  if (v.type != ValueType::array || !is_integer(v.elem)) impl_->wrong_type(key, "an integer array");
  const std::uint64_t each = fixed_size(v.elem);
  std::vector<std::int64_t> out(v.count);
  for (std::uint64_t i = 0; i < v.count; ++i)
    out[i] = impl_->integer_at(key, v.elem, impl_->bytes() + v.pos + i * each);
  return out;
}

std::vector<double> GgufFile::get_float_array(const std::string& key) const {
  const Value& v = impl_->value(key);
  if (v.type != ValueType::array || !(is_integer(v.elem) || v.elem == ValueType::f32 || v.elem == ValueType::f64))
    impl_->wrong_type(key, "a numeric array");
  const std::uint64_t each = fixed_size(v.elem);
  std::vector<double> out(v.count);
  for (std::uint64_t i = 0; i < v.count; ++i) out[i] = impl_->real_at(key, v.elem, impl_->bytes() + v.pos + i * each);
  return out;
}

std::vector<std::string> GgufFile::keys() const {
  std::vector<std::string> out;
  out.reserve(impl_->kvs.size());
  for (const auto& kv : impl_->kvs) out.push_back(kv.first);
  return out;
}

std::string GgufFile::type_of(const std::string& key) const { return impl_->type_name(impl_->value(key)); }

std::string GgufFile::describe(const std::string& key) const { return impl_->describe(impl_->value(key)); }

const std::vector<GgufTensorInfo>& GgufFile::tensors() const { return impl_->tensors; }

const GgufTensorInfo* GgufFile::find_tensor(const std::string& name) const {
  const auto it = impl_->tensor_index.find(name);
  return it == impl_->tensor_index.end() ? nullptr : &impl_->tensors[it->second];
}

const std::uint8_t* GgufFile::tensor_data(const GgufTensorInfo& info) const {
  return impl_->bytes() + impl_->data_offset + info.offset;
}

Tensor GgufFile::read_f32(const std::string& name) const {
  const GgufTensorInfo* info = find_tensor(name);
  DARK_CHECK(info != nullptr, impl_->where(), "no tensor named '", name, "'");
  DARK_CHECK(gguf_can_dequantize(info->type), impl_->where(), "tensor '", name, "' has type ",
             gguf_type_name(info->type), ", which cannot be dequantised (supported: ", gguf_dequantizable_types(), ")");
  Shape shape(info->dims.rbegin(), info->dims.rend());
  Tensor out = Tensor::empty(shape, DType::f32);
  dequantize(info->type, tensor_data(*info), info->bytes, info->numel(), out.data<float>());
  return out;
}

}  // namespace dark::data
