// A small GGUF writer for tests: builds version 2 or 3 files byte by byte (metadata of every
// value type, nested arrays, a custom general.alignment, tensors of any type from raw bytes)
// and reports where each field landed so tests can corrupt exactly one of them.
// Independent of data/gguf.cpp: it follows the published layout, nothing else.
#pragma once
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace dark::testing {

// GGUF metadata value types (the file format's numbering).
enum GgufValueTypeId : std::uint32_t {
  kGgufU8 = 0, kGgufI8, kGgufU16, kGgufI16, kGgufU32, kGgufI32, kGgufF32, kGgufBool, kGgufString,
  kGgufArray, kGgufU64, kGgufI64, kGgufF64,
};

// Little-endian byte sink.
struct ByteSink {
  std::string bytes;
  template <class T>
  void put(T v) {
    char raw[sizeof(T)];
    std::memcpy(raw, &v, sizeof(T));
    bytes.append(raw, sizeof(T));
  }
  void put_string(const std::string& s) {
    put<std::uint64_t>(s.size());
    bytes += s;
  }
};

// Where the writer put things (byte offsets in the file).
struct GgufLayout {
  std::string bytes;
  std::size_t kv_begin = 0;                   // first metadata key
  std::vector<std::size_t> tensor_info_pos;   // each tensor info's name length
  std::vector<std::size_t> type_field_pos;    // each tensor info's type
  std::vector<std::size_t> offset_field_pos;  // each tensor info's offset
  std::size_t infos_end = 0;                  // end of the tensor infos
  std::size_t data_offset = 0;                // start of the data section
  std::vector<std::uint64_t> offsets;         // tensor offsets from data_offset
};

class GgufTestWriter {
 public:
  explicit GgufTestWriter(std::uint32_t version = 3) : version_(version) {}

  // One key/value: `payload` is the encoded value after its type.
  void kv_raw(const std::string& key, std::uint32_t type, const std::string& payload) {
    ByteSink s;
    s.put_string(key);
    s.put<std::uint32_t>(type);
    s.bytes += payload;
    kvs_.push_back(s.bytes);
  }
  template <class T>
  void kv(const std::string& key, std::uint32_t type, T v) {
    ByteSink s;
    s.put(v);
    kv_raw(key, type, s.bytes);
  }
  void kv_string(const std::string& key, const std::string& v) {
    ByteSink s;
    s.put_string(v);
    kv_raw(key, kGgufString, s.bytes);
  }
  template <class T>
  static std::string array_payload(std::uint32_t elem, const std::vector<T>& items) {
    ByteSink s;
    s.put<std::uint32_t>(elem);
    s.put<std::uint64_t>(items.size());
    for (const auto& v : items) s.put(v);
    return s.bytes;
  }
  static std::string string_array_payload(const std::vector<std::string>& items) {
    ByteSink s;
    s.put<std::uint32_t>(kGgufString);
    s.put<std::uint64_t>(items.size());
    for (const auto& v : items) s.put_string(v);
    return s.bytes;
  }
  // An array of arrays: each of `payloads` is an array_payload (element type + count + items).
  static std::string nested_array_payload(const std::vector<std::string>& payloads) {
    ByteSink s;
    s.put<std::uint32_t>(kGgufArray);
    s.put<std::uint64_t>(payloads.size());
    for (const auto& p : payloads) s.bytes += p;
    return s.bytes;
  }
  void alignment(std::uint32_t a) {
    alignment_ = a;
    kv<std::uint32_t>("general.alignment", kGgufU32, a);
  }

  void tensor(const std::string& name, const std::vector<std::uint64_t>& dims, std::uint32_t type,
              const std::string& data) {
    tensors_.push_back({name, dims, type, data});
  }

  // The whole file. Tensors are laid out in order, each at the next aligned offset; no
  // padding follows the last one, so cutting any byte off the end damages it.
  GgufLayout build() const {
    GgufLayout L;
    ByteSink s;
    s.bytes += "GGUF";
    s.put<std::uint32_t>(version_);
    s.put<std::uint64_t>(tensors_.size());
    s.put<std::uint64_t>(kvs_.size());
    L.kv_begin = s.bytes.size();
    for (const auto& kv : kvs_) s.bytes += kv;
    std::uint64_t offset = 0;
    for (const auto& t : tensors_) {
      L.tensor_info_pos.push_back(s.bytes.size());
      s.put_string(t.name);
      s.put<std::uint32_t>(static_cast<std::uint32_t>(t.dims.size()));
      for (auto d : t.dims) s.put<std::uint64_t>(d);
      L.type_field_pos.push_back(s.bytes.size());
      s.put<std::uint32_t>(t.type);
      L.offset_field_pos.push_back(s.bytes.size());
      s.put<std::uint64_t>(offset);
      L.offsets.push_back(offset);
      offset = align(offset + t.data.size());
    }
    L.infos_end = s.bytes.size();
    L.data_offset = align(s.bytes.size());
    s.bytes.resize(L.data_offset, '\0');
    for (std::size_t i = 0; i < tensors_.size(); ++i) {
      s.bytes.resize(L.data_offset + L.offsets[i], '\0');
      s.bytes += tensors_[i].data;
    }
    L.bytes = s.bytes;
    return L;
  }

 private:
  struct PendingTensor {
    std::string name;
    std::vector<std::uint64_t> dims;
    std::uint32_t type;
    std::string data;
  };
  std::uint64_t align(std::uint64_t n) const { return (n + alignment_ - 1) / alignment_ * alignment_; }

  std::uint32_t version_;
  std::uint64_t alignment_ = 32;
  std::vector<std::string> kvs_;
  std::vector<PendingTensor> tensors_;
};

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace dark::testing
