// Checks the differentiable ops of autograd/ops.h against PyTorch: forward values and the
// gradients of sum(out * dout) for a random dout, read from tests/reference/ops_v1.bin
// (written by tests/reference/gen_ops.py; no expected number lives in this file).
//
// For every case named in the file, case_table() below rebuilds the same computation with
// darkformer ops. Each case runs twice:
//   TorchReferenceF64/<case>: float64 forward and every input gradient, within
//     |got - want| <= 1e-12 + 1e-10 * |want|. Differences left are rounding order only
//     (summation order, libm vs. torch's vectorised exp/log/erf, ~1 ulp each).
//   TorchReferenceF32/<case>: the float inputs converted with .to(DType::f32) (the
//     production dtype), forward only, against the float64 reference within
//     |got - want| <= 1e-5 + 1e-5 * |want|: float32 rounding of inputs and arithmetic
//     (~6e-8 relative per step) over at most ~33-term sums. gen_ops.py asserts that torch's
//     own float32 forward meets this bound for every case. The atol matters: a float32
//     sum whose terms cancel has a tiny output with a large relative error.
// Measured on the CPU backend when written: worst f64 error 3.6e-15 absolute (over 250x
// inside the bound), worst f32 error 2.4e-6 absolute (exp near 20), so neither is loosened.
// TorchReference.FileHasExpectedCases fails on a missing, truncated or stale file, or when
// the file and case_table() disagree about the case names.
//
// File format ops_v1.bin (little-endian; documented in full at the top of gen_ops.py):
//   header:  "DKREF" (5 bytes), version u32 (= 1), n_cases u32
//   case:    name_len u32, name utf-8, n_tensors u32, tensors
//   tensor:  role u8 (0 input, 1 output, 2 dout, 3 grad), slot u32 (the input index for
//            input and grad; 0 otherwise), dtype u8 (0 f64, 1 i64), rank u32,
//            dims i64[rank], data (numel * 8 bytes)
//   trailer: "DKEND" (5 bytes)
// A float input with a grad tensor requires grad; the others (i64 ids, 0/1 masks) do not.
//
// Regenerate (needs Debian's python3-torch; CI never does): /usr/bin/python3 tests/reference/gen_ops.py
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "autograd/tape.h"
#include "core/tensor.h"

// tests/CMakeLists.txt sets DARK_TEST_DATA_DIR to the absolute tests/reference/; the
// fallback serves a build by hand run from the repository root.
#ifndef DARK_TEST_DATA_DIR
#define DARK_TEST_DATA_DIR "tests/reference"
#endif

namespace {

using dark::DType;
using dark::Shape;
using dark::Tensor;

static_assert(std::endian::native == std::endian::little, "ops_v1.bin is little-endian");

constexpr char kMagic[] = "DKREF";
constexpr char kTrailer[] = "DKEND";
constexpr std::uint32_t kVersion = 1;
// Bump together with gen_ops.py when cases are added or removed.
constexpr std::size_t kExpectedCases = 58;
constexpr const char* kRegenerate = "/usr/bin/python3 tests/reference/gen_ops.py";
const std::string kPath = std::string(DARK_TEST_DATA_DIR) + "/ops_v1.bin";

struct Tolerance {
  double rtol;
  double atol;
};
constexpr Tolerance kF64Tol{1e-10, 1e-12};
constexpr Tolerance kF32Tol{1e-5, 1e-5};

// ---------------------------------------------------------------------------------------
// Reading the file
// ---------------------------------------------------------------------------------------
enum class Role : std::uint8_t { input = 0, output = 1, dout = 2, grad = 3 };

struct RefTensor {
  Role role = Role::input;
  std::uint32_t slot = 0;
  bool is_i64 = false;
  Shape shape;
  std::vector<double> f64;
  std::vector<std::int64_t> i64;

  Tensor make() const {
    return is_i64 ? Tensor::from_vector<std::int64_t>(i64, shape)
                  : Tensor::from_vector<double>(f64, shape);
  }
};

struct RefCase {
  std::string name;
  std::vector<RefTensor> inputs;
  RefTensor output;
  std::optional<RefTensor> dout;
  std::map<std::uint32_t, RefTensor> grads;  // by input slot
};

struct RefFile {
  std::string error;  // empty when the file was read completely
  std::uint32_t version = 0;
  std::vector<RefCase> cases;

