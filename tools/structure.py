#!/usr/bin/env python3
"""The structure of argus drawn from its own imports (docs/architecture.md).

Rooms are the top-level modules of src/ (src/<x>.rs or src/<x>/). An arrow a -> b is a
path in a's production code (test modules and `#[cfg(test)] mod x;` files left out;
comments and string literals too) that names b, in every form Rust has: `crate::b::..`,
`super::..` and `super::super::..`, `self::..`, a module's own children named bare
(`mod x;` then `x::f` or `pub use x::f`), grouped use trees at any depth
(`use super::{a, b::{c, d}}`), and `#[macro_export]` macros by name (`crate::yaml_path!`,
`use crate::yaml_path;`: their home is the file that defines them). A file's use of the
modules it sits in (`super::Error` in a child of the room's facade) is no arrow: they
own it. Prints the rooms, the arrows, the circles among rooms and among files, and every
arrow that runs up a layer or sideways between stages that is not on the allow-list.

    python3 tools/structure.py src          # exit 1 on a circle or an unlisted back arrow
    python3 tools/structure.py src --long   # also exit 1 on production files > 700
                                            # lines or functions > 120 (listed)
"""
import collections
import os
import re
import sys

# Higher runs first: a room may import only rooms of a greater number (stages in pipeline
# order: a stage composes the ones after it, never one before it).
LAYERS = {
    "main": 0, "crate": 0, "commands": 0.1, "cli": 0.2,
    "run": 1.0, "doctor": 1.05, "slurm": 1.1, "export": 1.2, "restart": 1.25,
    "diagnose": 1.27, "submit": 1.3, "training": 1.4,
    "inputs": 1.5, "cluster": 1.6, "data": 1.7, "snapshot": 1.8,
    "config": 2, "ui": 2,
}
LEAF = 3
# Arrows that run back up, each named and justified in docs/architecture.md.
ALLOWED = set()


def layer(room):
    return LAYERS.get(room, LEAF)


def read(root):
    files = {}
    for dp, _, names in os.walk(root):
        for n in names:
            if n.endswith(".rs"):
                p = os.path.join(dp, n)
                rel = os.path.relpath(p, root)[:-3]
                mod = rel.replace("/mod", "").replace("/", "::")
                files["crate" if mod in ("lib", "main") else mod] = (p, open(p).read())
    for mod, (_, text) in list(files.items()):
        for m in re.finditer(r"#\[cfg\(test\)\]\s*(?:pub\s+)?mod\s+(\w+);", text):
            files.pop((mod + "::" if mod != "crate" else "") + m.group(1), None)
    return files


def production(text):
    i = text.find("#[cfg(test)]\nmod tests")
    return text if i < 0 else text[:i]


