#!/usr/bin/env python3
"""Write tools/notes_pretrained_config.md: which config.json keys transformers treats as generic.

Facts for a strict config loader (which keys every model type may carry, which keys each of
LlamaConfig / Qwen3Config / Qwen3MoeConfig / GptOssConfig adds), extracted from the installed
transformers 5 by introspection, not by hand:

* ``dataclasses.fields(PreTrainedConfig)`` -- transformers 5's config base class is a (strict)
  dataclass; its fields are the generic attributes with their types and defaults;
* the string constants of ``kwargs.pop(...)`` / ``kwargs.get(...)`` in the source of
  ``PreTrainedConfig.__post_init__`` (``ast``) -- generic keys consumed without being fields;
* ``GenerationConfig._get_default_generation_params()`` -- generation keys that ``__post_init__``
  drops from a config.json;
* ``PreTrainedConfig().to_dict()`` / ``to_diff_dict()`` and the same for each model class -- what
  an instance holds and what ``save_pretrained`` writes;
* each model class's own fields = its dataclass fields minus the base's, and its ``attribute_map``;
* the fate of every transformers-4 generic key (``PretrainedConfig.__init__``'s parameters in
  4.x, read with ``ast`` from a 4.x ``configuration_utils.py`` given by ``--tf4-source``) when
  passed to ``LlamaConfig`` in transformers 5: field, consumed, or kept as an extra attribute
  (and then written back by ``save_pretrained``).

Run: ``python tools/gen_notes_pretrained_config.py [--tf4-source PATH]`` (PATH: a
transformers 4.x ``configuration_utils.py``, e.g. unzipped from ``pip download --no-deps
"transformers<5"``). Needs torch + transformers 5.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import json
import os
import textwrap
import warnings

import transformers
from transformers import GenerationConfig, GptOssConfig, LlamaConfig, PreTrainedConfig, Qwen3Config, Qwen3MoeConfig

warnings.filterwarnings("ignore")
transformers.logging.set_verbosity_error()

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "notes_pretrained_config.md")
MODEL_CLASSES = [LlamaConfig, Qwen3Config, Qwen3MoeConfig, GptOssConfig]
MISSING = dataclasses.MISSING


def fmt_type(t):
    s = t if isinstance(t, str) else getattr(t, "__name__", None) or str(t)
    return str(s).replace("typing.", "").replace("torch.", "torch.")


def fmt_default(f):
    if f.default is not MISSING:
        return json.dumps(f.default) if isinstance(f.default, (int, float, str, bool, type(None), list, dict)) else repr(f.default)
    if f.default_factory is not MISSING:  # type: ignore[misc]
        return f"{f.default_factory()!r} (factory)"
    return "(required)"


def fields_of(cls):
    return {f.name: f for f in dataclasses.fields(cls)}


def kwargs_keys_in(func):
    """String constants used as kwargs.pop(KEY...) / kwargs.get(KEY...) in func's source."""
    src = textwrap.dedent(inspect.getsource(func))
    keys = []
    for node in ast.walk(ast.parse(src)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("pop", "get")
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "kwargs"
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            keys.append((node.args[0].value, node.func.attr))
    seen, out = set(), []
    for k, how in keys:
        if k not in seen:
            seen.add(k)
            out.append((k, how))
    return out


def set_literal_in(func, var):
    """The string members of a set literal assigned to `var` in func's source."""
    src = textwrap.dedent(inspect.getsource(func))
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == var for t in node.targets):
            if isinstance(node.value, ast.Set):
                return [e.value for e in node.value.elts if isinstance(e, ast.Constant)]
    return []


