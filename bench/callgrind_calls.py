#!/usr/bin/env python3
"""callgrind_calls.py FILE NAME... - how many times each named function was
called in a callgrind profile (summed over every caller), e.g. malloc."""
import re
import sys

names = {}        # compressed id -> function name
counts = {n: 0 for n in sys.argv[2:]}
current = None    # the function the next calls= line calls
with open(sys.argv[1], encoding="utf-8", errors="replace") as f:
    for line in f:
        m = re.match(r"c?fn=\((\d+)\)(?: (.*))?", line)
        if m:
            if m.group(2) is not None:
                names[m.group(1)] = m.group(2).strip()
            current = names.get(m.group(1)) if line.startswith("cfn=") else None
            continue
        if current is not None and line.startswith("calls="):
            if current in counts:
                counts[current] += int(line.split()[0][6:])
            current = None
print(" ".join(f"{n}={c}" for n, c in counts.items()))
