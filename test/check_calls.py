#!/usr/bin/env python3
"""No two C files of src/ (or of src/client/) call each other.

For every pair of files src/A.c and src/B.c, fails when A uses a function
defined in B and B one defined in A, and prints both uses.  A use is any
mention of the name outside comments and literals (a call, or the function
passed as a callback); definitions are found by PostgreSQL's layout, the
function's name at the start of a line followed by its parameters and a
brace.  Also fails when the files' uses form a longer cycle.

    test/check_calls.py [TREE]     # TREE/src; default: the tree of this script
"""
import os
import re
import sys
from itertools import combinations

here = os.path.dirname(os.path.abspath(__file__))
tree = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..")
srcdir = os.path.join(tree, "src")


def strip(text):
    """Blank comments and string/char literals, keeping line breaks."""
    pat = re.compile(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
    return pat.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


defn = re.compile(r"^([A-Za-z_]\w*)\s*\(([^;{}]*)\)\s*\{", re.M)
ident = re.compile(r"\b[A-Za-z_]\w*\b")

def check(srcdir):
    """Prints the uses between the C files of srcdir; returns the cycles found."""
    files = sorted(f for f in os.listdir(srcdir) if f.endswith(".c"))
    code = {}
    defined = {}   # name -> file, external functions only
    for f in files:
        with open(os.path.join(srcdir, f)) as fh:
            code[f] = strip(fh.read())
        for m in defn.finditer(code[f]):
            start = code[f].rfind("\n", 0, max(m.start() - 1, 0))
            rettype = code[f][start + 1:m.start()]
            if re.search(r"\bstatic\b", rettype):
                continue
            defined[m.group(1)] = f

    uses = {f: {} for f in files}  # file -> {other file: [names]}
    for f in files:
        for name in sorted(set(ident.findall(code[f]))):
            g = defined.get(name)
            if g is not None and g != f:
                uses[f].setdefault(g, []).append(name)

    bad = 0
    for a, b in combinations(files, 2):
        if b in uses[a] and a in uses[b]:
            bad += 1
            print("cycle: %s uses %s of %s; %s uses %s of %s"
                  % (a, ", ".join(uses[a][b]), b, b, ", ".join(uses[b][a]), a))

    # Longer cycles: depth-first search for a back edge.
    state = {}
    stack = []


    def visit(f):
        nonlocal bad
        state[f] = 1
        stack.append(f)
        for g in sorted(uses[f]):
            if state.get(g) == 1:
                cyc = stack[stack.index(g):] + [g]
                if len(cyc) > 3:
                    bad += 1
                    print("cycle: " + " -> ".join(cyc))
            elif g not in state:
                visit(g)
        stack.pop()
        state[f] = 2


    for f in files:
        if f not in state:
            visit(f)

    for f in files:
        print("%-20s uses %s" % (f, ", ".join(sorted(uses[f])) or "-"))
    if bad:
        print("FAIL: %d cycle(s) between the files of %s" % (bad, os.path.normpath(srcdir)))
    else:
        print("ok: no two files of %s call each other" % os.path.normpath(srcdir))
    return bad


# The extension (src/) and the client (src/client/) are checked apart: each
# is its own program, and neither calls the other.
sys.exit(1 if check(srcdir) + check(os.path.join(srcdir, "client")) else 0)
