// Grid execution of the CUDA emulator (see grid.h).
#include "cuda_emulator/grid.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include "cuda_emulator/fiber.h"
#include "cuda_emulator/memory.h"
#include "core/error.h"

namespace dark::cuda_emu {
namespace {

enum class State { ready, at_block_barrier, at_warp_barrier, at_mbarrier, done };

struct EmuThread {
  ThreadContext ctx;
  std::unique_ptr<Fiber> fiber;
  State state = State::ready;
  std::vector<std::function<void()>> async_open;                 // issued since the last commit
  std::vector<std::vector<std::function<void()>>> async_groups;  // committed, oldest first
  const unsigned char* mbarrier = nullptr;  // at_mbarrier: the barrier and the parity of the phase awaited
  unsigned mbarrier_parity = 0;
  bool polling = false;        // at_mbarrier in a try_wait, which may give up
  bool gave_up = false;        // the try_wait was released without its phase (the block was stuck)
};

// An mbarrier's state in its 8 bytes of shared memory: word 0 the arrivals still missing in
// the current phase, word 1 the arrivals a phase needs with the phase's parity in bit 31.
struct MbarrierState {
  std::uint32_t missing, expected_and_parity;
  std::uint32_t expected() const { return expected_and_parity & 0x7fffffffu; }
  unsigned parity() const { return expected_and_parity >> 31; }
};
constexpr std::uint32_t kMaxMbarrierCount = (1u << 20) - 1;

MbarrierState read_mbarrier(const unsigned char* bar) {
  MbarrierState s;
  std::memcpy(&s, bar, sizeof s);
  return s;
}

bool mbarrier_phase_done(const unsigned char* bar, unsigned parity) { return read_mbarrier(bar).parity() != parity; }

// One warp-synchronous operation (__syncwarp, a shuffle, a vote, mma.sync, ldmatrix, a
// gather) of the lanes of `mask`: each lane deposits its operand in `in` and waits until all
// have arrived; the last to arrive releases them. The operation is one instance per call, so
// lanes read the others' operands (and `snapshot`) after the release at their own pace: the
// next operation of the same lanes gets a new instance and never waits for a slow reader (one
// wait per lane and operation, where a second barrier to free shared slots took two: the
// emulated GPU tests spend most of their time switching fibers). The instance goes back to
// the block's pool when every lane of the mask has read.
struct Collective {
  unsigned mask = 0, arrived = 0, done = 0;
  alignas(16) unsigned char in[32][64];
  alignas(16) unsigned char snapshot[32][16];  // ldmatrix: the rows as they were when all had arrived
};

struct Warp {
  unsigned existing = 0, exited = 0;
  std::vector<Collective*> pending;  // not yet complete: at most a few at once (disjoint masks)
};

struct Block {
  std::vector<EmuThread> threads;
  std::vector<Warp> warps;
  int live = 0, block_waiting = 0;
  Dim3 block_idx;
  std::vector<unsigned char> dynamic_shared;
  std::vector<std::unique_ptr<Collective>> collectives;  // every instance made for this launch
  std::vector<Collective*> free_collectives;

