#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""List every relative markdown link in the tracked .md files that does not
resolve: a target file or folder that is not there, or a #fragment that names
no heading of its page. Exits 1 if any is found, 2 on a bad argument, 0
otherwise.

  scripts/check-links.py [--paths] [FILE.md ...]

With no FILE, every .md file git tracks (every .md file under the tree when
there is no git). Links to other sites (http:, mailto: ...) are not fetched,
and links that climb out of the tree (CHANGELOG.md's ../../compare/A...B, a
page of the repository's web site) are counted, not checked.

--paths also checks the paths into bench/results that the pages write as code
(`bench/results/...`, `results/...` from bench/, `2026-...` from
bench/results/): each must exist, a glob or {a,b} naming at least one file;
one written `COMMIT:bench/results/...` names a file the tree no longer holds
and must exist at that commit (`git show COMMIT:PATH` prints it).
"""
import fnmatch
import glob
import os
import re
import subprocess
import sys
import unicodedata
import urllib.parse

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(<[^>]*>|[^\s()]*(?:\([^\s()]*\)[^\s()]*)*)(?:\s+(?:\"[^\"]*\"|'[^']*'|\([^)]*\)))?\s*\)")
REF_DEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
HISTORY = re.compile(r"^([0-9a-f]{7,40}):(bench/results/\S+)$")
DATED = re.compile(r"^20\d\d-\d\d-\d\d-")


def tracked_md():
    try:
        out = subprocess.run(["git", "-C", ROOT, "ls-files", "-z", "--", "*.md"],
                             check=True, capture_output=True).stdout
        return sorted(p for p in out.decode().split("\0") if p)
    except (OSError, subprocess.CalledProcessError):
        found = []
        for d, dirs, files in os.walk(ROOT):
            dirs[:] = [x for x in dirs if not x.startswith((".", "build"))]
            found += [os.path.relpath(os.path.join(d, f), ROOT) for f in files if f.endswith(".md")]
        return sorted(found)


def lines_outside_fences(text):
    """Yield (line number, line) for the lines outside fenced code blocks."""
    fence = None
    for n, line in enumerate(text.splitlines(), 1):
        m = FENCE.match(line)
        if fence:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
                fence = None
            continue
        if m:
            fence = m.group(1)
            continue
        yield n, line


def paragraphs(text):
    """Yield (first line number, text) for each run of non-blank lines outside
    fenced code blocks: a code span may cross lines, never a blank one."""
    block, first, last = [], 0, 0
    for n, line in lines_outside_fences(text):
        if line.strip() and n == last + 1 and block:
            block.append(line)
        else:
            if block:
                yield first, "\n".join(block)
            block, first = ([line], n) if line.strip() else ([], 0)
        last = n
    if block:
        yield first, "\n".join(block)


def slug(heading):
    """The anchor GitHub gives a heading: lower case, markup and punctuation
    dropped, spaces made hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = text.replace("`", "").lower()
    kept = []
    for ch in text:
        cat = unicodedata.category(ch)
        if ch in " -_" or cat[0] in "LN" or cat == "Mn":
            kept.append("-" if ch == " " else ch)
    return "".join(kept)


_anchors = {}


def anchors(path):
    if path not in _anchors:
        seen = {}
        names = set()
        with open(path, encoding="utf-8") as f:
            for _, line in lines_outside_fences(f.read()):
                m = HEADING.match(line)
                if not m:
                    continue
                base = slug(m.group(2))
                n = seen.get(base, 0)
                seen[base] = n + 1
                names.add(base if n == 0 else f"{base}-{n}")
        _anchors[path] = names
    return _anchors[path]


OUTSIDE = "outside the tree"


def check_link(md, dest):
    """None if dest resolves from page md, OUTSIDE if it climbs out of the
    tree (GitHub's ../../compare/A...B), else why not."""
    if dest.startswith("<") and dest.endswith(">"):
        dest = dest[1:-1]
    if not dest or SCHEME.match(dest):
        return None
    target, _, fragment = dest.partition("#")
    target = urllib.parse.unquote(target)
    if not target:
        path = os.path.join(ROOT, md)
    elif target.startswith("/"):
        path = os.path.join(ROOT, target.lstrip("/"))
    else:
        path = os.path.normpath(os.path.join(ROOT, os.path.dirname(md), target))
    if os.path.relpath(path, ROOT).startswith(os.pardir):
        return OUTSIDE
    if not os.path.exists(path):
        return "no such file or folder"
    if fragment and path.endswith(".md") and os.path.isfile(path):
        if urllib.parse.unquote(fragment).lower() not in anchors(path):
            return f"no heading #{fragment} in {os.path.relpath(path, ROOT)}"
    return None


def expand_braces(pattern):
    m = re.search(r"\{([^{}]*)\}", pattern)
    if not m:
        return [pattern]
    out = []
    for alt in m.group(1).split(","):
        out += expand_braces(pattern[:m.start()] + alt + pattern[m.end():])
    return out


_history = {}


def in_history(commit, path):
    """Whether commit's tree holds path (a glob matches at least one file)."""
    folder = os.path.dirname(path.rstrip("/"))
    key = (commit, folder)
    if key not in _history:
        try:
            out = subprocess.run(["git", "-C", ROOT, "ls-tree", "-r", "--name-only", "-z",
                                  commit, "--", folder + "/"],
                                 check=True, capture_output=True).stdout
            _history[key] = [p for p in out.decode().split("\0") if p]
        except (OSError, subprocess.CalledProcessError):
            _history[key] = None
    names = _history[key]
    if names is None:
        return False
    want = path.rstrip("/")
    return any(p == want or p.startswith(want + "/") or fnmatch.fnmatchcase(p, want)
               for p in names)


def code_path(md, span):
    """The repository path a code span names in bench/results, or None."""
    span = span.strip().rstrip(".,;")
    if " " in span or "=" in span or "<" in span:
        return None
    if span.startswith("bench/results/"):
        return span
    if md.startswith("bench/") and span.startswith("results/"):
        return "bench/" + span
    if md.startswith("bench/results/") and DATED.match(span):
        return "bench/results/" + span
    return None


def check_path(md, span):
    m = HISTORY.match(span.strip().rstrip(".,;"))
    if m:
        commit, path = m.groups()
        if all(in_history(commit, p) for p in expand_braces(path)):
            return None
        return f"not in git history at {commit}"
    path = code_path(md, span)
    if path is None:
        return None
    for p in expand_braces(path):
        if not glob.glob(os.path.join(ROOT, p.rstrip("/"))):
            return "no such file or folder (a removed file is written COMMIT:path)"
    return None


def main(argv):
    if any(a in ("-h", "--help") for a in argv):
        print(__doc__.strip())
        return 0
    paths = "--paths" in argv
    files = [a for a in argv if a != "--paths"]
    for a in files:
        if a.startswith("-") or not os.path.isfile(a):
            why = "unknown option" if a.startswith("-") else "no such file"
            print(f"check-links: {a}: {why}; usage:\n{__doc__.strip()}", file=sys.stderr)
            return 2
    files = [os.path.relpath(os.path.abspath(f), ROOT) for f in files] or tracked_md()
    broken = links = outside = 0
    for md in files:
        with open(os.path.join(ROOT, md), encoding="utf-8") as f:
            text = f.read()
        for first, block in paragraphs(text):
            plain = CODE_SPAN.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), block)
            for n, line in enumerate(plain.split("\n"), first):
                dests = [m.group(1) for m in INLINE_LINK.finditer(line)]
                m = REF_DEF.match(line)
                if m:
                    dests.append(m.group(1))
                for dest in dests:
                    links += 1
                    why = check_link(md, dest)
                    if why == OUTSIDE:
                        outside += 1
                    elif why:
                        broken += 1
                        print(f"{md}:{n}: link {dest}: {why}")
            if paths:
                for m in CODE_SPAN.finditer(block):
                    span = " ".join(m.group(2).split())
                    why = check_path(md, span)
                    if why:
                        broken += 1
                        n = first + block.count("\n", 0, m.start())
                        print(f"{md}:{n}: path {span}: {why}")
    what = f"{links} links" + (" and the bench/results paths in code" if paths else "")
    print(f"check-links: {len(files)} files, {what}: {broken} that do not resolve"
          f" ({outside} links out of the tree, to the repository's web pages, not checked)")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
