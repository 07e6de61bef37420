"""Where do a kernel's warps wait? Warp-stall samples from an Nsight Compute report, per kernel.

    python -m bench.ncu_stalls REPORT.ncu-rep [--top 15] [--json out.json]
    python -m bench.ncu_stalls source.csv                  (already exported: ncu -i R --page source
                                                            --csv --print-source sass > source.csv)

The report needs the SourceCounters section (``ncu --section SourceCounters ...``). For every kernel
in it this prints: the share of stall samples per reason (long_sb = waiting on global memory, short_sb =
on shared memory / MUFU, barrier = bar.sync, wait = fixed-latency dependency, selected = issuing), per
SASS opcode (with how many warp-level instructions of it ran), and the instructions that collect the most
samples. Reading: a poll of another program's words shows up as long_sb on the first instruction that
uses the loaded value.
"""
from __future__ import annotations

import collections
import csv
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

from triton_kernels.runtime import atomic_write_text

from .cli import argument_parser, run

ALL = "Warp Stall Sampling (All Samples)"


def export_source(report: Path) -> str:
    """The report's per-instruction source page (SASS) as CSV text, through the ncu command line."""
    ncu = shutil.which("ncu")
    if ncu is None:
        raise SystemExit("bench.ncu_stalls: reading an .ncu-rep needs Nsight Compute (ncu, on a CUDA GPU machine) on "
                         "the PATH; export its source page there (ncu -i R --page source --csv --print-source sass) "
                         "and pass the CSV")
    out = subprocess.run([ncu, "-i", str(report), "--page", "source", "--csv", "--print-source", "sass"],
                         capture_output=True, text=True, check=True)
    return out.stdout


def parse(text: str) -> dict[str, list[dict]]:
    """{kernel name: [one dict per SASS instruction]} from ncu's source-page CSV (kernels one after
    another, each introduced by a "Kernel Name" line)."""
    kernels = {}
    for chunk in text.split('"Kernel Name",')[1:]:
        lines = chunk.splitlines()
        name = lines[0].strip().strip(",").strip('"')
        rows = list(csv.reader(io.StringIO("\n".join(lines[1:]))))
        if not rows:
            continue
        hdr = rows[0]
        kernels[name] = [dict(zip(hdr, r)) for r in rows[1:] if len(r) == len(hdr)]
    if not kernels:
        raise ValueError("no kernel found: is this ncu's source page exported as CSV (--page source --csv)?")
    return kernels


def _num(v) -> float:
    try:
        return float(str(v).replace(",", "") or 0)
    except ValueError:
        return 0.0


def _opcode(src: str) -> str:
    words = src.split()
    if not words:
        return "?"
    op = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
    return op.split(".")[0]


def summarise(instrs: list[dict], top: int = 15) -> dict:
    """Stall-sample shares per reason and per opcode, and the ``top`` instructions by samples."""
    if not instrs or ALL not in instrs[0]:
        raise ValueError(f"no '{ALL}' column: profile with --section SourceCounters")
    reasons = [k for k in instrs[0] if k.startswith("stall_") and "Not Issued" not in k]
    total = sum(_num(r[ALL]) for r in instrs) or 1.0
    by_reason = collections.Counter()
    by_op, executed = collections.Counter(), collections.Counter()
    for r in instrs:
        for k in reasons:
            by_reason[k[len("stall_"):]] += _num(r[k])
        op = _opcode(r.get("Source", ""))
        by_op[op] += _num(r[ALL])
        executed[op] += _num(r.get("Instructions Executed", 0))
    worst = sorted(instrs, key=lambda r: -_num(r[ALL]))[:top]
    return {
        "samples": total,
        "warp_instructions": sum(executed.values()),
        "reasons": {k: v / total for k, v in by_reason.most_common()},
        "opcodes": {k: {"share": v / total, "executed": executed[k]} for k, v in by_op.most_common()},
        "top": [{"source": r.get("Source", "").strip(), "share": _num(r[ALL]) / total,
                 "reason": max(reasons, key=lambda k: _num(r[k]))[len("stall_"):]} for r in worst],
    }


def main(argv=None) -> int:
    p = argument_parser("bench.ncu_stalls", __doc__, full=False)
    p.add_argument("source", type=Path, nargs="?", help="an .ncu-rep report, or its source page exported as CSV")
    p.add_argument("--top", type=int, default=15)
    p.add_argument("--json", type=Path, default=None)
    a = p.parse_args(argv)
    if a.source is None:
        raise SystemExit("bench.ncu_stalls needs a CUDA GPU's Nsight Compute report (REPORT.ncu-rep, made with ncu "
                         "--section SourceCounters) or its source page exported as CSV; nothing to read")
    if not a.source.exists():
        p.error(f"source: {a.source} does not exist")
    text = export_source(a.source) if a.source.suffix == ".ncu-rep" else a.source.read_text()
    out = {}
    for name, instrs in parse(text).items():
        s = out[name] = summarise(instrs, a.top)
        print(f"== {name}: {s['samples']:.0f} stall samples, {s['warp_instructions']:.0f} warp-level instructions")
        print("   by reason:  " + "  ".join(f"{k} {v * 100:.1f}%" for k, v in list(s["reasons"].items())[:8]))
        print("   by opcode:  " + "  ".join(f"{k} {v['share'] * 100:.1f}% (ran {v['executed']:.0f})"
                                          for k, v in list(s["opcodes"].items())[:8]))
        for t in s["top"]:
            print(f"   {t['share'] * 100:5.1f}%  {t['reason']:18s} {t['source'][:70]}")
    if a.json:
        atomic_write_text(a.json, json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
