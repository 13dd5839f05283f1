#!/usr/bin/env python3
"""Static evidence about CUDA kernels, for sessions without a GPU.

Compiles each given .cu file for one architecture (sm_90a by default) with the flags of a
configured CUDA build (its compile_commands.json), then prints one row per kernel:
registers, spills and stack (ptxas -v), and, from the SASS (cuobjdump -sass), how many
tensor-core instructions (HMMA: mma.sync; HGMMA: Hopper's wgmma), ldmatrix (LDSM), async
copies (LDGSTS: cp.async; UTMALDG: TMA), shared loads / stores and barriers the kernel has.

    scripts/kernel_evidence.py core/cuda/flash_attention.cu core/cuda/linear_attention.cu
    scripts/kernel_evidence.py --build-dir build-gpu --arch 90 --filter flash core/cuda/flash_attention.cu

cuobjdump is not part of the CUDA toolkit this project installs; the script installs PyPI's
nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm into cache/cuobjdump the first time (it needs no GPU and no driver).
Counts are static (instructions in the code, not executed ones): they show that a hot loop
uses the tensor cores, not how fast it runs. Warp-specialised kernels move registers between
warpgroups with setmaxnreg: ptxas then reports the count at entry and the spills of every
region together, so the table adds the counts the SASS sets (computing / loading warpgroups)
and the local loads and stores (STL, LDL) of the code after the raise, laid out up to the
lowering, and how many instructions each region holds (computing: from the raise; loading:
from the lowering). Exits non-zero when a kernel matching --require-no-spills spills (in the computing
code, for those kernels).
"""
import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OPCODES = ["HMMA", "HGMMA", "LDSM", "LDGSTS", "UTMALDG", "LDS", "STS", "BAR", "MUFU.EX2"]


def find_cuobjdump() -> str:
    for candidate in (shutil.which("cuobjdump"), "/usr/local/cuda/bin/cuobjdump"):
        if candidate and Path(candidate).exists():
            return candidate
    target = REPO / "cache" / "cuobjdump"
    tool = next(target.rglob("bin/cuobjdump"), None) if target.exists() else None
    if tool is None:
        print("kernel_evidence: installing nvidia-cuda-cuobjdump into cache/cuobjdump (pip)", file=sys.stderr)
        # cuobjdump -sass runs nvdisasm, found beside it
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--target", str(target),
                        "nvidia-cuda-cuobjdump", "nvidia-cuda-nvdisasm"], check=True)
        tool = next(target.rglob("bin/cuobjdump"), None)
    if tool is None:
        sys.exit("kernel_evidence: no cuobjdump after installing nvidia-cuda-cuobjdump")
    return str(tool)


def compile_command(build_dir: Path, source: Path, arch: str, output: Path) -> list:
    commands = build_dir / "compile_commands.json"
    if not commands.exists():
        sys.exit(f"kernel_evidence: {commands} is missing: configure a CUDA build there first, e.g.\n"
                 f"  cmake -S . -B {build_dir} -DDARK_USE_CUDA=ON -DCMAKE_EXPORT_COMPILE_COMMANDS=ON")
    for entry in json.loads(commands.read_text()):
        if Path(entry["file"]).resolve() == source.resolve():
            words = shlex.split(entry["command"])
            break
    else:
        sys.exit(f"kernel_evidence: {source} is not compiled by the build in {build_dir}")
    out = []
    skip = False
    for w in words:
        if skip:
            skip = False
            continue
        if w == "-o":
            skip = True
            continue
        if w.startswith("--generate-code") or w.startswith("-gencode"):
            continue
        out.append(w)
    out += [f"--generate-code=arch=compute_{arch},code=sm_{arch}", "-Xptxas", "-v", "-o", str(output)]
    return out, entry["directory"]


def demangle(names):
    if not names or not shutil.which("c++filt"):
        return {n: n for n in names}
    result = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True)
    return dict(zip(names, result.stdout.splitlines()))


def short(name: str) -> str:
    name = name.replace("(anonymous namespace)::", "")
    name = re.sub(r"\bdark::(cuda::)?", "", name)
    name = re.sub(r"^void ", "", name)
    name = re.sub(r"\(.*\)$", "", name)  # the parameter list
    return name


def ptxas_rows(log: str):
    rows = {}
    current = None
    for line in log.splitlines():
        m = re.search(r"Compiling entry function '([^']+)'", line)
        if m:
            current = m.group(1)
            rows[current] = {}
            continue
        if current is None:
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            rows[current].update(stack=int(m.group(1)), spill_st=int(m.group(2)), spill_ld=int(m.group(3)))
        m = re.search(r"Used (\d+) registers", line)
        if m:
            rows[current]["regs"] = int(m.group(1))
    return rows


