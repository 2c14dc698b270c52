#!/usr/bin/env python3
"""Checks that the library's includes run one way (docs/architecture.md):

  api (src/api, src/reference)  ->  backends (src/cpu, src/cuda)  ->  core (src/core)

  src/core      includes only src/core and the public include/flashcore/types.hpp
  src/cpu       includes src/cpu, src/core and the public headers (include/flashcore)
  src/cuda      includes src/cuda, src/core and the public headers
  src/api, src/reference  may include any of them

An include is `#include "..."` (or <flashcore/...>), resolved against the including file's
folder, then src/, then include/. Exits non-zero and names each include that runs the
wrong way.
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
INCLUDE = ROOT / "include"
SUFFIXES = {".h", ".hpp", ".cpp", ".c", ".cu", ".cuh", ".inc"}
INCLUDE_LINE = re.compile(r'^\s*#\s*include\s*(?:"([^"]+)"|<(flashcore/[^>]+)>)')

# layer of a file (its first folder under src/) -> the targets it may include
ALLOWED = {
    "core": {"core", "public:types.hpp"},
    "cpu": {"cpu", "core", "public"},
    "cuda": {"cuda", "core", "public"},
    "api": {"api", "reference", "cpu", "cuda", "core", "public"},
    "reference": {"api", "reference", "cpu", "cuda", "core", "public"},
}


def target_of(path: pathlib.Path, name: str):
    """The layer an include names: a folder under src/, 'public' or 'public:<file>', or None
    (a file outside the library: system or third-party headers)."""
    for base in (path.parent, SRC, INCLUDE):
        cand = (base / name).resolve()
        if cand.is_file():
            if cand.is_relative_to(SRC):
                return cand.relative_to(SRC).parts[0]
            if cand.is_relative_to(INCLUDE / "flashcore"):
                return "public:" + cand.name
            return None
    if name.startswith("flashcore/"):
        return "public:" + name.split("/", 1)[1]
    return None


def allowed(layer: str, target: str) -> bool:
    rules = ALLOWED[layer]
    if target in rules:
        return True
    return target.startswith("public:") and "public" in rules


def main() -> int:
    errors, checked = [], 0
    for path in sorted(SRC.rglob("*")):
        if path.suffix not in SUFFIXES or not path.is_file():
            continue
        layer = path.relative_to(SRC).parts[0]
        if layer not in ALLOWED:
            continue  # build files and the like at the top of src/
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            m = INCLUDE_LINE.match(line)
            if not m:
                continue
            name = m.group(1) or m.group(2)
            target = target_of(path, name)
            if target is None:
                continue
            checked += 1
            if not allowed(layer, target):
                shown = target.replace("public:", "include/flashcore/")
                errors.append(f"{path.relative_to(ROOT)}:{n}: src/{layer} must not include "
                              f"'{name}' ({shown if shown.startswith('include') else 'src/' + shown})")
    for e in errors:
        print(e, file=sys.stderr)
    print(f"check_layers: {checked} includes checked, {len(errors)} running the wrong way")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
