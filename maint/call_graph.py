#!/usr/bin/env python3
"""Counts what a reader of a chapter reads, by walking the real call graph.

The compiler does the reading: clang parses the chapter's server.cc and the
.cc files of common/ it calls into (`clang++ -Xclang -ast-dump=json`, the
include set the build uses), and this tool follows every reference from two
roots: the chapter's posting loop (ContinuePostWrite) and the completion
path (Network::PollCompletion). What is counted, non-blank lines:

* the chapter's server.cc, whole;
* every definition in the repository that the roots reach, transitively:
  functions and methods (their header declaration and its comment too),
  lambdas, the fields they read or write (private ones included), the
  types they name (a class's head and closing line; its members as they
  are reached; a struct copied whole, all its fields), each with the
  comment right above it.

The walk stops at the chapter (it is counted whole already) and at code
outside the repository (libfabric, the standard library). A lambda passed
to a function is taken as called by that function, as a reader follows it.
A hop is one step from a function to one it calls (a lambda is a step of
its own): the series' 14_batch.cpp takes 3 from its loop to fi_writemsg
(the loop, PostWrite, ProgressPendingOps, fi_writemsg).

Usage: maint/call_graph.py [--chapter 14_batch] [--list] [--json] [--check]
"""
import argparse
import bisect
import json
import os
import re
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

# Chapter 14's reader reads less than the series' 14_batch.cpp (513 lines,
# 1 file, 3 hops) would make them read in one file.
# The files a reader opens along the way from the loop to fi_writemsg are
# limited too; in all, they also open errors.h (the exception the
# completion path throws) and server.h (WriteJob).
LIMITS = {"lines": 500, "files": 4, "hops_to_post": 4, "files_to_post": 4}

POST_CALL = "fi_writemsg"
DEFAULT_ROOTS = ["ContinuePostWrite", "tutorial::Network::PollCompletion"]

FUNCTION_KINDS = {
    "FunctionDecl",
    "CXXMethodDecl",
    "CXXConstructorDecl",
    "CXXDestructorDecl",
    "CXXConversionDecl",
}
TYPE_KINDS = {"CXXRecordDecl", "EnumDecl", "TypedefDecl", "TypeAliasDecl"}
NAMED_KINDS = FUNCTION_KINDS | TYPE_KINDS | {"FieldDecl", "VarDecl", "EnumConstantDecl"}
SCOPE_KINDS = {"NamespaceDecl", "CXXRecordDecl"}


def compile_flags():
    flags = ["-std=c++17", "-fsyntax-only", "-I."]
    prefix = os.environ.get("LIBFABRIC_PREFIX", "")
    if prefix:
        flags.append(f"-I{prefix}/include")
    return flags + shlex.split(os.environ.get("CALL_GRAPH_FLAGS", ""))


def dump(root, source, whole):
    """The JSON AST of `source`, as a list of top-level objects from the
    repository. `whole`: every declaration (a chapter: its code sits in an
    anonymous namespace), else only those of namespace tutorial (faster)."""
    cmd = ["clang++"] + compile_flags() + ["-Xclang", "-ast-dump=json"]
    if not whole:
        cmd += ["-Xclang", "-ast-dump-filter=tutorial::"]
    proc = subprocess.Popen(cmd + [source], cwd=root, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    if whole:
        chunks = list(_repo_chunks(proc.stdout))
    else:
        chunks = _split_objects(proc.stdout.read())
    err = proc.stderr.read()
    if proc.wait() != 0:
        raise SystemExit(f"call_graph: clang++ failed on {source}:\n{err}")
    return chunks


def _split_objects(text):
    decoder, i, out = json.JSONDecoder(), 0, []
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if i >= len(text):
            return out
        obj, i = decoder.raw_decode(text, i)
        out.append(obj)


_FILE_LINE = re.compile(r'^\s*"file": "(.*)",?$')


def _repo_chunks(lines):
    """The translation unit's top-level declarations that lie in the
    repository (relative paths), read as a stream: a whole dump is hundreds
    of megabytes, nearly all of it the standard library. clang writes a
    location's file only when it changes, so the file is tracked across."""
    last_file, prev, cur, inside, first, before = None, "", [], False, None, None
    for line in lines:
        if not inside:
            if line.startswith("    {"):
                cur, inside, first, before = [line], True, None, last_file
            continue
        cur.append(line)
        if '"file": "' in line and '"includedFrom"' not in prev:
            m = _FILE_LINE.match(line)
            if m:
                last_file = m.group(1)
                first = first or last_file
        prev = line
        if line.startswith("    }"):
            inside = False
            where = first or before
            if where and not where.startswith("/"):
                text = "".join(cur).rstrip().rstrip(",")
                yield json.loads(text), before


class Source:
    """A file of the repository: its lines and where each begins."""

    def __init__(self, root, path):
        with open(os.path.join(root, path), encoding="utf-8") as f:
            self.text = f.read()
        self.lines = self.text.split("\n")
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line) + 1)

    def line_of(self, offset):  # 1-based
        return bisect.bisect_right(self.starts, offset)


