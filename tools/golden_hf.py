"""Make tiny dense-decoder goldens with Hugging Face transformers, in the layout
of ../shared/golden/dense: config.json, model.safetensors,
generation_config.json and golden.json (ids, logits_full: one forward over the
sequence; logits_incremental: a prefill of the first half, then one token at a
time on the cache). Every weight is perturbed so that no path is trivial.

    python3 tools/golden_hf.py OUTDIR

makes OUTDIR/mistral-sw-21 (MistralForCausalLM, sliding window 4, GQA 4/2) and
OUTDIR/qwen2-tied-22 (Qwen2ForCausalLM, q/k/v bias, tied embeddings).
"""
import json, os, sys
import torch
import transformers
from transformers import MistralConfig, MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM


def make(out, name, seed, cfg, cls):
    torch.manual_seed(seed)
    model = cls(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    d = os.path.join(out, name)
    model.save_pretrained(d, safe_serialization=True)
    cases = []
    g = torch.Generator().manual_seed(seed)
    for n in (5, 11):
        ids = torch.randint(0, cfg.vocab_size, (n,), generator=g).tolist()
        x = torch.tensor([ids])
        with torch.no_grad():
            full = model(x).logits[0]
            h = n // 2
            o = model(x[:, :h], use_cache=True)
            rows, past = [o.logits[0]], o.past_key_values
            for i in range(h, n):
                o = model(x[:, i:i + 1], past_key_values=past, use_cache=True)
                rows.append(o.logits[0])
                past = o.past_key_values
            inc = torch.cat(rows)
        cases.append(dict(ids=ids, logits_full=full.tolist(), logits_incremental=inc.tolist()))
        print(name, n, "full vs incremental max diff", (full - inc).abs().max().item())
    gold = dict(model=name, seed=seed, transformers=transformers.__version__, dtype="float32",
                architecture=cls.__name__,
                note="logits_full: one forward over the whole sequence; logits_incremental: prefill of the first half then one token at a time on the cache; rows are positions",
                cases=cases)
    with open(os.path.join(d, "golden.json"), "w") as f:
        json.dump(gold, f)


def main():
    out = sys.argv[1]
    torch.set_default_dtype(torch.float32)
    mistral = MistralConfig(vocab_size=300, hidden_size=64, intermediate_size=160, num_hidden_layers=3,
                            num_attention_heads=4, num_key_value_heads=2, head_dim=24, sliding_window=4,
                            max_position_embeddings=4096, rms_norm_eps=1e-5, tie_word_embeddings=False,
                            rope_theta=10000.0, attn_implementation="eager")
    make(out, "mistral-sw-21", 21, mistral, MistralForCausalLM)
    qwen2 = Qwen2Config(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                        rms_norm_eps=1e-6, tie_word_embeddings=True, rope_theta=1e6,
                        attn_implementation="eager")
    make(out, "qwen2-tied-22", 22, qwen2, Qwen2ForCausalLM)


if __name__ == "__main__":
    main()
