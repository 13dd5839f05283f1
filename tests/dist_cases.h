// The collective test cases every communicator backend runs (single and mpi in
// tests/mpi/collectives_main.cpp under mpirun and without it, nccl on one GPU in
// tests/test_dist_nccl.cpp), on the communicator's own device and world size.
//
// Data are exactly representable (nccl-tests' way): rank r's element i is a small integer
// (plus, for the integer dtypes, a per-rank offset no float type holds), so every sum and
// max over ranks is exact in f32, f64, bf16, i32 and i64, and every element is checked.
// Sizes include 0 (empty collectives), 1, odd sizes and one past a million elements.
//
// Every rank runs every case and issues the same collectives in the same order; checks use
// EXPECT (never ASSERT, which would return early on one rank and leave the others waiting
// in a collective). A failure message starts with the rank.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "core/backend.h"
#include "core/tensor.h"
#include "tests/test_util.h"
#include "train/dist/communicator.h"

namespace dark::testing::dist_cases {

using dist::Communicator;
using dist::ReduceOp;
using dist::Work;

inline const std::vector<DType> kDTypes = {DType::f32, DType::f64, DType::bf16, DType::i64, DType::i32};
inline const std::vector<std::int64_t> kSizes = {0, 1, 7, 1023, (std::int64_t{1} << 20) + 3};

// Rank r's value for global element g: integers in [-11, 11] (bf16 holds integers up to 256
// exactly, so sums over up to 23 ranks are exact), plus for i64 a multiple of 2^40 and for
// i32 a multiple of 100000 that no rounding to float would keep.
inline std::int64_t value(DType dtype, int rank, std::int64_t g) {
  const std::int64_t small = (g * 7 + rank * 5) % 23 - 11;
  if (dtype == DType::i64) return small + (std::int64_t{rank} + 1) * (std::int64_t{1} << 40);
  if (dtype == DType::i32) return small + (std::int64_t{rank} + 1) * 100000;
  return small;
}

inline std::int64_t reduced(ReduceOp op, DType dtype, int world, std::int64_t g) {
  std::int64_t out = value(dtype, 0, g);
  for (int r = 1; r < world; ++r) out = op == ReduceOp::sum ? out + value(dtype, r, g) : std::max(out, value(dtype, r, g));
  return out;
}

// n elements of dtype on `device`, element i = value_of(i).
template <class ValueOf>
Tensor make(DType dtype, std::int64_t n, Device device, ValueOf value_of) {
  std::vector<std::int64_t> v(n);
  for (std::int64_t i = 0; i < n; ++i) v[i] = value_of(i);
  return Tensor::from_vector(v, {n}).to(dtype).to(device);
}

// "" when element i of t is expected(i) for every i; else the first wrong element and how many.
template <class Expected>
std::string mismatch(const Tensor& t, Expected expected) {
  const std::vector<std::int64_t> got = t.to(Device::cpu()).to(DType::i64).to_vector<std::int64_t>();
  std::int64_t wrong = 0, first = -1;
  for (std::int64_t i = 0; i < static_cast<std::int64_t>(got.size()); ++i)
    if (got[i] != expected(i) && wrong++ == 0) first = i;
  if (wrong == 0) return "";
  return str(wrong, " of ", got.size(), " elements wrong; first: element ", first, " is ", got[first], ", want ",
             expected(first));
}

inline std::string label(const Communicator& comm, const std::string& what, DType dtype, std::int64_t n) {
  return str("rank ", comm.rank(), " of ", comm.world_size(), ": ", what, " ", dtype_name(dtype), " n=", n);
}

inline const char* op_name(ReduceOp op) { return op == ReduceOp::sum ? "sum" : "max"; }

// all_reduce, sum and max, every dtype and size.
inline void all_reduce_cases(Communicator& comm) {
  const int w = comm.world_size(), r = comm.rank();
  for (DType dtype : kDTypes)
    for (std::int64_t n : kSizes)
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::max}) {
        Tensor t = make(dtype, n, comm.device(), [&](std::int64_t i) { return value(dtype, r, i); });
        comm.all_reduce(t, op);
        EXPECT_EQ(mismatch(t, [&](std::int64_t i) { return reduced(op, dtype, w, i); }), "")
            << label(comm, str("all_reduce ", op_name(op)), dtype, n);
      }
}