  const RefCase* find(const std::string& name) const {
    for (const RefCase& c : cases)
      if (c.name == name) return &c;
    return nullptr;
  }
};

class Reader {
 public:
  explicit Reader(std::vector<char> bytes) : bytes_(std::move(bytes)) {}

  void bytes(void* dst, std::size_t n, const char* what) {
    if (n > bytes_.size() - pos_) {
      std::ostringstream os;
      os << "truncated at byte " << pos_ << " of " << bytes_.size() << " reading " << what
         << " (" << n << " bytes)";
      throw std::runtime_error(os.str());
    }
    std::memcpy(dst, bytes_.data() + pos_, n);
    pos_ += n;
  }
  template <class T>
  T pod(const char* what) {
    T v;
    bytes(&v, sizeof(T), what);
    return v;
  }
  std::size_t pos() const { return pos_; }
  std::size_t size() const { return bytes_.size(); }

 private:
  std::vector<char> bytes_;
  std::size_t pos_ = 0;
};

RefTensor read_tensor(Reader& r) {
  RefTensor t;
  const auto role = r.pod<std::uint8_t>("role");
  if (role > 3) throw std::runtime_error("bad role tag " + std::to_string(role));
  t.role = static_cast<Role>(role);
  t.slot = r.pod<std::uint32_t>("slot");
  const auto dtype = r.pod<std::uint8_t>("dtype");
  if (dtype > 1) throw std::runtime_error("bad dtype tag " + std::to_string(dtype));
  t.is_i64 = dtype == 1;
  const auto rank = r.pod<std::uint32_t>("rank");
  if (rank > 8) throw std::runtime_error("implausible rank " + std::to_string(rank));
  std::int64_t n = 1;
  for (std::uint32_t i = 0; i < rank; ++i) {
    const auto d = r.pod<std::int64_t>("dim");
    if (d < 0 || d > (1 << 24)) throw std::runtime_error("implausible dim " + std::to_string(d));
    t.shape.push_back(d);
    n *= d;
  }
  if (n > (1 << 24)) throw std::runtime_error("implausible numel " + std::to_string(n));
  if (t.is_i64) {
    t.i64.resize(static_cast<std::size_t>(n));
    r.bytes(t.i64.data(), t.i64.size() * 8, "i64 data");
  } else {
    t.f64.resize(static_cast<std::size_t>(n));
    r.bytes(t.f64.data(), t.f64.size() * 8, "f64 data");
  }
  return t;
}

RefFile read_file(const std::string& path) {
  RefFile file;
  try {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("cannot open");
    Reader r(std::vector<char>(std::istreambuf_iterator<char>(in), {}));
    char magic[5];
    r.bytes(magic, 5, "magic");
    if (std::memcmp(magic, kMagic, 5) != 0) throw std::runtime_error("bad magic (want DKREF)");
    file.version = r.pod<std::uint32_t>("version");
    if (file.version != kVersion)
      throw std::runtime_error("version " + std::to_string(file.version) + ", this test reads " +
                               std::to_string(kVersion));
    const auto n_cases = r.pod<std::uint32_t>("case count");
    for (std::uint32_t c = 0; c < n_cases; ++c) {
      RefCase rc;
      const auto len = r.pod<std::uint32_t>("name length");
      if (len > 256) throw std::runtime_error("implausible name length");
      rc.name.resize(len);
      r.bytes(rc.name.data(), len, "name");
      const auto n_tensors = r.pod<std::uint32_t>("tensor count");
      bool have_output = false;
      for (std::uint32_t i = 0; i < n_tensors; ++i) {
        RefTensor t = read_tensor(r);
        const std::string where = "case " + rc.name + " tensor " + std::to_string(i);
        switch (t.role) {
          case Role::input:
            if (t.slot != rc.inputs.size()) throw std::runtime_error(where + ": input slot out of order");
            rc.inputs.push_back(std::move(t));
            break;
          case Role::output:
            if (have_output || t.is_i64) throw std::runtime_error(where + ": bad output");
            rc.output = std::move(t);
            have_output = true;
            break;
          case Role::dout:
            if (rc.dout || t.is_i64) throw std::runtime_error(where + ": bad dout");
            rc.dout = std::move(t);
            break;
          case Role::grad: {
            const std::uint32_t s = t.slot;
            if (s >= rc.inputs.size() || rc.inputs[s].is_i64 || rc.grads.count(s) || t.is_i64)
              throw std::runtime_error(where + ": bad grad slot");
            rc.grads.emplace(s, std::move(t));
            break;
          }
        }
      }
      if (!have_output) throw std::runtime_error("case " + rc.name + " has no output");
      if (rc.grads.empty() != !rc.dout)
        throw std::runtime_error("case " + rc.name + ": dout present iff grads present");
      file.cases.push_back(std::move(rc));
    }
    char trailer[5];
    r.bytes(trailer, 5, "trailer");
    if (std::memcmp(trailer, kTrailer, 5) != 0) throw std::runtime_error("bad trailer (want DKEND)");
    if (r.pos() != r.size())
      throw std::runtime_error(std::to_string(r.size() - r.pos()) + " bytes after the trailer");
  } catch (const std::exception& e) {
    file.error = path + ": " + e.what() + ". Regenerate with: " + kRegenerate;
  }
  return file;
}

const RefFile& reference() {
  static const RefFile file = read_file(kPath);
  return file;
}

// ---------------------------------------------------------------------------------------
// The computations, by case name (the same ones as in gen_ops.py)
// ---------------------------------------------------------------------------------------
using In = std::vector<Tensor>;
using CaseFn = std::function<Tensor(const In&)>;

struct CaseDef {
  const char* name;
  CaseFn fn;
};

Tensor mlp_cross_entropy(const In& in) {
  const Tensor &x = in[0], &w1 = in[1], &b1 = in[2], &w2 = in[3], &b2 = in[4], &t = in[5];
  Tensor logits = dark::matmul(dark::gelu(dark::matmul(x, w1) + b1), w2) + b2;
  Tensor logp = dark::log_softmax(logits, -1);
  const std::int64_t rows = logp.size(0), classes = logp.size(1);
  // gather(logp, 1, t) as index_select on the flattened log-probs at row * C + t[row].
  std::vector<std::int64_t> targets = t.to_vector<std::int64_t>();
  std::vector<std::int64_t> flat_index(targets.size());
  for (std::size_t i = 0; i < targets.size(); ++i)
    flat_index[i] = static_cast<std::int64_t>(i) * classes + targets[i];
  Tensor index = Tensor::from_vector<std::int64_t>(flat_index, {rows});
  Tensor picked = dark::index_select(dark::reshape(logp, {rows * classes}), 0, index);
  return -dark::mean(picked);
}

Tensor layernorm(const In& in) {
  const Tensor &x = in[0], &gamma = in[1], &beta = in[2];
  Tensor mu = dark::mean(x, {-1}, true);
  Tensor xc = x - mu;
  Tensor var = dark::mean(dark::square(xc), {-1}, true);
  return xc * dark::rsqrt(var + 1e-5) * gamma + beta;
}

Tensor causal_attention(const In& in) {
  const Tensor &q = in[0], &k = in[1], &v = in[2], &mask = in[3];
  Tensor s = dark::mul_scalar(dark::matmul(q, k, false, true), 1.0 / std::sqrt(7.0));
  s = dark::masked_fill(s, mask, -1e9);
  return dark::matmul(dark::softmax(s, -1), v);
}

const std::vector<CaseDef>& case_table() {
  static const std::vector<CaseDef> table = {
      // ---- linear algebra ----
      {"matmul_5x7_7x3", [](const In& in) { return dark::matmul(in[0], in[1]); }},
      {"matmul_trans_a_k33", [](const In& in) { return dark::matmul(in[0], in[1], true, false); }},
      {"matmul_trans_b", [](const In& in) { return dark::matmul(in[0], in[1], false, true); }},
      {"matmul_trans_ab_batch", [](const In& in) { return dark::matmul(in[0], in[1], true, true); }},
      {"matmul_broadcast_batch", [](const In& in) { return dark::matmul(in[0], in[1]); }},
      // ---- elementwise binary ----
      {"add_broadcast", [](const In& in) { return dark::add(in[0], in[1]); }},
      {"sub_broadcast", [](const In& in) { return dark::sub(in[0], in[1]); }},
      {"mul_broadcast", [](const In& in) { return dark::mul(in[0], in[1]); }},
      {"div_broadcast", [](const In& in) { return dark::div(in[0], in[1]); }},
      {"pow_broadcast", [](const In& in) { return dark::pow(in[0], in[1]); }},
      {"maximum_broadcast", [](const In& in) { return dark::maximum(in[0], in[1]); }},
      {"minimum_broadcast", [](const In& in) { return dark::minimum(in[0], in[1]); }},
      {"compare_ops",
       [](const In& in) {
         const Tensor &a = in[0], &b = in[1], &c = in[2];
         return dark::lt(a, b) + dark::le(a, c) * 2.0 + dark::gt(a, b) * 4.0 +
                dark::ge(a, c) * 8.0 + dark::eq(a, c) * 16.0 + dark::ne(a, b) * 32.0;
       }},
      // ---- elementwise unary ----
      {"exp", [](const In& in) { return dark::exp(in[0]); }},
      {"log", [](const In& in) { return dark::log(in[0]); }},
      {"sqrt", [](const In& in) { return dark::sqrt(in[0]); }},
      {"rsqrt", [](const In& in) { return dark::rsqrt(in[0]); }},
      {"tanh", [](const In& in) { return dark::tanh(in[0]); }},
      {"sigmoid", [](const In& in) { return dark::sigmoid(in[0]); }},
      {"silu", [](const In& in) { return dark::silu(in[0]); }},
      {"gelu", [](const In& in) { return dark::gelu(in[0]); }},
      {"gelu_tanh", [](const In& in) { return dark::gelu_tanh(in[0]); }},
      {"relu", [](const In& in) { return dark::relu(in[0]); }},
      {"neg", [](const In& in) { return dark::neg(in[0]); }},
      {"abs", [](const In& in) { return dark::abs(in[0]); }},
      {"square", [](const In& in) { return dark::square(in[0]); }},
      {"sin", [](const In& in) { return dark::sin(in[0]); }},
      {"cos", [](const In& in) { return dark::cos(in[0]); }},
      {"reciprocal", [](const In& in) { return dark::reciprocal(in[0]); }},
      {"add_scalar", [](const In& in) { return dark::add_scalar(in[0], 0.75); }},
      {"mul_scalar", [](const In& in) { return dark::mul_scalar(in[0], -1.25); }},
      {"pow_scalar", [](const In& in) { return dark::pow_scalar(in[0], 1.7); }},
      // ---- reductions ----
      {"sum_axes02_keepdim", [](const In& in) { return dark::sum(in[0], {0, 2}, true); }},
      {"sum_all", [](const In& in) { return dark::sum(in[0]); }},
      {"mean_axis1", [](const In& in) { return dark::mean(in[0], {1}); }},
      {"max_last_keepdim", [](const In& in) { return dark::max(in[0], {-1}, true); }},
      {"max_ties", [](const In& in) { return dark::max(in[0], {2}); }},
      {"min_axis0_via_reduce",
       [](const In& in) { return dark::reduce(dark::ReduceOp::min, in[0], {0}, false); }},
      {"logsumexp_axis1_keepdim", [](const In& in) { return dark::logsumexp(in[0], {1}, true); }},
      {"logsumexp_axes02", [](const In& in) { return dark::logsumexp(in[0], {0, 2}); }},
      {"sum_to", [](const In& in) { return dark::sum_to(in[0], {5, 1}); }},
      // ---- softmax ----
      {"softmax_last", [](const In& in) { return dark::softmax(in[0], -1); }},
      {"softmax_mid_axis", [](const In& in) { return dark::softmax(in[0], 1); }},
      {"log_softmax_last", [](const In& in) { return dark::log_softmax(in[0], -1); }},
      {"log_softmax_mid_axis", [](const In& in) { return dark::log_softmax(in[0], -2); }},
      // ---- views and layout ----
      {"views_chain",
       [](const In& in) {
         Tensor y = dark::permute(in[0], {2, 0, 1});  // (7, 3, 5)
         y = dark::reshape(y, {7, 15});               // not viewable: copies
         y = dark::unsqueeze(dark::transpose(y, 0, 1), 0);
         y = dark::expand(y, {2, 15, 7});
         return y * dark::squeeze(in[1], 3);
       }},
      {"slice_step_negative",
       [](const In& in) { return dark::slice(dark::slice(in[0], 1, 1, 7, 2), 2, -4, 5); }},
      {"cast_roundtrip",
       [](const In& in) {
         Tensor t = dark::contiguous(dark::transpose(in[0], 0, 1));
         return dark::to_dtype(dark::to_dtype(t, DType::f32), in[0].dtype());
       }},
      // ---- indexing ----
      {"embedding_repeated_ids", [](const In& in) { return dark::embedding(in[0], in[1]); }},
      {"index_select_axis1", [](const In& in) { return dark::index_select(in[0], 1, in[1]); }},
      {"concat_axis1", [](const In& in) { return dark::concat({in[0], in[1], in[2]}, 1); }},
      {"split_reorder",
       [](const In& in) {
         std::vector<Tensor> p = dark::split(in[0], {2, 3, 2}, 1);
         return dark::concat({p.at(2), p.at(0), dark::square(p.at(1))}, 1);
       }},
      {"cumsum_axis1", [](const In& in) { return dark::cumsum(in[0], 1); }},
      {"where_broadcast3", [](const In& in) { return dark::where(in[0], in[1], in[2]); }},
      {"masked_fill_broadcast", [](const In& in) { return dark::masked_fill(in[0], in[1], -2.5); }},
      // ---- composites ----
      {"mlp_cross_entropy", mlp_cross_entropy},
      {"layernorm", layernorm},
      {"causal_attention", causal_attention},
  };
  return table;
}

std::vector<std::string> case_names() {
  std::vector<std::string> names;
  for (const CaseDef& c : case_table()) names.emplace_back(c.name);
  return names;
}

const CaseFn* find_fn(const std::string& name) {
  for (const CaseDef& c : case_table())
    if (name == c.name) return &c.fn;
  return nullptr;
}

// ---------------------------------------------------------------------------------------
// Comparison
// ---------------------------------------------------------------------------------------
std::string index_str(std::int64_t flat, const Shape& shape) {
  std::vector<std::int64_t> idx(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    idx[d] = shape[d] ? flat % shape[d] : 0;
    flat = shape[d] ? flat / shape[d] : 0;
  }
  std::string s = "[";
  for (std::size_t d = 0; d < idx.size(); ++d) s += (d ? ", " : "") + std::to_string(idx[d]);
  return s + "]";
}

// Adds a failure (with max errors, the first bad elements and the regenerate command) when
// `got` differs from `want` in shape, dtype or beyond tol.
void expect_close(const std::string& what, const Tensor& got, const RefTensor& want,
                  DType want_dtype, Tolerance tol) {
  if (!got.defined()) {
    ADD_FAILURE() << what << ": undefined tensor, want f64" << dark::shape_str(want.shape);
    return;
  }
  if (got.shape() != want.shape || got.dtype() != want_dtype) {
    ADD_FAILURE() << what << ": got " << got.describe() << ", want " << dark::dtype_name(want_dtype)
                  << dark::shape_str(want.shape);
    return;
  }
  const std::vector<double> g = got.to(DType::f64).to_vector<double>();
  const std::vector<double>& w = want.f64;
  double max_abs = 0, max_rel = 0;
  std::int64_t bad = 0;
  std::ostringstream first;
  first.precision(17);
  for (std::size_t i = 0; i < w.size(); ++i) {
    const double err = std::fabs(g[i] - w[i]);
    const bool ok = err <= tol.atol + tol.rtol * std::fabs(w[i]);  // false for NaN
    const double rel = w[i] != 0 ? err / std::fabs(w[i]) : (err == 0 ? 0 : INFINITY);
    if (!(err <= max_abs)) max_abs = err;  // propagates NaN
    if (!(rel <= max_rel)) max_rel = rel;
    if (!ok && bad++ < 5)
      first << "\n    " << index_str(static_cast<std::int64_t>(i), want.shape) << ": got " << g[i]
            << ", want " << w[i] << " (abs err " << err << ")";
  }
  std::ostringstream bound;  // default precision: "1e-12", not gtest's 17 digits
  bound << "|got - want| <= " << tol.atol << " + " << tol.rtol << " * |want|";
  if (bad > 0)
    ADD_FAILURE() << what << ": " << bad << " of " << w.size() << " elements outside "
                  << bound.str() << "; max abs err " << max_abs << ", max rel err " << max_rel
                  << "; first bad elements:" << first.str()
                  << "\n  (if the reference is stale, regenerate: " << kRegenerate << ")";
}

// The case's file entry and computation; adds a failure and returns false if either is missing.
bool lookup(const std::string& name, const RefCase*& rc, const CaseFn*& fn) {
  const RefFile& file = reference();
  if (!file.error.empty()) {
    ADD_FAILURE() << file.error;
    return false;
  }
  rc = file.find(name);
  fn = find_fn(name);
  if (rc == nullptr)
    ADD_FAILURE() << "case " << name << " is not in " << kPath << "; regenerate: " << kRegenerate;
  return rc != nullptr && fn != nullptr;
}

class TorchReferenceF64 : public ::testing::TestWithParam<std::string> {};
class TorchReferenceF32 : public ::testing::TestWithParam<std::string> {};

TEST_P(TorchReferenceF64, ForwardAndGradients) {
  const RefCase* rc = nullptr;
  const CaseFn* fn = nullptr;
  if (!lookup(GetParam(), rc, fn)) return;
  dark::clear_tape();
  std::vector<Tensor> inputs;
  for (const RefTensor& t : rc->inputs) {
    inputs.push_back(t.make());
    if (rc->grads.count(t.slot)) inputs.back().set_requires_grad(true);
  }
  const std::string name = rc->name + "(f64)";
  try {
    Tensor out = (*fn)(inputs);
    expect_close(name + " output", out, rc->output, DType::f64, kF64Tol);
    if (!rc->dout) return;  // forward-only case
    dark::backward(out, rc->dout->make());
    EXPECT_EQ(dark::tape_size(), 0u) << name << ": backward left entries on the tape";
    for (const auto& [slot, want] : rc->grads)
      expect_close(name + " grad of input " + std::to_string(slot) + " " +
                       dark::shape_str(rc->inputs[slot].shape),
                   inputs[slot].grad(), want, DType::f64, kF64Tol);
  } catch (const std::exception& e) {
    dark::clear_tape();
    ADD_FAILURE() << name << " threw: " << e.what();
  }
}

TEST_P(TorchReferenceF32, Forward) {
  const RefCase* rc = nullptr;
  const CaseFn* fn = nullptr;
  if (!lookup(GetParam(), rc, fn)) return;
  dark::clear_tape();
  std::vector<Tensor> inputs;
  for (const RefTensor& t : rc->inputs) inputs.push_back(t.is_i64 ? t.make() : t.make().to(DType::f32));
  const std::string name = rc->name + "(f32)";
  try {
    Tensor out = (*fn)(inputs);
    expect_close(name + " output vs the f64 reference", out, rc->output, DType::f32, kF32Tol);
    EXPECT_EQ(dark::tape_size(), 0u) << name << ": recorded although no input requires grad";
  } catch (const std::exception& e) {
    dark::clear_tape();
    ADD_FAILURE() << name << " threw: " << e.what();
  }
}

std::string param_name(const ::testing::TestParamInfo<std::string>& info) { return info.param; }

INSTANTIATE_TEST_SUITE_P(Ops, TorchReferenceF64, ::testing::ValuesIn(case_names()), param_name);
INSTANTIATE_TEST_SUITE_P(Ops, TorchReferenceF32, ::testing::ValuesIn(case_names()), param_name);

TEST(TorchReference, FileHasExpectedCases) {
  const RefFile& file = reference();
  ASSERT_TRUE(file.error.empty()) << file.error;
  EXPECT_EQ(file.version, kVersion);
  EXPECT_EQ(file.cases.size(), kExpectedCases)
      << kPath << " has the wrong number of cases; regenerate: " << kRegenerate;
  EXPECT_EQ(case_table().size(), kExpectedCases) << "case_table() and kExpectedCases disagree";
  std::set<std::string> in_file;
  for (const RefCase& c : file.cases) {
    EXPECT_TRUE(in_file.insert(c.name).second) << "duplicate case " << c.name;
    EXPECT_NE(find_fn(c.name), nullptr) << "case " << c.name << " in the file has no C++ computation";
  }
  std::set<std::string> in_table;
  for (const CaseDef& c : case_table()) {
    EXPECT_TRUE(in_table.insert(c.name).second) << "duplicate table entry " << c.name;
    EXPECT_TRUE(in_file.count(c.name)) << "case " << c.name << " is missing from the file";
  }
}

}  // namespace
