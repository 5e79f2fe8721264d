"""What each engine does with a sampler's settings, per engine version, with the sources they were read
from: the one table the exports, the importers, the engine presets and the list of what an engine cannot
express all read. To update an engine, change its row here and run tests/engines/test_engines_export.py.

Each row holds, in the playground's own parameter and stage names:
- ``defaults``: the values a client that sets nothing gets (the engine preset sets these);
- ``stages``: the stages the engine has, each with its name there;
- ``order``: the fixed order it applies them in (None: the user orders them, llama.cpp's ``--samplers``);
- ``notes``: where a name means something else there, or the engine applies something the run did not,
  each with its source;
- ``phases``: what the engine does with a run in two phases (strategies/phases.py): a thinking budget, a
  message before the forced close, how it finds the close, and where a second chain for the answer stands.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from playground.models.lineup import MAX_NEW_TOKENS, MAX_PROMPT_TOKENS

LLAMA_CPP_COMMIT = "001d906a6d86e2490e394361e7cc6f478b100088"
LLAMA_CPP = f"https://github.com/ggml-org/llama.cpp/blob/{LLAMA_CPP_COMMIT}"
VLLM_SAMPLER = "https://github.com/vllm-project/vllm/blob/3e342658b2e9c85a30a54d19e64e5ad77b8a26a6"
VLLM_PARAMS = "https://github.com/vllm-project/vllm/blob/00388f6573ccfcffad607b8c9ecdf341a4669ceb"
OLLAMA = "https://github.com/ollama/ollama/blob/fb30760996871fa9460115c753afd2c60d4ab0f7"
TRANSFORMERS = "https://github.com/huggingface/transformers/blob/v5.23.0/src/transformers/generation"
# the reasoning budget was read where the stored copies of llama.cpp had it (none at LLAMA_CPP_COMMIT); an older
# copy (145b6280) still took only -1 or 0 for --reasoning-budget and had no --reasoning-budget-message
LLAMA_CPP_ARGS = "https://github.com/ggml-org/llama.cpp/blob/0017d6fb63f9590e791a7562b276148f7bd5b7fc"
LLAMA_CPP_SERVER_README = ("https://github.com/ggml-org/llama.cpp/blob/00dc8057ab28c9cb4c79a6dd6dfce07fe779f63b/"
                           "tools/server/README.md")
LLAMA_CPP_BUDGET = "https://github.com/ggml-org/llama.cpp/blob/007d71358afee62ef906904edc79fec9b2d728fa"
VLLM_INPUT = "https://github.com/vllm-project/vllm/blob/009daaeebfb0ce2813f970f2173ea9c8eee09092"
VLLM_REASONING = "https://github.com/vllm-project/vllm/blob/03e8268f9f9101b8d7eb707732e3fc61e0665249"
VLLM_BUDGET_STATE = "https://github.com/vllm-project/vllm/blob/0278c178063606651c9d15a40630a4404e84a182"
LLAMA_SECOND_CHAIN = ("llama.cpp issue #27123 and PR #25709, both open",
                      "https://github.com/ggml-org/llama.cpp/issues/27123, "
                      "https://github.com/ggml-org/llama.cpp/pull/25709")

STAGE_WORDS = {
    "word_bias": "bias by word", "penalty": "repetition penalty", "presence_frequency": "presence and frequency "
    "penalties", "no_repeat_ngram": "no-repeat n-gram ban", "dry": "DRY", "temperature": "temperature",
    "dynamic_temperature": "dynamic temperature", "top_h": "top-H", "top_k": "top-k", "top_p": "top-p",
    "min_p": "min-p", "p_less": "p-less", "typical_p": "typical-p", "epsilon": "epsilon cutoff", "eta": "eta cutoff",
    "top_nsigma": "top-nσ", "xtc": "XTC", "watermark": "green-list watermark", "synthid": "SynthID Text watermark",
    "mirostat": "mirostat v2", "adaptive_p": "adaptive-p",
}


@dataclass(frozen=True)
class Note:
    """One fact about an engine, in a person's words, and where it can be checked."""

    text: str
    source: str


