// gradcheck (see gradcheck.h): perturbs each input element in place through its strides.
#include "autograd/gradcheck.h"

#include <cmath>
#include <sstream>

#include "autograd/grad_mode.h"
#include "autograd/tape.h"

namespace dark {
namespace {

double weighted_sum(const Tensor& out, const std::vector<double>& dout) {
  const std::vector<double> v = out.to(DType::f64).to_vector<double>();
  double s = 0;
  for (std::size_t i = 0; i < v.size(); ++i) s += v[i] * dout[i];
  return s;
}

// Storage offset (in elements) of the logical row-major element `index` of t.
std::int64_t element_offset(const Tensor& t, std::int64_t index) {
  std::int64_t offset = t.offset();
  for (std::size_t axis = t.dim(); axis-- > 0;) {
    offset += (index % t.shape()[axis]) * t.strides()[axis];
    index /= t.shape()[axis];
  }
  return offset;
}

}  // namespace

GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                          const std::vector<Tensor>& inputs, GradcheckOptions options) {
  for (const Tensor& t : inputs) {
    DARK_CHECK(!t.requires_grad() || (t.dtype() == DType::f64 && t.device().is_cpu()),
               "gradcheck: differentiated inputs must be f64 on the cpu, got ", t.describe());
    for (std::size_t a = 0; a < t.dim(); ++a)
      DARK_CHECK(!(t.requires_grad() && t.strides()[a] == 0 && t.shape()[a] > 1),
                 "gradcheck: input ", t.describe(), " is an expanded view; perturbing one element would move several");
  }
  for (Tensor t : inputs) t.zero_grad();

  // Analytic: one backward of sum(out * dout).
  Tensor out = fn(inputs);
  const Tensor dout_tensor = Tensor::randn(out.shape(), options.seed, 0, DType::f64).to(out.dtype());
  const std::vector<double> dout = dout_tensor.to(DType::f64).to_vector<double>();
  backward(out, dout_tensor);

  GradcheckResult result;
  std::ostringstream report;
  NoGradGuard no_grad;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    Tensor x = inputs[i];
    if (!x.requires_grad()) continue;
    const Tensor analytic_tensor = x.grad();
    const std::vector<double> analytic = analytic_tensor.defined()
                                             ? analytic_tensor.to(DType::f64).to_vector<double>()
                                             : std::vector<double>(x.numel(), 0.0);
    double* base = static_cast<double*>(x.storage()->data());
    int reported = 0;
    for (std::int64_t e = 0; e < x.numel(); ++e) {
      double& v = base[element_offset(x, e)];
      const double original = v;
      v = original + options.eps;
      const double plus = weighted_sum(fn(inputs), dout);
      v = original - options.eps;
      const double minus = weighted_sum(fn(inputs), dout);
      v = original;
      const double numeric = (plus - minus) / (2 * options.eps);
      const double abs_err = std::fabs(numeric - analytic[e]);
      const double rel_err = abs_err / std::max(std::fabs(numeric), 1e-12);
      result.max_abs_error = std::max(result.max_abs_error, abs_err);
      if (abs_err > options.atol) result.max_rel_error = std::max(result.max_rel_error, rel_err);
      if (!(abs_err <= options.atol + options.rtol * std::fabs(numeric))) {
        result.ok = false;
        if (reported++ < 5)
          report << "input " << i << " " << x.describe() << " element " << e << ": analytic " << analytic[e]
                 << " numeric " << numeric << " (abs err " << abs_err << ")\n";
      }
    }
    x.zero_grad();
  }
  result.report = report.str();
  return result;
}

}  // namespace dark
