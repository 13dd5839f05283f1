#!/usr/bin/env bash
# The PyPI PyTorch of the CPU benchmarks (scripts/bench_train.sh, scripts/bench_attention.sh):
# makes sure a virtual environment with the latest torch, numpy and darkformer-pytorch from
# PyPI exists, then prints its python's path on stdout (everything else goes to stderr).
# A separate environment, because Debian's python3-torch is 1.13 (no
# scaled_dot_product_attention, no fused AdamW, no torch.compile) and pip must not touch the
# system's packages. It lives under cache/ (ignored by git) and is only (re)built when its
# python cannot import torch and darkformer_pytorch, so later runs start at once and measure
# the same versions; delete the folder (or set TORCH_VENV to a new one) to upgrade.
# The torch wheel from PyPI bundles CUDA libraries; the benchmarks use its CPU side only.
#
#   torch_python="$(scripts/torch-venv.sh)" || exit 1
#
# Env: TORCH_VENV (default cache/venv-torch, relative to the repository root),
# TORCH_VENV_PYTHON (the interpreter that creates it, default python3).
# Exit: 0 with the path printed, 1 when the environment could not be made.
set -euo pipefail
cd "$(dirname "$0")/.."

venv="${TORCH_VENV:-cache/venv-torch}"
base_python="${TORCH_VENV_PYTHON:-python3}"
packages=(torch numpy darkformer-pytorch)

if "$venv/bin/python" -c "import torch, darkformer_pytorch" 2> /dev/null; then
  echo "$(cd "$venv" && pwd)/bin/python"
  exit 0
fi

if [[ ! -x "$venv/bin/python" ]]; then
  echo "torch-venv: creating $venv with $base_python -m venv" >&2
  if ! "$base_python" -m venv "$venv" >&2; then
    # Debian splits venv (ensurepip) out of python3; install it when we can, as
    # scripts/bench_train.sh does for python3-torch.
    rm -rf "$venv"
    if command -v apt-get > /dev/null && [[ "$base_python" == python3 || "$base_python" == /usr/bin/python3 ]]; then
      sudo_cmd=""
      [[ $(id -u) == 0 ]] || sudo_cmd="sudo"
      echo "torch-venv: installing python3-venv" >&2
      $sudo_cmd apt-get install -y python3-venv > /dev/null
      "$base_python" -m venv "$venv" >&2 || { echo "torch-venv: $base_python -m venv $venv failed" >&2; exit 1; }
    else
      echo "torch-venv: $base_python -m venv $venv failed (Debian: apt-get install python3-venv)" >&2
      exit 1
    fi
  fi
fi
echo "torch-venv: installing ${packages[*]} from PyPI into $venv (torch is a large download)" >&2
if ! "$venv/bin/pip" install --quiet --upgrade "${packages[@]}" >&2; then
  echo "torch-venv: pip install ${packages[*]} failed (no network or no PyPI?)" >&2
  exit 1
fi
if ! "$venv/bin/python" -c "import torch, darkformer_pytorch" >&2; then
  echo "torch-venv: $venv/bin/python still cannot import torch and darkformer_pytorch" >&2
  exit 1
fi
"$venv/bin/python" -c "import torch, darkformer_pytorch; print(f'torch-venv: torch {torch.__version__}, darkformer-pytorch {darkformer_pytorch.__version__}')" >&2
echo "$(cd "$venv" && pwd)/bin/python"
