"""Reads the op traits of Burn 0.21 from the sources of its `burn-backend` crate.

`backend_src()` finds those sources through `cargo metadata` (the `burn-backend` 0.21.0
package's `manifest_path`), so it works wherever the workspace's dependencies are in cargo's
cache (after `cargo fetch` or any build); `parse()` lists the methods of one trait.

Run as a script, prints every backend trait's required methods (a survey):
    python3 backend-ascend/tools/burn_traits.py
"""
import glob
import json
import os
import re
import subprocess

# The repository root (the workspace's Cargo.toml).
REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
BURN_BACKEND = ("burn-backend", "0.21.0")


class SourcesNotFound(Exception):
    """Burn's sources could not be located (cargo missing, or dependencies not fetchable)."""


class WrongBurn(Exception):
    """The workspace does not depend on the Burn version the generator is written for."""


def _metadata(offline):
    cmd = [os.environ.get("CARGO", "cargo"), "metadata", "--format-version", "1",
           "--manifest-path", os.path.join(REPO, "Cargo.toml")]
    if offline:
        cmd.append("--offline")
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    except OSError as e:
        raise SourcesNotFound(f"cannot run {cmd[0]}: {e}")
    if p.returncode != 0:
        raise SourcesNotFound(f"`{' '.join(cmd[:4])}{' --offline' if offline else ''}` "
                              f"failed (exit {p.returncode}):\n{p.stderr.strip()}")
    return json.loads(p.stdout)


def backend_src():
    """The `src/backend/` directory of `burn-backend` 0.21.0 (with a trailing slash).

    Asks `cargo metadata --offline` first (the cache any build or `cargo fetch` populated; no
    network), then plain `cargo metadata` (which downloads what is missing)."""
    errors = []
    for offline in (True, False):
        try:
            meta = _metadata(offline)
        except SourcesNotFound as e:
            errors.append(str(e))
            continue
        for p in meta["packages"]:
            if (p["name"], p["version"]) == BURN_BACKEND:
                return os.path.join(os.path.dirname(p["manifest_path"]), "src", "backend", "")
        raise WrongBurn("{} {} is not a dependency of the workspace".format(*BURN_BACKEND))
    raise SourcesNotFound("\n".join(errors))


def module_ops_files(src):
    """The files (relative to `src`) under `ops/modules/` that define `ModuleOps`."""
    out = []
    for f in sorted(glob.glob(os.path.join(src, "ops", "modules", "*.rs"))):
        with open(f) as fh:
            if "pub trait ModuleOps" in fh.read():
                out.append(os.path.relpath(f, src))
    return out


def strip_comments(s):
    s = re.sub(r"//[^\n]*", "", s)
    s = re.sub(r"/\*.*?\*/", "", s, flags=re.S)
    return s


def parse(path, trait, bodies=False):
    """The methods of `trait` in `path`, in source order: `(signature, required)` (plus the
    default body, or None, with `bodies`); signatures and bodies on one line each."""
    with open(path) as fh:
        s = strip_comments(fh.read())
    m = re.search(r"pub trait " + trait + r"\b[^{]*\{", s)
    i = m.end()
    depth = 1
    out = []
    while depth > 0:
        c = s[i]
        if c == "{":
            depth += 1
            i += 1
            continue
        if c == "}":
            depth -= 1
            i += 1
            continue
        if depth == 1 and s.startswith("fn ", i) and (s[i - 1] in " \n\t"):
            j = i
            p = 0
            b = 0
            while True:
                c = s[j]
                if c == "(":
                    p += 1
                elif c == ")":
                    p -= 1
                elif c == "[":
                    b += 1
                elif c == "]":
                    b -= 1
                elif p == 0 and b == 0 and c in ";{":
                    break
                j += 1
            sig = " ".join(s[i:j].split())
            body = None
            if c == "{":
                k = j + 1
                d = 1
                while d:
                    d += {"{": 1, "}": -1}.get(s[k], 0)
                    k += 1
                body = " ".join(s[j:k].split())
            out.append((sig, c == ";", body) if bodies else (sig, c == ";"))
            i = j
            continue
        i += 1
    return out


if __name__ == "__main__":
    R = backend_src()
    files = [("ops/tensor.rs", "FloatTensorOps"), ("ops/int_tensor.rs", "IntTensorOps"),
             ("ops/bool_tensor.rs", "BoolTensorOps"), ("ops/qtensor.rs", "QTensorOps"),
             ("ops/activation.rs", "ActivationOps"), ("ops/transaction.rs", "TransactionOps"),
             ("base.rs", "Backend")]
    files += [(f, "ModuleOps") for f in module_ops_files(R)]
    tot = 0
    for f, t in files:
        r = parse(R + f, t)
        req = [x for x, b in r if b]
        tot += len(req)
        print("==", t, len(req), "/", len(r))
        for x in req:
            print("  ", x)
    print(tot)
