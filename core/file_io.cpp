// Durable file I/O: atomic writes, whole-file reads, memory maps, SHA-256. See file_io.h.
#include "core/file_io.h"

#include "core/sha256_hardware.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <system_error>
#include <vector>

namespace dark {

namespace fs = std::filesystem;

namespace detail {
void throw_io_error(const char* call, const fs::path& path, int error, const char* file, int line) {
  // Keep the source location short: "train/file_io.cpp" rather than the build's full path.
  const fs::path source(file);
  const std::string where = (source.parent_path().filename() / source.filename()).string();
  throw Error(str(call, "(", path.string(), "): ", std::strerror(error), " (", where, ":", line, ")"));
}
}  // namespace detail

namespace {

fs::path directory_of(const fs::path& path) {
  const fs::path parent = path.parent_path();
  return parent.empty() ? fs::path(".") : parent;
}

void close_quietly(int fd) {
  if (fd >= 0) ::close(fd);
}

}  // namespace

// ---------------------------------------------------------------- atomic writes
AtomicFileWriter::AtomicFileWriter(fs::path path) : path_(std::move(path)) {
  temp_ = path_;
  temp_ += ".tmp-" + std::to_string(::getpid());
  fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  DARK_IO_CHECK(fd_ >= 0, "open", temp_);
}

AtomicFileWriter::~AtomicFileWriter() {
  if (committed_) return;
  close_quietly(fd_);
  ::unlink(temp_.c_str());
}

void AtomicFileWriter::write(const void* data, std::size_t size) {
  DARK_CHECK(!committed_ && fd_ >= 0, "AtomicFileWriter: write after commit to ", path_.string());
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd_, p, size);
    if (n < 0 && errno == EINTR) continue;
    DARK_IO_CHECK(n > 0, "write", temp_);
    p += n;
    size -= static_cast<std::size_t>(n);
  }
}

void AtomicFileWriter::write_at(const void* data, std::size_t size, std::uint64_t offset) {
  DARK_CHECK(!committed_ && fd_ >= 0, "AtomicFileWriter: write after commit to ", path_.string());
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::pwrite(fd_, p, size, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    DARK_IO_CHECK(n > 0, "pwrite", temp_);
    p += n, offset += static_cast<std::uint64_t>(n);
    size -= static_cast<std::size_t>(n);
  }
}

void AtomicFileWriter::commit() {
  DARK_CHECK(!committed_, "AtomicFileWriter: ", path_.string(), " committed twice");
  DARK_IO_CHECK(::fsync(fd_) == 0, "fsync", temp_);
  const int fd = fd_;
  fd_ = -1;
  DARK_IO_CHECK(::close(fd) == 0, "close", temp_);
  DARK_IO_CHECK(::rename(temp_.c_str(), path_.c_str()) == 0, "rename", temp_);
  committed_ = true;
  fsync_directory(directory_of(path_));
}

void write_file_atomic(const fs::path& path, std::string_view bytes) {
  AtomicFileWriter writer(path);
  writer.write(bytes);
  writer.commit();
}

std::string read_file(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  DARK_IO_CHECK(fd >= 0, "open", path);
  std::string out;
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int error = errno;
      close_quietly(fd);
      detail::throw_io_error("read", path, error, __FILE__, __LINE__);
    }
    if (n == 0) break;
    out.append(buffer, static_cast<std::size_t>(n));
  }
  close_quietly(fd);
  return out;
}

void fsync_directory(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DARK_IO_CHECK(fd >= 0, "open", dir);
  const int rc = ::fsync(fd);
  const int error = errno;
  close_quietly(fd);
  if (rc != 0) detail::throw_io_error("fsync", dir, error, __FILE__, __LINE__);
}

// ---------------------------------------------------------------- scratch directories
ScratchDirectory::ScratchDirectory(const std::string& purpose) {
  std::error_code ec;
  const fs::path base = fs::temp_directory_path(ec);
  DARK_CHECK(!ec, "temp_directory_path: ", ec.message());
  std::string pattern = (base / ("darkformer-" + purpose + "-XXXXXX")).string();
  DARK_IO_CHECK(::mkdtemp(pattern.data()) != nullptr, "mkdtemp", fs::path(pattern));
  path_ = pattern;
}