@dataclass(frozen=True)
class PhaseFacts:
    """A run in two phases as the engine takes it: its thinking budget ('' where it has none), whether it
    forces a message before the close, how it finds the close, and where a second chain for the answer
    stands (it has none: ``second_chain`` says which issue or PR asks for it, or what to do by hand)."""

    budget: str
    budget_source: str
    message: bool
    marker: str
    marker_source: str
    second_chain: str
    second_chain_source: str


@dataclass(frozen=True)
class EngineFacts:
    key: str
    title: str
    version: str
    defaults: dict[str, Any]
    defaults_source: str
    stages: dict[str, str]
    stages_source: str
    order: tuple[str, ...] | None
    order_source: str
    notes: tuple[Note, ...] = ()
    limits: dict[str, tuple[float, float]] = field(default_factory=dict)  # parameter -> the range it takes
    # defaults in the engine's own names, where an importer needs them (same source as ``defaults``)
    own_defaults: dict[str, Any] = field(default_factory=dict)
    phases: PhaseFacts | None = None


LLAMA_ORDER_NOTE = Note("llama.cpp's penalties stage is one sampler: the repetition penalty, then the frequency and "
                        "presence penalties, all three over one window, --repeat-last-n (64 by default, 0 = off), "
                        "which llama-server and llama-completion fill with the prompt's tokens before the first draw. "
                        "llama.cpp 0c1e570 (vendored by llama-cpp-python 0.3.36) refuses a negative window, where "
                        "versions before it read -1 as the context: for the whole text the export writes "
                        f"{MAX_PROMPT_TOKENS + MAX_NEW_TOKENS}, the longest text a playground run holds "
                        f"({MAX_PROMPT_TOKENS} prompt + {MAX_NEW_TOKENS} new tokens).",
                        f"{LLAMA_CPP}/src/llama-sampling.cpp (llama_sampler_penalties); common/arg.cpp at 0c1e570 "
                        "(--repeat-last-n and --dry-penalty-last-n take N >= 0)")

