// The tape and the reverse replay (see tape.h).
#include "autograd/tape.h"

#include <algorithm>
#include <memory>
#include <unordered_map>
#include <unordered_set>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/kernels.h"

namespace dark {
namespace {

struct TapeEntry {
  std::int64_t id = 0;
  const char* op = "";
  std::vector<std::shared_ptr<AutogradMeta>> inputs;  // null where no gradient is needed
  std::vector<Shape> input_shapes;
  std::vector<std::shared_ptr<AutogradMeta>> outputs;
  std::vector<OutputTemplate> output_templates;
  BackwardFn backward;
};

struct Tape {
  std::vector<TapeEntry> entries;
  std::int64_t next_id = 0;
};

thread_local Tape tape;

bool needs_grad(const Tensor& t) { return t.defined() && t.requires_grad(); }

// The gradients of buffer-bound parameters (bind_grad) during one backward(): a parameter's
// contributions (a tied embedding gets two) are summed here and added to its buffer once, when
// the parameter's gradient is final (flush). So each backward adds its total to the buffer in
// one addition per element, and the buffer after micro-batches 1 and 2 of one process equals
// the sum of two ranks' buffers after one each: data parallelism reproduces gradient
// accumulation bit for bit on two ranks.
using PendingGrads = std::unordered_map<AutogradMeta*, Tensor>;

// A non-leaf's gradient contributions still to come in this backward (one per input slot of
// an entry that feeds root and reads it), and its dtype: the last of several is summed
// straight into that dtype (bf16), not into an f32 tensor that its producer's replay would
// cast. An entry that gives the input no gradient leaves the count above 0, and then the sum
// stays f32 and is cast there, as before.
struct Expected {
  std::int64_t remaining = 0;
  DType dtype = DType::f32;
};

// What one backward() tracks besides the gradients.
struct ReplayState {
  PendingGrads pending;
  std::unordered_map<const AutogradMeta*, Expected> expected;
  // For each leaf with hooks or a bound gradient: the index of the entry after whose replay
  // its gradient is final (see plan_replay).
  std::unordered_map<const AutogradMeta*, std::int64_t> final_entry;
  // A non-leaf's second contribution, held back while exactly one more is expected, so that
  // the three are summed in one pass (q, k and v read the same normed input): one kernel
  // reading three terms and writing the result where two sums wrote and re-read an f32 partial
  // sum. Folded in by the producer's replay if the third never comes.
  std::unordered_map<const AutogradMeta*, Tensor> held;
};

// a + b summed in acc and rounded to out (acc, or bf16 for the last term of a bf16 tensor's
// gradient), a new tensor. bf16 terms of an f32 sum are read by grad_sum directly rather than
// cast first: one kernel instead of three, same bits (the casts are exact, and the f32 sum is
// rounded to bf16 as a cast of it would be).
// Whether grad_sum can add the terms: an f32 sum of f32 / bf16 terms, contiguous on one device.
bool grad_sum_reads(std::initializer_list<const Tensor*> terms, DType acc) {
  if (acc != DType::f32) return false;
  for (const Tensor* t : terms)
    if ((t->dtype() != DType::f32 && t->dtype() != DType::bf16) || !t->is_contiguous() ||
        t->device() != (*terms.begin())->device())
      return false;
  return true;
}

// Two terms go through grad_sum only when one is bf16 (two f32 terms: the add kernel, the same).
bool sums_bf16_directly(const Tensor& a, const Tensor& b, DType acc) {
  return (a.dtype() == DType::bf16 || b.dtype() == DType::bf16) && grad_sum_reads({&a, &b}, acc);
}

Tensor sum_of(const Tensor& a, const Tensor& b, DType acc, DType out_dtype) {
  if (!sums_bf16_directly(a, b, acc)) return add(a.to(acc), b.to(acc)).to(out_dtype);
  Tensor out = Tensor::empty(a.shape(), out_dtype, a.device());
  kernels::grad_sum().get(out.device().type, out_dtype)(a, b, Tensor(), out);
  return out;
}

// (a + b) + c with sum_of's bits, in one pass where grad_sum can read all three.
Tensor sum_of(const Tensor& a, const Tensor& b, const Tensor& c, DType acc, DType out_dtype) {
  if (!grad_sum_reads({&a, &b, &c}, acc)) return sum_of(sum_of(a, b, acc, acc), c, acc, out_dtype);
  Tensor out = Tensor::empty(a.shape(), out_dtype, a.device());
  kernels::grad_sum().get(out.device().type, out_dtype)(a, b, c, out);
  return out;
}

// Adds g into meta's gradient. Out of place, so a gradient tensor that several inputs
// received (add passes dy through to both operands) is never modified through an alias.
// Sums are taken in grad_dtype (f32 for bf16). A non-leaf's first gradient is kept in its own
// dtype: most intermediates receive just one, which their producer's backward reads in the
// output's dtype, so a bf16 gradient makes no round trip through f32 on its way (two cast
// kernels and 12 bytes of traffic per element, at every edge of the graph). The bits are the
// same: bf16 -> f32 -> bf16 is exact, and second contributions are still summed in f32.
void accumulate(AutogradMeta& meta, const Tensor& g, bool leaf, ReplayState& state) {
  const DType acc = grad_dtype(g.dtype());
  if (meta.grad_in_buffer) {  // a parameter whose gradient lives in a flat buffer (kept bf16 until flush)
    meta.grad_zeroed = false;  // flush will add to it
    DARK_CHECK(meta.grad->shape() == g.shape(), "backward: gradient of shape ", shape_str(g.shape()),
               " for a parameter of shape ", shape_str(meta.grad->shape()));
    const auto [it, first] = state.pending.try_emplace(&meta, g);
    if (!first) it->second = sum_of(it->second, g, acc, acc);
    return;
  }
  const auto expected = state.expected.find(&meta);
  const bool last = expected != state.expected.end() && --expected->second.remaining == 0;
  if (!meta.grad) {
    if (!leaf) {
      meta.grad = std::make_shared<Tensor>(g);
      return;
    }
    // Leaves keep their gradient after backward, where users may modify it in place: never
    // an alias of a tensor an op returned (a cast is already a copy).
    const Tensor g_acc = g.to(acc);
    meta.grad = std::make_shared<Tensor>(g_acc.shares_storage(g) ? g_acc.clone() : g_acc);
  } else {
    DARK_CHECK(meta.grad->shape() == g.shape(), "backward: gradient of shape ", shape_str(g.shape()),
               " cannot accumulate into gradient of shape ", shape_str(meta.grad->shape()));
    const DType out_dtype = last ? expected->second.dtype : acc;
    const auto held = state.held.find(&meta);
    if (held != state.held.end()) {
      const Tensor second = std::move(held->second);
      state.held.erase(held);
      meta.grad = std::make_shared<Tensor>(sum_of(*meta.grad, second, g, acc, out_dtype));
    } else if (!leaf && expected != state.expected.end() && expected->second.remaining == 1 &&
               grad_sum_reads({meta.grad.get(), &g}, acc)) {
      state.held.emplace(&meta, g);
    } else {
      meta.grad = std::make_shared<Tensor>(sum_of(*meta.grad, g, acc, out_dtype));
    }
  }
}

// Adds a held-back second contribution (ReplayState::held) whose third never came. Only f32
// sums are held (grad_sum_reads), and the producer's replay casts the sum to its output dtype.
void fold_held(AutogradMeta& meta, ReplayState& state) {
  const auto held = state.held.find(&meta);
  if (held == state.held.end()) return;
  meta.grad = std::make_shared<Tensor>(sum_of(*meta.grad, held->second, DType::f32, DType::f32));
  state.held.erase(held);
}

// Adds this backward's gradient of a buffer-bound parameter to its buffer (see PendingGrads).
void flush(AutogradMeta& meta, PendingGrads& pending) {
  const auto it = pending.find(&meta);
  if (it == pending.end()) return;
  Tensor& buffer = *meta.grad;
  const Tensor& g = it->second;
  if (sums_bf16_directly(buffer, g, buffer.dtype()))
    kernels::grad_sum().get(buffer.device().type, buffer.dtype())(buffer, g, Tensor(), buffer);  // in place
  else
    kernels::binary().get(buffer.device().type, buffer.dtype())(BinaryOp::add, buffer, g.to(buffer.dtype()), buffer);
  pending.erase(it);
}

// Runs the entry's backward and accumulates the input gradients it returns. Skips the
// entry when none of its outputs received a gradient.
void replay(TapeEntry& entry, ReplayState& state) {
  BackwardContext ctx;
  bool any = false;
  for (std::size_t o = 0; o < entry.outputs.size(); ++o) {
    AutogradMeta& meta = *entry.outputs[o];
    fold_held(meta, state);
    if (meta.grad) {
      // Sums of gradients are f32 for bf16, but an op's backward works in its output's dtype.
      ctx.out_grads_.push_back(meta.grad->to(entry.output_templates[o].dtype));
      ctx.zero_out_.push_back(false);
      meta.grad.reset();  // a non-leaf's gradient lives only until its producer consumed it
      any = true;
    } else {
      ctx.out_grads_.emplace_back();  // zeros, made by out_grad if the backward asks
      ctx.zero_out_.push_back(true);
    }
  }
  ctx.out_templates_ = &entry.output_templates;
  if (!any) return;
  for (const auto& in : entry.inputs) {
    ctx.needs_.push_back(in != nullptr);
    ctx.inputs_.push_back(in.get());
  }
  ctx.in_grads_.resize(entry.inputs.size());
  ctx.taken_.resize(entry.inputs.size());
  entry.backward(ctx);
  for (std::size_t j = 0; j < entry.inputs.size(); ++j) {
    if (!entry.inputs[j] || !ctx.in_grads_[j].defined()) continue;
    DARK_CHECK(!ctx.taken_[j], entry.op, " backward: input ", j,
               " got both its gradient buffer (take_zeroed_grad) and a gradient to add to it");
    const Tensor& g = ctx.in_grads_[j];
    DARK_CHECK(g.shape() == entry.input_shapes[j], entry.op, " backward: gradient for input ", j, " has shape ",
               shape_str(g.shape()), " but the input has shape ", shape_str(entry.input_shapes[j]));
    accumulate(*entry.inputs[j], g, entry.inputs[j]->producer < 0, state);
  }
}

}  // namespace

const Tensor& BackwardContext::out_grad(std::size_t i) const {
  Tensor& g = out_grads_.at(i);
  if (!g.defined()) {
    const OutputTemplate& t = out_templates_->at(i);
    g = Tensor::zeros(t.shape, t.dtype, t.device);
  }
  return g;
}

Tensor BackwardContext::take_zeroed_grad(std::size_t i) {
  AutogradMeta* meta = inputs_.at(i);
  if (!meta || meta->producer >= 0 || !meta->grad_in_buffer || !meta->grad_zeroed) return Tensor();
  meta->grad_zeroed = false;
  taken_.at(i) = true;
  return *meta->grad;
}

namespace {

void run_grad_ready_hooks(const AutogradMeta& leaf) {
  const auto hooks = leaf.grad_ready_hooks;  // a copy: a hook may remove itself
  for (const auto& [id, hook] : hooks) hook();
}

// Pre-scan of the entries that feed root (produced by entry `start`), in replay order: "feeds
// root" is structural (some output is root or an input of an entry that feeds root), not
// whether a gradient will flow, so what it plans depends only on the graph's shape.
//  - final_entry: for each leaf with on_grad_ready hooks (grad_binding.h) or a buffer-bound
//    gradient, the index of the entry after whose replay its gradient is final: the lowest
//    index of an entry that reads it, since the replay runs from `start` down to 0;
//  - expected: each non-leaf's gradient contributions and dtype (see Expected).
void plan_replay(const AutogradMeta& root, std::int64_t start, ReplayState& state) {
  const auto hooked = [](const auto& in) { return !in->grad_ready_hooks.empty() || in->grad_in_buffer; };
  std::unordered_set<const AutogradMeta*> reached = {&root};
  for (std::int64_t i = start; i >= 0; --i) {
    const TapeEntry& entry = tape.entries[i];
    bool feeds_root = false;
    for (std::size_t o = 0; o < entry.outputs.size(); ++o) {
      if (!reached.contains(entry.outputs[o].get())) continue;
      feeds_root = true;
      const auto it = state.expected.find(entry.outputs[o].get());
      if (it != state.expected.end()) it->second.dtype = entry.output_templates[o].dtype;
    }
    if (!feeds_root) continue;
    for (const auto& in : entry.inputs) {
      if (!in) continue;
      reached.insert(in.get());
      if (in->producer >= 0) ++state.expected[in.get()].remaining;
      else if (hooked(in)) state.final_entry[in.get()] = i;
    }
  }
}

// Adds the gradients that became final with entry i (its inputs, in order) to their buffers
// and fires their hooks, and forgets those leaves, so a leaf read twice by the entry fires once.
void finish_ready_leaves(const TapeEntry& entry, std::int64_t i, ReplayState& state) {
  for (const auto& in : entry.inputs) {
    if (!in) continue;
    const auto it = state.final_entry.find(in.get());
    if (it == state.final_entry.end() || it->second != i) continue;
    state.final_entry.erase(it);
    flush(*in, state.pending);
    run_grad_ready_hooks(*in);
  }
}

}  // namespace

bool should_record(std::initializer_list<const Tensor*> inputs) {
  if (!grad_enabled()) return false;
  for (const Tensor* t : inputs)
    if (needs_grad(*t)) return true;
  return false;
}

bool should_record(const std::vector<Tensor>& inputs) {
  if (!grad_enabled()) return false;
  for (const Tensor& t : inputs)
    if (needs_grad(t)) return true;
  return false;
}

void record(const char* op, const std::vector<Tensor>& inputs, std::vector<Tensor*> outputs,
            BackwardFn backward) {
  TapeEntry entry;
  entry.id = tape.next_id++;
  entry.op = op;
  for (const Tensor& t : inputs) {
    entry.inputs.push_back(needs_grad(t) ? t.autograd_meta() : nullptr);
    entry.input_shapes.push_back(t.defined() ? t.shape() : Shape{});
  }
  for (Tensor* out : outputs) {
    auto meta = std::make_shared<AutogradMeta>();
    meta->requires_grad = true;
    meta->producer = entry.id;
    out->mutable_autograd_meta() = meta;
    entry.outputs.push_back(meta);
    entry.output_templates.push_back({out->shape(), out->dtype(), out->device()});
  }
  entry.backward = std::move(backward);
  tape.entries.push_back(std::move(entry));
}

struct TapeScope::Saved {
  std::vector<TapeEntry> entries;
};

TapeScope::TapeScope() : saved_(std::make_unique<Saved>()) { std::swap(saved_->entries, tape.entries); }
TapeScope::~TapeScope() { std::swap(saved_->entries, tape.entries); }

std::size_t tape_size() { return tape.entries.size(); }
void clear_tape() { tape.entries.clear(); }

void backward(const Tensor& output, const Tensor& grad) {
  DARK_CHECK(output.defined(), "backward: output tensor is undefined");
  DARK_CHECK(output.requires_grad(), "backward: ", output.describe(),
             " does not require grad (no input of the ops that made it requires grad, or it was "
             "computed under no_grad)");
  Tensor seed = grad;
  if (!seed.defined()) {
    DARK_CHECK(output.numel() == 1, "backward: output of shape ", shape_str(output.shape()),
               " is not a scalar; pass an explicit gradient of that shape");
    seed = Tensor::ones(output.shape(), output.dtype(), output.device());
  }
  DARK_CHECK(seed.shape() == output.shape(), "backward: gradient of shape ", shape_str(seed.shape()),
             " for an output of shape ", shape_str(output.shape()));
  DARK_CHECK(seed.device() == output.device(), "backward: gradient on ", seed.device().to_string(),
             " for an output on ", output.device().to_string());

  NoGradGuard no_grad;
  AutogradMeta& root = *output.autograd_meta();
  ReplayState state;
  if (root.producer < 0) {  // backward from a leaf: its gradient is the seed
    accumulate(root, seed, true, state);
    flush(root, state.pending);
    run_grad_ready_hooks(root);
    return;
  }
  std::int64_t start = -1;
  for (std::int64_t i = static_cast<std::int64_t>(tape.entries.size()) - 1; i >= 0; --i)
    if (tape.entries[i].id == root.producer) start = i;
  DARK_CHECK(start >= 0, "backward: the ops that produced this tensor are no longer on the tape (an "
                         "earlier backward consumed them, or clear_tape() was called); recompute the forward pass");
  plan_replay(root, start, state);
  accumulate(root, seed, false, state);

  for (std::int64_t i = start; i >= 0; --i) {
    TapeEntry entry = std::move(tape.entries[i]);  // freed (with what it saved) at the end of this iteration
    replay(entry, state);
    // Also after a skipped entry: the leaves whose last contribution it was get nothing more.
    if (!state.final_entry.empty()) finish_ready_leaves(entry, i, state);
  }
  DARK_CHECK(state.pending.empty(), "backward: ", state.pending.size(),
             " bound gradient(s) were never added to their buffer");
  DARK_CHECK(state.held.empty(), "backward: ", state.held.size(), " held gradient term(s) were never summed");
  tape.entries.clear();
}

}  // namespace dark