// reduce_scatter of world * n elements into n, into a tensor of its own and in place (out =
// in's block `rank`); n odd, so the input is not a multiple of anything convenient.
inline void reduce_scatter_cases(Communicator& comm) {
  const int w = comm.world_size(), r = comm.rank();
  for (DType dtype : kDTypes)
    for (std::int64_t n : kSizes)
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::max})
        for (bool in_place : {false, true}) {
          Tensor in = make(dtype, w * n, comm.device(), [&](std::int64_t g) { return value(dtype, r, g); });
          Tensor out = in_place ? core::slice(in, 0, r * n, (r + 1) * n) : Tensor::zeros({n}, dtype, comm.device());
          comm.reduce_scatter(in, out, op);
          EXPECT_EQ(mismatch(out, [&](std::int64_t i) { return reduced(op, dtype, w, r * n + i); }), "")
              << label(comm, str("reduce_scatter ", op_name(op), in_place ? " in place" : ""), dtype, n);
        }
}

// all_gather of n elements per rank into world * n, into a tensor of its own and in place (in
// = out's block `rank`; the other blocks start as -99).
inline void all_gather_cases(Communicator& comm) {
  const int w = comm.world_size(), r = comm.rank();
  for (DType dtype : kDTypes)
    for (std::int64_t n : kSizes)
      for (bool in_place : {false, true}) {
        auto own = [&](std::int64_t g) { return g / n == r ? value(dtype, r, g) : -99; };
        Tensor out = make(dtype, w * n, comm.device(), in_place ? std::function<std::int64_t(std::int64_t)>(own)
                                                                : [](std::int64_t) -> std::int64_t { return -99; });
        Tensor in = in_place ? core::slice(out, 0, r * n, (r + 1) * n)
                             : make(dtype, n, comm.device(), [&](std::int64_t i) { return value(dtype, r, r * n + i); });
        comm.all_gather(in, out);
        EXPECT_EQ(mismatch(out, [&](std::int64_t g) { return value(dtype, static_cast<int>(g / n), g); }), "")
            << label(comm, in_place ? "all_gather in place" : "all_gather", dtype, n);
      }
}

// broadcast from every root.
inline void broadcast_cases(Communicator& comm) {
  const int w = comm.world_size(), r = comm.rank();
  for (DType dtype : kDTypes)
    for (std::int64_t n : kSizes)
      for (int root = 0; root < w; ++root) {
        Tensor t = make(dtype, n, comm.device(), [&](std::int64_t i) { return value(dtype, r, i); });
        comm.broadcast(t, root);
        EXPECT_EQ(mismatch(t, [&](std::int64_t i) { return value(dtype, root, i); }), "")
            << label(comm, str("broadcast from ", root), dtype, n);
      }
}

