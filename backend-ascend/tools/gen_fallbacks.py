#!/usr/bin/env python3
"""Generates the host-fallback methods of the Ascend backend.

For every method of Burn 0.21's backend op traits that has no default body and is not written
by hand in `backend-ascend/src/ops/<file>.rs` (above the GENERATED marker), emits a method that
moves its tensor arguments to the host (`Fallback::arg`), calls NdArray's implementation and
moves the result back (`Fallback::ret`), counting the call under the method's name.

Run from the repository root after changing hand-written methods:
    python3 backend-ascend/tools/gen_fallbacks.py && cargo fmt --all
"""
import os, re, sys
sys.path.insert(0, os.path.dirname(__file__))
from burn_traits import parse, R
import glob

MARK = "    // ---- GENERATED host fallbacks (tools/gen_fallbacks.py): do not edit below ----\n"
END = "}\n"

FILES = [
    ("ops/tensor.rs", "FloatTensorOps", "src/ops/tensor.rs"),
    ("ops/int_tensor.rs", "IntTensorOps", "src/ops/int_tensor.rs"),
    ("ops/bool_tensor.rs", "BoolTensorOps", "src/ops/bool_tensor.rs"),
    ("ops/qtensor.rs", "QTensorOps", "src/ops/qtensor.rs"),
]
for f in glob.glob(R + "ops/modules/*.rs"):
    if "pub trait ModuleOps" in open(f).read():
        FILES.append((f[len(R):], "ModuleOps", "src/ops/module.rs"))


# Defaults Burn gives a backend that are not usable as they stand: `unimplemented!` bodies
# (detected) and inexact composites (listed: prod via exp(sum(log x)) fails for x <= 0).
# These get a host fallback too, so the backend does what NdArray does.
INEXACT_DEFAULTS = {"float_prod", "float_prod_dim"}


def split_args(s):
    out, depth, cur = [], 0, ""
    for c in s:
        if c in "<([":
            depth += 1
        elif c in ">)]":
            depth -= 1
        if c == "," and depth == 0:
            out.append(cur.strip()); cur = ""
        else:
            cur += c
    if cur.strip():
        out.append(cur.strip())
    return out


def gen(sig, trait):
    sig = sig.replace("<B>", "<Self>").replace("crate::", "burn_backend::")
    m = re.match(r"fn (\w+)\s*(<[^(]*>)?\(", sig)
    name, generics = m.group(1), m.group(2) or ""
    i, depth = m.end(), 1
    while depth:
        depth += {"(": 1, ")": -1}.get(sig[i], 0)
        i += 1
    args, rest = sig[m.end() : i - 1], sig[i:].strip()
    args = re.sub(r"(^|[(,]\s*)_(\w+):", r"\1\2:", args)
    ret = rest[2:].strip() if rest.startswith("->") else None
    lines = [f"    fn {name}{generics}({args}){' -> ' + ret if ret else ''} {{",
             f'        let mut cx = Fallback::new("{name}");']
    call = []
    for a in split_args(args):
        n, t = [x.strip() for x in a.split(":", 1)]
        if "Tensor<Self>" in t or "QuantizationParametersPrimitive" in t:
            lines.append(f"        let {n} = cx.arg({n});")
        elif t == "&Device<Self>":
            lines.append(f"        let {n} = cx.device({n});")
        elif t == "FloatDType":
            lines.append(f"        let {n} = cx.float_dtype({n});")
        call.append(n)
    lines.append(f"        cx.ret(<Host as {trait}<Host>>::{name}({', '.join(call)}))")
    lines.append("    }")
    return "\n".join(lines)


root = os.path.join(os.path.dirname(__file__), "..")
by_target = {}
for src, trait, target in FILES:
    by_target.setdefault(target, []).append((src, trait))
for target, srcs in by_target.items():
    path = os.path.join(root, target)
    text = open(path).read()
    head = text.split(MARK)[0] if MARK in text else text[: text.rstrip().rfind("}")]
    manual = set(re.findall(r"\bfn (\w+)", head))
    out = []
    for src, trait in srcs:
        for sig, required, body in parse(R + src, trait, bodies=True):
            name = re.match(r"fn (\w+)", sig).group(1)
            broken = body is not None and ("unimplemented!" in body or name in INEXACT_DEFAULTS)
            if (required or broken) and name not in manual:
                out.append(gen(sig, trait))
    open(path, "w").write(head + MARK + "\n\n".join(out) + "\n" + END)
    print(target, len(out), "fallbacks")
