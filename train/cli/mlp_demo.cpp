// MLP demo (see mlp_demo.h). Teacher: y = tanh(x W1) w2 with fixed random weights.
// Student: y = gelu(x A + a) B + b, trained by SGD on the mean squared error.
#include "train/cli/mlp_demo.h"

#include <cmath>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "autograd/tape.h"

namespace dark::cli {
namespace {

// Philox streams keyed by purpose, so data and weights never share random numbers.
enum Stream : std::uint64_t { kTeacher = 1, kStudent = 2, kTrainData = 3, kEvalData = 4 };

Tensor scaled_randn(const Shape& shape, std::uint64_t seed, std::uint64_t stream, double scale) {
  NoGradGuard no_grad;
  return mul_scalar(Tensor::randn(shape, seed, stream), scale);
}

}  // namespace

MlpDemoResult run_mlp_demo(const MlpDemoConfig& c, const std::function<void(int, double)>& progress) {
  const std::int64_t d = c.input_dim, h = c.hidden_dim;
  const double in_scale = 1.0 / std::sqrt(static_cast<double>(d));
  const Tensor teacher_w1 = scaled_randn({d, 16}, c.seed, kTeacher, 2.0 * in_scale);
  const Tensor teacher_w2 = scaled_randn({16, 1}, c.seed + 1, kTeacher, 0.5);
  auto teacher = [&](const Tensor& x) { return matmul(tanh(matmul(x, teacher_w1)), teacher_w2); };

  std::vector<Tensor> params = {
      scaled_randn({d, h}, c.seed, kStudent, in_scale), Tensor::zeros({h}),
      scaled_randn({h, 1}, c.seed + 1, kStudent, 1.0 / std::sqrt(static_cast<double>(h))), Tensor::zeros({1})};
  for (Tensor& p : params) p.set_requires_grad(true);
  auto student = [&](const Tensor& x) { return add(matmul(gelu(add(matmul(x, params[0]), params[1])), params[2]), params[3]); };
  auto mse = [](const Tensor& pred, const Tensor& target) { return mean(square(sub(pred, target))); };

  const Tensor eval_x = Tensor::randn({512, d}, c.seed, kEvalData);
  Tensor eval_y;
  {
    NoGradGuard no_grad;
    eval_y = teacher(eval_x);
  }
  auto eval_loss = [&] {
    NoGradGuard no_grad;
    return mse(student(eval_x), eval_y).item();
  };

  MlpDemoResult result;
  result.initial_eval_loss = eval_loss();
  for (int step = 0; step < c.steps; ++step) {
    Tensor x = Tensor::randn({c.batch_size, d}, c.seed, kTrainData + (static_cast<std::uint64_t>(step) << 8));
    Tensor y;
    {
      NoGradGuard no_grad;
      y = teacher(x);
    }
    Tensor loss = mse(student(x), y);
    backward(loss);
    {
      NoGradGuard no_grad;
      for (Tensor& p : params) {
        p.copy_(sub(p, mul_scalar(p.grad(), c.learning_rate)));
        p.zero_grad();
      }
    }
    result.losses.push_back(loss.item());
    if (progress) progress(step, result.losses.back());
  }
  result.final_eval_loss = eval_loss();
  return result;
}

}  // namespace dark::cli