  Collective* new_collective(unsigned mask) {
    if (free_collectives.empty()) {
      collectives.push_back(std::make_unique<Collective>());
      free_collectives.push_back(collectives.back().get());
    }
    Collective* c = free_collectives.back();
    free_collectives.pop_back();
    c->mask = mask, c->arrived = 0, c->done = 0;
    return c;
  }
};

Block* running_block = nullptr;
EmuThread* running_thread = nullptr;
std::uint64_t skipped_ns = 0;  // the emulated clock's lead over the host's (global_timer_ns)
int arrivals_to_drop = 0;      // drop_mbarrier_arrivals
float mma_corruption = 0.0f;   // corrupt_mma_products

std::vector<std::unique_ptr<FiberStack>>& stack_pool() {
  static std::vector<std::unique_ptr<FiberStack>> pool;
  return pool;
}

std::unique_ptr<FiberStack> take_stack() {
  auto& pool = stack_pool();
  if (pool.empty()) return std::make_unique<FiberStack>();
  std::unique_ptr<FiberStack> s = std::move(pool.back());
  pool.pop_back();
  return s;
}

void give_back_stack(FiberStack* s) { stack_pool().emplace_back(s); }

std::map<const void*, std::size_t>& shared_limits() {
  static std::map<const void*, std::size_t> limits;
  return limits;
}

std::string where() {
  if (!running_thread) return "outside any kernel";
  const ThreadContext& c = running_thread->ctx;
  return str("block (", c.block_idx.x, ", ", c.block_idx.y, ", ", c.block_idx.z, ") thread (", c.thread_idx.x, ", ",
             c.thread_idx.y, ", ", c.thread_idx.z, ")");
}

EmuThread& self() {
  if (!running_thread) throw Error("CUDA emulator: a device function was called outside a kernel");
  return *running_thread;
}

// Suspends the calling thread until the scheduler marks it ready again.
void wait_until_released(EmuThread& t) {
  while (t.state != State::ready) t.fiber->yield();
}

void release_block_barrier(Block& b) {
  for (EmuThread& t : b.threads)
    if (t.state == State::at_block_barrier) t.state = State::ready;
  b.block_waiting = 0;
}

void check_mask(const Warp& w, unsigned mask, int lane, const char* op) {
  if (!(mask & (1u << lane)))
    device_fault(str(op, " with mask 0x", std::hex, mask, std::dec, " does not include the calling lane ", lane));
  if (mask & ~w.existing)
    device_fault(str(op, " with mask 0x", std::hex, mask, " names lanes this block does not have (lanes present: 0x",
                     w.existing, ")"));
  if (mask & w.exited)
    device_fault(str(op, " with mask 0x", std::hex, mask, " names lanes that have already exited (0x", (mask & w.exited),
                     ")"));
}

// The calling lane's part of a warp-synchronous operation (Collective): deposits `bytes` of
// `operand` and returns once every lane of mask has arrived. `on_complete` runs in the last
// lane to arrive, before any lane goes on. The caller reads what it needs from the returned
// instance and then calls leave().
Collective& arrive(unsigned mask, const char* op, const void* operand = nullptr, std::size_t bytes = 0,
                   void (*on_complete)(Collective&) = nullptr) {
  EmuThread& t = self();
  Block& b = *running_block;
  Warp& w = b.warps[t.ctx.warp];
  check_mask(w, mask, t.ctx.lane, op);
  if (bytes > sizeof Collective::in[0])
    device_fault(str(op, " of ", bytes, " bytes (at most ", sizeof Collective::in[0], " are emulated)"));
  Collective* c = nullptr;
  for (Collective* pending : w.pending) {
    if (pending->mask == mask) c = pending;
    else if (pending->mask & mask)
      device_fault(str(op, " with mask 0x", std::hex, mask, " overlaps a warp barrier with mask 0x", pending->mask,
                       " that other lanes of the warp wait at"));
  }
  if (!c) {
    c = b.new_collective(mask);
    w.pending.push_back(c);
  }
  if (bytes > 0) std::memcpy(c->in[t.ctx.lane], operand, bytes);
  c->arrived |= 1u << t.ctx.lane;
  if (c->arrived != mask) {
    t.state = State::at_warp_barrier;
    wait_until_released(t);
    return *c;
  }
  // The last lane to arrive completes the operation and releases the others.
  w.pending.erase(std::find(w.pending.begin(), w.pending.end(), c));
  if (on_complete) on_complete(*c);
  const int first = t.ctx.warp * 32;
  for (int l = 0; l < 32; ++l)
    if (mask & (1u << l)) b.threads[first + l].state = State::ready;
  return *c;
}

// The calling lane has read what it needs from c; the last lane to do so frees it.
void leave(Collective& c) {
  c.done |= 1u << self().ctx.lane;
  if (c.done == c.mask) running_block->free_collectives.push_back(&c);
}

void on_thread_exit(Block& b, EmuThread& t) {
  if (!t.async_open.empty() || !t.async_groups.empty())
    device_fault(str("the thread exited with ", t.async_open.size(), " uncommitted and ", t.async_groups.size(),
                     " committed groups of asynchronous products (wgmma) it never waited for"));
  Warp& w = b.warps[t.ctx.warp];
  w.exited |= 1u << t.ctx.lane;
  for (const Collective* c : w.pending)
    if (c->mask & (1u << t.ctx.lane))
      device_fault(str("lane ", t.ctx.lane, " of warp ", t.ctx.warp, " exited while lanes 0x", std::hex, c->arrived,
                       " wait for it at a warp-synchronous operation with mask 0x", c->mask));
  --b.live;
  // Exited threads count as arrived at __syncthreads (as on the GPU).
  if (b.block_waiting > 0 && b.block_waiting == b.live) release_block_barrier(b);
}

std::string describe_deadlock(const Block& b) {
  int at_warp = 0, at_mbarrier = 0;
  for (const EmuThread& t : b.threads) at_mbarrier += t.state == State::at_mbarrier;
  std::string warps;
  for (std::size_t i = 0; i < b.warps.size(); ++i)
    for (const Collective* c : b.warps[i].pending) {
      at_warp += std::popcount(c->arrived);
      warps += str("; warp ", i, ": lanes 0x", std::hex, c->arrived, " of mask 0x", c->mask, std::dec, " wait");
    }
  return str("block (", b.block_idx.x, ", ", b.block_idx.y, ", ", b.block_idx.z, ") cannot go on: ", b.block_waiting,
             " thread(s) wait at __syncthreads, ", at_warp, " at warp-synchronous operations and ", at_mbarrier,
             " at mbarriers, with ", b.live,
             " of ", b.threads.size(), " threads not exited (a barrier some threads never reach)", warps);
}

// DARK_CUDA_EMULATOR_ORDER=reverse runs a block's threads from the last to the first. Each
// thread runs until it waits, so the first in order is always ahead of the others: a missing
// barrier shows up as a wrong result in one order or the other (run the tests in both).
bool reverse_order() {
  static const bool reverse = [] {
    const char* env = std::getenv("DARK_CUDA_EMULATOR_ORDER");
    return env != nullptr && std::string(env) == "reverse";
  }();
  return reverse;
}

// The block is stuck: every thread that polls an mbarrier (try_wait) is released with a
// failed poll, and the emulated clock skips ahead. False when no thread polls (a deadlock).
bool give_up_polls(Block& b) {
  bool any = false;
  for (EmuThread& t : b.threads)
    if (t.state == State::at_mbarrier && t.polling) {
      t.state = State::ready;
      t.gave_up = true;
      any = true;
    }
  if (any) skipped_ns += kStuckSkipNanoseconds;
  return any;
}

void run_block(Block& b, const std::function<void()>& body) {
  b.live = static_cast<int>(b.threads.size());
  b.block_waiting = 0;
  for (Warp& w : b.warps) {
    w.exited = 0;
    w.pending.clear();
  }
  b.free_collectives.clear();  // a fault may have left instances in use
  for (const auto& c : b.collectives) b.free_collectives.push_back(c.get());
  if (!b.dynamic_shared.empty()) std::memset(b.dynamic_shared.data(), 0xff, b.dynamic_shared.size());
  for (EmuThread& t : b.threads) {
    t.state = State::ready;
    t.async_open.clear();
    t.async_groups.clear();
    t.polling = t.gave_up = false;
  }
  struct Cleanup {  // stacks go back to the pool even when a fault ends the block
    Block& b;
    ~Cleanup() {
      for (EmuThread& t : b.threads)
        if (t.fiber) {
          give_back_stack(t.fiber->stack());
          t.fiber.reset();
        }
      running_thread = nullptr;
    }
  } cleanup{b};
  const bool reverse = reverse_order();
  const std::size_t count = b.threads.size();
  while (b.live > 0) {
    bool progressed = false;
    for (std::size_t k = 0; k < count; ++k) {
      EmuThread& t = b.threads[reverse ? count - 1 - k : k];
      if (t.state == State::at_mbarrier && mbarrier_phase_done(t.mbarrier, t.mbarrier_parity)) t.state = State::ready;
      if (t.state != State::ready) continue;
      if (!t.fiber) t.fiber = std::make_unique<Fiber>(take_stack().release(), body);
      // A thread whose poll gave up and that only polls the same phase again made no progress.
      const bool gave_up = t.gave_up;
      const unsigned char* polled = t.mbarrier;
      const unsigned polled_parity = t.mbarrier_parity;
      running_thread = &t;
      t.fiber->resume();
      running_thread = nullptr;
      const bool idle = gave_up && t.state == State::at_mbarrier && t.polling && t.mbarrier == polled &&
                        t.mbarrier_parity == polled_parity;
      progressed = progressed || !idle;
      if (t.fiber->finished()) {
        t.state = State::done;
        give_back_stack(t.fiber->stack());
        t.fiber.reset();
        running_thread = &t;  // for the fault message
        on_thread_exit(b, t);
        running_thread = nullptr;
      }
    }
    if (!progressed && !give_up_polls(b)) throw Error(str("CUDA emulator: deadlock in a kernel: ", describe_deadlock(b)));
  }
}

}  // namespace

const ThreadContext& current() { return self().ctx; }

void device_fault(const std::string& what) { throw Error(str("CUDA emulator: ", where(), ": ", what)); }

namespace {
std::atomic<bool> trapped{false};  // one device, one context: for the whole process
}  // namespace
void trap() {
  trapped = true;
  device_fault("__trap()");
}
bool context_broken() { return trapped; }

void sync_threads() {
  EmuThread& t = self();
  Block& b = *running_block;
  ++b.block_waiting;
  t.state = State::at_block_barrier;
  if (b.block_waiting == b.live) {
    release_block_barrier(b);  // the last to arrive releases everyone, itself included
    return;
  }
  wait_until_released(t);
}

void sync_warp(unsigned mask) { leave(arrive(mask, "__syncwarp")); }

void warp_exchange(unsigned mask, const void* value, void* result, std::size_t bytes, int source_lane) {
  EmuThread& t = self();
  Collective& c = arrive(mask, "a warp shuffle", value, bytes);
  if (source_lane < 0 || source_lane >= 32 || !(mask & (1u << source_lane)))
    device_fault(str("lane ", t.ctx.lane, " reads lane ", source_lane, " in a warp shuffle with mask 0x", std::hex, mask,
                     ", which does not include it (the value is undefined on a GPU)"));
  std::memcpy(result, c.in[source_lane], bytes);
  leave(c);
}

unsigned existing_lanes() { return running_block->warps[self().ctx.warp].existing; }

unsigned warp_ballot(unsigned mask, bool predicate) {
  const unsigned char vote = predicate ? 1 : 0;
  Collective& c = arrive(mask, "a warp vote", &vote, 1);
  unsigned bits = 0;
  for (int l = 0; l < 32; ++l)
    if ((mask & (1u << l)) && c.in[l][0]) bits |= 1u << l;
  leave(c);
  return bits;
}

void* dynamic_shared_memory() {
  Block& b = *running_block;
  (void)self();
  return b.dynamic_shared.empty() ? nullptr : b.dynamic_shared.data();
}

void corrupt_mma_products(float offset) { mma_corruption = offset; }

void mma_m16n8k16_bf16(float* d, const std::uint32_t* a, const std::uint32_t* b, const float* c) {
  EmuThread& t = self();
  Block& blk = *running_block;
  Warp& w = blk.warps[t.ctx.warp];
  if (w.existing != 0xffffffffu) device_fault("mma.sync needs a full warp of 32 threads");
  const std::uint32_t mine[6] = {a[0], a[1], a[2], a[3], b[0], b[1]};
  Collective& fragments = arrive(0xffffffffu, "mma.sync", mine, sizeof mine);
  // PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type".
  auto element = [&](int lane, int reg, int half) {
    std::uint32_t word;
    std::memcpy(&word, fragments.in[lane] + 4 * reg, 4);
    const std::uint32_t bits = (half ? (word >> 16) : (word & 0xffffu)) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  };
  auto a_at = [&](int row, int k) {  // A is 16 x 16, row-major fragments a0..a7
    const int lane = (row & 7) * 4 + ((k & 7) >> 1);
    const int e = (k >= 8 ? 4 : 0) + (row >= 8 ? 2 : 0) + (k & 1);
    return element(lane, e >> 1, e & 1);
  };
  auto b_at = [&](int k, int n) {  // B is 16 x 8, column fragments b0..b3 (registers 4, 5 of the slot)
    const int lane = n * 4 + ((k & 7) >> 1);
    const int e = (k >= 8 ? 2 : 0) + (k & 1);
    return element(lane, 4 + (e >> 1), e & 1);
  };
  const int group = t.ctx.lane >> 2, in_group = t.ctx.lane & 3;
  float out[4];
  for (int i = 0; i < 4; ++i) {
    const int row = group + (i >= 2 ? 8 : 0), col = in_group * 2 + (i & 1);
    float acc = c[i];
    for (int k = 0; k < 16; ++k) acc += a_at(row, k) * b_at(k, col);
    out[i] = mma_corruption != 0.0f ? acc + mma_corruption : acc;
  }
  leave(fragments);
  std::memcpy(d, out, sizeof out);
}

namespace {
// Faults unless [p, p + bytes) lies in the running block's dynamic shared memory.
void check_in_shared(const void* p, std::size_t bytes, const char* what) {
  const auto& shared = running_block->dynamic_shared;
  const auto* at = static_cast<const unsigned char*>(p);
  if (shared.empty() || at < shared.data() || at + bytes > shared.data() + shared.size())
    device_fault(str(what, " at ", p, ": outside the block's dynamic shared memory"));
  if (reinterpret_cast<std::uintptr_t>(p) % 16 != 0) device_fault(str(what, " at ", p, ": not 16-byte aligned"));
}
}  // namespace

void ldmatrix_x4(std::uint32_t* r, const void* row_address, bool transposed) {
  EmuThread& t = self();
  Warp& w = running_block->warps[t.ctx.warp];
  if (w.existing != 0xffffffffu) device_fault("ldmatrix needs a full warp of 32 threads");
  check_in_shared(row_address, 16, "an ldmatrix row");
  // The rows are read once every lane has arrived, all at that moment (as the hardware's one
  // instruction does): a lane that goes on first cannot change what the others get.
  Collective& rows = arrive(0xffffffffu, "ldmatrix", &row_address, sizeof row_address, [](Collective& c) {
    for (int l = 0; l < 32; ++l) {
      const unsigned char* p;
      std::memcpy(&p, c.in[l], sizeof p);
      std::memcpy(c.snapshot[l], p, 16);
    }
  });
  // PTX ISA, "Warp-level matrix load instruction: ldmatrix".
  auto element = [&](int matrix, int row, int col) {
    std::uint16_t v;
    std::memcpy(&v, rows.snapshot[matrix * 8 + row] + 2 * col, 2);
    return static_cast<std::uint32_t>(v);
  };
  const int lane = t.ctx.lane, major = lane / 4, minor = 2 * (lane % 4);
  std::uint32_t out[4];
  for (int i = 0; i < 4; ++i)
    out[i] = transposed ? element(i, minor, major) | (element(i, minor + 1, major) << 16)
                        : element(i, major, minor) | (element(i, major, minor + 1) << 16);
  leave(rows);
  std::memcpy(r, out, sizeof out);
}

std::uint32_t shared_address(const void* p) {
  (void)self();
  const auto& shared = running_block->dynamic_shared;
  const auto* at = static_cast<const unsigned char*>(p);
  if (shared.empty() || at < shared.data() || at >= shared.data() + shared.size())
    device_fault(str("the shared-memory address of ", p, ": outside the block's dynamic shared memory"));
  return static_cast<std::uint32_t>(at - shared.data());
}

const unsigned char* shared_bytes(std::uint32_t address, std::size_t bytes) {
  auto& shared = running_block->dynamic_shared;
  if (std::size_t{address} + bytes > shared.size())
    device_fault(str("shared-memory address ", address, " (+", bytes, " bytes) lies past the block's ", shared.size(),
                     " bytes of dynamic shared memory"));
  return shared.data() + address;
}

void warp_all_gather(const void* value, void* all, std::size_t bytes) {
  EmuThread& t = self();
  Warp& w = running_block->warps[t.ctx.warp];
  if (w.existing != 0xffffffffu) device_fault("a warp-wide gather needs a full warp of 32 threads");
  Collective& c = arrive(0xffffffffu, "a warp-wide gather", value, bytes);
  for (int l = 0; l < 32; ++l) std::memcpy(static_cast<unsigned char*>(all) + l * bytes, c.in[l], bytes);
  leave(c);
}

void async_issue(std::function<void()> op) { self().async_open.push_back(std::move(op)); }

void async_commit() {
  EmuThread& t = self();
  t.async_groups.push_back(std::move(t.async_open));
  t.async_open.clear();
}

void async_wait(int pending_groups) {
  EmuThread& t = self();
  while (static_cast<int>(t.async_groups.size()) > pending_groups) {
    for (auto& op : t.async_groups.front()) op();
    t.async_groups.erase(t.async_groups.begin());
  }
}

void copy_async_16(void* dst, const void* src, bool valid) {
  (void)self();
  check_in_shared(dst, 16, "a cp.async destination");
  if (!valid) {
    std::memset(dst, 0, 16);
    return;
  }
  if (reinterpret_cast<std::uintptr_t>(src) % 16 != 0) device_fault(str("a cp.async source at ", src, ": not 16-byte aligned"));
  std::memcpy(dst, src, 16);
}

namespace {
// The barrier at bar, checked: in the block's dynamic shared memory, 8-byte aligned, initialised.
unsigned char* mbarrier_at(void* bar, const char* op) {
  auto& shared = running_block->dynamic_shared;
  auto* at = static_cast<unsigned char*>(bar);
  if (shared.empty() || at < shared.data() || at + 8 > shared.data() + shared.size())
    device_fault(str(op, " on ", bar, ": outside the block's dynamic shared memory"));
  if ((at - shared.data()) % 8 != 0) device_fault(str(op, " on ", bar, ": not 8-byte aligned"));
  return at;
}
MbarrierState checked_state(const unsigned char* bar, const char* op) {
  const MbarrierState s = read_mbarrier(bar);
  if (s.expected() == 0 || s.expected() > kMaxMbarrierCount || s.missing == 0 || s.missing > s.expected())
    device_fault(str(op, " on an mbarrier that mbarrier.init did not set up (or that was overwritten)"));
  return s;
}
}  // namespace

void mbarrier_init(void* bar, unsigned count) {
  (void)self();
  unsigned char* at = mbarrier_at(bar, "mbarrier.init");
  if (count == 0 || count > kMaxMbarrierCount) device_fault(str("mbarrier.init with count ", count, " (valid: 1 .. 2^20 - 1)"));
  const MbarrierState s{count, count};
  std::memcpy(at, &s, sizeof s);
}

void drop_mbarrier_arrivals(int count) { arrivals_to_drop = count; }

void mbarrier_arrive(void* bar) {
  (void)self();
  unsigned char* at = mbarrier_at(bar, "mbarrier.arrive");
  MbarrierState s = checked_state(at, "mbarrier.arrive");
  if (arrivals_to_drop > 0) {
    --arrivals_to_drop;
    return;
  }
  if (--s.missing == 0) {  // the phase completes: the next one starts, its parity flipped
    s.missing = s.expected();
    s.expected_and_parity ^= 0x80000000u;
  }
  std::memcpy(at, &s, sizeof s);
}

void mbarrier_wait_parity(void* bar, unsigned parity) {
  EmuThread& t = self();
  const unsigned char* at = mbarrier_at(bar, "mbarrier.try_wait.parity");
  (void)checked_state(at, "mbarrier.try_wait.parity");
  if (parity > 1) device_fault(str("mbarrier.try_wait.parity with parity ", parity, " (valid: 0, 1)"));
  if (mbarrier_phase_done(at, parity)) return;
  t.state = State::at_mbarrier;  // the scheduler makes it ready once the phase has completed
  t.mbarrier = at;
  t.mbarrier_parity = parity;
  wait_until_released(t);
}

bool mbarrier_try_wait_parity(void* bar, unsigned parity) {
  EmuThread& t = self();
  const unsigned char* at = mbarrier_at(bar, "mbarrier.try_wait.parity");
  (void)checked_state(at, "mbarrier.try_wait.parity");
  if (parity > 1) device_fault(str("mbarrier.try_wait.parity with parity ", parity, " (valid: 0, 1)"));
  t.gave_up = false;
  if (mbarrier_phase_done(at, parity)) return true;
  t.state = State::at_mbarrier;  // ready again once the phase completes, or when the block is stuck (give_up_polls)
  t.mbarrier = at;
  t.mbarrier_parity = parity;
  t.polling = true;
  wait_until_released(t);
  t.polling = false;
  return !t.gave_up;
}

std::uint64_t global_timer_ns() {
  const auto now = std::chrono::steady_clock::now().time_since_epoch();
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(now).count()) + skipped_ns;
}