def tf4_generic_keys(path):
    """PretrainedConfig.__init__ keyword parameters and kwargs.pop keys of a transformers 4.x source file."""
    tree = ast.parse(open(path).read())
    version = None
    for cls in ast.walk(tree):
        if isinstance(cls, ast.ClassDef) and cls.name == "PretrainedConfig":
            for fn in cls.body:
                if isinstance(fn, ast.FunctionDef) and fn.name == "__init__":
                    params = [a.arg for a in fn.args.kwonlyargs]
                    defaults = [ast.unparse(d) if d is not None else None for d in fn.args.kw_defaults]
                    popped = []
                    for node in ast.walk(fn):
                        if (
                            isinstance(node, ast.Call)
                            and isinstance(node.func, ast.Attribute)
                            and node.func.attr in ("pop", "get")
                            and isinstance(node.func.value, ast.Name)
                            and node.func.value.id == "kwargs"
                            and node.args
                            and isinstance(node.args[0], ast.Constant)
                        ):
                            if node.args[0].value not in popped:
                                popped.append(node.args[0].value)
                    gen = []
                    for fn2 in cls.body:
                        if isinstance(fn2, ast.FunctionDef) and fn2.name == "_get_global_generation_defaults":
                            for node in ast.walk(fn2):
                                if isinstance(node, ast.Dict):
                                    gen = [k.value for k in node.keys if isinstance(k, ast.Constant)]
                    return dict(zip(params, defaults)), popped, gen
    raise SystemExit(f"no PretrainedConfig.__init__ in {path}")


