#!/usr/bin/env python3
"""Write a tiny, randomly initialised Qwen2-shaped causal LM plus a locally trained tokenizer.

    python make_tiny_model.py OUT_DIR [--text-from DIR] [--vocab-size 512] [--seed 0]
                              [--vllm | --hidden-size 64 --heads 4 --kv-heads 2 --layers 2
                               --intermediate-size 128]

OUT_DIR receives config.json, generation_config.json, model.safetensors, tokenizer.json,
tokenizer_config.json (and whatever else the installed transformers writes for a fast
tokenizer, e.g. special_tokens_map.json / chat_template.jinja); everything loads offline with
AutoModelForCausalLM.from_pretrained(OUT_DIR) / AutoTokenizer.from_pretrained(OUT_DIR).

The tokenizer is a byte-level BPE (Qwen2-like: digits split one by one, no UNK possible) trained
with the `tokenizers` library on the `question`/`answer` columns of every *.parquet below
--text-from (default: argus' GSM8K quickstart sample) plus digits, punctuation and the chat
markers. It carries a Qwen-style chat template (<|im_start|>role\\n...<|im_end|>\\n), eos =
<|im_end|>, pad = <|endoftext|>.

The model is Qwen2 (hidden 64, 2 layers, 4 heads, 2 KV heads, tied embeddings, fp32) with weights
from torch.manual_seed(seed): same torch/transformers/tokenizers versions -> same bytes. It is
only a stand-in for a real checkpoint so that verl's training loops can run on CPU; it never
learns to solve anything.

Its heads are 16 wide, which vLLM's GPU attention kernels refuse (FlashAttention and FlashInfer
take 64, 128, 256, ...): --vllm makes the same kind of model with hidden 256 and 4 heads of 64
(2 KV heads, intermediate 512, 2 layers; 1.3 M parameters, 5.2 MB), for a vLLM rollout on a GPU
(bench/gpu-smoke). The sizes can also be given one by one; the defaults make the CPU model above.
"""

import argparse
import glob
import json
import os
import string

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_TEXT = os.path.normpath(os.path.join(HERE, "..", "..", "profiles", "jobs", "quickstart", "gsm8k-sample"))
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
EXTRA_TEXT = [
    string.digits,
    string.punctuation,
    "Let's think step by step and output the final answer after \"####\".",
    "user assistant system",
]


def corpus(text_dir):
    import pyarrow.parquet as pq

    files = sorted(glob.glob(os.path.join(text_dir, "**", "*.parquet"), recursive=True))
    if not files:
        raise SystemExit(f"no *.parquet under {text_dir}")
    texts = list(EXTRA_TEXT)
    for path in files:
        table = pq.read_table(path)
        for col in ("question", "answer"):
            if col in table.column_names:
                texts.extend(str(x) for x in table.column(col).to_pylist())
    return texts


def train_tokenizer(texts, vocab_size):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(r"\p{N}"), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir")
    ap.add_argument("--text-from", default=DEFAULT_TEXT, help="dir searched for *.parquet with question/answer")
    ap.add_argument("--vocab-size", type=int, default=512)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--hidden-size", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4, help="attention heads (head width = hidden / heads)")
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--intermediate-size", type=int, default=128)
    ap.add_argument("--vllm", action="store_true", help="heads vLLM's GPU kernels take: hidden 256, 4 heads of 64")
    args = ap.parse_args()
    if args.vllm:
        args.hidden_size, args.heads, args.kv_heads, args.intermediate_size = 256, 4, 2, 512
    if args.hidden_size % args.heads or args.heads % args.kv_heads:
        raise SystemExit("--hidden-size must be a multiple of --heads, and --heads of --kv-heads")

    import torch
    from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    os.makedirs(args.out_dir, exist_ok=True)
    raw = train_tokenizer(corpus(args.text_from), args.vocab_size)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=raw,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>"],
        chat_template=CHAT_TEMPLATE,
        model_max_length=512,
        clean_up_tokenization_spaces=False,
    )
    tokenizer.save_pretrained(args.out_dir)
    # keep the template inside tokenizer_config.json too (older transformers read it only there)
    cfg_path = os.path.join(args.out_dir, "tokenizer_config.json")
    with open(cfg_path) as f:
        tok_cfg = json.load(f)
    tok_cfg["chat_template"] = CHAT_TEMPLATE
    # class name understood by transformers 4.x and 5.x alike (5.x writes "TokenizersBackend")
    tok_cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    with open(cfg_path, "w") as f:
        json.dump(tok_cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    special = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "additional_special_tokens": ["<|im_start|>"]}
    with open(os.path.join(args.out_dir, "special_tokens_map.json"), "w") as f:
        json.dump(special, f, indent=2, sort_keys=True)
        f.write("\n")
    jinja = os.path.join(args.out_dir, "chat_template.jinja")
    if os.path.exists(jinja):
        os.remove(jinja)

    eos_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    pad_id = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=args.hidden_size,
        intermediate_size=args.intermediate_size,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads,
        max_position_embeddings=512,
        rope_theta=10000.0,
        tie_word_embeddings=True,
        bos_token_id=pad_id,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        torch_dtype="float32",
    )
    torch.manual_seed(args.seed)
    model = Qwen2ForCausalLM(config).to(torch.float32).eval()
    model.generation_config = GenerationConfig(
        bos_token_id=pad_id, eos_token_id=[eos_id, pad_id], pad_token_id=pad_id, do_sample=True
    )
    model.save_pretrained(args.out_dir, safe_serialization=True)
    for name in os.listdir(args.out_dir):  # save_pretrained may create 0600 files
        os.chmod(os.path.join(args.out_dir, name), 0o644)
    total = sum(os.path.getsize(os.path.join(args.out_dir, f)) for f in os.listdir(args.out_dir))
    print(f"wrote {args.out_dir}: {sorted(os.listdir(args.out_dir))}, {total} bytes, vocab {len(tokenizer)}")


if __name__ == "__main__":
    main()