def code_only(text):
    """`text` without comments (doc comments included), string and char literals: only
    code names modules; a doc link or a message that spells a path is not an import."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif c == "r" and re.match(r'r#*"', text[i:i + 40]) and not re.match(r"\w", text[i - 1:i] or " "):
            hashes = re.match(r'r(#*)"', text[i:]).group(1)
            j = text.find('"' + hashes, i + 2 + len(hashes))
            out.append('""')
            i = n if j < 0 else j + 1 + len(hashes)
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""')
            i = j + 1
        elif c == "'":
            # A char literal ('x', '\n', '\u{1b}'); a lifetime ('a) is left as it is.
            m = re.match(r"'(\\u\{[0-9a-fA-F]+\}|\\.|[^\\'])'", text[i:i + 12])
            out.append("' '" if m else c)
            i += len(m.group(0)) if m else 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def use_paths(text, at):
    """The paths a path or use tree starting at `text[at]` names, as lists of segments:
    `a::b`, `a::{b, c::{d, e as f}, self}`, `a::*`."""
    ident = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|\*")

    def tree(i):
        while i < len(text) and text[i] in " \t\n":
            i += 1
        if i < len(text) and text[i] == "{":
            paths, i = [], i + 1
            while i < len(text):
                while i < len(text) and text[i] in " \t\n,":
                    i += 1
                if i >= len(text) or text[i] == "}":
                    return paths, i + 1
                sub, j = tree(i)
                paths.extend(sub)
                # `x as y`: the name is x's.
                m = re.compile(r"\s+as\s+\w+").match(text, j)
                i = m.end() if m else max(j, i + 1)
            return paths, i
        m = ident.match(text, i)
        if not m:
            return [[]], i
        seg, i = m.group(0), m.end()
        if text.startswith("::", i):
            rest, i = tree(i + 2)
            return [[seg] + r for r in rest], i
        return [[seg]], i

    return tree(at)[0]


def graph(files):
    mods = set(files)
    # #[macro_export] macros live at the crate's root by name; their home is the file
    # that defines them.
    macros = {}
    for mod, (_, text) in files.items():
        for m in re.finditer(r"#\[macro_export\]\s*macro_rules!\s*(\w+)", text):
            macros[m.group(1)] = mod
    rooms, fedges = collections.defaultdict(set), collections.defaultdict(set)

    def target_of(path):
        if len(path) == 1 and path[0] in macros:
            return macros[path[0]]
        return next(("::".join(path[:k]) for k in range(len(path), 0, -1)
                     if "::".join(path[:k]) in mods), None)

    for mod, (_, text) in files.items():
        text = code_only(production(text))
        here = [] if mod == "crate" else mod.split("::")
        # This module's own children (`mod x;`), named bare (`x::f`) or through `self::`.
        children = set(re.findall(r"^\s*(?:pub(?:\([a-z]+\))?\s+)?mod\s+(\w+)\s*;", text, re.M))
        pattern = r"\b(crate|self|super)((?:::super)*)::"
        if children:
            pattern += r"|(?<![\w:])(" + "|".join(sorted(children)) + r")::"
        for m in re.finditer(pattern, text):
            if m.group(1) == "crate":
                base, at = [], m.end()
            elif m.group(1) in ("self", "super"):
                ups = (m.group(1) == "super") + m.group(2).count("super")
                if ups > len(here):
                    continue
                base, at = here[:len(here) - ups], m.end()
            else:
                base, at = here, m.start()
            for path in use_paths(text, at):
                target = target_of(base + path) if base + path else None
                # A file may use the items of the modules it sits in (`super::Error`, its
                # room's facade): they own it, so that is no arrow; every other use is.
                if target and target != mod and not (mod + "::").startswith(target + "::"):
                    fedges[mod].add(target)
                    a, b = mod.split("::")[0], target.split("::")[0]
                    if a != b:
                        rooms[a].add(b)
    return rooms, fedges


def circles(g, nodes):
    sys.setrecursionlimit(10000)
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in g.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            c = []
            while True:
                w = stack.pop()
                on.discard(w)
                c.append(w)
                if w == v:
                    break
            if len(c) > 1:
                out.append(sorted(c))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def long_parts(files):
    out = []
    for mod, (path, text) in sorted(files.items()):
        lines = production(text).split("\n")
        if len(lines) > 700:
            out.append(f"file {path}: {len(lines)} production lines")
        i = 0
        while i < len(lines):
            m = re.match(r"\s*(pub(\([a-z]+\))?\s+)?(async\s+)?fn\s+(\w+)", lines[i])
            if not m:
                i += 1
                continue
            depth, started, j = 0, False, i
            while j < len(lines):
                s = re.sub(r'"([^"\\]|\\.)*"', '""', lines[j]).split("//")[0]
                s = re.sub(r"'.'", "", s)
                depth += s.count("{") - s.count("}")
                started = started or "{" in s
                if (started and depth <= 0) or (not started and s.rstrip().endswith(";")):
                    break
                j += 1
            if j - i + 1 > 120:
                out.append(f"fn {path}:{i + 1} {m.group(4)}: {j - i + 1} lines")
            i = j + 1 if started else i + 1
    return out


def main():
    root = next((a for a in sys.argv[1:] if not a.startswith("-")), "src")
    files = read(root)
    rooms, fedges = graph(files)
    names = sorted({m.split("::")[0] for m in files})
    arrows = sum(len(v) for v in rooms.values())
    print(f"{len(names)} rooms, {arrows} arrows")
    bad = False
    for c in circles(rooms, names):
        print("circle of rooms:", " ".join(c))
        bad = True
    for c in circles(fedges, files):
        print("circle of files:", " ".join(c))
        bad = True
    back = []
    for a in names:
        for b in sorted(rooms[a]):
            up = layer(b) < layer(a) or (layer(a) == layer(b) and layer(a) < LEAF)
            if up:
                back.append((a, b))
    for a, b in back:
        listed = (a, b) in ALLOWED
        print(f"{'allowed' if listed else 'UNLISTED'} back arrow: {a} -> {b}")
        bad |= not listed
    if "--long" in sys.argv:
        for line in long_parts(files):
            print(line)
            bad = True
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