def probe(cls, key, value, **base_kw):
    """What transformers 5 does with `key` in a config dict of class `cls`."""
    try:
        c = cls(**base_kw, **{key: value})
    except Exception as e:  # noqa: BLE001
        return f"raises {type(e).__name__}"
    d = c.to_dict()
    diff = json.loads(c.to_json_string(use_diff=True))
    is_field = key in fields_of(cls)
    consumed = dict(kwargs_keys_in(PreTrainedConfig.__post_init__))
    if is_field:
        what = "field"
    elif key in consumed:
        what = "consumed by `__post_init__` (section 2)"
    elif key in cls.attribute_map:
        what = f"alias of `{cls.attribute_map[key]}`"
    elif key in d:
        what = "extra attribute (kept)"
    elif hasattr(c, key):
        what = "property / consumed"
    else:
        what = "consumed (dropped)"
    saved = "yes" if key in diff else ("as `" + cls.attribute_map[key] + "`" if key in cls.attribute_map and cls.attribute_map[key] in diff else "no")
    return f"{what}; written by save_pretrained: {saved}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tf4-source", help="a transformers 4.x configuration_utils.py (optional)")
    ap.add_argument("--tf4-version", default=None, help="its version, for the notes")
    args = ap.parse_args()

    L = []
    w = L.append
    w("# Generic config keys in transformers 5 (notes for a strict config.json loader)")
    w("")
    w(
        f"Generated by `tools/gen_notes_pretrained_config.py` from the installed transformers "
        f"**{transformers.__version__}** (`{os.path.relpath(inspect.getsourcefile(PreTrainedConfig), os.path.dirname(transformers.__file__) + '/..')}`)"
        + (f" and transformers **{args.tf4_version}**'s `configuration_utils.py` (read with `ast`, not imported)" if args.tf4_source else "")
        + ". Everything below is introspected (how: see each section), not typed by hand."
    )
    w("")
    w("## In short")
    w("")
    base = fields_of(PreTrainedConfig)
    w(
        "- In transformers 5 `PreTrainedConfig` (alias `PretrainedConfig`) is a `@dataclass` wrapped in huggingface_hub's "
        "`@strict(accept_kwargs=True)`: declared fields are type-checked, **any other key is accepted** and set as a plain "
        "attribute (`__post_init__`: \"Additional attributes without default values\"), kept in `to_dict()` and written back "
        "by `save_pretrained`. transformers itself therefore never refuses an unknown config.json key."
    )
    w(
        f"- The generic (base-class) fields are only {len(base)}: " + ", ".join(f"`{n}`" for n in base) + ". "
        "Generic keys that transformers 4 declared on every config (`torchscript`, `tie_word_embeddings`, `pruned_heads`, "
        "`is_decoder`, `tokenizer_class`, `bos/pad/eos/sep_token_id`, `decoder_start_token_id`, `prefix`, "
        "`finetuning_task`, `task_specific_params`, ...) are **no longer base fields**: each model class declares the ones it "
        "uses (Llama / Qwen3 / Qwen3-MoE / gpt-oss declare `pad/bos/eos_token_id` and `tie_word_embeddings`), the rest "
        "become extra attributes (see the table of 4.x keys below)."
    )
    w(
        "- Generation parameters in a config.json (`max_length`, `do_sample`, `temperature`, `top_k`, ...) are popped and "
        "dropped by `__post_init__` unless the class declares them as fields (`use_cache` is a field of all four classes)."
    )
    w("")

    # ---- base fields
    w("## 1. `PreTrainedConfig` dataclass fields (generic to every model type)")
    w("")
    w("How: `dataclasses.fields(transformers.PreTrainedConfig)`.")
    w("")
    w("| field | type | default |")
    w("| --- | --- | --- |")
    for n, f in base.items():
        w(f"| `{n}` | `{fmt_type(f.type)}` | `{fmt_default(f)}` |")
    w("")
    w("`model_type` is a `ClassVar` (not a field) that `to_dict()` adds; `transformers_version` is overwritten with the running version on save.")
    w("")

    # ---- kwargs consumed in __post_init__
    w("## 2. Generic keys consumed by `PreTrainedConfig.__post_init__` (not fields)")
    w("")
    w(
        "How: the string constants of every `kwargs.pop(KEY, ...)` / `kwargs.get(KEY, ...)` in "
        "`inspect.getsource(PreTrainedConfig.__post_init__)` (`ast`), and the `ignored_keys` set literal there."
    )
    w("")
    w("| key | how |")
    w("| --- | --- |")
    notes = {
        "torch_dtype": "legacy name of `dtype`; used when `dtype` is unset, not kept under this name",
        "num_labels": "only builds `id2label` when that is absent",
        "name_or_path": "stored as `_name_or_path` (not written by `save_pretrained`: removed by `to_diff_dict`)",
        "_commit_hash": "dropped",
        "output_attentions": "stored as `_output_attentions` (property `output_attentions`)",
        "attn_implementation": "stored as `_attn_implementation`",
        "experts_implementation": "stored as `_experts_implementation`",
        "per_layer_config": "HeterogeneousConfigMixin: per-layer overrides",
        "rope_scaling": "legacy RoPE dict (`rope_type` or `type`, factor, ...): folded into `rope_parameters`",
        "rope_theta": "legacy top-level theta: folded into `rope_parameters['rope_theta']`",
    }
    for k, how in kwargs_keys_in(PreTrainedConfig.__post_init__):
        w(f"| `{k}` | `kwargs.{how}`: {notes.get(k, '')} |")
    for k in set_literal_in(PreTrainedConfig.__post_init__, "ignored_keys"):
        w(f"| `{k}` | in `ignored_keys`: skipped silently |")
    w(
        "| legacy RoPE keys | `convert_rope_params_to_dict(**kwargs)` (when the class has `rope_parameters`): `rope_theta`, "
        "`rope_scaling`, `partial_rotary_factor` ... are folded into `rope_parameters` |"
    )
    w("")
    gen = GenerationConfig._get_default_generation_params()
    w(
        "Generation keys popped (dropped) when not a field of the class — how: "
        "`GenerationConfig._get_default_generation_params().keys()`: " + ", ".join(f"`{k}`" for k in gen) + "."
    )
    w("")

    # ---- instance dict
    pc = PreTrainedConfig()
    w("## 3. What a bare `PreTrainedConfig()` holds and writes")
    w("")
    w("How: `PreTrainedConfig().to_dict()` and `json.loads(PreTrainedConfig().to_json_string(use_diff=True))`.")
    w("")
    w("- `to_dict()` keys: " + ", ".join(f"`{k}`" for k in pc.to_dict()))
    w("- `to_json_string(use_diff=True)` (what `save_pretrained` writes) keys: " + ", ".join(f"`{k}`" for k in json.loads(pc.to_json_string())))
    w("")

    # ---- per class
    w("## 4. Fields each model class adds")
    w("")
    w(
        "How: `dataclasses.fields(Cls)` minus the base's; `Cls.attribute_map`; keys of `Cls().to_dict()` that are "
        "neither (set by the class's `__post_init__`); and the keys `Cls().save_pretrained` writes "
        "(`to_json_string(use_diff=True)`)."
    )
    w("")
    for cls in MODEL_CLASSES:
        own = {n: f for n, f in fields_of(cls).items() if n not in base}
        inst = cls()
        d = inst.to_dict()
        w(f"### `{cls.__name__}` (`model_type: {cls.model_type}`, `{inspect.getsourcefile(cls).split('transformers/')[-1]}`)")
        w("")
        w("| field | type | default |")
        w("| --- | --- | --- |")
        for n, f in own.items():
            w(f"| `{n}` | `{fmt_type(f.type)}` | `{fmt_default(f)}` |")
        w("")
        if cls.attribute_map:
            w("`attribute_map` (aliases accepted in a config.json, stored under the target): " + ", ".join(f"`{a}` → `{b}`" for a, b in cls.attribute_map.items()))
        else:
            w("`attribute_map`: none")
        w("")
        extra = [k for k in d if k not in fields_of(cls) and k not in ("model_type", "transformers_version")]
        w("Other keys in `to_dict()` of a default instance: " + (", ".join(f"`{k}`" for k in extra) if extra else "none"))
        w("")
        w("Written by `save_pretrained` for a default instance: " + ", ".join(f"`{k}`" for k in json.loads(inst.to_json_string())))
        w("")

    # ---- legacy keys
    probes = [
        ("head_dim", 16),
        ("layer_types", ["full_attention"] * 2),
        ("unk_token_id", 0),
        ("_model_name_or_path", "x"),
        ("torchscript", False),
        ("chunk_size_feed_forward", 0),
        ("tokenizer_class", "X"),
        ("sep_token_id", 3),
        ("use_bfloat16", False),
        ("tf_legacy_loss", False),
        ("gradient_checkpointing", False),
        ("max_window_layers", 4),
        ("num_experts", 8),
        ("experts_per_token", 2),
        ("initial_context_length", 4096),
    ]
    if args.tf4_source:
        params, popped, gen4 = tf4_generic_keys(args.tf4_source)
        w(f"## 5. transformers {args.tf4_version or '4.x'}'s generic keys in transformers {transformers.__version__}")
        w("")
        w(
            f"How: the keyword-only parameters of `PretrainedConfig.__init__` and its `kwargs.pop` keys in transformers "
            f"{args.tf4_version or '4.x'}'s `configuration_utils.py` (`ast`), and the keys of its "
            "`_get_global_generation_defaults()`; each passed alone (with its 4.x default, or a sample value where that "
            "is None) to transformers 5's `LlamaConfig` / `Qwen3MoeConfig`, then looked for among the fields, the "
            "`attribute_map`, `to_dict()` and the `save_pretrained` output. 4.x wrote only non-default values "
            "(`to_diff_dict`) since 4.0, but Hub configs from older or third-party tools often carry the full set."
        )
        w("")
        w(
            "\"written by save_pretrained: no\" for a field means the probed value equals the default, which "
            "`to_diff_dict` omits; a field with another value is written. An extra attribute is written whatever its value."
        )
        w("")
        w(f"| 4.x key | 4.x default | in transformers {transformers.__version__} `LlamaConfig` | `Qwen3MoeConfig` |")
        w("| --- | --- | --- | --- |")
        sample = {
            "dtype": '"float32"',
            "pruned_heads": "{}",
            "cross_attention_hidden_size": "16",
            "architectures": '["LlamaForCausalLM"]',
            "finetuning_task": '"x"',
            "id2label": '{"0": "a", "1": "b"}',
            "label2id": '{"a": 0, "b": 1}',
            "num_labels": "2",
            "task_specific_params": "{}",
            "problem_type": '"regression"',
            "tokenizer_class": '"X"',
            "prefix": '"x"',
            "bos_token_id": "1",
            "pad_token_id": "0",
            "eos_token_id": "2",
            "sep_token_id": "3",
            "decoder_start_token_id": "0",
        }
        rows = [(k, v) for k, v in params.items()] + [(k, None) for k in popped if k not in params]
        for k, dflt in rows:
            lit = dflt if dflt not in (None, "None") else sample.get(k, "0")
            try:
                val = ast.literal_eval(lit)
            except Exception:  # noqa: BLE001
                val = 0
            if k == "torch_dtype":
                val = "float32"
            if k in ("name_or_path", "transformers_version", "attn_implementation", "_commit_hash"):
                val = "x" if k != "attn_implementation" else "eager"
            w(f"| `{k}` | `{dflt}` | {probe(LlamaConfig, k, val)} | {probe(Qwen3MoeConfig, k, val)} |")
        w("")
        w(
            "4.x generation defaults (`_get_global_generation_defaults`, set on every 4.x config and written by old full "
            "dumps): " + ", ".join(f"`{k}`" for k in gen4) + ". In transformers 5 each is popped and dropped "
            "(section 2) unless the class declares it."
        )
        w("")
    w("## 6. Probes of keys seen in real config.json files")
    w("")
    w(
        "How: `Cls(**{key: value})` as in section 5. `_model_name_or_path` and `unk_token_id` come from transformers' own "
        "GGUF conversion (`integrations/ggml.py` maps GGUF `general.name` → `_model_name_or_path` and "
        "`tokenizer.ggml.unknown_token_id` → `unk_token_id`); `max_window_layers` from Qwen's Hub configs; `num_experts` "
        "from Qwen3-MoE Hub configs; `experts_per_token` / `initial_context_length` from openai/gpt-oss-*."
    )
    w("")
    w("| key | " + " | ".join(f"`{c.__name__}`" for c in MODEL_CLASSES) + " |")
    w("| --- |" + " --- |" * len(MODEL_CLASSES))
    for k, v in probes:
        kw = dict(num_hidden_layers=2) if k == "layer_types" else {}
        w(f"| `{k}` | " + " | ".join(probe(c, k, v, **kw) for c in MODEL_CLASSES) + " |")
    w("")
    w(
        "`head_dim` is not a field of `Qwen3MoeConfig`: `Qwen3MoeAttention` reads `getattr(config, 'head_dim', "
        "hidden_size // num_attention_heads)`, so a qwen3_moe config without it means hidden / heads (not Qwen3Config's "
        "128). `layer_types` is not a field of `Qwen3MoeConfig` either: its model applies `config.sliding_window` "
        "(None unless `use_sliding_window`) to every layer. (`layer_types` probed as `Cls(num_hidden_layers=2, layer_types=[2 x "
        "full_attention])`: with a length other than `num_hidden_layers` every class raises "
        "`StrictDataclassClassValidationError`.)"
    )
    w("")
    w("## 7. Type checking of declared fields (`@strict`)")
    w("")
    w("How: `Cls(**{field: value})` with a value of another JSON type; the exception class is shown.")
    w("")
    w("| probe | result |")
    w("| --- | --- |")
    for cls, k, v in [
        (LlamaConfig, "hidden_size", 64.0),
        (LlamaConfig, "hidden_size", "64"),
        (LlamaConfig, "rms_norm_eps", 1),
        (LlamaConfig, "tie_word_embeddings", 1),
        (LlamaConfig, "eos_token_id", [1, 2]),
        (Qwen3MoeConfig, "num_experts_per_tok", 2.0),
        (Qwen3MoeConfig, "mlp_only_layers", None),
        (Qwen3MoeConfig, "norm_topk_prob", "true"),
        (GptOssConfig, "num_local_experts", "4"),
    ]:
        try:
            c = cls(**{k: v})
            r = f"accepted, stored as {getattr(c, k)!r}"
        except Exception as e:  # noqa: BLE001
            r = f"raises `{type(e).__name__}`"
        w(f"| `{cls.__name__}({k}={v!r})` | {r} |")
    w("")
    with open(OUT, "w") as f:
        f.write("\n".join(L))
    print(f"wrote {OUT} ({sum(len(x) + 1 for x in L)} bytes)")


if __name__ == "__main__":
    main()
