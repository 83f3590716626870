#!/usr/bin/env python3
"""Checks the relative links of README.md, CONTRIBUTING.md and doc/*.md.

Every link [text](target) whose target is not a URL must name a file or
directory of the tree (relative to the linking file), and a #anchor must be
a heading of the target Markdown file, slugged as GitHub does (lower case,
punctuation other than - and _ dropped, spaces to -, -1, -2 for repeats).
Links inside code blocks and code spans are ignored.  Usage:
check_links.py [TREE].  Prints each broken link; exit status 1 when any.
"""
import glob
import os
import re
import sys

LINK = re.compile(r'(?<!\!)\[(?:[^\]\\]|\\.)*\]\(([^)\s]+)(?:\s+"[^"]*")?\)')


def strip_code(text):
    text = re.sub(r'^(```|~~~).*?^\1\s*$', '', text, flags=re.S | re.M)
    return re.sub(r'`[^`\n]*`', '', text)


def slug(heading):
    s = heading.strip().lower()
    s = re.sub(r'[`*]', '', s)
    s = re.sub(r'\[([^\]]*)\]\([^)]*\)', r'\1', s)
    s = re.sub(r'[^\w\- ]', '', s)
    return s.replace(' ', '-')


def anchors(path):
    seen, out = {}, set()
    with open(path, encoding='utf-8') as f:
        text = re.sub(r'^(```|~~~).*?^\1\s*$', '', f.read(), flags=re.S | re.M)
    for m in re.finditer(r'^#{1,6}\s+(.*?)\s*#*\s*$', text, re.M):
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else '%s-%d' % (base, n))
    return out


def check(tree):
    files = [os.path.join(tree, f) for f in ('README.md', 'CONTRIBUTING.md')]
    files += sorted(glob.glob(os.path.join(tree, 'doc', '*.md')))
    broken = []
    for path in files:
        if not os.path.exists(path):
            continue
        with open(path, encoding='utf-8') as f:
            text = strip_code(f.read())
        for m in LINK.finditer(text):
            target = m.group(1)
            if re.match(r'^[a-z][a-z0-9+.-]*:', target, re.I):
                continue            # http:, https:, mailto:
            file_part, _, anchor = target.partition('#')
            dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
            rel = os.path.relpath(path, tree)
            if not os.path.exists(dest):
                broken.append('%s: %s: no such file' % (rel, target))
            elif anchor and dest.endswith('.md') and anchor not in anchors(dest):
                broken.append('%s: %s: no heading with that anchor' % (rel, target))
    return broken


if __name__ == '__main__':
    tree = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), '..')
    broken = check(tree)
    for b in broken:
        print(b)
    sys.exit(1 if broken else 0)
