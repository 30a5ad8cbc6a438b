"""Tiny Hugging Face models built in the tests (no weights can be downloaded).

``build_tiny_llama(folder)`` writes a byte-level BPE tokenizer (trained on a few Chinese and
English lines, with a chat template) and a 2-layer ``LlamaForCausalLM`` of about 130k
parameters with ``save_pretrained``: a real model folder that ``from_pretrained`` loads offline.
``publish(hub, repo_id, folder)`` serves such a folder through the loopback Hub stand-in
(``tests.catalog.servers.HubServer``), so a test pulls it through the real ``hf:`` path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Large models are trained on rented GPUs from a notebook.",
    "Checkpoints are saved every ten steps and the job resumes after a preemption.",
    "A cached dataset mounts in well under a second on every node.",
    "Thumbs up and thumbs down become preference pairs for alignment.",
    "user: how many cards do I need? assistant: two nodes with eight cards each.",
    "训练一个大模型需要很多显卡和数据。",
    "数据清洗会去掉重复的段落和敏感信息。",
    "模型导出为 ONNX 格式并量化为 INT4。",
    "北京和上海的团队在同一个集群上训练。",
]

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>' + message['content'] + '</s>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)


def build_tokenizer(folder: Path, *, vocab_size: int = 450) -> Any:
    """A byte-level BPE tokenizer trained on ``CORPUS``, saved as a fast tokenizer in ``folder``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<s>", "</s>", "<pad>", "<|system|>", "<|user|>", "<|assistant|>"]
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        additional_special_tokens=specials[3:],
    )
    fast.chat_template = CHAT_TEMPLATE
    folder.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(folder)
    return fast


def build_tiny_llama(folder: Path, *, seed: int = 0, hidden_size: int = 64, layers: int = 2) -> Path:
    """Tokenizer + a tiny ``LlamaForCausalLM`` saved with ``save_pretrained`` into ``folder``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = build_tokenizer(folder)
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(folder)
    return folder


def publish(hub: Any, repo_id: str, folder: Path) -> str:
    """Serve every file of ``folder`` as the Hub repo ``repo_id``; returns the commit sha."""
    from tests.catalog.servers import Blob

    files = {
        str(p.relative_to(folder)).replace("\\", "/"): Blob(p.read_bytes())
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }
    return str(hub.add_repo(repo_id, files))
