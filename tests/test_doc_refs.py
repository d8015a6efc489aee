#!/usr/bin/env python3
"""Every reference from the sources into docs/ must lead somewhere.

Usage: test_doc_refs.py SOURCE_DIR

Scans the text files under src/, include/, tests/, bench/, examples/, python/, fuzz/,
scripts/ and cmake/, and the top-level CMakeLists.txt (comments and strings alike; build
trees, caches and fuzz corpora are skipped), and checks that

  - each docs/<name>.md they mention exists;
  - a section named after it exists in that file. The project's form is the file followed by
    the section's title in double quotes, e.g. docs/architecture.md "Memory accounting"; the
    title may wrap onto the next comment line, a comma may stand between file and title, and
    inside a C string the title's quotes are escaped.
    The title is the heading's text, or its words before a " (" or ":" that follows
    ("Gradient accumulation" for "## Gradient accumulation (`--grad-accum K`)"), compared as
    GitHub anchors (lowercase, punctuation dropped, spaces to '-'). A GitHub anchor written
    after '#' (docs/cuda.md#gemm-arithmetic) is checked against the headings' anchors;
  - nothing cites the design document that lives outside the repository (its name is built
    below, so this file does not cite it either), nor the issue tracker (the word issue and a
    number): whoever clones the repository has neither, so comments point into docs/.

Exits 1 listing every broken reference as file:line, 0 when all resolve.
"""
import os
import re
import sys

SCAN_DIRS = ("src", "include", "tests", "bench", "examples", "python", "fuzz", "scripts", "cmake")
SCAN_FILES = ("CMakeLists.txt",)
OUTSIDE_DOC = "DESIGN" + ".md"
TRACKER = re.compile(r"\b[Ii]ssues? #?[0-9]+")

# Between a file name and its quoted title: blanks (after a comma too), or a line break
# followed by the next line's comment leader (" * ", "# ", "// ").
GAP = r'(?:,?[ \t]+|,?[ \t]*\n[ \t]*(?:\*|#|//)?[ \t]*)'
TITLE = r'\\?"((?:[A-Za-z0-9`])(?:[^"\\\n]|\n[ \t]*(?:\*|#|//)?[ \t]*){0,120}?)\\?"'
REF = re.compile(r'(?<![\w./-])docs/((?:[\w-]+/)*[\w-]+\.md)(?:#([\w-]+)|' + GAP + TITLE + ')?')


def skip_dir(name):
    return (name.startswith(("build", "corpus", ".")) or name == "__pycache__"
            or name.endswith(".egg-info"))


def source_files(root):
    for f in SCAN_FILES:
        if os.path.isfile(os.path.join(root, f)):
            yield f
    for d in SCAN_DIRS:
        top = os.path.join(root, d)
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames[:] = sorted(n for n in dirnames if not skip_dir(n))
            for f in sorted(filenames):
                yield os.path.relpath(os.path.join(dirpath, f), root)


def read_text(path):
    with open(path, "rb") as f:
        data = f.read()
    if b"\0" in data[:8192]:
        return None  # binary
    return data.decode("utf-8", errors="replace")


def slug(text):
    """GitHub's anchor of a heading: lowercase, punctuation dropped, spaces to '-'."""
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def headings(md_text):
    """(anchors, names) of a markdown file's headings, fenced code blocks excluded. anchors are
    GitHub's (repeats get -1, -2, ...); names are the slugs a quoted title may match."""
    anchors, names, seen = set(), set(), {}
    fence = None
    for line in md_text.splitlines():
        m = re.match(r"^\s*(`{3,}|~{3,})", line)
        if m:
            if fence is None:
                fence = m.group(1)[0]
            elif m.group(1)[0] == fence:
                fence = None
            continue
        if fence is not None:
            continue
        m = re.match(r"^#{1,6}[ \t]+(.*?)[ \t#]*$", line)
        if not m:
            continue
        text = m.group(1)
        s = slug(text)
        n = seen.get(s, 0)
        seen[s] = n + 1
        anchors.add(s if n == 0 else "%s-%d" % (s, n))
        names.add(s)
        short = re.split(r" \(|:", text, maxsplit=1)[0]
        names.add(slug(short))
    return anchors, names


def main():
    if len(sys.argv) != 2:
        print("usage: test_doc_refs.py SOURCE_DIR", file=sys.stderr)
        return 2
    root = sys.argv[1]
    docs = {}
    problems = []
    nrefs = nsections = nfiles = 0

    def doc(name):
        if name not in docs:
            path = os.path.join(root, "docs", name)
            docs[name] = headings(read_text(path) or "") if os.path.isfile(path) else None
        return docs[name]

    for rel in source_files(root):
        text = read_text(os.path.join(root, rel))
        if text is None:
            continue
        nfiles += 1
        for m in re.finditer(re.escape(OUTSIDE_DOC), text, re.IGNORECASE):
            line = text.count("\n", 0, m.start()) + 1
            problems.append("%s:%d: cites %s, which is not in the repository; point into "
                            "docs/ instead (docs/architecture.md holds the design)"
                            % (rel, line, m.group(0)))
        for m in TRACKER.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            problems.append("%s:%d: cites the issue tracker (%s), which is not in the "
                            "repository; say what the code does, or point into docs/"
                            % (rel, line, m.group(0)))
        for m in REF.finditer(text):
            nrefs += 1
            line = text.count("\n", 0, m.start()) + 1
            name, anchor, title = m.group(1), m.group(2), m.group(3)
            h = doc(name)
            if h is None:
                problems.append("%s:%d: docs/%s does not exist" % (rel, line, name))
                continue
            anchors, names = h
            if anchor:
                nsections += 1
                if anchor not in anchors:
                    problems.append("%s:%d: docs/%s has no section with anchor #%s"
                                    % (rel, line, name, anchor))
            elif title:
                title = re.sub(r"\s*\n[ \t]*(?:\*|#|//)?[ \t]*", " ", title).strip()
                nsections += 1
                if slug(title) not in names:
                    problems.append('%s:%d: docs/%s has no section "%s"'
                                    % (rel, line, name, title))
    for p in problems:
        print(p)
    print("%d docs references (%d naming a section) in %d files: %s"
          % (nrefs, nsections, nfiles, "%d broken" % len(problems) if problems else "all resolve"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