def norm(path):
    return os.path.normpath(path)


class Decl:
    def __init__(self, node, file, begin, end, qual, parent):
        self.node = node
        self.kind = node["kind"]
        self.name = node.get("name", "")
        self.file = file
        self.begin = begin
        self.end = end
        self.qual = qual
        self.parent = parent  # key of the enclosing record, if any
        self.mangled = node.get("mangledName")
        self.implicit = bool(node.get("isImplicit"))
        self.body = None  # the node whose subtree is walked
        self.key = (file, begin, self.name, self.kind)


class Index:
    def __init__(self, root):
        self.root = root
        self.sources = {}
        self.decls = {}  # key -> Decl
        self.by_mangled = {}  # mangled name -> [keys]
        self.by_qual = {}  # qualified name -> [keys]
        self.fields_of = {}  # record key -> [field keys]
        self.parsed = set()

    def source(self, path):
        if path not in self.sources:
            self.sources[path] = Source(self.root, path)
        return self.sources[path]

    def in_repo(self, path):
        return path is not None and not os.path.isabs(path)

    def add_tu(self, source, whole):
        self.parsed.add(source)
        chunks = dump(self.root, source, whole)
        tu = _TU(self, len(self.parsed))
        for chunk in chunks:
            node = chunk[0] if isinstance(chunk, tuple) else chunk
            tu.last_file = chunk[1] if isinstance(chunk, tuple) else tu.last_file
            tu.scan(node, [], None)
        return tu


class _TU:
    """One translation unit's declarations, by clang's ids."""

    def __init__(self, index, number):
        self.index = index
        self.number = number
        self.last_file = None
        self.ids = {}  # clang id -> decl key

    def _loc(self, loc):
        if not loc:
            return None
        if "expansionLoc" in loc:
            self._loc(loc.get("spellingLoc"))
            return self._loc(loc["expansionLoc"])
        if "file" in loc:
            self.last_file = loc["file"]
        if "offset" not in loc:
            return None
        return (self.last_file, loc["offset"], loc.get("tokLen", 0))

    def _place(self, node):
        self._loc(node.get("loc"))
        rng = node.get("range") or {}
        b = self._loc(rng.get("begin"))
        e = self._loc(rng.get("end"))
        if not b or not e or b[0] is None:
            return None
        return norm(b[0]), b[1], e[1] + e[2]

    def scan(self, node, scopes, parent):
        place = self._place(node)
        kind = node.get("kind")
        name = node.get("name")
        decl = None
        if place and kind in NAMED_KINDS and self.index.in_repo(place[0]):
            qual = "::".join(scopes + [name or ""])
            decl = Decl(node, place[0], place[1], place[2], qual, parent)
            old = self.index.decls.get(decl.key)
            if old is None or (old.body is None and self._has_body(node)):
                self.index.decls[decl.key] = decl
                decl.tu = self
                if self._has_body(node) or kind not in FUNCTION_KINDS:
                    decl.body = node
            else:
                decl = old
            self.ids[node["id"]] = decl.key
            if decl.mangled:
                self.index.by_mangled.setdefault(decl.mangled, set()).add(decl.key)
            self.index.by_qual.setdefault(qual, set()).add(decl.key)
            if kind == "FieldDecl" and parent:
                self.index.fields_of.setdefault(parent, set()).add(decl.key)
        if kind in FUNCTION_KINDS or kind == "VarDecl":
            # Bodies are walked later, from this TU's ids.
            self._note_ids(node)
            return
        inner_scopes = scopes
        inner_parent = parent
        if kind in SCOPE_KINDS:
            inner_scopes = scopes + [name or "(anonymous namespace)"]
        if kind == "CXXRecordDecl" and decl is not None:
            inner_parent = decl.key
        for child in node.get("inner", []):
            self.scan(child, inner_scopes, inner_parent)

    def _note_ids(self, node):
        # Locations inside a body still move clang's "last file".
        for child in node.get("inner", []):
            self._place(child)
            self._note_ids(child)

    @staticmethod
    def _has_body(node):
        return any(c.get("kind") == "CompoundStmt" for c in node.get("inner", []))


