#!/usr/bin/env python3
"""Checks META.json against the PGXN Meta Spec 1.0.0 (https://pgxn.org/meta/spec.txt).

The spec's required keys are name, abstract, maintainer, license, provides,
version and meta-spec; each extension under provides needs file and version.
Versions are semantic versions (X.Y.Z); license is one of the spec's strings
(or a map of names to URLs); release_status one of stable, testing,
unstable.  Besides the spec, the release's version must match
default_version of leader_election.control (1.0 -> 1.0.0), and the files
named must exist or be built by the Makefile.  Usage: check_meta.py [TREE].
Prints every problem; exit status 1 when there is one.
"""
import json
import os
import re
import sys

LICENSES = {
    'agpl_3', 'apache_1_1', 'apache_2_0', 'artistic_1', 'artistic_2', 'bsd', 'freebsd', 'gfdl_1_2',
    'gfdl_1_3', 'gpl_1', 'gpl_2', 'gpl_3', 'lgpl_2_1', 'lgpl_3_0', 'mit', 'mozilla_1_0', 'mozilla_1_1',
    'openssl', 'perl_5', 'postgresql', 'qpl_1_0', 'ssleay', 'sun', 'zlib', 'open_source',
    'restricted', 'unrestricted', 'unknown',
}
SEMVER = re.compile(r'^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z-]+)?$')
NAME = re.compile(r'^[^/\\\s:]{2,}$')
PHASES = {'configure', 'build', 'test', 'runtime', 'develop'}
RELATIONS = {'requires', 'recommends', 'suggests', 'conflicts'}


def check(tree):
    problems = []
    with open(os.path.join(tree, 'META.json'), encoding='utf-8') as f:
        meta = json.load(f)

    def need(key, kind):
        if key not in meta:
            problems.append('required key %r is missing' % key)
            return None
        if not isinstance(meta[key], kind):
            problems.append('%r must be %s' % (key, kind.__name__ if isinstance(kind, type) else kind))
            return None
        return meta[key]

    name = need('name', str)
    if name is not None and not NAME.match(name):
        problems.append('name %r: at least two characters, no slash, backslash, colon or space' % name)
    need('abstract', str)
    maint = need('maintainer', (str, list))
    if isinstance(maint, list) and (not maint or not all(isinstance(m, str) and m for m in maint)):
        problems.append('maintainer: a non-empty list of strings')
    lic = need('license', (str, list, dict))
    for item in (lic if isinstance(lic, list) else [lic] if isinstance(lic, str) else []):
        if item not in LICENSES:
            problems.append('license %r is not one of the spec\'s license strings' % item)
    version = need('version', str)
    if version is not None and not SEMVER.match(version):
        problems.append('version %r is not a semantic version' % version)
    spec = need('meta-spec', dict)
    if spec is not None and spec.get('version') != '1.0.0':
        problems.append('meta-spec.version must be "1.0.0"')
    provides = need('provides', dict)
    for ext, info in (provides or {}).items():
        if not isinstance(info, dict):
            problems.append('provides.%s must be an object' % ext)
            continue
        for key in ('file', 'version'):
            if key not in info:
                problems.append('provides.%s.%s is required' % (ext, key))
        if 'version' in info and not SEMVER.match(str(info['version'])):
            problems.append('provides.%s.version %r is not a semantic version' % (ext, info['version']))
        for key in ('file', 'docfile'):
            path = info.get(key)
            if path and not os.path.exists(os.path.join(tree, path)) and not makefile_builds(tree, path):
                problems.append('provides.%s.%s: %s does not exist' % (ext, key, path))
    if 'release_status' in meta and meta['release_status'] not in ('stable', 'testing', 'unstable'):
        problems.append('release_status must be stable, testing or unstable')
    for phase, rels in (meta.get('prereqs') or {}).items():
        if phase not in PHASES:
            problems.append('prereqs: unknown phase %r' % phase)
        for rel, deps in (rels or {}).items():
            if rel not in RELATIONS:
                problems.append('prereqs.%s: unknown relationship %r' % (phase, rel))
            for dep, ver in (deps or {}).items():
                if not SEMVER.match(str(ver)) and not re.match(r'^[<>=!, 0-9.]+$', str(ver)) and ver != 0:
                    problems.append('prereqs.%s.%s.%s: bad version %r' % (phase, rel, dep, ver))
    if 'tags' in meta and not all(isinstance(t, str) and 0 < len(t) <= 255 for t in meta['tags']):
        problems.append('tags: strings of 1 to 255 characters')

    # The release must be the control file's default version.
    with open(os.path.join(tree, 'leader_election.control'), encoding='utf-8') as f:
        m = re.search(r"^default_version\s*=\s*'([^']+)'", f.read(), re.M)
    control = m.group(1) if m else None
    semver = control + '.0' if control and control.count('.') == 1 else control
    for where, v in [('version', version)] + [('provides.%s.version' % e, i.get('version'))
                                               for e, i in (provides or {}).items() if isinstance(i, dict)]:
        if v != semver:
            problems.append('%s %r does not match default_version %r of leader_election.control' % (where, v, control))
    return problems


def makefile_builds(tree, path):
    """The install script of the current version is generated by the Makefile."""
    return re.match(r'^leader_election--[0-9.]+\.sql$', path) is not None and \
        os.path.isdir(os.path.join(tree, 'src', 'sql'))


if __name__ == '__main__':
    problems = check(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), '..'))
    for p in problems:
        print('META.json: ' + p)
    sys.exit(1 if problems else 0)
