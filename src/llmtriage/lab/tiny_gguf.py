"""A tiny Llama as a GGUF file, written with the standard library only (no numpy, no ``gguf`` package).

The GGUF v3 layout: a header, metadata key-values, tensor descriptions, then the tensor data aligned to 32
bytes. The model is a 2-layer Llama with random F32 weights and a SentencePiece ("llama") vocabulary: <unk>,
<s>, </s>, the 256 byte tokens llama.cpp needs for byte fallback, "▁" and the printable ASCII characters, so
the token count of an ASCII prompt is about its length in characters. The output rows of the special tokens are
zero while the others have a large spread, so generation never samples </s>: every request runs to max_tokens.
"""

from __future__ import annotations

import random
import struct
from array import array
from dataclasses import dataclass
from pathlib import Path

ALIGNMENT = 32
_MAGIC = b"GGUF"
_VERSION = 3
# GGUF metadata value types and ggml tensor types used here.
_UINT32, _INT32, _FLOAT32, _BOOL, _STRING, _ARRAY = 4, 5, 6, 7, 8, 9
_GGML_F32 = 0
# llama.cpp token types.
_NORMAL, _UNKNOWN, _CONTROL, _BYTE = 1, 2, 3, 6


@dataclass(frozen=True)
class TinyLlamaShape:
    """The dimensions of the generated model."""

    n_embd: int = 64
    n_layer: int = 2
    n_head: int = 4
    n_head_kv: int = 2
    n_ff: int = 128
    context_length: int = 4096


TINY_LLAMA = TinyLlamaShape()


def vocabulary() -> list[tuple[str, int]]:
    """The tokens and their llama.cpp types, in id order."""
    tokens = [("<unk>", _UNKNOWN), ("<s>", _CONTROL), ("</s>", _CONTROL)]
    tokens += [(f"<0x{b:02X}>", _BYTE) for b in range(256)]
    tokens += [("\u2581", _NORMAL)] + [(chr(c), _NORMAL) for c in range(33, 127)]
    return tokens


def _string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


def _value(value: object) -> bytes:
    if isinstance(value, bool):
        return struct.pack("<I?", _BOOL, value)
    if isinstance(value, int):
        return struct.pack("<II", _UINT32, value)
    if isinstance(value, float):
        return struct.pack("<If", _FLOAT32, value)
    if isinstance(value, str):
        return struct.pack("<I", _STRING) + _string(value)
    if isinstance(value, list) and value and isinstance(value[0], str):
        return struct.pack("<IIQ", _ARRAY, _STRING, len(value)) + b"".join(_string(v) for v in value)
    if isinstance(value, list) and value and isinstance(value[0], float):
        return struct.pack("<IIQ", _ARRAY, _FLOAT32, len(value)) + array("f", value).tobytes()
    if isinstance(value, list) and value and isinstance(value[0], int):
        return struct.pack("<IIQ", _ARRAY, _INT32, len(value)) + array("i", value).tobytes()
    raise TypeError(f"no GGUF type for {value!r}")


def _metadata(shape: TinyLlamaShape, name: str) -> dict[str, object]:
    vocab = vocabulary()
    return {
        "general.architecture": "llama",
        "general.name": name,
        "general.alignment": ALIGNMENT,
        "llama.context_length": shape.context_length,
        "llama.embedding_length": shape.n_embd,
        "llama.block_count": shape.n_layer,
        "llama.feed_forward_length": shape.n_ff,
        "llama.attention.head_count": shape.n_head,
        "llama.attention.head_count_kv": shape.n_head_kv,
        "llama.rope.dimension_count": shape.n_embd // shape.n_head,
        "llama.attention.layer_norm_rms_epsilon": 1e-5,
        "llama.vocab_size": len(vocab),
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.tokens": [text for text, _ in vocab],
        "tokenizer.ggml.scores": [0.0 if kind != _NORMAL else -float(i) for i, (_, kind) in enumerate(vocab)],
        "tokenizer.ggml.token_type": [kind for _, kind in vocab],
        "tokenizer.ggml.bos_token_id": 1,
        "tokenizer.ggml.eos_token_id": 2,
        "tokenizer.ggml.unknown_token_id": 0,
        "tokenizer.ggml.add_bos_token": True,
        "tokenizer.ggml.add_eos_token": False,
    }


def _tensor_shapes(shape: TinyLlamaShape) -> list[tuple[str, tuple[int, ...]]]:
    """Names and ggml dimensions (ne0 first: the row length) of the Llama tensors."""
    n_vocab = len(vocabulary())
    kv = shape.n_embd // shape.n_head * shape.n_head_kv
    tensors = [("token_embd.weight", (shape.n_embd, n_vocab)), ("output_norm.weight", (shape.n_embd,))]
    tensors.append(("output.weight", (shape.n_embd, n_vocab)))
    for i in range(shape.n_layer):
        tensors += [
            (f"blk.{i}.attn_norm.weight", (shape.n_embd,)),
            (f"blk.{i}.attn_q.weight", (shape.n_embd, shape.n_embd)),
            (f"blk.{i}.attn_k.weight", (shape.n_embd, kv)),
            (f"blk.{i}.attn_v.weight", (shape.n_embd, kv)),
            (f"blk.{i}.attn_output.weight", (shape.n_embd, shape.n_embd)),
            (f"blk.{i}.ffn_norm.weight", (shape.n_embd,)),
            (f"blk.{i}.ffn_gate.weight", (shape.n_embd, shape.n_ff)),
            (f"blk.{i}.ffn_up.weight", (shape.n_embd, shape.n_ff)),
            (f"blk.{i}.ffn_down.weight", (shape.n_ff, shape.n_embd)),
        ]
    return tensors


def _weights(name: str, dims: tuple[int, ...], rng: random.Random) -> array[float]:
    count = 1
    for d in dims:
        count *= d
    if len(dims) == 1:
        return array("f", [1.0] * count)
    if name == "output.weight":
        # A large spread makes the logits of the normal tokens far above the zero logit of the special ones.
        special = len([1 for _, kind in vocabulary() if kind in (_UNKNOWN, _CONTROL)])
        row = dims[0]
        return array("f", [0.0] * (special * row) + [rng.gauss(0.0, 1.0) for _ in range(count - special * row)])
    scale = dims[0] ** -0.5
    return array("f", [rng.gauss(0.0, scale) for _ in range(count)])


def _pad(size: int) -> int:
    return -size % ALIGNMENT


def write_tiny_gguf(path: Path, shape: TinyLlamaShape = TINY_LLAMA, seed: int = 0, name: str = "tiny-llama") -> Path:
    """Write the model to ``path`` (through a temporary file, so a partial write never looks complete)."""
    rng = random.Random(seed)
    tensors = _tensor_shapes(shape)
    metadata = _metadata(shape, name)
    head = bytearray(_MAGIC + struct.pack("<IQQ", _VERSION, len(tensors), len(metadata)))
    for key, value in metadata.items():
        head += _string(key) + _value(value)
    blobs = [_weights(n, dims, rng).tobytes() for n, dims in tensors]
    offset = 0
    for (tensor_name, dims), blob in zip(tensors, blobs, strict=True):
        head += _string(tensor_name) + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims)
        head += struct.pack("<IQ", _GGML_F32, offset)
        offset += len(blob) + _pad(len(blob))
    head += bytes(_pad(len(head)))
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    with partial.open("wb") as out:
        out.write(head)
        for blob in blobs:
            out.write(blob + bytes(_pad(len(blob))))
    partial.replace(path)
    return path
