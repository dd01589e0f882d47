"""Shared test fixtures for engines: a tiny random Llama over the byte-level ChatML tokenizer, and the tools,
example episode and questions the engine tests render prompts from. Test helpers only, not a test file."""

from __future__ import annotations

from typing import Any

import torch
from tiny_tokenizers import byte_tokenizer
from transformers import LlamaConfig, LlamaForCausalLM

from agentrl.env.core import tool_spec

TOOLS = [tool_spec("python", "Run Python code and see its output.", {"code": {"type": "string"}})]
EXAMPLES: list[dict[str, Any]] = [
    {"role": "user", "content": "What is 2+2?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"name": "python", "arguments": {"code": "print(2+2)"}}],
    },
    {"role": "tool", "content": "4"},
    {"role": "assistant", "content": "", "tool_calls": [{"name": "submit", "arguments": {"answer": "4"}}]},
]


def tiny_llama(hidden: int = 64, seed: int = 0) -> LlamaForCausalLM:
    """A randomly initialised 2-layer Llama (GQA 4/2 heads) sized for `byte_tokenizer()`, in eval mode."""
    torch.manual_seed(seed)
    tokenizer = byte_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    return LlamaForCausalLM(config).eval()
