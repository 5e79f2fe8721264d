"""A loaded model with its tokenizer (``LM``): the narrow seam strategies call, and its weights' variants."""
from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, Callable

import torch

from playground.errors import InvalidRequest
from playground.models.architectures import ARCHITECTURES
from playground.models.dtypes import cast_model, dtype_name
from playground.models.fast import check as weights_check
from playground.models.fast import int4 as gguf_int4
from playground.models.fast.layers import LeanCache, LeanForward
from playground.models.lineup import MAX_PROMPT_TOKENS, ModelSpec, Progress, gguf_path, loads_from_gguf
from playground.models.machine_record import is_kept, kept_or_measured, record_path

BYTE_TOKEN = re.compile(r"<0x[0-9A-Fa-f]{2}>")  # sentencepiece's byte fallback (Gemma, Llama)


def _byte_level_chars() -> dict[str, int]:
    """Byte-level BPE's character for each byte (GPT-2's table: printable bytes stand for themselves,
    the others take the characters from U+0100 on, in byte order), as character -> byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    others = [b for b in range(256) if b not in printable]
    return {**{chr(b): b for b in printable}, **{chr(256 + k): b for k, b in enumerate(others)}}


_BYTE_OF_CHAR = _byte_level_chars()


def byte_piece(raw: str, text: str) -> str:
    """How a token that decodes to U+FFFD alone is written: its bytes that are no whole character as
    ``<0xE2>``. ``raw``: the vocabulary's own piece, sentencepiece's ``<0xE2>`` or byte-level BPE's
    characters (GPT-2's one character per byte: "â" is 0xE2, "Ġ" a space); ``text`` (the decoded
    token) where ``raw`` is neither, a true U+FFFD included."""
    if BYTE_TOKEN.fullmatch(raw):
        return raw.upper().replace("0X", "0x")
    byte_of = _BYTE_OF_CHAR
    if not raw or any(c not in byte_of for c in raw):
        return text
    decoded = bytes(byte_of[c] for c in raw).decode("utf-8", errors="surrogateescape")
    return "".join(f"<0x{ord(c) - 0xDC00:02X}>" if 0xDC80 <= ord(c) <= 0xDCFF else c for c in decoded)


class WeightsRefused(InvalidRequest):
    """A copy of a model's weights that failed its check against float32 on this CPU."""

    def __init__(self, message: str, check: "weights_check.WeightsCheck"):
        super().__init__(message)
        self.check = check


LEAN_FORWARDS = tuple(arch.lean for arch in ARCHITECTURES)


def lean_forward(model: Any) -> LeanForward | None:
    """The lean forward over a transformers model's own weights (llama, Gemma 3), or None."""
    for lean in LEAN_FORWARDS:
        if lean.supports(model):
            return lean(model)
    return None


