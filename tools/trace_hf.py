#!/usr/bin/env python3
"""Trace a transformers model at layer granularity, in reel trace's format.

    python tools/trace_hf.py --model DIR --ids 1,2,3 --out hf.safetensors
    reel trace --model DIR --ids 1,2,3 --out reel.safetensors
    reel trace --diff hf.safetensors reel.safetensors --tol 1e-4

Registers forward hooks on a Hugging Face transformers model and writes, for
one forward over the ids (call 0, positions 0..n-1), the values that exist on
both sides under the names Reel's graphs give them:

    embed                      the token embeddings
    layer N / attn / attn_out  a dense layer's attention output (o_proj)
    layer N / mlp / mlp_out    a dense layer's MLP output (down_proj)
    layer N / gdn / gdn_out    a Qwen4-Exp Gated DeltaNet layer's output
    layer N / qsa / attn_out   a Qwen4-Exp sparse attention layer's output
    layer N / moe / moe_out    a Qwen4-Exp MoE block's output
    layer N / out              each decoder layer's output (the next one's
                               input; Qwen4-Exp: all hyper-connection streams)
    head / norm                the final norm (dense models)
    head / u                   Qwen4-Exp's final stream mixer
    head / logits              the logits

Each value is stored as a [positions, ...] float32 tensor named "NAME#0", with
the metadata reel trace writes (FormatKey "reel.trace" = "1"; per tensor
name, op, scope, call, index, pos, dtype), so `reel trace --diff` lines the
two up by position whatever chunks Reel ran in. The dense models (Llama,
Qwen3) and Qwen4-Exp are known; another architecture gets the points this
script can find by module name (embed, layers, logits), and --list shows what
it hooked. Needs torch, transformers and safetensors; not part of make test.
"""

import argparse
import json
import sys

import torch
from safetensors.torch import save_file
from transformers import AutoConfig, AutoModelForCausalLM

FORMAT_KEY, FORMAT_VERSION = "reel.trace", "1"


def first_tensor(out):
    """The first tensor of a module's output (a tensor, tuple or ModelOutput)."""
    if torch.is_tensor(out):
        return out
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (tuple, list)):
        for x in out:
            t = first_tensor(x)
            if t is not None:
                return t
    return None


def rows_first(t, positions):
    """A [batch 1, positions, ...] value as [positions, features] (streams
    flattened stream-major, as Reel lays them out); a layout with the
    positions elsewhere is moved first."""
    t = t.detach()
    if t.dim() >= 2 and t.shape[0] == 1:
        t = t[0]
    if t.shape[0] != positions:
        dims = [d for d in range(t.dim()) if t.shape[d] == positions]
        if not dims:
            raise ValueError(f"no dimension of {positions} positions in shape {tuple(t.shape)}")
        t = t.movedim(dims[0], 0)
    return t.reshape(positions, -1).to(torch.float32).contiguous().cpu()


def decoder(model):
    """The module holding the decoder layers (model.model, or the language
    model of a multimodal wrapper)."""
    for path in ("model.language_model", "model", "language_model.model", "transformer"):
        m = model
        try:
            for part in path.split("."):
                m = getattr(m, part)
        except AttributeError:
            continue
        if hasattr(m, "layers"):
            return m
    raise SystemExit("trace_hf: no decoder layers found (model.model.layers)")


def points(model, qwen4):
    """(module, name) pairs to hook, in graph order."""
    dec = decoder(model)
    out = [(model.get_input_embeddings(), "embed")]
    for i, layer in enumerate(dec.layers):
        if qwen4:
            if getattr(layer, "linear_attn", None) is not None:
                out.append((layer.linear_attn, f"layer {i} / gdn / gdn_out"))
            elif getattr(layer, "self_attn", None) is not None:
                out.append((layer.self_attn, f"layer {i} / qsa / attn_out"))
            if getattr(layer, "mlp", None) is not None:
                out.append((layer.mlp, f"layer {i} / moe / moe_out"))
        else:
            if getattr(layer, "self_attn", None) is not None:
                out.append((layer.self_attn, f"layer {i} / attn / attn_out"))
            if getattr(layer, "mlp", None) is not None:
                out.append((layer.mlp, f"layer {i} / mlp / mlp_out"))
        out.append((layer, f"layer {i} / out"))
    if qwen4:
        mixer = getattr(dec, "hyper_connection_mixer", None)
        if mixer is not None:
            out.append((mixer, "head / u"))
    else:
        norm = getattr(dec, "norm", None)
        if norm is not None:
            out.append((norm, "head / norm"))
    head = model.get_output_embeddings()
    if head is not None:
        out.append((head, "head / logits"))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="checkpoint folder")
    ap.add_argument("--ids", required=True, help="comma-separated token ids")
    ap.add_argument("--out", required=True, help="safetensors file to write")
    ap.add_argument("--device", default="cpu", help="torch device (cpu, cuda)")
    ap.add_argument("--dtype", default="float32", help="torch dtype to run in (float32, bfloat16)")
    ap.add_argument("--attn", default="eager", help="attn_implementation (eager, sdpa)")
    ap.add_argument("--list", action="store_true", help="print each hooked module and its name")
    args = ap.parse_args()

    ids = [int(x) for x in args.ids.replace(" ", "").split(",") if x]
    if not ids:
        raise SystemExit("trace_hf: --ids is empty")
    cfg = AutoConfig.from_pretrained(args.model)
    qwen4 = "qwen4" in str(getattr(cfg, "model_type", "")).lower()
    model = AutoModelForCausalLM.from_pretrained(
        args.model, dtype=getattr(torch, args.dtype), attn_implementation=args.attn)
    model.to(args.device).eval()

    n = len(ids)
    records = []  # (name, op, scope, tensor) in the order the hooks fired
    seen = set()

    def hook(name, module):
        def fn(_mod, _inp, output):
            if name in seen:  # a module run twice (a tied head, say): keep the first
                return
            t = first_tensor(output)
            if t is None:
                print(f"trace_hf: {name}: {type(module).__name__} returned no tensor", file=sys.stderr)
                return
            seen.add(name)
            scope = name.rsplit(" / ", 1)[0] if " / " in name else ""
            records.append((name, type(module).__name__, scope, rows_first(t, n)))
        return fn

    handles = []
    for module, name in points(model, qwen4):
        if args.list:
            print(f"{name:32s} {type(module).__name__}", file=sys.stderr)
        handles.append(module.register_forward_hook(hook(name, module)))
    with torch.no_grad():
        model(input_ids=torch.tensor([ids], device=args.device), use_cache=False)
    for h in handles:
        h.remove()

    tensors, meta = {}, {"format": "pt", FORMAT_KEY: FORMAT_VERSION}
    graph = f"transformers {type(model).__name__}"
    for i, (name, op, scope, t) in enumerate(records):
        key = f"{name}#0"
        tensors[key] = t
        meta[key] = json.dumps({"name": name, "op": op, "scope": scope, "graph": graph,
                                "call": 0, "index": i, "pos": [0, n], "dtype": "f32"})
    save_file(tensors, args.out, metadata=meta)
    print(f"traced {len(records)} values of {graph} into {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