ENGINES: dict[str, EngineFacts] = {
    "llama.cpp": EngineFacts(
        key="llama.cpp", title="llama.cpp",
        version=f"llama.cpp master at commit {LLAMA_CPP_COMMIT[:8]}",
        defaults={"temperature": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.05, "typical_p": 1.0,
                  "repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0, "penalty_last_n": 64,
                  "dry_multiplier": 0.0, "xtc_probability": 0.0, "xtc_threshold": 0.1, "top_nsigma": 0.0,
                  "mirostat_tau": 0.0, "adaptive_p_target": -1.0, "order": "llama.cpp"},
        defaults_source=f"{LLAMA_CPP}/common/common.h (struct common_params_sampling: temp 0.80, top_k 40, top_p "
                        "0.95, min_p 0.05, penalty_last_n 64, mirostat 0, top_n_sigma -1)",
        own_defaults={"mirostat_tau": 5.0, "mirostat_eta": 0.1, "seed": "LLAMA_DEFAULT_SEED (random)",
                      "n_predict": -1},
        stages={"penalty": "penalties", "presence_frequency": "penalties", "dry": "dry", "top_nsigma": "top_n_sigma",
                "top_k": "top_k", "typical_p": "typ_p", "top_p": "top_p", "min_p": "min_p", "xtc": "xtc",
                "temperature": "temperature", "dynamic_temperature": "temperature", "mirostat": "mirostat",
                "adaptive_p": "adaptive_p"},
        stages_source=f"{LLAMA_CPP}/common/sampling.cpp (common_sampler_types_from_names) and common/arg.cpp",
        order=None,
        order_source=f"{LLAMA_CPP}/common/common.h (samplers: penalties;dry;top_n_sigma;top_k;typ_p;top_p;min_p;"
                     "xtc;temperature, changed with --samplers)",
        notes=(LLAMA_ORDER_NOTE,
               Note("With --mirostat 2, llama.cpp runs only temperature and mirostat: the other samplers of the "
                    "chain are skipped.", f"{LLAMA_CPP}/common/sampling.cpp (common_sampler_init)"),
               Note("Dynamic temperature in llama.cpp is one temperature stage, T in [--temp - --dynatemp-range, "
                    "--temp + --dynatemp-range].", f"{LLAMA_CPP}/common/arg.cpp (--dynatemp-range)"),
               Note("A GGUF's general.sampling.* keys (temp, top_k, top_p, min_p, xtc_*, penalty_*, mirostat*, "
                    "sequence) become the defaults of the flags not given (PR #17120); the export gives each.",
                    "https://github.com/ggml-org/llama.cpp/pull/17120"),
               Note("llama-server takes stop strings, a grammar and every sampler value per request too; a "
                    "request's fields override the flags.", f"{LLAMA_CPP}/tools/server/README.md")),
        phases=PhaseFacts(
            budget="--reasoning-budget N (-1 unrestricted, 0 ends the thinking at once, N > 0 a token budget) and "
                   "--reasoning-budget-message MESSAGE (forced before the end-of-thinking tag), on llama-server, "
                   "llama-cli and llama-completion",
            budget_source=f"{LLAMA_CPP_ARGS}/common/arg.cpp (--reasoning-budget, --reasoning-budget-message) and "
                          f"{LLAMA_CPP_SERVER_README}",
            message=True,
            marker="the thinking tags of the model's chat template (a chat request; the start and end tags are "
                   "the template format's own): the budget counts the tokens after the start tag, lets a token "
                   "finish a UTF-8 character, then forces the message and the end tag one token a step",
            marker_source=f"{LLAMA_CPP_BUDGET}/common/reasoning-budget.cpp (common_reasoning_budget_accept)",
            second_chain=LLAMA_SECOND_CHAIN[0], second_chain_source=LLAMA_SECOND_CHAIN[1]),
    ),
    "vllm": EngineFacts(
        key="vllm", title="vLLM",
        version="vLLM main at 3e342658 (v1 sampler) and 00388f65 (SamplingParams)",
        defaults={"temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "repetition_penalty": 1.0,
                  "presence_penalty": 0.0, "frequency_penalty": 0.0, "penalty_last_n": -1,
                  "order": "penalty,presence_frequency,temperature,min_p,top_k,top_p"},
        defaults_source=f"{VLLM_PARAMS}/vllm/sampling_params.py (SamplingParams: temperature 1.0, top_p 1.0, "
                        "top_k 0, min_p 0.0, max_tokens 16, seed None)",
        stages={"penalty": "repetition_penalty", "presence_frequency": "presence_penalty/frequency_penalty",
                "temperature": "temperature", "min_p": "min_p", "top_k": "top_k", "top_p": "top_p"},
        stages_source=f"{VLLM_PARAMS}/vllm/sampling_params.py",
        order=("penalty", "presence_frequency", "temperature", "min_p", "top_k", "top_p"),
        order_source=f"{VLLM_SAMPLER}/vllm/v1/sample/sampler.py (Sampler docstring: penalties, temperature, "
                     "min_p, then top_k and top_p)",
        notes=(Note("vLLM counts presence and frequency over every token the request has generated (no window).",
                    f"{VLLM_SAMPLER}/vllm/v1/sample/ops/penalties.py (apply_all_penalties)"),
               Note("vLLM's OpenAI server starts with --generation-config auto: the model's generation_config.json "
                    "gives the defaults of every field a request leaves out; the export sets each one.",
                    "https://github.com/vllm-project/vllm/blob/main/vllm/config/model.py (ModelConfig."
                    "generation_config, default \"auto\"; PR #11164 added it)"),
               Note("vLLM treats a temperature below 1e-5 as greedy.", f"{VLLM_SAMPLER}/vllm/v1/sample/sampler.py")),
        phases=PhaseFacts(
            budget="SamplingParams(thinking_token_budget=N), a request's \"thinking_token_budget\" (None or -1 "
                   "unlimited, 0 ends the thinking at once); vLLM refuses it unless started with "
                   "--reasoning-parser or --reasoning-config",
            budget_source=f"{VLLM_PARAMS}/vllm/sampling_params.py (thinking_token_budget, "
                          f"validate_thinking_token_budget) and {VLLM_INPUT}/vllm/v1/engine/input_processor.py "
                          "(InputProcessor._validate_params)",
            message=False,
            marker="the reasoning parser's start and end strings, or --reasoning-config's reasoning_start_str and "
                   "reasoning_end_str; at the budget it forces the end string's tokens alone",
            marker_source=f"{VLLM_REASONING}/vllm/config/reasoning.py (ReasoningConfig) and "
                          f"{VLLM_BUDGET_STATE}/vllm/v1/sample/thinking_budget_state.py",
            second_chain="vLLM PR #52876 (post_thinking), open",
            second_chain_source="https://github.com/vllm-project/vllm/pull/52876"),
    ),
    "transformers": EngineFacts(
        key="transformers", title="transformers",
        version="transformers 5.23.0",
        defaults={"temperature": 0.0, "order": "transformers"},
        own_defaults={"do_sample": False, "temperature": 1.0, "top_k": 50, "top_p": 1.0, "typical_p": 1.0,
                      "repetition_penalty": 1.0, "no_repeat_ngram_size": 0, "epsilon_cutoff": 0.0, "eta_cutoff": 0.0,
                      "max_length": 20},
        defaults_source=f"{TRANSFORMERS}/configuration_utils.py (GenerationConfig._get_default_generation_params: "
                        "do_sample False, max_length 20; with do_sample=True alone: temperature 1.0, top_k 50)",
        stages={"penalty": "repetition_penalty", "no_repeat_ngram": "no_repeat_ngram_size",
                "temperature": "temperature", "top_h": "top_h", "top_k": "top_k", "top_p": "top_p", "min_p": "min_p",
                "typical_p": "typical_p", "epsilon": "epsilon_cutoff", "eta": "eta_cutoff"},
        stages_source=f"{TRANSFORMERS}/utils.py (GenerationMixin._get_logits_processor)",
        order=("penalty", "no_repeat_ngram", "temperature", "top_h", "top_k", "top_p", "min_p", "typical_p",
               "epsilon", "eta"),
        order_source=f"{TRANSFORMERS}/utils.py (GenerationMixin._get_logits_processor appends the processors in "
                     "this order)",
        notes=(Note("generate() fills every GenerationConfig field left None from the model's generation_config.json "
                    "(Gemma 3's top_k 64, for one), then from its own defaults (top_k 50); the export sets each.",
                    f"{TRANSFORMERS}/utils.py (GenerationMixin._prepare_generation_config)"),
               Note("With do_sample=False (temperature 0 here) generate() skips temperature, top-k, top-p, min-p, "
                    "typical-p, epsilon and eta; only the penalties act before the argmax.",
                    f"{TRANSFORMERS}/utils.py (GenerationMixin._get_logits_processor)"),
               Note("transformers' stop_strings need the tokenizer passed to generate().",
                    f"{TRANSFORMERS}/utils.py (GenerationMixin._get_stopping_criteria)")),
        phases=PhaseFacts(
            budget="", budget_source=f"{TRANSFORMERS}/configuration_utils.py (GenerationConfig has no thinking "
                                     "budget; no module of transformers/generation in 5.23.0 mentions thinking)",
            message=False,
            marker="none: generate() does not know a thinking phase (a custom LogitsProcessor passed as "
                   "logits_processor= can count and force one)",
            marker_source=f"{TRANSFORMERS}/utils.py (GenerationMixin.generate, logits_processor)",
            second_chain="generate() takes one GenerationConfig a call; a second generate() from the close, with "
                         "the answer's GenerationConfig, does it by hand",
            second_chain_source=f"{TRANSFORMERS}/utils.py (GenerationMixin.generate)"),
    ),
    "ollama": EngineFacts(
        key="ollama", title="Ollama",
        version="Ollama v0.33.0-rc2 (commit fb307609), which runs llama-server b10488",
        defaults={"temperature": 0.8, "top_k": 40, "top_p": 0.9, "min_p": 0.0, "typical_p": 1.0,
                  "repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0, "penalty_last_n": 64,
                  "order": "llama.cpp"},
        defaults_source=f"{OLLAMA}/api/types.go (DefaultOptions: temperature 0.8, top_k 40, top_p 0.9, "
                        "repeat_last_n 64, repeat_penalty 1.0, seed -1, num_predict -1; min_p 0 sent as is)",
        stages={"penalty": "repeat_penalty", "presence_frequency": "presence_penalty/frequency_penalty",
                "top_k": "top_k", "typical_p": "typical_p", "top_p": "top_p", "min_p": "min_p",
                "temperature": "temperature"},
        stages_source=f"{OLLAMA}/api/types.go (Options) and docs/modelfile.mdx (PARAMETER)",
        order=("penalty", "presence_frequency", "top_k", "typical_p", "top_p", "min_p", "temperature"),
        order_source=f"{OLLAMA}/llm/llama_server.go (llamaServerCompletionRequest sends no samplers, so "
                     "llama-server's default order applies)",
        notes=(LLAMA_ORDER_NOTE,
               Note("A model from Ollama's library carries its own Modelfile PARAMETERs (stop strings, often "
                    "temperature), which apply where neither the request nor your Modelfile sets them.",
                    f"{OLLAMA}/docs/modelfile.mdx"),
               Note("Ollama takes a grammar only as a request's format (a JSON schema), not in a Modelfile.",
                    f"{OLLAMA}/llm/llama_server.go (format -> json_schema)")),
        phases=PhaseFacts(
            budget="", budget_source=f"{OLLAMA}/api/types.go (ChatRequest.Think: true, false or \"low\", "
                                     "\"medium\", \"high\", \"max\"), llm/llama_server.go "
                                     "(llamaServerChatTemplateKwargs: enable_thinking and reasoning_effort for the "
                                     "template; no --reasoning-budget) and docs/api/anthropic-compatibility.mdx "
                                     "(budget_tokens accepted but not enforced)",
            message=False,
            marker="the model's own template and parser; a request's \"think\": false asks the template for no "
                   "thinking, and a Modelfile has no thinking PARAMETER",
            marker_source=f"{OLLAMA}/docs/api.md (think) and docs/modelfile.mdx",
            second_chain="Ollama passes one set of options to llama-server, which has no second chain: "
                         + LLAMA_SECOND_CHAIN[0],
            second_chain_source=LLAMA_SECOND_CHAIN[1]),
    ),
    "openai": EngineFacts(
        key="openai", title="the OpenAI API",
        version="OpenAI API reference, chat completions (2025)",
        defaults={"temperature": 1.0, "top_p": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0,
                  "penalty_last_n": -1},
        defaults_source="https://platform.openai.com/docs/api-reference/chat/create",
        stages={"presence_frequency": "presence_penalty/frequency_penalty", "temperature": "temperature",
                "top_p": "top_p"},
        stages_source="https://platform.openai.com/docs/api-reference/chat/create",
        order=None,
        order_source="https://platform.openai.com/docs/api-reference/chat/create (the order is not stated)",
        notes=(Note("The OpenAI API does not say in which order it applies temperature and top_p.",
                    "https://platform.openai.com/docs/api-reference/chat/create"),),
        limits={"temperature": (0.0, 2.0)},
        phases=PhaseFacts(
            budget="", budget_source="https://platform.openai.com/docs/api-reference/chat/create "
                                     "(reasoning_effort is a level, not a token count; max_completion_tokens "
                                     "caps the reasoning and the answer together)",
            message=False,
            marker="none: a reasoning model's thinking is the service's own",
            marker_source="https://platform.openai.com/docs/api-reference/chat/create",
            second_chain="the API takes one set of sampling fields a request",
            second_chain_source="https://platform.openai.com/docs/api-reference/chat/create"),
    ),
}



def facts_text() -> str:
    """The table as text, every fact beside its source (``export-config --facts``)."""
    lines = []
    for f in ENGINES.values():
        defaults = ", ".join(f"{k} {v}" for k, v in {**f.defaults, **f.own_defaults}.items())
        order = "the user's (--samplers)" if f.order is None and f.key == "llama.cpp" else (
            " → ".join(f.order) if f.order else "not stated")
        lines += [f"{f.title}: {f.version}",
                  f"  defaults: {defaults}", f"    source: {f.defaults_source}",
                  f"  stages: {', '.join(f'{k} ({v})' for k, v in f.stages.items())}", f"    source: {f.stages_source}",
                  f"  order: {order}", f"    source: {f.order_source}"]
        for note in f.notes:
            lines += [f"  - {note.text}", f"    source: {note.source}"]
        if f.phases is not None:
            ph = f.phases
            lines += [f"  thinking budget: {ph.budget or 'none'}", f"    source: {ph.budget_source}",
                      f"  end of the thinking: {ph.marker}", f"    source: {ph.marker_source}",
                      f"  a second chain for the answer: none ({ph.second_chain})",
                      f"    source: {ph.second_chain_source}"]
    return "\n".join(lines) + "\n"
