#!/usr/bin/env python3
"""The tree describes the design, not how it came to be: no file outside
CHANGELOG.md (and git's own) names an issue or a helper by number, or a run
by a letter (the words followed by a digit, or "run" by one letter A to P).
Prints each hit; exits 1 if any.

    test/check_history_words.py [TREE]
"""
import os
import re
import subprocess
import sys

WORDS = re.compile(r'issue [0-9]|helper [0-9]|\brun [A-P]\b', re.I)
SKIP_DIRS = {'.git', 'node_modules', '.gopath', 'tmp_check', 'tmp_check_iso', 'results', '__pycache__'}


def files(tree):
    """The tracked files when the tree is a git checkout (test runs leave logs
    and outputs in their copy of it), else every file below it."""
    try:
        out = subprocess.run(['git', '-C', tree, 'ls-files', '-z'], capture_output=True, check=True).stdout
        return [os.path.join(tree, f) for f in out.decode().split('\0') if f]
    except (OSError, subprocess.CalledProcessError):
        found = []
        for root, dirs, names in os.walk(tree):
            dirs[:] = [d for d in dirs if d not in SKIP_DIRS]
            found += [os.path.join(root, n) for n in names]
        return found


def main():
    tree = sys.argv[1] if len(sys.argv) > 1 else '.'
    hits = 0
    for path in files(tree):
        if True:
            if os.path.relpath(path, tree) == 'CHANGELOG.md' or os.path.islink(path) or not os.path.isfile(path):
                continue
            try:
                with open(path, encoding='utf-8') as f:
                    for n, line in enumerate(f, 1):
                        if WORDS.search(line):
                            print('%s:%d: %s' % (os.path.relpath(path, tree), n, line.rstrip()))
                            hits += 1
            except (UnicodeDecodeError, OSError):
                continue        # binary files
    print('%d lines name an issue, a helper or a run' % hits if hits else 'ok: no history words')
    return 1 if hits else 0


if __name__ == '__main__':
    sys.exit(main())