def _overrides(node):
    return any(c.get("kind") == "OverrideAttr" for c in node.get("inner", []))


def _chapter_classes(index, chapter_file, types):
    """The repository's classes the chapter's code names anywhere."""
    named = set()

    def scan(node):
        t = node.get("type")
        if isinstance(t, dict):
            for text in (t.get("qualType", ""), t.get("desugaredQualType", "")):
                for name in _TYPE_NAME.findall(text):
                    named.update(types.get(name, ()))
        for child in node.get("inner", []):
            scan(child)

    for decl in index.decls.values():
        if decl.file == chapter_file and decl.parent is None:
            scan(decl.node)
    return named


_TYPE_NAME = re.compile(r"(?:\(anonymous namespace\)::)?[A-Za-z_]\w*(?:::[A-Za-z_]\w*)*")


class Walk:
    """What the roots reach, and the hops between functions."""

    def __init__(self, index, chapter_file, types):
        self.index = index
        self.chapter_file = chapter_file
        self.types = types  # qualified type name -> keys
        self.reached = set()
        self.whole_records = set()
        self.edges = {}  # function key -> set of function keys (and externals)
        self.externals = {}  # function key -> set of external names called
        self.callbacks = set()  # function keys that call a callback
        self.names = {}
        self.todo = []
        self.missing = set()
        self.overrides = {}  # method name -> overriding methods in the chapter's classes

    def reach(self, key, via=None):
        if via is not None and key != via:
            self.edges.setdefault(via, set()).add(key)
        if key in self.reached:
            return
        self.reached.add(key)
        decl = self.index.decls.get(key)
        if decl is None:
            return
        if decl.parent:
            self.reach_record(decl.parent)
        if decl.file == self.chapter_file and via is not None:
            # The chapter is read whole; what its callbacks call is the
            # handler's business, not the path's.
            if via[0] == "lambda" or decl.kind not in FUNCTION_KINDS:
                return
        if decl.kind in FUNCTION_KINDS:
            # A virtual call reaches the overrides of the classes the
            # chapter names (the NICs it makes).
            if self.is_virtual(decl):
                for other in self.overrides.get(decl.name, ()):
                    if other != key:
                        self.reach(other, via=key)
            if decl.implicit and decl.parent:
                self.whole_records.add(decl.parent)
            definition = self.definition_of(decl)
            if definition is not None and definition != key:
                self.reach(definition, via=key)
            if decl.body is not None and decl.node is decl.body:
                self.todo.append(key)
        elif decl.kind == "FieldDecl" or decl.kind == "VarDecl":
            self.todo.append(key)
        elif decl.kind in TYPE_KINDS:
            self.todo.append(key)

    def is_virtual(self, decl):
        same = [self.index.decls[k] for k in self.index.by_mangled.get(decl.mangled, ())]
        return any(d.node.get("virtual") or _overrides(d.node) for d in [decl] + same)

    def reach_record(self, key):
        if key not in self.reached:
            self.reached.add(key)
            decl = self.index.decls.get(key)
            if decl is not None and decl.parent:
                self.reach_record(decl.parent)

    def definition_of(self, decl):
        if decl.body is not None and decl.node is decl.body:
            return decl.key
        if decl.mangled:
            for key in self.index.by_mangled.get(decl.mangled, ()):
                d = self.index.decls[key]
                if d.body is not None:
                    return key
        self.missing.add(decl)
        return None

    def run(self):
        while self.todo:
            key = self.todo.pop()
            decl = self.index.decls[key]
            if decl.kind in TYPE_KINDS:
                # A type's own lines; its members count as they are reached.
                if decl.kind != "CXXRecordDecl":
                    self.type_refs(decl.node, key, decl.tu)
                continue
            self.visit(decl.body if decl.body is not None else decl.node, key, decl.tu, key)

    def type_refs(self, node, at, tu):
        t = node.get("type")
        if isinstance(t, dict):
            alias = t.get("typeAliasDeclId")
            if alias and alias in tu.ids:
                self.reach(tu.ids[alias], via=None)
            for text in (t.get("qualType", ""), t.get("desugaredQualType", "")):
                for name in _TYPE_NAME.findall(text):
                    for key in self.types.get(name, ()):
                        self.reach(key)

    def visit(self, node, at, tu, fn):
        """Walks `node` (inside function-like `fn`)."""
        kind = node.get("kind")
        self.type_refs(node, at, tu)
        if kind == "LambdaExpr":
            lam_key = self._lambda_key(node, tu, fn)
            if id(node) not in self._passed:
                self.edges.setdefault(fn, set()).add(lam_key)
            for child in node.get("inner", []):
                self.visit(child, at, tu, lam_key)
            return
        if kind in ("CallExpr", "CXXMemberCallExpr", "CXXOperatorCallExpr"):
            self._call(node, at, tu, fn)
        if kind == "InitListExpr":
            self._whole_by_type(node)
        ref = node.get("referencedDecl")
        if isinstance(ref, dict):
            self._ref(ref.get("id"), ref.get("name", ""), tu, fn)
        member = node.get("referencedMemberDecl")
        if member:
            self._ref(member, node.get("name", ""), tu, fn)
        for child in node.get("inner", []):
            self.visit(child, at, tu, fn)

    _passed = {}

    def _lambda_key(self, node, tu, fn):
        rng = node.get("range", {})
        key = ("lambda", fn, rng.get("begin", {}).get("offset"))
        self.names[key] = "lambda in " + self.label(fn)
        return key

    def _call(self, node, at, tu, fn):
        inner = node.get("inner", [])
        if not inner:
            return
        callee = self._callee(inner[0], tu)
        if node["kind"] == "CXXOperatorCallExpr" and len(inner) > 1:
            obj = inner[1]
            while obj.get("kind") in ("ImplicitCastExpr", "ParenExpr") and obj.get("inner"):
                obj = obj["inner"][0]
            # The operation's callback (not any std::function: a NIC's
            # remote-write hook is no completion of ours).
            if "std::function" in json.dumps(obj.get("type", {})) and obj.get("name") == "callback":
                self.callbacks.add(fn)
        if node["kind"] == "CXXMemberCallExpr" and callee is not None:
            decl = self.index.decls.get(callee)
            # Chapter 17's handler: a virtual OnCompletion.
            if decl is not None and decl.name == "OnCompletion":
                self.callbacks.add(fn)
        # A lambda handed to a function is called from there.
        target = callee if callee is not None else fn
        for arg in inner[1:]:
            lam = self._lambda_in(arg)
            if lam is not None:
                lam_key = self._lambda_key(lam, tu, fn)
                self.edges.setdefault(target, set()).add(lam_key)
                self._passed[id(lam)] = lam_key

    def _lambda_in(self, node):
        while node.get("kind") in ("MaterializeTemporaryExpr", "ImplicitCastExpr",
                                   "CXXBindTemporaryExpr", "CXXConstructExpr",
                                   "CXXFunctionalCastExpr", "ExprWithCleanups"):
            inner = node.get("inner", [])
            if len(inner) != 1:
                return None
            node = inner[0]
        return node if node.get("kind") == "LambdaExpr" else None

    def _callee(self, node, tu):
        while node.get("kind") in ("ImplicitCastExpr", "ParenExpr"):
            inner = node.get("inner", [])
            if not inner:
                return None
            node = inner[0]
        ref = node.get("referencedDecl")
        rid = ref.get("id") if isinstance(ref, dict) else node.get("referencedMemberDecl")
        if rid and rid in tu.ids:
            key = tu.ids[rid]
            decl = self.index.decls.get(key)
            if decl is not None and decl.kind in FUNCTION_KINDS:
                return self.definition_of(decl) or key
        return None

    def _ref(self, rid, name, tu, fn):
        if rid in tu.ids:
            key = tu.ids[rid]
            decl = self.index.decls.get(key)
            if decl is not None and decl.kind in FUNCTION_KINDS:
                self.reach(key, via=fn)
                definition = self.definition_of(decl)
                if definition is not None:
                    self.edges.setdefault(fn, set()).add(definition)
            else:
                self.reach(key)
        elif name:
            self.externals.setdefault(fn, set()).add(name)

    def _whole_by_type(self, node):
        t = node.get("type", {}).get("desugaredQualType") or node.get("type", {}).get(
            "qualType", "")
        for key in self.types.get(t.replace("const ", "").strip(), ()):
            self.whole_records.add(key)
            self.reach(key)

    def label(self, key):
        if key in self.names:
            return self.names[key]
        decl = self.index.decls.get(key)
        if decl is None:
            return str(key)
        return decl.qual.replace("tutorial::", "").replace("(anonymous namespace)::", "")

    def hops(self, roots, is_target):
        """Shortest path from a root to a function for which is_target()."""
        from collections import deque

        seen = {r: None for r in roots}
        queue = deque(roots)
        while queue:
            key = queue.popleft()
            end = is_target(key)
            if end:
                path, k = [end], key
                self.last_keys = []
                while k is not None:
                    path.append(self.label(k))
                    self.last_keys.append(k)
                    k = seen[k]
                return list(reversed(path))
            for nxt in sorted(self.edges.get(key, ()), key=str):
                if nxt not in seen:
                    seen[nxt] = key
                    queue.append(nxt)
        return None