ScratchDirectory::~ScratchDirectory() {
  std::error_code ignored;  // a destructor must not throw; a leftover folder in /tmp is harmless
  fs::remove_all(path_, ignored);
}

// ---------------------------------------------------------------- memory maps
MappedFile::MappedFile(const fs::path& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  DARK_IO_CHECK(fd >= 0, "open", path);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int error = errno;
    close_quietly(fd);
    detail::throw_io_error("fstat", path, error, __FILE__, __LINE__);
  }
  size_ = static_cast<std::size_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    const int error = errno;
    close_quietly(fd);
    if (p == MAP_FAILED) detail::throw_io_error("mmap", path, error, __FILE__, __LINE__);
    data_ = static_cast<const std::uint8_t*>(p);
  } else {
    close_quietly(fd);
  }
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<std::uint8_t*>(data_), size_);
}

// ---------------------------------------------------------------- SHA-256
namespace {

constexpr std::array<std::uint32_t, 64> kSha256Rounds = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

constexpr std::uint32_t rotr(std::uint32_t x, int n) {
  return (x >> n) | (x << (32 - n));
}


// One block, FIPS 180-4 as written.
void compress_portable(std::array<std::uint32_t, 8>& state, const std::uint8_t* block) {
  std::uint32_t w[64];
  for (int i = 0; i < 16; ++i) {
    w[i] = (std::uint32_t{block[4 * i]} << 24) | (std::uint32_t{block[4 * i + 1]} << 16) |
           (std::uint32_t{block[4 * i + 2]} << 8) | std::uint32_t{block[4 * i + 3]};
  }
  for (int i = 16; i < 64; ++i) {
    const std::uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
    const std::uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  std::uint32_t a = state[0], b = state[1], c = state[2], d = state[3];
  std::uint32_t e = state[4], f = state[5], g = state[6], h = state[7];
  for (int i = 0; i < 64; ++i) {
    const std::uint32_t s1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
    const std::uint32_t ch = (e & f) ^ (~e & g);
    const std::uint32_t t1 = h + s1 + ch + kSha256Rounds[i] + w[i];
    const std::uint32_t s0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
    const std::uint32_t maj = (a & b) ^ (a & c) ^ (b & c);
    const std::uint32_t t2 = s0 + maj;
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  state[0] += a;
  state[1] += b;
  state[2] += c;
  state[3] += d;
  state[4] += e;
  state[5] += f;
  state[6] += g;
  state[7] += h;
}

#if defined(__x86_64__)
// One block on the x86 SHA extensions: sha256rnds2 runs two rounds on the state held as ABEF and CDGH
// (high to low), sha256msg1 / sha256msg2 extend the message schedule four words at a time.
__attribute__((target("sha,sse4.1,ssse3"))) void compress_sha_extensions(std::array<std::uint32_t, 8>& state,
                                                                          const std::uint8_t* block) {
  const __m128i byte_swap = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);  // big-endian words
  __m128i abcd = _mm_loadu_si128(reinterpret_cast<const __m128i*>(&state[0]));
  __m128i efgh = _mm_loadu_si128(reinterpret_cast<const __m128i*>(&state[4]));
  abcd = _mm_shuffle_epi32(abcd, 0xB1);                    // B A D C
  efgh = _mm_shuffle_epi32(efgh, 0x1B);                    // H G F E
  __m128i abef = _mm_alignr_epi8(abcd, efgh, 8);           // F E B A: A in the high word
  __m128i cdgh = _mm_blend_epi16(efgh, abcd, 0xF0);        // H G D C
  const __m128i saved_abef = abef, saved_cdgh = cdgh;
  __m128i w[16];  // the schedule, four words each: w[j] = W[4j .. 4j + 3]
  for (int j = 0; j < 4; ++j)
    w[j] = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 16 * j)), byte_swap);
  for (int j = 4; j < 16; ++j)  // W[t] = s1(W[t-2]) + W[t-7] + s0(W[t-15]) + W[t-16]
    w[j] = _mm_sha256msg2_epu32(
        _mm_add_epi32(_mm_sha256msg1_epu32(w[j - 4], w[j - 3]), _mm_alignr_epi8(w[j - 1], w[j - 2], 4)), w[j - 1]);
  for (int j = 0; j < 16; ++j) {
    __m128i wk = _mm_add_epi32(w[j], _mm_loadu_si128(reinterpret_cast<const __m128i*>(&kSha256Rounds[4 * j])));
    cdgh = _mm_sha256rnds2_epu32(cdgh, abef, wk);  // rounds 4j, 4j + 1: the new ABEF
    wk = _mm_shuffle_epi32(wk, 0x0E);
    abef = _mm_sha256rnds2_epu32(abef, cdgh, wk);  // rounds 4j + 2, 4j + 3
  }
  abef = _mm_add_epi32(abef, saved_abef);
  cdgh = _mm_add_epi32(cdgh, saved_cdgh);
  const __m128i feba = _mm_shuffle_epi32(abef, 0x1B);      // A B E F
  const __m128i dchg = _mm_shuffle_epi32(cdgh, 0xB1);      // G H C D
  _mm_storeu_si128(reinterpret_cast<__m128i*>(&state[0]), _mm_blend_epi16(feba, dchg, 0xF0));  // A B C D
  _mm_storeu_si128(reinterpret_cast<__m128i*>(&state[4]), _mm_alignr_epi8(dchg, feba, 8));     // E F G H
}

