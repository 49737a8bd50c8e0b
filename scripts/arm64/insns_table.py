"""The table of scripts/arm64_check.sh insns: instructions per image by kernel and build, from
the logs npu_data/bench/kernel_insns.py and the plugin scripts/arm64/insn_count.c wrote."""

import pathlib
import re
import sys

cache = pathlib.Path(sys.argv[1])
table: dict[str, dict[str, float]] = {}
builds = {}
for build in ("native", "portable", "scalar"):
    case, per = None, 1
    for line in (cache / f"insns-{build}.log").read_text().splitlines():
        if line.startswith("build "):
            builds[build] = line[6:]
        elif m := re.match(r"case (.*) per_image_of (\d+)$", line):
            case, per = m.group(1), int(m.group(2))
        elif (m := re.match(r"insns (\d+)$", line)) and case:
            table.setdefault(case, {})[build] = int(m.group(1)) / per
for build, desc in builds.items():
    print(f"{build}: {desc}")
print(f"{'aarch64 instructions per image':<32} {'native':>12} {'portable':>12} {'scalar':>13}"
      "  portable/native  scalar/native")
for case, row in table.items():
    n, p, s = (row.get(b, float("nan")) for b in ("native", "portable", "scalar"))
    print(f"{case:<32} {n:>12,.0f} {p:>12,.0f} {s:>13,.0f}  {p / n:>15.2f}  {s / n:>13.2f}")