def comment_above(lines, first):
    """0-based index of the first line of the comment (or template line)
    right above line index `first`."""
    while first > 0 and re.match(r"^\s*(//|template\b)", lines[first - 1]):
        first -= 1
    return first


def lines_of(index, walk, decl):
    """The 1-based line numbers a reader reads for one reached declaration."""
    src = index.source(decl.file)
    b, e = src.line_of(decl.begin), src.line_of(max(decl.begin, decl.end - 1))
    first = comment_above(src.lines, b - 1) + 1
    if decl.kind == "CXXRecordDecl" and decl.key not in walk.whole_records:
        head = b
        while head <= e and "{" not in src.lines[head - 1]:
            head += 1
        return set(range(first, head + 1)) | {e}
    return set(range(first, e + 1))


def measure(root, chapter="14_batch", roots=None, jobs=2):
    roots = roots or DEFAULT_ROOTS
    chapter_file = f"chapters/{chapter}/server.cc"
    index = Index(root)
    index.add_tu(chapter_file, whole=True)
    # The .cc files that define what the chapter reaches: the one named
    # after each header whose declarations are reached, until nothing new.
    while True:
        walk = _walk(index, chapter_file, roots)
        wanted = set()
        for decl in walk.missing:
            base = os.path.splitext(decl.file)[0] + ".cc"
            if os.path.exists(os.path.join(root, base)) and base not in index.parsed:
                wanted.add(base)
        if not wanted:
            break
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            results = list(pool.map(lambda s: (s, dump(root, s, False)), sorted(wanted)))
        for source, chunks in results:
            index.parsed.add(source)
            tu = _TU(index, len(index.parsed))
            for chunk in chunks:
                tu.scan(chunk, [], None)
    by_file = {}
    for key in walk.reached:
        decl = index.decls.get(key)
        if decl is None or decl.file == chapter_file:
            continue
        by_file.setdefault(decl.file, set()).update(lines_of(index, walk, decl))
    chapter_src = index.source(chapter_file)
    files = {chapter_file: set(range(1, len(chapter_src.lines) + 1))}
    files.update(by_file)
    parts = {}
    for path, nums in files.items():
        src = index.source(path)
        kept = sorted(n for n in nums if n <= len(src.lines) and src.lines[n - 1].strip())
        parts[path] = {"lines": len(kept), "ranges": ranges(kept, src)}

    def posts(key):
        return POST_CALL if POST_CALL in walk.externals.get(key, ()) else None

    def calls_back(key):
        return "callback" if key in walk.callbacks else None

    root_keys = _root_keys(index, chapter_file, roots)
    post_path = walk.hops([k for k in root_keys if index.decls[k].file == chapter_file], posts)
    if post_path is None:
        # Chapters from 15 on only queue in the loop; the poll posts.
        post_path = walk.hops(root_keys, posts)
    post_files = set()
    for key in getattr(walk, "last_keys", []) if post_path else []:
        while key not in index.decls and isinstance(key, tuple) and key[0] == "lambda":
            key = key[1]
        if key in index.decls:
            post_files.add(index.decls[key].file)
    done_path = walk.hops([k for k in root_keys if index.decls[k].file != chapter_file],
                          calls_back)
    return {
        "chapter": chapter,
        "roots": roots,
        "lines": sum(p["lines"] for p in parts.values()),
        "files": len(parts),
        "hops_to_post": len(post_path) - 1 if post_path else None,
        "post_path": post_path,
        "files_to_post": len(post_files) if post_path else None,
        "hops_to_callback": len(done_path) - 1 if done_path else None,
        "callback_path": done_path,
        "parts": parts,
        "definitions": sorted(
            f"{index.decls[k].file}:{index.source(index.decls[k].file).line_of(index.decls[k].begin)}"
            f" {walk.label(k)}" for k in walk.reached if k in index.decls),
    }


