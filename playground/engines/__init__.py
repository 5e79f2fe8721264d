"""Engines a run's settings go to: value presets, exports (llama.cpp, vLLM, transformers, Ollama, OpenAI),
importers, and what each engine cannot express, from one table of facts (facts.py)."""
from playground.engines.formats import FORMATS, Export, export, export_all, export_trace
from playground.engines.importing import import_file, import_text
from playground.engines.presets import PRESETS, Preset, preset
from playground.engines.settings import RunSettings, settings_for, settings_of_trace

__all__ = ["FORMATS", "Export", "export", "export_all", "export_trace", "import_file", "import_text", "PRESETS",
           "Preset", "preset", "RunSettings", "settings_for", "settings_of_trace"]
