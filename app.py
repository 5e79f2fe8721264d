"""Decoding Playground: ``python app.py`` serves the page (also the Hugging Face Space entry point).

Environment: PORT or GRADIO_SERVER_PORT (default 7860), GRADIO_SERVER_NAME (default 127.0.0.1;
0.0.0.0 to serve a network, set for you on a Space), PLAYGROUND_MODEL (the model loaded before the
page opens; "none" to skip), PLAYGROUND_DEVICE (cpu, cuda, mps), PLAYGROUND_HUB=1 (list hub models
in the model menu; on a Space they are listed anyway). The limits of a public server
(PLAYGROUND_MODELS, PLAYGROUND_MAX_MODEL_GB, PLAYGROUND_MEMORY_GB, PLAYGROUND_MAX_MODELS,
PLAYGROUND_TIME_BUDGET, PLAYGROUND_MAX_ROW_TOKENS, and on ZeroGPU PLAYGROUND_GPU_TOKEN_SECONDS) are
listed in the README's Space section. On ZeroGPU the kept models load onto cuda here, before serving.
"""
from __future__ import annotations

# Before any worker thread exists: glibc's malloc arenas capped (playground.serving.memory).
from playground.serving.memory import limit_arenas  # isort: skip
limit_arenas()
# playground.ui next: it imports `spaces` (ZeroGPU) before anything imports torch.
from playground.ui import build_demo, launch_kwargs  # isort: skip

import os
import sys

from playground.errors import InvalidRequest
from playground.models import DEFAULT_MODEL, ModelStore
from playground.ui.handlers import zero_gpu
from playground.ui.pull import STEPS


def start_device() -> str | None:
    """$PLAYGROUND_DEVICE, else cuda on ZeroGPU (where `spaces` lets the weights go there before a GPU
    is attached), else the store's own choice."""
    return os.environ.get("PLAYGROUND_DEVICE") or ("cuda" if zero_gpu() else None)


store = ModelStore(device=start_device())
demo = build_demo(store)


def preload(key: str) -> None:
    """Load the default model before serving, printing its progress, so the first click is fast."""
    def report(fraction: float, message: str) -> None:
        print(f"[{fraction:4.0%}] {message}", flush=True)

    try:
        # on the decoder's thread: the CPU kernels' thread team runs at full speed for the first thread that
        # uses it (a first start converts the GGUF file here), and that thread decodes every run
        STEPS.submit(store.get, key, report).result()
    except InvalidRequest as err:  # a missing package or no network: the page still serves the others
        print(f"warning: {err}", file=sys.stderr, flush=True)


def start_models() -> list[str]:
    """The models loaded before serving: $PLAYGROUND_MODEL (default smollm2-135m, "none" for none); on
    ZeroGPU every model the store keeps (that one and the toys), because there the weights are placed on
    cuda at start-up, outside the GPU function: one loaded inside a run is gone when the run returns."""
    key = os.environ.get("PLAYGROUND_MODEL", DEFAULT_MODEL).strip()
    keys = [key] if key.lower() != "none" else []
    if zero_gpu():
        keys += sorted(k for k in store.keep if k not in keys)
    return keys


def main() -> None:
    for key in start_models():
        preload(key)
    port = os.environ.get("PORT") or os.environ.get("GRADIO_SERVER_PORT")
    demo.launch(server_name=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
                server_port=int(port) if port else None, **launch_kwargs())


if __name__ == "__main__":
    main()
