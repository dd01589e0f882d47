"""Test helper: a real fast tokenizer over single bytes with ChatML special tokens, built in-process.

What this is: the one tokenizer that unit and integration tests use when they need real token ids but no
downloaded model (the prompting, rollout and HF-engine tests). What this is not: a fixture file; tests
build what they need from `byte_tokenizer`.
"""

from __future__ import annotations

from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

CHATML = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def byte_tokenizer(chat_template: str = CHATML, pad: bool = True) -> PreTrainedTokenizerFast:
    """One token per byte plus `<|im_start|>` and `<|im_end|>` (eos, and pad unless `pad=False`)."""
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    backend = Tokenizer(models.BPE(vocab={char: i for i, char in enumerate(alphabet)}, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token="<|im_end|>",
        pad_token="<|im_end|>" if pad else None,
        additional_special_tokens=["<|im_start|>"],
        chat_template=chat_template,
    )
