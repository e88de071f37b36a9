#!/usr/bin/env python3
"""PyTorch + transformers baseline on a Hugging Face checkpoint folder, for BENCHMARKS.md.

This is a measurement script, not a test: nothing in the test suite or CI runs it, and it
asserts nothing about speed. It times what the project's own CPU path does, on the same
checkpoint, with PyTorch's eager execution (no torch.compile) in float32, and prints ONE JSON
object on stdout (progress goes to stderr):

* prefill: one forward of a ``--prompt-tokens`` (72) token prompt with ``use_cache=True`` and
  ``logits_to_keep=1`` (as ``generate`` runs its prefill), under ``torch.inference_mode``;
  median over ``--prefill-runs`` after ``--warmup`` untimed runs; tokens/s = prompt tokens /
  median time.
* decode: greedy, one sequence, ``--decode-tokens`` (128) new tokens with the KV cache
  (``DynamicCache``), no sampling, EOS ignored. The prefill yields new token 1; each of the
  remaining ``decode-tokens - 1`` steps feeds the last token and yields the next. decode
  tokens/s = (decode-tokens - 1) / time of those steps (median over ``--decode-runs``). The same
  tokens are then produced by ``model.generate(do_sample=False, min/max_new_tokens=...)``,
  checked equal, and its end-to-end time is reported as well (prefill included).
* full fine-tune step: ``--batch`` x ``--seq`` (4 x 256) seeded random token ids,
  ``model(ids, labels=ids)`` (transformers' shifted mean cross-entropy), backward,
  ``torch.optim.AdamW`` step (``--lr``, weight decay 0, torch's default foreach
  implementation), ``zero_grad(set_to_none=True)``; median step time over ``--train-steps``
  steps after ``--train-warmup`` untimed steps; tokens/s = batch * seq / median step time.
* LoRA step: the same on a freshly loaded base wrapped by PEFT (``LoraConfig(r=8,
  lora_alpha=8, lora_dropout=0, bias="none", target_modules=q_proj,k_proj,v_proj,o_proj)``
  by default; ``--lora-targets`` / ``--lora-r`` / ``--lora-alpha`` change it), AdamW over the
  adapters only.

Threads: ``--threads N`` sets ``torch.set_num_threads(N)`` and ``torch.set_num_interop_threads(N)``
before anything runs (``--interop-threads`` overrides the second). Attention:
``--attn sdpa`` (transformers' default) or ``eager`` (transformers' plain matmul/softmax one).

How to run (CPU torch is enough; a CUDA wheel runs on the CPU as well)::

    pip install torch transformers peft safetensors
    python tools/torch_baseline.py /path/to/hf-folder --threads 2 > baseline.json
    # smoke test: tiny counts, a few seconds, no meaningful numbers
    python tools/torch_baseline.py /path/to/hf-folder --threads 1 --smoke

The folder is a Hugging Face checkpoint (config.json + *.safetensors; tokenizer.json optional:
with it the prompt is real text, without it seeded random ids). Run it on an otherwise idle
machine; the JSON records the versions, threads and every count it used.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import platform
import resource
import statistics
import sys
import time
import warnings

PROMPT_TEXT = (
    "The history of computing is a story of people who wanted to calculate faster than they could by hand. "
    "Early mechanical calculators added and multiplied with gears; later machines read their programs from "
    "punched cards, and the first electronic computers filled whole rooms with vacuum tubes. Transistors, "
    "integrated circuits and microprocessors made them smaller, cheaper and faster every year, until a phone "
    "in a pocket could do more than all the computers of the nineteen sixties together."
)


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("checkpoint", help="Hugging Face folder: config.json + model.safetensors (+ tokenizer.json)")
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (and interop threads)")
    ap.add_argument("--interop-threads", type=int, default=None, help="torch.set_num_interop_threads (default: --threads)")
    ap.add_argument("--attn", default="sdpa", choices=["sdpa", "eager"], help="transformers attn_implementation")
    ap.add_argument("--parts", default="prefill,decode,full,lora", help="comma-separated subset of prefill,decode,full,lora")
    ap.add_argument("--warmup", type=int, default=2, help="untimed prefill / decode runs first")
    ap.add_argument("--prompt-tokens", type=int, default=72)
    ap.add_argument("--prefill-runs", type=int, default=10)
    ap.add_argument("--decode-tokens", type=int, default=128, help="new tokens generated (>= 2)")
    ap.add_argument("--decode-runs", type=int, default=3)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--train-steps", type=int, default=5, help="timed steps (after the warm-up)")
    ap.add_argument("--train-warmup", type=int, default=2, help="untimed steps first")
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--lora-r", type=int, default=8)
    ap.add_argument("--lora-alpha", type=float, default=8.0)
    ap.add_argument("--lora-targets", default="q_proj,k_proj,v_proj,o_proj")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="tiny counts to check the script runs: 8 prompt tokens, 4 new tokens, 1 run, "
        "1 train step of 2 x 32, no warm-up",
    )
    a = ap.parse_args()
    if a.smoke:
        a.warmup, a.prompt_tokens, a.prefill_runs = 0, 8, 1
        a.decode_tokens, a.decode_runs = 4, 1
        a.batch, a.seq, a.train_steps, a.train_warmup = 2, 32, 1, 0
    if a.decode_tokens < 2:
        ap.error("--decode-tokens must be >= 2")
    a.parts = [p for p in a.parts.split(",") if p]
    for p in a.parts:
        if p not in ("prefill", "decode", "full", "lora"):
            ap.error(f"unknown part {p!r}")
    return a


def median_stats(times):
    return dict(
        median_s=statistics.median(times),
        min_s=min(times),
        max_s=max(times),
        runs=len(times),
    )


def main():
    args = parse_args()
    # Threads first: set_num_interop_threads must precede any inter-op parallel work.
    import torch

    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(args.interop_threads or args.threads)

    import transformers
    from transformers import AutoModelForCausalLM
    from transformers.cache_utils import DynamicCache

    warnings.filterwarnings("ignore")
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()

    def load():
        m = AutoModelForCausalLM.from_pretrained(args.checkpoint, dtype=torch.float32, attn_implementation=args.attn)
        return m

    t0 = time.perf_counter()
    model = load()
    model.eval()
    load_s = time.perf_counter() - t0
    cfg = model.config
    vocab = cfg.vocab_size
    # transformers >= 5.2x names the cache argument `cache` (`past_key_values` is deprecated until 5.40)
    cache_kw = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    n_params = sum(p.numel() for p in model.parameters())
    log(f"loaded {cfg.model_type} ({n_params / 1e6:.1f} M parameters) in {load_s:.1f} s")

    # --- the prompt: real text when the folder has a tokenizer, else seeded random ids
    prompt_source = "seeded random ids"
    ids = None
    if os.path.exists(os.path.join(args.checkpoint, "tokenizer.json")):
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(args.checkpoint)
        text_ids = tok(PROMPT_TEXT, add_special_tokens=False)["input_ids"]
        reps = -(-args.prompt_tokens // len(text_ids))
        ids = (text_ids * reps)[: args.prompt_tokens]
        prompt_source = "PROMPT_TEXT tokenized without special tokens, repeated / cut to length"
    else:
        tok = None
    if ids is None:
        g = torch.Generator().manual_seed(args.seed)
        ids = torch.randint(0, vocab, (args.prompt_tokens,), generator=g).tolist()
    prompt = torch.tensor([ids], dtype=torch.int64)

    result = dict(
        script="tools/torch_baseline.py",
        checkpoint=os.path.abspath(args.checkpoint),
        model_type=cfg.model_type,
        parameters=n_params,
        dtype="float32",
        execution="PyTorch eager (no torch.compile), CPU",
        attn_implementation=args.attn,
        cache_argument=cache_kw,
        versions=dict(
            python=platform.python_version(),
            torch=torch.__version__,
            transformers=transformers.__version__,
            peft=_version("peft"),
        ),
        threads=dict(
            intra_op=torch.get_num_threads(),
            inter_op=torch.get_num_interop_threads(),
            os_cpu_count=os.cpu_count(),
        ),
        smoke=args.smoke,
        load_s=load_s,
    )

    # --- prefill
    def prefill():
        cache = DynamicCache(config=cfg)
        out = model(prompt, **{cache_kw: cache}, use_cache=True, logits_to_keep=1)
        return out, cache

    if "prefill" in args.parts:
        times = []
        with torch.inference_mode():
            for i in range(args.warmup + args.prefill_runs):
                t = time.perf_counter()
                prefill()
                dt = time.perf_counter() - t
                if i >= args.warmup:
                    times.append(dt)
        st = median_stats(times)
        result["prefill"] = dict(
            prompt_tokens=args.prompt_tokens,
            prompt_source=prompt_source,
            prompt_ids=ids,
            logits_to_keep=1,
            warmup=args.warmup,
            tokens_per_s=args.prompt_tokens / st["median_s"],
            **st,
        )
        log(f"prefill: {result['prefill']['tokens_per_s']:.1f} tokens/s (median {st['median_s'] * 1e3:.1f} ms)")

    # --- greedy decode, one sequence
    if "decode" in args.parts:
        n_new = args.decode_tokens
        decode_times, prefill_times, gen = [], [], None
        with torch.inference_mode():
            for i in range(args.warmup + args.decode_runs):
                t = time.perf_counter()
                out, cache = prefill()
                nxt = out.logits[:, -1].argmax(-1, keepdim=True)
                t1 = time.perf_counter()
                toks = [nxt]
                for _ in range(n_new - 1):
                    out = model(nxt, **{cache_kw: cache}, use_cache=True)
                    nxt = out.logits[:, -1].argmax(-1, keepdim=True)
                    toks.append(nxt)
                t2 = time.perf_counter()
                if i >= args.warmup:
                    prefill_times.append(t1 - t)
                    decode_times.append(t2 - t1)
                gen = torch.cat(toks, dim=1)
            # the same tokens through generate(): the reference loop, timed end to end
            model.generation_config.eos_token_id = None
            t = time.perf_counter()
            ref = model.generate(
                prompt,
                attention_mask=torch.ones_like(prompt),
                do_sample=False,
                max_new_tokens=n_new,
                min_new_tokens=n_new,
                eos_token_id=None,
                pad_token_id=0,
                use_cache=True,
            )
            gen_s = time.perf_counter() - t
        ref = ref[:, prompt.shape[1] :]
        st = median_stats(decode_times)
        result["decode"] = dict(
            batch=1,
            prompt_tokens=args.prompt_tokens,
            new_tokens=n_new,
            decode_steps=n_new - 1,
            warmup=args.warmup,
            tokens_per_s=(n_new - 1) / st["median_s"],
            **st,
            prefill_in_loop_median_s=statistics.median(prefill_times),
            generate_e2e_s=gen_s,
            generate_e2e_new_tokens_per_s=n_new / gen_s,
            generate_matches_loop=bool(torch.equal(ref, gen)),
            greedy_ids=gen[0].tolist(),
            greedy_text=tok.decode(gen[0]) if tok is not None else None,
        )
        if not result["decode"]["generate_matches_loop"]:
            log("WARNING: generate() and the timed loop produced different tokens")
        log(f"decode: {result['decode']['tokens_per_s']:.1f} tokens/s (median {st['median_s'] * 1e3:.1f} ms for {n_new - 1} steps)")

    # --- training steps
    g = torch.Generator().manual_seed(args.seed + 1)
    batch = torch.randint(0, vocab, (args.batch, args.seq), generator=g)

    def train(m, params, label):
        m.train()
        m.config.use_cache = False
        opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0)
        times, losses = [], []
        for i in range(args.train_warmup + args.train_steps):
            t = time.perf_counter()
            loss = m(input_ids=batch, labels=batch, use_cache=False).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            dt = time.perf_counter() - t
            losses.append(float(loss))
            if i >= args.train_warmup:
                times.append(dt)
            log(f"{label} step {i}: {dt:.3f} s, loss {losses[-1]:.4f}")
        st = median_stats(times)
        return dict(
            batch=args.batch,
            seq=args.seq,
            tokens_per_step=args.batch * args.seq,
            warmup_steps=args.train_warmup,
            optimizer=f"torch.optim.AdamW(lr={args.lr}, weight_decay=0, betas=(0.9, 0.999), eps=1e-8)",
            loss="transformers labels=input_ids (shifted mean cross-entropy)",
            data="seeded random token ids",
            step_tokens_per_s=args.batch * args.seq / st["median_s"],
            **st,
            losses=losses,
            trainable_parameters=sum(p.numel() for p in params),
        )

    if "full" in args.parts:
        params = [p for p in model.parameters() if p.requires_grad]
        result["full_finetune"] = train(model, params, "full")
        log(f"full: {result['full_finetune']['step_tokens_per_s']:.1f} tokens/s")
    del model
    if "lora" in args.parts:
        from peft import LoraConfig, get_peft_model

        base = load()
        targets = [t for t in args.lora_targets.split(",") if t]
        lcfg = LoraConfig(
            r=args.lora_r,
            lora_alpha=args.lora_alpha,
            lora_dropout=0.0,
            bias="none",
            target_modules=targets,
            task_type="CAUSAL_LM",
        )
        pm = get_peft_model(base, lcfg)
        params = [p for p in pm.parameters() if p.requires_grad]
        info = train(pm, params, "lora")
        info["lora"] = dict(r=args.lora_r, alpha=args.lora_alpha, dropout=0.0, target_modules=targets, bias="none")
        result["lora_step"] = info
        log(f"lora: {info['step_tokens_per_s']:.1f} tokens/s")

    result["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(result, indent=1))


def _version(dist):
    try:
        from importlib.metadata import version

        return version(dist)
    except Exception:
        return None


if __name__ == "__main__":
    main()