@dataclass
class LM:
    """A loaded causal LM with its tokenizer: the seam strategies see."""

    spec: ModelSpec
    model: Any  # transformers PreTrainedModel
    tokenizer: Any
    device: torch.device
    load_seconds: float = 0.0
    _piece_cache: dict[int, str] = field(default_factory=dict, repr=False)
    fast: LeanForward | None = None  # a lean forward over the same weights (playground.models.fast), or None
    int4: bool = False  # the lean forward multiplies by the GGUF file's 4-bit blocks (playground.models.fast.int4)
    _variants: dict[str, "LM"] = field(default_factory=dict, repr=False)
    _checks: dict[str, "weights_check.WeightsCheck | None"] = field(default_factory=dict, repr=False)
    check: "weights_check.WeightsCheck | None" = None  # how this copy compared with float32 (None: the reference)
    _variants_lock: threading.RLock = field(default_factory=threading.RLock, repr=False)
    # what a strategy keeps with this copy of the model, under a key of its own (the EAGLE head: "eagle_head")
    attached: dict[Any, Any] = field(default_factory=dict, repr=False, compare=False)

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

    def measured_once(self, name: str, measure: Callable[[], dict[str, Any]]) -> tuple[dict[str, Any], bool]:
        """``measure()`` for these weights on this machine, made once per machine and kept with the model
        (playground.models.machine_record): every process then reads the same figures; (them, measured
        just now)."""
        key = ("measured", self.weights, name)
        if key in self.attached:
            return self.attached[key], False
        value, fresh = kept_or_measured(record_path(self.key, self.weights, name, self.device), measure)
        self.attached[key] = value
        return value, fresh

    def is_measured(self, name: str) -> bool:
        """Whether ``measured_once(name, ...)`` would read a kept record rather than measure now."""
        return ("measured", self.weights, name) in self.attached or is_kept(
            record_path(self.key, self.weights, name, self.device))

    def with_dtype(self, dtype: torch.dtype) -> "LM":
        """This model with its weights in ``dtype``: ``with_weights`` by the dtype's name."""
        return self.with_weights(dtype_name(dtype))

    def with_weights(self, name: str, progress: Progress | None = None) -> "LM":
        """This model with the weights ``name`` stands for: ``int4`` or a torch dtype's name. A copy
        is made on first use (a few seconds, shown through ``progress``) and kept.

        A copy made from the float32 model proves itself first (``playground.models.fast.check``): one
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
                if check is not None and not check.passed:
                    del self._variants[name]  # a refused copy is not kept in memory; its check is
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
            # int4_refusal is None only for a model a lean forward supports, so its bfloat16 copy has one
            assert base.fast is not None
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

    @property
    def one_pass_gap(self) -> float:
        """The largest logit difference between scoring several tokens in one pass and one token at a
        time on this CPU (``playground.models.fast.check.one_pass_gap``): measured by the weights'
        check, or for the weights as loaded by their probe (once per process)."""
        return self.check.one_pass_gap if self.check is not None else self._probe.one_pass_gap

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
            if "\ufffd" in text:  # a byte of a character split across tokens: written, not drawn as a box
                text = byte_piece(raw, text)
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
                attention_mask: torch.Tensor | None = None, position_ids: torch.Tensor | None = None,
                last: bool = False) -> "Forward":
        """Feed ``input_ids`` [batch, n] after what ``cache`` holds; float32 logits [batch, n, vocab], or
        with ``last`` the last row's alone [batch, 1, vocab] (a prompt's prefill: a lean forward then
        runs the LM head on that row only, the numbers it gives that row in the whole pass; transformers
        computes every row and keeps the last, so its numbers do not change either).

        With a lean forward, a fresh or lean cache goes through it; a transformers cache (made
        elsewhere) still goes through transformers, on the same weights.
        A 4D additive ``attention_mask`` [batch, 1, n, cached + n] with ``position_ids`` [batch, n]
        runs a draft tree in one pass (``strategies.speculative.eagle.tree``): transformers passes a 4D mask to
        the attention unchanged, for llama, Gemma 3 and GPT-2 alike, and the lean forward takes it too.
        """
        if self.fast is not None and (cache is None or isinstance(cache, LeanCache)):
            cache = self.fast.new_cache() if cache is None else cache
            logits, states = self.fast.forward(input_ids.to(self.device), cache, hidden, attention_mask, position_ids,
                                               last)
            return Forward(logits.float(), cache, states)
        extra = {}
        if attention_mask is not None and position_ids is not None:
            extra = dict(attention_mask=attention_mask.to(self.device, self.model.dtype),
                         position_ids=position_ids.to(self.device))
        out = self.model(input_ids=input_ids.to(self.device), past_key_values=cache, use_cache=True,
                         output_hidden_states=hidden, **extra)
        logits = out.logits[:, -1:] if last else out.logits
        return Forward(logits.float(), out.past_key_values, out.hidden_states if hidden else None)

    def new_cache(self) -> Any:
        if self.fast is not None:
            return self.fast.new_cache()
        from transformers import DynamicCache
        return DynamicCache(config=self.model.config)

    # --- early exit: the model's own first layers as a cheaper model ----------------------------

    def decoder_parts(self) -> tuple[Any, str, Any]:
        """(the base model, the name of its layer list, its final norm); InvalidRequest for an
        architecture without them (early exit and ``logits_from_hidden`` need them)."""
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
        _, _, norm = self.decoder_parts()
        logits = self.model.get_output_embeddings()(norm(hidden))
        cap = getattr(self.model.config, "final_logit_softcapping", None)
        if cap:
            logits = torch.tanh(logits / cap) * cap
        return logits.float()

    @torch.inference_mode()
    def layer_logits(self, states: tuple[torch.Tensor, ...], row: int = 0, position: int = -1,
                     last: torch.Tensor | None = None) -> torch.Tensor:
        """The logit lens: every hidden state at ``states[i][row, position]`` read through the final norm
        and the LM head, as the model reads its last one -> float32 logits [len(states), vocab].

        ``states`` are a forward's ``hidden_states`` (the embeddings, then one per layer). Their last entry
        comes normed (transformers' convention, which the lean forwards keep), so it goes through the head
        alone, on its own: its row is the forward's own logits at that position. The others share one
        product: the norm, then the head (the lean forwards' weights where they run: bfloat16, or over
        int4's blocks the dense bfloat16 head where this CPU multiplies it faster: ``lens_head``).
        ``last`` ([vocab]): the forward's own logits at that position, taken as the last row as they are
        (transformers' head over a pass's many rows rounds a row otherwise than over one).
        """
        inner = torch.stack([s[row, position] for s in states[:-1]])
        final = states[-1][row, position][None]
        if self.fast is not None:
            head_row = self.fast.project(final) if last is None else last[None]
            rows = self.fast.lens_logits(inner)
            out = torch.empty(len(states), rows.shape[-1], dtype=torch.float32, device=rows.device)
            out[:-1] = rows  # one float32 buffer for the record, no concatenated copy
            out[-1] = head_row[0]
            return out
        _, _, norm = self.decoder_parts()
        head = self.model.get_output_embeddings()
        read = head(norm(inner)) if last is not None else head(torch.cat([norm(inner), final]))
        cap = getattr(self.model.config, "final_logit_softcapping", None)
        if cap:
            read = torch.tanh(read / cap) * cap
        return read.float() if last is None else torch.cat([read.float(), last[None].float()])

    def truncated(self, num_layers: int) -> "LM":
        """The first ``num_layers`` layers + final norm + LM head as a model of its own.

        Shares every weight with this model (no copy); has its own, shorter KV cache.
        """
        if not 1 <= num_layers <= self.num_layers:
            raise InvalidRequest(f"layer must be in [1, {self.num_layers}] for {self.key}, got {num_layers}")
        import copy
        base, layers_name, _ = self.decoder_parts()
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


