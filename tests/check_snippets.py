#!/usr/bin/env python3
"""Checks that every C snippet of the documentation is code the build compiles.

Each ```c block in README.md, docs/, examples/ and bench/ must follow a marker:
    <!-- program PATH -->     the block is the whole file PATH
    <!-- excerpt of PATH -->  the block's lines are consecutive lines of PATH
PATH (from the source root) must be a C file that its folder's meson.build
builds, so that the snippet compiles, and runs where it is a test.
    usage: check_snippets.py <source-root>
"""
import os, re, sys

MARKER = re.compile(r"<!--\s*(program|excerpt of)\s+(\S+)\s*-->")
SKIP_DIRS = {"subprojects", "node_modules"}


def markdown_files(root):
    yield os.path.join(root, "README.md")
    for top in ("docs", "examples", "bench"):
        for folder, dirs, files in os.walk(os.path.join(root, top)):
            dirs[:] = [d for d in dirs if not d.startswith((".", "build")) and d not in SKIP_DIRS]
            yield from (os.path.join(folder, f) for f in sorted(files) if f.endswith(".md"))


def c_blocks(lines):
    """(line number, marker line, block lines) for each ```c block."""
    i = 0
    while i < len(lines):
        if lines[i].strip() in ("```c", "```C"):
            start = i
            j = i + 1
            while j < len(lines) and lines[j].strip() != "```":
                j += 1
            k = start - 1
            while k >= 0 and not lines[k].strip():
                k -= 1
            yield start + 1, lines[k] if k >= 0 else "", lines[start + 1:j]
            i = j
        i += 1


def is_built(root, path):
    """Whether the meson.build beside path names it: 'name', 'name.c' or a test area."""
    build = os.path.join(root, os.path.dirname(path), "meson.build")
    stem = re.sub(r"^test_", "", os.path.splitext(os.path.basename(path))[0])
    try:
        text = open(build).read()
    except OSError:
        return False
    return re.search(r"'(test_)?%s(\.c)?'" % re.escape(stem), text) is not None


def check_block(root, marker, block):
    """None if the block is what its marker says, else why not."""
    m = MARKER.search(marker)
    if not m:
        return "no <!-- program PATH --> or <!-- excerpt of PATH --> marker before it"
    kind, path = m.groups()
    full = os.path.join(root, path)
    if not path.endswith(".c") or not os.path.isfile(full):
        return f"{path} is not a C file of the repository"
    if not is_built(root, path):
        return f"{path} is not built by {os.path.dirname(path) or '.'}/meson.build"
    source = open(full).read().split("\n")
    if kind == "program":
        return None if block == source[:len(block)] and not any(source[len(block):]) \
            else f"the block is not the whole of {path}"
    n = len(block)
    if n and any(source[i:i + n] == block for i in range(len(source) - n + 1)):
        return None
    return f"the block is not a verbatim excerpt of {path}"


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    root, failures, count = sys.argv[1], 0, 0
    for md in markdown_files(root):
        if not os.path.isfile(md):
            continue
        lines = open(md).read().split("\n")
        for line_no, marker, block in c_blocks(lines):
            count += 1
            why = check_block(root, marker, block)
            if why:
                failures += 1
                print(f"{os.path.relpath(md, root)}:{line_no}: {why}")
    print(f"{count} C snippets, {failures} not compiled code")
    return 1 if failures or count == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
