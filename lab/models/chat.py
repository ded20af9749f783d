"""Chat prompts: messages, the tokenizer's own chat template, and stop tokens.

Used by every command that prompts a chat model, and by :mod:`lab.prompts`, which the parser of
``lab study`` reads: torch is named only in annotations here, so building messages imports none.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    import torch


def build_messages(prompt: str, system: str | None = None) -> list[dict[str, str]]:
    """Chat messages for one user prompt and an optional system prompt.

    Raises:
        ValueError: ``prompt`` is empty or whitespace, or ``system`` is given but empty.
    """
    if not isinstance(prompt, str) or not prompt.strip():
        raise ValueError(f"prompt={prompt!r} is empty")
    messages = []
    if system is not None:
        if not system.strip():
            raise ValueError(f"system={system!r} is empty; omit it to use the template's default")
        messages.append({"role": "system", "content": system})
    messages.append({"role": "user", "content": prompt})
    return messages


def encode_chat(tokenizer: Any, messages: Sequence[dict[str, str]], *, add_generation_prompt: bool = True) -> torch.Tensor:
    """Tokenize chat messages with the tokenizer's own chat template, in one step.

    Rendering the template to text and tokenizing that text again adds a second BOS
    on tokenizers that prepend one (a known fault); here the template tokenizes
    directly, and the result is checked to start with at most one BOS. A model
    without a chat template (a base model) gets its messages' contents joined by
    blank lines and tokenized with the tokenizer's own special tokens.

    Args:
        tokenizer: A transformers tokenizer.
        messages: ``[{"role": ..., "content": ...}, ...]``, non-empty.
        add_generation_prompt: Append the assistant header (chat models only).

    Returns:
        ``input_ids`` of shape ``[1, S]``, dtype int64, on the CPU.

    Raises:
        ValueError: ``messages`` is empty, a message lacks role/content, or the result
            starts with two BOS tokens.
    """
    if not messages:
        raise ValueError("messages=[] is empty; give at least one user message")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or "role" not in m or "content" not in m:
            raise ValueError(f"messages[{i}]={m!r} needs 'role' and 'content'")
    if getattr(tokenizer, "chat_template", None):
        enc = tokenizer.apply_chat_template(
            list(messages), add_generation_prompt=add_generation_prompt, tokenize=True,
            return_dict=True, return_tensors="pt",
        )
        ids = enc["input_ids"]
    else:
        text = "\n\n".join(m["content"] for m in messages)
        ids = tokenizer(text, return_tensors="pt", add_special_tokens=True)["input_ids"]
    ids = ids.long()  # int64; the tokenizer's own tensor type
    bos = getattr(tokenizer, "bos_token_id", None)
    if bos is not None and ids.shape[1] >= 2 and ids[0, 0] == bos and ids[0, 1] == bos:
        raise ValueError("prompt encodes with two BOS tokens; the template and tokenizer both added one")
    return ids


def eos_token_ids(model: Any, tokenizer: Any) -> set[int]:
    """All token ids that end a generation (generation config, config and tokenizer)."""
    ids: set[int] = set()
    for source in (getattr(model, "generation_config", None), model.config):
        eos = getattr(source, "eos_token_id", None)
        if isinstance(eos, int):
            ids.add(eos)
        elif eos:
            ids.update(int(e) for e in eos)
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    # Chat models end a turn with their end-of-turn marker even when config says otherwise.
    for marker in ("<|im_end|>", "<end_of_turn>"):
        tid = tokenizer.convert_tokens_to_ids(marker) if marker in tokenizer.get_vocab() else None
        if tid is not None:
            ids.add(int(tid))
    return ids