LaunchStatus set_max_dynamic_shared(const void* kernel, std::size_t bytes) {
  if (bytes > kMaxSharedOptin) return LaunchStatus::invalid_value;
  shared_limits()[kernel] = bytes;
  return LaunchStatus::ok;
}

std::size_t max_dynamic_shared(const void* kernel) {
  const auto it = shared_limits().find(kernel);
  return it == shared_limits().end() ? kDefaultSharedLimit : it->second;
}

LaunchStatus run_grid(const void* kernel, Dim3 grid, Dim3 block, std::size_t dynamic_shared_bytes,
                      const std::function<void()>& thread_body) {
  // The limits of compute capability 9.0.
  const std::uint64_t threads = std::uint64_t{block.x} * block.y * block.z;
  if (threads == 0 || threads > 1024 || block.z > 64 || grid.x == 0 || grid.y == 0 || grid.z == 0 ||
      grid.x > 0x7fffffffu || grid.y > 65535 || grid.z > 65535)
    return LaunchStatus::invalid_configuration;
  if (dynamic_shared_bytes > max_dynamic_shared(kernel)) return LaunchStatus::invalid_value;
  DeviceAccess access;  // device memory readable while the kernel runs
  Block b;
  const int n = static_cast<int>(threads);
  b.threads.resize(n);
  b.warps.resize((n + 31) / 32);
  for (int i = 0; i < n; ++i) {
    ThreadContext& c = b.threads[i].ctx;
    c.thread_idx = {static_cast<unsigned>(i % block.x), static_cast<unsigned>((i / block.x) % block.y),
                    static_cast<unsigned>(i / (block.x * block.y))};
    c.block_dim = block;
    c.grid_dim = grid;
    c.linear = i;
    c.lane = i % 32;
    c.warp = i / 32;
    b.warps[c.warp].existing |= 1u << c.lane;
  }
  b.dynamic_shared.resize(dynamic_shared_bytes);
  Block* const outer_block = running_block;
  EmuThread* const outer_thread = running_thread;
  struct Restore {
    Block* b;
    EmuThread* t;
    ~Restore() { running_block = b, running_thread = t; }
  } restore{outer_block, outer_thread};
  if (outer_thread) throw Error("CUDA emulator: a kernel launched from inside a kernel (dynamic parallelism is not emulated)");
  running_block = &b;
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        b.block_idx = {x, y, z};
        for (EmuThread& t : b.threads) t.ctx.block_idx = b.block_idx;
        run_block(b, thread_body);
      }
  return LaunchStatus::ok;
}

}  // namespace dark::cuda_emu
