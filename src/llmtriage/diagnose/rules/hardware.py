"""Hardware and kernel faults: checked on every path, ranked above configuration causes."""

from __future__ import annotations

from collections.abc import Iterator

from llmtriage import catalog
from llmtriage.diagnose.questions import hardware_log_errors
from llmtriage.diagnose.rules import Signal, rule, signal
from llmtriage.diagnose.rules.signatures import ALL_CLASSES
from llmtriage.diagnose.scene import Scene

SEVERE_XID_WEIGHT = 0.9
APPLICATION_XID_WEIGHT = 0.5
LOG_FAULT_WEIGHT = 0.8


@rule(*ALL_CLASSES)
def kernel_log(scene: Scene) -> Iterator[Signal]:
    """Xid codes by NVIDIA's catalog; GPUs off the bus, ECC and GSP errors are the GPU's own."""
    table = catalog.xids()
    for event in scene.kernel.events:
        if event.kind == "xid" and event.xid is not None:
            info = table.get(event.xid)
            if info is None or info.hardware_severe:
                what = info.description if info else "not in NVIDIA's catalog"
                action = f"; action: {info.immediate_action}" if info else ""
                yield signal(
                    "xid_hardware_or_driver", SEVERE_XID_WEIGHT, event.cite(), f"Xid {event.xid}: {what}{action}"
                )
            elif info.cause_categories and info.cause_categories[0].startswith("user_application"):
                yield signal(
                    "illegal_memory_access_kernel_bug",
                    APPLICATION_XID_WEIGHT,
                    event.cite(),
                    f"Xid {event.xid}: {info.description}; NVIDIA: usually the application's kernel",
                )
        elif event.kind in ("fallen_off_bus", "ecc", "gsp"):
            yield signal("xid_hardware_or_driver", SEVERE_XID_WEIGHT, event.cite(), event.kind.replace("_", " "))


@rule(*ALL_CLASSES)
def hardware_errors(scene: Scene) -> Iterator[Signal]:
    """CUDA and nvidia-smi errors that name a hardware or kernel fault."""
    seen: set[str] = set()
    for event in hardware_log_errors(scene):
        if event.signature in seen:
            continue
        seen.add(event.signature)
        note = event.signature
        if event.family == "kernel":
            version = scene.log.meta.engine_version
            quant = scene.launch.quantization if scene.launch else None
            context = [f"engine {version}" if version else "", f"quantization {quant}" if quant else ""]
            if "awq" in event.text.lower() or "gptq" in event.text.lower():
                context.append("a quantized kernel is named")
            extra = ", ".join(c for c in context if c)
            note = f"{event.signature}" + (f" ({extra}): check the engine version and kernel first" if extra else "")
        for cause in event.causes:
            yield signal(cause, LOG_FAULT_WEIGHT, event.cite(), note)
