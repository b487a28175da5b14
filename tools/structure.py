#!/usr/bin/env python3
"""The structure of argus drawn from its own imports (docs/architecture.md).

Rooms are the top-level modules of src/ (src/<x>.rs or src/<x>/). An arrow a -> b is a
`crate::b` or (for files of one room) `super::` path in a's production code (test modules
and `#[cfg(test)] mod x;` files left out). Prints the rooms, the arrows, the circles among
rooms and among files, and every arrow that runs up a layer or sideways between stages
that is not on the allow-list below.

    python3 tools/structure.py src          # exit 1 on a circle or an unlisted back arrow
    python3 tools/structure.py src --long   # also: production files > 700 lines, functions > 120
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


def graph(files):
    mods = set(files)
    rooms, fedges = collections.defaultdict(set), collections.defaultdict(set)
    for mod, (_, text) in files.items():
        text = production(text)
        for m in re.finditer(r"\bcrate::([a-z_]+(?:::[a-z_]+)*)", text):
            path = m.group(1).split("::")
            target = next(("::".join(path[:k]) for k in range(len(path), 0, -1)
                           if "::".join(path[:k]) in mods), None)
            if target and target != mod:
                fedges[mod].add(target)
                a, b = mod.split("::")[0], target.split("::")[0]
                if a != b:
                    rooms[a].add(b)
        parent = mod.split("::")[:-1]
        for m in re.finditer(r"\bsuper::([a-z_]+)", text):
            cand = "::".join(parent + [m.group(1)])
            if cand in mods and cand != mod:
                fedges[mod].add(cand)
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
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
