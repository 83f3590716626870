#!/usr/bin/env python3
"""The C files of src/ and src/client/ stay readable: no function over 150
lines, no file header comment over 25 lines (the design notes belong in
src/README.md).  src/client/test_notify.c, the parser's test program, is
held to the same rules.

    test/check_functions.py [TREE]     # TREE/src; default: the tree of this script
"""
import glob
import os
import re
import sys

MAX_FUNCTION = 150
MAX_HEADER = 25

here = os.path.dirname(os.path.abspath(__file__))
tree = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..")
bad = 0
paths = sorted(glob.glob(os.path.join(tree, "src", "*.[ch]")) +
               glob.glob(os.path.join(tree, "src", "client", "*.[ch]")))
for path in paths:
    name = os.path.relpath(path, tree)
    lines = open(path).read().split("\n")
    if lines and lines[0].startswith("/*"):
        end = next((i for i, l in enumerate(lines) if l.rstrip().endswith("*/")), 0)
        if end + 1 > MAX_HEADER:
            bad += 1
            print("%s: header comment of %d lines (at most %d)" % (name, end + 1, MAX_HEADER))
    # PostgreSQL layout: return type on its own line, name at column 0,
    # body from "{" to "}" at column 0.
    for i, l in enumerate(lines):
        m = re.match(r"^([A-Za-z_]\w*)\(", l)
        if not m:
            continue
        j = i
        while j < len(lines) and lines[j] != "{" and not lines[j].rstrip().endswith(";"):
            j += 1
        if j >= len(lines) or lines[j] != "{":
            continue
        k = j
        while k < len(lines) and lines[k] != "}":
            k += 1
        length = k - i + 2      # with the line of the return type
        if length > MAX_FUNCTION:
            bad += 1
            print("%s:%d: %s is %d lines (at most %d)" % (name, i + 1, m.group(1), length, MAX_FUNCTION))
if bad:
    sys.exit(1)
print("ok: no function over %d lines, no header over %d lines in src/ and src/client/"
      % (MAX_FUNCTION, MAX_HEADER))