def ranges(nums, src):
    """Runs of line numbers, joined across blank lines."""
    out = []
    for n in nums:
        if out and all(not src.lines[m - 1].strip() for m in range(out[-1][1] + 1, n)):
            out[-1][1] = n
        else:
            out.append([n, n])
    return [f"{a}-{b}" if a != b else f"{a}" for a, b in out]


def _root_keys(index, chapter_file, roots):
    keys = []
    for root in roots:
        found = [k for k, d in index.decls.items()
                 if d.kind in FUNCTION_KINDS and
                 (d.qual == root or (d.file == chapter_file and d.name == root))]
        defined = [k for k in found if index.decls[k].node is index.decls[k].body]
        found = defined or found
        if not found:
            raise SystemExit(f"call_graph: no definition of {root} found")
        keys += found
    return keys


def _walk(index, chapter_file, roots):
    types = {}
    for key, decl in index.decls.items():
        if decl.kind in TYPE_KINDS and (decl.kind != "CXXRecordDecl" or
                                        decl.node.get("completeDefinition")):
            types.setdefault(decl.qual, set()).add(key)
            types.setdefault(decl.qual.replace("(anonymous namespace)::", ""), set()).add(key)
    # An out-of-line definition is named after its declaration.
    for keys in index.by_mangled.values():
        best = max((index.decls[k].qual for k in keys), key=len)
        for k in keys:
            index.decls[k].qual = best
    walk = Walk(index, chapter_file, types)
    Walk._passed = {}
    classes = _chapter_classes(index, chapter_file, types)
    for key, decl in index.decls.items():
        if decl.kind in FUNCTION_KINDS and decl.parent in classes and _overrides(decl.node):
            definition = walk.definition_of(decl) or key
            walk.overrides.setdefault(decl.name, set()).add(definition)
    walk.missing.clear()
    for key in _root_keys(index, chapter_file, roots):
        walk.reach(key)
    walk.run()
    # A record copied or built whole: all of its fields are read.
    for record in list(walk.whole_records):
        for field in index.fields_of.get(record, ()):
            walk.reached.add(field)
    return walk