bool cpu_has_sha_extensions() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_max(0, nullptr) < 7) return false;
  __cpuid(1, a, b, c, d);
  const bool sse41 = (c >> 19) & 1, ssse3 = (c >> 9) & 1;
  __cpuid_count(7, 0, a, b, c, d);
  return sse41 && ssse3 && ((b >> 29) & 1);
}
const bool kShaExtensions = cpu_has_sha_extensions();
#else
const bool kShaExtensions = false;
#endif
std::atomic<bool> use_sha_extensions{kShaExtensions};

}  // namespace

Sha256::Sha256()
    : state_{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19} {
}

bool sha256_hardware_available() { return kShaExtensions; }

bool sha256_use_hardware(bool on) { return use_sha_extensions.exchange(on && kShaExtensions); }

void Sha256::compress(const std::uint8_t* block) {
#if defined(__x86_64__)
  if (use_sha_extensions.load(std::memory_order_relaxed)) {
    compress_sha_extensions(state_, block);
    return;
  }
#endif
  compress_portable(state_, block);
}

void Sha256::update(const void* data, std::size_t size) {
  if (size == 0) return;
  const auto* p = static_cast<const std::uint8_t*>(data);
  total_bytes_ += size;
  if (buffered_ > 0) {
    const std::size_t take = std::min(size, 64 - buffered_);
    std::memcpy(buffer_.data() + buffered_, p, take);
    buffered_ += take;
    p += take;
    size -= take;
    if (buffered_ < 64) return;
    compress(buffer_.data());
    buffered_ = 0;
  }
  for (; size >= 64; p += 64, size -= 64) compress(p);
  std::memcpy(buffer_.data(), p, size);
  buffered_ = size;
}

std::string Sha256::hex_digest() {
  const std::uint64_t bit_length = total_bytes_ * 8;
  const std::uint8_t pad_start = 0x80;
  update(&pad_start, 1);
  const std::uint8_t zero = 0;
  while (buffered_ != 56) update(&zero, 1);
  std::uint8_t length_bytes[8];
  for (int i = 0; i < 8; ++i) length_bytes[i] = static_cast<std::uint8_t>(bit_length >> (56 - 8 * i));
  update(length_bytes, 8);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(64);
  for (const std::uint32_t word : state_) {
    for (int shift = 28; shift >= 0; shift -= 4) out.push_back(kHex[(word >> shift) & 0xf]);
  }
  return out;
}

std::string sha256_hex(const void* data, std::size_t size) {
  Sha256 hash;
  hash.update(data, size);
  return hash.hex_digest();
}

std::string sha256_file(const fs::path& path) {
  // Read in blocks rather than mapped: a mapped multi-GB checkpoint would count in the
  // process's resident set (and its peak) while it is hashed.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  DARK_IO_CHECK(fd >= 0, "open", path);
  Sha256 hash;
  std::vector<char> block(std::size_t{1} << 20);
  for (;;) {
    const ssize_t n = ::read(fd, block.data(), block.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      errno = err;
      DARK_IO_CHECK(n == 0, "read", path);
      break;
    }
    hash.update(block.data(), static_cast<std::size_t>(n));
  }
  return hash.hex_digest();
}

}  // namespace dark