// barrier: rank 0 arrives 200 ms late, and no other rank leaves before it arrived.
inline void barrier_cases(Communicator& comm) {
  comm.barrier();
  const auto start = std::chrono::steady_clock::now();
  if (comm.rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  comm.barrier();
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GE(waited, 0.15) << "rank " << comm.rank() << " left the barrier before rank 0 arrived";
}

// Non-blocking collectives of every kind issued at once, then waited on in another order;
// then 16 all-reduces waited on in reverse. Every Work is done afterwards, and waiting
// again returns at once.
inline void async_cases(Communicator& comm) {
  const int w = comm.world_size(), r = comm.rank();
  const Device dev = comm.device();
  const std::int64_t n = 1023;
  auto mine = [&](DType dtype) { return [=](std::int64_t g) { return value(dtype, r, g); }; };
  Tensor a = make(DType::f32, n, dev, mine(DType::f32));
  Tensor b_in = make(DType::bf16, w * n, dev, mine(DType::bf16));
  Tensor b_out = core::slice(b_in, 0, r * n, (r + 1) * n);  // in place
  Tensor c_in = make(DType::i64, n, dev, [&](std::int64_t i) { return value(DType::i64, r, r * n + i); });
  Tensor c_out = Tensor::zeros({w * n}, DType::i64, dev);
  Tensor d = make(DType::f64, n, dev, mine(DType::f64));
  Tensor e = make(DType::bf16, n, dev, mine(DType::bf16));
  Tensor empty = Tensor::zeros({0}, DType::f32, dev);
  std::vector<Work> works = {comm.all_reduce_async(a, ReduceOp::sum),
                             comm.reduce_scatter_async(b_in, b_out, ReduceOp::sum),
                             comm.all_gather_async(c_in, c_out),
                             comm.all_reduce_async(empty, ReduceOp::sum),
                             comm.broadcast_async(d, w - 1),
                             comm.all_reduce_async(e, ReduceOp::max)};
  for (int i : {4, 1, 5, 0, 3, 2}) works[i].wait();
  for (Work& work : works) {
    EXPECT_TRUE(work.done()) << "rank " << r;
    work.wait();  // again: returns at once
  }
  EXPECT_EQ(mismatch(a, [&](std::int64_t i) { return reduced(ReduceOp::sum, DType::f32, w, i); }), "") << "rank " << r << ": async all_reduce";
  EXPECT_EQ(mismatch(b_out, [&](std::int64_t i) { return reduced(ReduceOp::sum, DType::bf16, w, r * n + i); }), "")
      << "rank " << r << ": async reduce_scatter in place";
  EXPECT_EQ(mismatch(c_out, [&](std::int64_t g) { return value(DType::i64, static_cast<int>(g / n), g); }), "")
      << "rank " << r << ": async all_gather";
  EXPECT_EQ(mismatch(d, [&](std::int64_t i) { return value(DType::f64, w - 1, i); }), "") << "rank " << r << ": async broadcast";
  EXPECT_EQ(mismatch(e, [&](std::int64_t i) { return reduced(ReduceOp::max, DType::bf16, w, i); }), "")
      << "rank " << r << ": async all_reduce max";

  std::vector<Tensor> many;
  std::vector<Work> pending;
  for (int k = 0; k < 16; ++k) {
    many.push_back(make(DType::f32, 100 + k, dev, [&](std::int64_t i) { return value(DType::f32, r, i + k); }));
    pending.push_back(comm.all_reduce_async(many.back(), ReduceOp::sum));
  }
  for (int k = 15; k >= 0; --k) pending[k].wait();
  for (int k = 0; k < 16; ++k)
    EXPECT_EQ(mismatch(many[k], [&](std::int64_t i) { return reduced(ReduceOp::sum, DType::f32, w, i + k); }), "")
        << "rank " << r << ": all_reduce " << k << " of 16 in flight at once";
  EXPECT_TRUE(Work().done());
  Work().wait();  // a default Work: returns at once
}

// Bad arguments are errors that name the collective and the tensor, thrown on the caller's
// thread before anything is issued (so every rank throws alike and nobody waits).
inline void argument_error_cases(Communicator& comm) {
  const int w = comm.world_size(), r = comm.rank();
  const Device dev = comm.device();
  const std::int64_t n = 4;
  Tensor out = Tensor::zeros({n}, DType::f32, dev);
  expect_error([&] { comm.reduce_scatter(Tensor::zeros({w * n + 1}, DType::f32, dev), out); },
               {"reduce_scatter: in f32[", "must have world_size (" + std::to_string(w) + ") x out's 4"});
  expect_error([&] { comm.all_gather(out, Tensor::zeros({w * n + 1}, DType::f32, dev)); },
               {"all_gather: out f32[", "must have world_size"});
  expect_error([&] { comm.reduce_scatter(Tensor::zeros({w * n}, DType::f64, dev), out); }, {"reduce_scatter", "differ in dtype"});
  Tensor matrix = Tensor::zeros({3, 5}, DType::f32, dev);
  expect_error([&] { comm.all_reduce(core::transpose(matrix, 0, 1)); }, {"all_reduce: tensor f32[5, 3]", "not contiguous"});
  expect_error([&] { comm.broadcast(out, w); }, {"broadcast: root " + std::to_string(w), "not a rank"});
  expect_error([&] { comm.all_reduce(Tensor()); }, {"all_reduce: tensor is an undefined tensor"});
  // Overlapping, but not at block `rank`: only the exact in-place form may overlap.
  Tensor base = Tensor::zeros({w * n + 1}, DType::f32, dev);
  expect_error([&] { comm.all_gather(core::slice(base, 0, 1, 1 + n), core::slice(base, 0, 0, w * n)); },
               {"all_gather: in overlaps out but is not its block " + std::to_string(r)});
  if (dev.is_cpu() && cuda_available()) {
    expect_error([&] { comm.all_reduce(Tensor::zeros({2}, DType::f32, Device::cuda(0))); },
                 {"is not on the communicator's device cpu"});
  } else if (dev.is_cuda()) {
    expect_error([&] { comm.all_reduce(Tensor::zeros({2})); }, {"is not on the communicator's device cuda"});
  }
}

}  // namespace dark::testing::dist_cases