def report(m, listing=False, line_ranges=True):
    out = [f"chapter {m['chapter']}: from {' and '.join(m['roots'])}"]
    post = m["post_path"]
    out.append(f"  hops, loop -> {POST_CALL}: {m['hops_to_post']}"
               + (f" ({' -> '.join(post)})" if post else ""))
    back = m["callback_path"]
    out.append(f"  hops, completion -> handler: {m['hops_to_callback']}"
               + (f" ({' -> '.join(back)})" if back else ""))
    out.append(f"  files from loop to {POST_CALL}: {m['files_to_post']}")
    out.append(f"  non-blank lines read: {m['lines']} in {m['files']} files")
    for path, part in sorted(m["parts"].items(), key=lambda kv: (not kv[0].startswith("chap"),
                                                               kv[0])):
        where = f"  {', '.join(part['ranges'])}" if line_ranges else ""
        out.append(f"    {part['lines']:4d}  {path}{where}")
    if listing:
        out.append("  definitions reached:")
        out += [f"    {d}" for d in m["definitions"]]
    return "\n".join(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", default=os.path.join(os.path.dirname(__file__), ".."))
    parser.add_argument("--chapter", default="14_batch")
    parser.add_argument("--list", action="store_true", help="list every definition reached")
    parser.add_argument("--no-ranges", action="store_true",
                        help="leave out the line ranges (docs/maintaining.md shows this form)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--check", action="store_true",
                        help=f"exit 1 past the limits {LIMITS}")
    args = parser.parse_args()
    m = measure(os.path.abspath(args.root), args.chapter)
    print(json.dumps(m, indent=1) if args.json else report(m, args.list, not args.no_ranges))
    failed = [k for k, limit in LIMITS.items() if m[k] is None or m[k] > limit]
    if args.check and failed:
        print("over the limit: " + ", ".join(failed), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
