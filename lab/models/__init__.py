"""Part of every command: loading the lab's models (no names are re-exported here).

- :mod:`lab.models.profiles`: the named model set-ups (``smollm2``, ``qwen2.5-coder`` ...);
- :mod:`lab.models.loading`: :func:`~lab.models.loading.load_model` and the tokenizer, for a
  profile, a hub id or a local path;
- :mod:`lab.models.source`: :class:`~lab.models.source.ModelSource`, what a loaded model is and
  where it came from, looked up with :func:`~lab.models.source.model_source`;
- :mod:`lab.models.gguf_chunks`, :mod:`lab.models.cache`: GGUF files shipped as chunk packages,
  and the dequantized-model cache with its checksums;
- :mod:`lab.models.hub`, :mod:`lab.models.chat`, :mod:`lab.models.devices`: hub ids offline, the
  chat template, device and dtype choice (MPS, then CUDA, then CPU).
- :mod:`lab.models.hooks`: forward hooks on a loaded model's decoder layers, removed on exit.
"""
