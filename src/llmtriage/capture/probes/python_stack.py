"""Print the software stack of this Python as one JSON document: its version, torch (version, CUDA, HIP, arch
list, NCCL) and every installed distribution (``name==version``, as ``pip freeze`` lists them). ``errors`` says
what could not be read and why; ``notes`` what is absent by build (torch without CUDA or NCCL).

Run by ``llmtriage capture`` in the server's own interpreter with ``CUDA_VISIBLE_DEVICES=""``. It never starts CUDA
work: ``import torch`` is lazy about CUDA, the arch list is read from the compile-time flags
(``torch._C._cuda_getArchFlags``: ``torch.cuda.get_arch_list()`` calls ``is_available()`` in older releases, which
would initialise the driver) and the NCCL version is a library constant. Read-only: it writes nothing (run with
``PYTHONDONTWRITEBYTECODE=1``). Python 3.7+ syntax (annotations are never evaluated), no third-party imports besides torch.
"""

from __future__ import annotations

import importlib
import json
import platform
import sys
from typing import Any


def _describe(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return type(error).__name__ + (": " + text[0][:300] if text else "")


def _distributions(out: dict[str, Any]) -> None:
    try:
        from importlib import metadata
    except ImportError as e:  # Python < 3.8
        out["errors"]["distributions"] = _describe(e)
        return
    found = set()
    for dist in metadata.distributions():
        try:
            name = dist.metadata["Name"]
            if name:
                found.add((str(name), str(dist.version)))
        except Exception as e:  # one broken .dist-info must not hide the others
            out["errors"]["distributions"] = _describe(e)
    out["distributions"] = [[name, version] for name, version in sorted(found, key=lambda d: d[0].lower())]


def _torch(out: dict[str, Any]) -> None:
    try:
        import torch
    except Exception as e:  # not installed, or an install that cannot load (a missing libcudart...)
        out["errors"]["torch"] = _describe(e)
        return
    info = {
        "version": str(getattr(torch, "__version__", "")) or None,
        "cuda": getattr(torch.version, "cuda", None),
        "hip": getattr(torch.version, "hip", None),
        "arch_list": None,
        "nccl": None,
    }
    flags = getattr(torch._C, "_cuda_getArchFlags", None)
    if flags is None:
        info["arch_list"] = []  # what get_arch_list() answers for a build without CUDA
        out["notes"]["arch_list"] = "torch is built without CUDA: no CUDA kernels"
    else:
        try:
            info["arch_list"] = (flags() or "").split()
        except Exception as e:
            out["errors"]["arch_list"] = _describe(e)
    if getattr(torch._C, "_nccl_version", None) is None:
        out["notes"]["nccl"] = "torch is built without NCCL"
    else:
        try:
            version = importlib.import_module("torch.cuda.nccl").version()
            info["nccl"] = ".".join(str(v) for v in version) if isinstance(version, tuple) else str(version)
        except Exception as e:
            out["errors"]["nccl"] = _describe(e)
    out["torch"] = info


def main() -> None:
    out: dict[str, Any] = {
        "python_version": platform.python_version(),
        "executable": sys.executable,
        "errors": {},
        "notes": {},
    }
    _distributions(out)
    _torch(out)
    sys.stdout.write(json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
