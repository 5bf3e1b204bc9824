#!/usr/bin/env python3
"""Finds import circles between the modules (files) of each crate.

    scripts/import_cycles.py [crate dir ...]   (default: every workspace crate)

A module *uses* another when its code names a path into it (`use
crate::a::b::X`, `crate::a::b::f()`, `super::b::X`, grouped or not); comments
are left out. A module using one of its own ancestors is not counted: a
child (its tests, say) is part of its parent. Every set of modules that reach
each other through uses is printed with one use per step, and the exit status
is 1 when there is one. ARCHITECTURE.md's first rule: no module imports
another that imports it back.

Test code (files named tests.rs or *_tests.rs, and `#[cfg(test)]` inline
modules) is left out. A use through an ancestor's re-export (`pub use`)
counts as a use of that ancestor, which a child may make.
"""
import os
import re
import sys

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def module_files(src):
    """Module path (tuple) -> file, for every .rs file under src (a module
    declared with `#[path = "…"]` under the name it is declared with)."""
    mods = {}
    for dirpath, _, files in os.walk(src):
        for fn in files:
            if not fn.endswith(".rs"):
                continue
            rel = os.path.relpath(os.path.join(dirpath, fn), src)[:-3].split(os.sep)
            if rel[-1] == "mod" or rel in (["lib"], ["main"]):
                rel = rel[:-1]
            mods[tuple(rel)] = os.path.join(dirpath, fn)
    by_file = {os.path.normpath(f): m for m, f in mods.items()}
    for mod, path in list(mods.items()):
        text = open(path, encoding="utf-8").read()
        for m in re.finditer(r'#\[path\s*=\s*"([^"]+)"\]\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+(' + IDENT + r")\s*;", text):
            target = os.path.normpath(os.path.join(os.path.dirname(path), m.group(1)))
            old = by_file.get(target)
            if old is not None and old in mods:
                del mods[old]
                mods[mod + (m.group(2),)] = target
    return mods


def is_test_file(path, src):
    rel = os.path.relpath(path, src)
    name = os.path.basename(rel)
    return name == "tests.rs" or name.endswith("_tests.rs") or ("tests" in rel.split(os.sep)[:-1])


def without_test_modules(text):
    """The text without its `#[cfg(test)]` inline modules (braces matched)."""
    out, i = [], 0
    pat = re.compile(r"#\[cfg\(test\)\]\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+" + IDENT + r"\s*\{")
    while True:
        m = pat.search(text, i)
        if not m:
            out.append(text[i:])
            return "".join(out)
        out.append(text[i:m.start()])
        depth, j = 1, m.end()
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        i = j


def strip_comments(text):
    out = []
    for line in text.split("\n"):
        stripped = line.lstrip()
        if stripped.startswith("//"):
            continue
        # A trailing comment, when no string is open before it.
        i = line.find("//")
        while i >= 0:
            if line[:i].count('"') % 2 == 0:
                line = line[:i]
                break
            i = line.find("//", i + 2)
        out.append(line)
    text = re.sub(r"/\*.*?\*/", "", "\n".join(out), flags=re.S)
    return without_test_modules(text)


def expand_group(text, i):
    """text[i] == '{': the paths inside a use group, and the index after it."""
    paths, depth, start = [], 1, i + 1
    j = i + 1
    items = []
    while j < len(text) and depth:
        c = text[j]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                items.append(text[start:j])
        elif c == "," and depth == 1:
            items.append(text[start:j])
            start = j + 1
        j += 1
    for item in items:
        item = item.strip()
        if not item:
            continue
        m = re.match(r"((?:" + IDENT + r"\s*::\s*)*)(\{)?", item)
        head = [p.strip() for p in m.group(1).split("::") if p.strip()]
        if m.group(2):
            for sub in expand_group(item, m.end(2) - 1)[0]:
                paths.append(head + sub)
        else:
            tail = re.match(r"(?:" + IDENT + r"\s*::\s*)*(" + IDENT + ")", item)
            paths.append(head + ([tail.group(1)] if tail and tail.group(1) not in head[-1:] else []))
    return paths, j


def referenced_paths(text):
    """Every path starting at crate::, super:: or self:: in the text."""
    found = []
    for m in re.finditer(r"(?<![A-Za-z0-9_:])((?:crate|super|self)(?:\s*::\s*super)*)\s*::\s*", text):
        prefix = [p.strip() for p in m.group(1).split("::")]
        rest = text[m.end():]
        if rest.startswith("{"):
            for p in expand_group(text, m.end())[0]:
                found.append(prefix + p)
        else:
            p = re.match(r"(" + IDENT + r"(?:\s*::\s*" + IDENT + r")*)(\s*::\s*\{)?", rest)
            if not p:
                continue
            head = [x.strip() for x in p.group(1).split("::")]
            if p.group(2):
                for sub in expand_group(text, m.end() + p.end() - 1)[0]:
                    found.append(prefix + head + sub)
            else:
                found.append(prefix + head)
    return found


def resolve(path, here, mods):
    """The module a path names, as a tuple, or None."""
    if path[0] == "crate":
        base, rest = (), path[1:]
    else:
        base = here
        rest = path
        if rest[0] == "self":
            rest = rest[1:]
        # `super` from a file module is its parent module.
        while rest and rest[0] == "super":
            base = base[:-1]
            rest = rest[1:]
    full = base + tuple(rest)
    for n in range(len(full), -1, -1):
        if full[:n] in mods:
            return full[:n]
    return None


def edges_of(src):
    mods = module_files(src)
    edges = {}
    for mod, path in mods.items():
        if is_test_file(path, src):
            continue
        text = strip_comments(open(path, encoding="utf-8").read())
        for ref in referenced_paths(text):
            target = resolve(ref, mod, mods)
            if target is None or target == mod or mod[: len(target)] == target:
                continue  # itself, or an ancestor (a child is part of it)
            if is_test_file(mods[target], src):
                continue
            edges.setdefault(mod, {}).setdefault(target, "::".join(ref))
    return mods, edges


def cycles(nodes, edges):
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def name(mod):
    return "::".join(mod) or "crate"


def workspace_members(root):
    text = open(os.path.join(root, "Cargo.toml"), encoding="utf-8").read()
    members = re.search(r"members\s*=\s*\[([^\]]*)\]", text)
    return re.findall(r'"([^"]+)"', members.group(1))


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    crates = sys.argv[1:] or workspace_members(root)
    found = 0
    for crate in crates:
        src = os.path.join(root, crate, "src")
        mods, edges = edges_of(src)
        for comp in cycles(mods, edges):
            found += 1
            print(f"{crate}: a circle of {len(comp)} modules: {', '.join(name(m) for m in comp)}")
            members = set(comp)
            for m in comp:
                for t, via in sorted(edges.get(m, {}).items()):
                    if t in members:
                        print(f"    {name(m)} -> {name(t)}   ({via})")
        print(f"{crate}: {len(mods)} modules, {sum(len(e) for e in edges.values())} uses between them")
    if found:
        print(f"{found} import circle(s)")
        sys.exit(1)
    print("no import circle")


if __name__ == "__main__":
    main()