def sass_counts(sass: str):
    counts = {}
    current = None
    region = None  # "grow" after a USETMAXREG.TRY_ALLOC, "shrink" after a USETMAXREG.DEALLOC
    for line in sass.splitlines():
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            current = m.group(1)
            counts[current] = {op: 0 for op in OPCODES + ["total"]}
            counts[current].update(grow=None, shrink=None, grow_local=0, grow_total=0, shrink_total=0)
            region = None
            continue
        if current is None:
            continue
        m = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)([^;]*)", line)
        if not m:
            continue
        op = m.group(1)
        c = counts[current]
        c["total"] += 1
        for key in OPCODES:
            if op == key or op.startswith(key + "."):
                c[key] += 1
        if op.startswith("USETMAXREG"):
            value = re.search(r"0x([0-9a-f]+)", m.group(2))
            region = "grow" if "TRY_ALLOC" in op else "shrink"
            if value:
                c[region] = int(value.group(1), 16)
        else:
            if region is not None:
                c[f"{region}_total"] += 1
            if region == "grow" and (op.startswith("STL") or op.startswith("LDL")):
                c["grow_local"] += 1
    return counts


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sources", nargs="+", help=".cu files of the project")
    parser.add_argument("--build-dir", default="build-gpu", help="configured CUDA build (default build-gpu)")
    parser.add_argument("--arch", default="90a", help="compute capability without the dot (default 90a: H100 / H200 with wgmma)")
    parser.add_argument("--filter", default="", help="only kernels whose name contains this")
    parser.add_argument("--require-no-spills", default=None, metavar="SUBSTRING",
                        help="fail when a kernel whose name contains SUBSTRING spills")
    args = parser.parse_args()
    build_dir = (REPO / args.build_dir) if not os.path.isabs(args.build_dir) else Path(args.build_dir)
    cuobjdump = find_cuobjdump()
    failed = False
    print(f"| kernel | regs | spill st/ld (B) | stack (B) | setmaxnreg | computing STL+LDL | {' | '.join(OPCODES)} "
          f"| SASS instr | computing / loading instr |")
    print("|---|" + "---|" * (len(OPCODES) + 7))
    with tempfile.TemporaryDirectory() as tmp:
        for source in args.sources:
            path = (REPO / source) if not os.path.isabs(source) else Path(source)
            obj = Path(tmp) / (path.stem + ".o")
            cmd, cwd = compile_command(build_dir, path, args.arch, obj)
            compiled = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
            if compiled.returncode != 0:
                sys.exit(f"kernel_evidence: compiling {source} failed:\n{compiled.stderr[-4000:]}")
            rows = ptxas_rows(compiled.stderr)
            env = dict(os.environ, PATH=f"{Path(cuobjdump).parent}{os.pathsep}{os.environ.get('PATH', '')}")
            sass = subprocess.run([cuobjdump, "-sass", str(obj)], capture_output=True, text=True, check=True,
                                  env=env).stdout
            counts = sass_counts(sass)
            names = demangle(sorted(rows))
            for mangled in sorted(rows, key=lambda n: short(names[n])):
                name = short(names[mangled])
                if args.filter and args.filter not in name:
                    continue
                r, c = rows[mangled], counts.get(mangled, {})
                reallocates = c.get("grow") is not None
                spills = c["grow_local"] if reallocates else r.get("spill_st", 0) + r.get("spill_ld", 0)
                if args.require_no_spills is not None and args.require_no_spills in name and spills:
                    failed = True
                cells = [str(c.get(op, "?")) for op in OPCODES]
                moved = f"{c['grow']} / {c.get('shrink') or '-'}" if reallocates else "-"
                computing = str(c["grow_local"]) if reallocates else "-"
                regions = f"{c['grow_total']} / {c['shrink_total']}" if reallocates else "-"
                print(f"| {name} | {r.get('regs', '?')} | {r.get('spill_st', 0)}/{r.get('spill_ld', 0)} | "
                      f"{r.get('stack', 0)} | {moved} | {computing} | {' | '.join(cells)} | {c.get('total', '?')} "
                      f"| {regions} |")
    if failed:
        sys.exit(f"kernel_evidence: a kernel matching '{args.require_no_spills}' spills registers")


if __name__ == "__main__":
    main()
