"""The page's whole configuration <-> a URL query string, for "copy link" and its restore.

A link carries every control of the page that changes the run: the model and its weights
(``dtype=float32``), the strategy and each of its parameters (a parameter the run filled in, such as
the tree an EAGLE ``auto`` run chose, included), the prompt, the system prompt and chat template, the
seed, the budget, the forced tokens and the grammar. It writes only what differs from the page's
defaults (``defaults()``); the restore starts from those defaults and fills in the rest. A value over
its limit (a prompt or grammar longer than a run takes, a link longer than a browser opens) is
refused with the value and the limit, never cut. It names the forced tokens of a branch
(``force=0:9,3:12``, step:token id); a link made while a branch of the Branches panel is shown adds
the steps where that branch parts from its parent (``branch=3``): the parent is the same run with the
other forced steps, so the restore runs the parent, then the branch under it. It also names the
grammar the text must follow (``grammar=json&grammar_text=...``), plus the Compare tab's second
strategy, and the What-if tab's lockstep (``pair_model``, ``pair_a``, ``pair_b``, ``pair_text``: the opened
page reads it once restored), and the What-if tab's sweep last run (``sweep`` the parameter, ``sweep_grid``
``lin:LOW:HIGH:COUNT`` or ``log:...``, ``sweep_n``, ``sweep_tokens``, ``sweep_extract``, ``sweep_known``: the
opened page runs it once restored; without ``sweep``, ``sweep_n``, ``sweep_tokens``, ``sweep_extract`` and ``sweep_known``
are the answer rules' draw and checker, set in the panel and not run). Parameters of the first strategy are ``p.<name>``, of the second ``b.<name>``. ``run=generate`` or
``run=compare`` makes the opened page run once restored (a seeded run then reproduces the
same output). Decoding is forgiving: an unknown key or a value the strategy would refuse
is dropped with a warning, so an old link still opens. No gradio.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping
from urllib.parse import parse_qsl, urlencode

from playground.engine import MAX_TEXT_CHARS
from playground.engines.settings import whole
from playground.errors import InvalidRequest
from playground.models.dtypes import DEFAULT_DTYPE, DTYPES
from playground.whatif.extractors import make_extractor
from playground.whatif.grid import check_param, parse_values
from playground.whatif.sample_many import MAX_TOKENS
from playground.whatif.sweep import MAX_PAGE_N, MAX_SWEEP_SAMPLES
from strategies.forcing import parse_path
from strategies.params import check_value, field_kind
from strategies.registry import get_strategy
from strategies.sampling.grammar import GRAMMAR_KINDS, MAX_GRAMMAR_CHARS, GrammarSpec

RUN_MODES = ("", "generate", "compare")
DEFAULT_STRATEGY = "sampling"
DEFAULT_COMPARE = "greedy"
DEFAULT_MAX_NEW_TOKENS = 48
DEFAULT_PROMPT = "Explain in one sentence why the sky is blue."
MAX_LINK_CHARS = 60_000  # a link's query: browsers and the page's server open addresses up to about 64 kB


@dataclass
class Config:
    """Everything a person sets on the page."""

    model: str = "smollm2-135m"
    dtype: str = DEFAULT_DTYPE  # the weights (playground.models.dtypes): auto, float32, bfloat16, int4
    strategy: str = DEFAULT_STRATEGY
    prompt: str = ""
    system: str = ""
    chat: bool = True
    seed: int = 0
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    params: dict[str, Any] = field(default_factory=dict)
    compare_strategy: str = DEFAULT_COMPARE
    compare_params: dict[str, Any] = field(default_factory=dict)
    run: str = ""
    forced: str = ""  # a branch's forced tokens, "step:id,step:id" (playground.whatif.branches)
    branch: str = ""  # the steps of ``forced`` where the branch parts from its parent run, "3" (or "3,7")
    grammar_kind: str = ""  # "" (none) or one of json, regex, choices, lark (strategies.sampling.grammar)
    grammar_text: str = ""  # the schema, expression, choices or Lark grammar
    # the What-if tab's lockstep (playground.whatif.lockstep): model B ("" = the page's model), each side's
    # weights and the text both read; with pair_a set the opened page reads it in lockstep once restored
    pair_model: str = ""
    pair_a: str = ""
    pair_b: str = ""
    pair_text: str = ""
    # the What-if tab's sweep (playground.whatif.sweep): the parameter ("" = none), its grid as
    # ``lin:LOW:HIGH:COUNT`` or ``log:LOW:HIGH:COUNT``, N samples per value, tokens per sample, the answer
    # extractor's spec ("" = none) and the known answers ("12|twelve"); with ``sweep`` set the opened page
    # runs the sweep once restored; without ``sweep`` the other four are the answer rules' settings (a fresh
    # draw of N samples of that many tokens, the extractor and the checker), restored and not run
    sweep: str = ""
    sweep_grid: str = ""
    sweep_n: int = 0
    sweep_tokens: int = 0
    sweep_extract: str = ""
    sweep_known: str = ""
    # the What-if tab's Score text: with it set the opened page scores it (and a detection reads it)
    score_text: str = ""


SWEEP_KEYS = ("sweep", "sweep_grid", "sweep_n", "sweep_tokens", "sweep_extract", "sweep_known")
RULES_KEYS = SWEEP_KEYS[2:]  # what a link carries of the answer rules without a sweep
MAX_KNOWN_CHARS = 1000  # the sweep's known answers


def defaults() -> Config:
    """The page's configuration before anything is set: what a link leaves out, and what its restore
    starts from."""
    return Config(prompt=DEFAULT_PROMPT)


def strategy_defaults(strategy: str) -> dict[str, Any]:
    """Every parameter of ``strategy`` at its declared default."""
    return {f.name: f.default for f in dataclasses.fields(get_strategy(strategy).params)}


def encode(config: Config, base: Config | None = None) -> str:
    """``config`` as a query string, starting with '?': only the keys whose value differs from ``base``
    (``defaults()`` if None), and of each strategy only the parameters off their declared default."""
    base = base or defaults()
    check_limits(config)
    items: list[tuple[str, str]] = []
    for key in ("model", "dtype", "strategy", "prompt", "system"):
        value = getattr(config, key)
        if value != getattr(base, key):
            items.append((key, value))
    for key in ("seed", "max_new_tokens"):
        if int(getattr(config, key)) != int(getattr(base, key)):
            items.append((key, str(int(getattr(config, key)))))
    if bool(config.chat) != bool(base.chat):
        items.append(("chat", "1" if config.chat else "0"))
    items += [(f"p.{k}", v) for k, v in _changed(config.strategy, config.params)]
    if config.forced:
        items.append(("force", config.forced))
        if config.branch:
            items.append(("branch", config.branch))
    if config.grammar_kind and config.grammar_text.strip():
        items += [("grammar", config.grammar_kind), ("grammar_text", config.grammar_text)]
    if config.compare_strategy != base.compare_strategy:
        items.append(("b", config.compare_strategy))
    items += [(f"b.{k}", v) for k, v in _changed(config.compare_strategy, config.compare_params)]
    if config.pair_a:
        items += [(key, getattr(config, key)) for key in ("pair_model", "pair_a", "pair_b", "pair_text")
                  if getattr(config, key)]
    items += [(key, str(getattr(config, key))) for key in (SWEEP_KEYS if config.sweep else RULES_KEYS)
              if getattr(config, key)]
    if config.score_text:
        items.append(("score_text", config.score_text))
    if config.run:
        items.append(("run", config.run))
    query = "?" + urlencode(items)
    if len(query) > MAX_LINK_CHARS:
        longest = max(items, key=lambda item: len(item[1]))
        raise InvalidRequest(f"the share link would be {len(query)} characters, over the {MAX_LINK_CHARS} a "
                             f"browser opens; its longest value is {longest[0]} ({len(longest[1])} characters)")
    return query


def check_limits(config: Config) -> None:
    """InvalidRequest naming the value and its limit where ``config`` holds more than a run takes: a link
    carries every value whole or not at all."""
    for name, text in (("prompt", config.prompt), ("system prompt", config.system)):
        if len(text) > MAX_TEXT_CHARS:
            raise InvalidRequest(f"{name} must be at most {MAX_TEXT_CHARS} characters, got {len(text)}: "
                                 "a share link never cuts it")
    if len(config.pair_text) > MAX_TEXT_CHARS:
        raise InvalidRequest(f"the lockstep's text must be at most {MAX_TEXT_CHARS} characters, got "
                             f"{len(config.pair_text)}: a share link never cuts it")
    if len(config.score_text) > MAX_TEXT_CHARS:
        raise InvalidRequest(f"the text to score must be at most {MAX_TEXT_CHARS} characters, got "
                             f"{len(config.score_text)}: a share link never cuts it")
    if len(config.sweep_known) > MAX_KNOWN_CHARS:
        raise InvalidRequest(f"the sweep's known answer must be at most {MAX_KNOWN_CHARS} characters, got "
                             f"{len(config.sweep_known)}: a share link never cuts it")
    if config.grammar_kind and len(config.grammar_text) > MAX_GRAMMAR_CHARS:
        raise InvalidRequest(f"the {config.grammar_kind} grammar must be at most {MAX_GRAMMAR_CHARS} characters, "
                             f"got {len(config.grammar_text)}: a share link never cuts it")


def _changed(strategy: str, params: dict[str, Any]) -> list[tuple[str, str]]:
    """``params`` written as text, without those at ``strategy``'s declared default."""
    try:
        declared = strategy_defaults(strategy)
    except InvalidRequest:
        declared = {}
    return [(k, _text(v)) for k, v in params.items() if k not in declared or _text(v) != _text(declared[k])]


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value)) if abs(value) < 1e15 else repr(value)
    return str(value)


def decode(query: str | Mapping[str, str], base: Config | None = None) -> tuple[Config, list[str]]:
    """A query (string or mapping) -> (Config, warnings). Starts from ``base`` (``defaults()`` if None)."""
    pairs = dict(parse_qsl(query.lstrip("?"), keep_blank_values=True)) if isinstance(query, str) else dict(query)
    cfg = dataclasses.replace(base) if base else defaults()
    cfg.params, cfg.compare_params = dict(cfg.params), dict(cfg.compare_params)
    warnings: list[str] = []
    if "model" in pairs:
        cfg.model = pairs["model"]
    for key, name in (("prompt", "prompt"), ("system", "system prompt")):
        if key in pairs and len(pairs[key]) > MAX_TEXT_CHARS:
            warnings.append(f"ignored {key}: {name} must be at most {MAX_TEXT_CHARS} characters, "
                            f"got {len(pairs[key])}")
        elif key in pairs:
            setattr(cfg, key, pairs[key])
    if "dtype" in pairs and pairs["dtype"] in DTYPES:
        cfg.dtype = pairs["dtype"]
    elif "dtype" in pairs:
        warnings.append(f"ignored dtype: the weights must be one of {', '.join(DTYPES)}, got {pairs['dtype']!r}")
    for key in ("seed", "max_new_tokens"):
        if key in pairs:
            try:
                setattr(cfg, key, int(float(pairs[key])))
            except ValueError:
                warnings.append(f"{key} must be an integer, got {pairs[key]!r}")
    if "chat" in pairs:
        cfg.chat = pairs["chat"].lower() in ("1", "true", "yes", "on")
    if "force" in pairs:
        try:
            parse_path(pairs["force"])
            cfg.forced = pairs["force"].strip()
        except InvalidRequest as err:
            warnings.append(f"ignored force: {err}")
    if "branch" in pairs:
        cfg.branch = _branch_part(pairs["branch"], cfg.forced, warnings)
    if "grammar" in pairs or "grammar_text" in pairs:
        cfg.grammar_kind, cfg.grammar_text = _grammar_part(pairs, warnings)
    _pair_part(pairs, cfg, warnings)
    if pairs.get("run", "") in RUN_MODES:
        cfg.run = pairs.get("run", "")
    else:
        warnings.append(f"run must be one of generate, compare, got {pairs['run']!r}")
    cfg.strategy, cfg.params = _strategy_part(pairs, "strategy", "p.", cfg.strategy, cfg.params, warnings)
    cfg.compare_strategy, cfg.compare_params = _strategy_part(pairs, "b", "b.", cfg.compare_strategy,
                                                              cfg.compare_params, warnings)
    _sweep_part(pairs, cfg, warnings)
    if len(pairs.get("score_text", "")) > MAX_TEXT_CHARS:
        warnings.append(f"ignored score_text: the text to score must be at most {MAX_TEXT_CHARS} characters, "
                        f"got {len(pairs['score_text'])}")
    elif "score_text" in pairs:
        cfg.score_text = pairs["score_text"]
    known = {*SWEEP_KEYS, "score_text", "model", "dtype", "prompt", "system", "seed", "max_new_tokens", "chat", "run", "strategy", "b", "force",
             "branch", "grammar", "grammar_text", "pair_model", "pair_a", "pair_b", "pair_text"}
    for key in pairs:
        if key not in known and not key.startswith(("p.", "b.", "__")):  # __theme etc. are gradio's
            warnings.append(f"ignored unknown link key {key!r}")
    return cfg, warnings


def _pair_part(pairs: Mapping[str, str], cfg: Config, warnings: list[str]) -> None:
    """The link's lockstep into ``cfg``: both weights must be weights types, the text within a run's
    limit; otherwise the lockstep is left out with a warning naming the value (the rest still opens)."""
    if not any(key in pairs for key in ("pair_model", "pair_a", "pair_b", "pair_text")):
        return
    a, b = pairs.get("pair_a", ""), pairs.get("pair_b", "")
    text = pairs.get("pair_text", "")
    if a not in DTYPES or b not in DTYPES:
        bad = a if a not in DTYPES else b
        warnings.append(f"ignored the lockstep: its weights must be one of {', '.join(DTYPES)}, got {bad!r}")
    elif len(text) > MAX_TEXT_CHARS:
        warnings.append(f"ignored the lockstep: its text must be at most {MAX_TEXT_CHARS} characters, "
                        f"got {len(text)}")
    else:
        cfg.pair_model, cfg.pair_a, cfg.pair_b, cfg.pair_text = pairs.get("pair_model", ""), a, b, text


def _sweep_part(pairs: Mapping[str, str], cfg: Config, warnings: list[str]) -> None:
    """The link's sweep into ``cfg`` (read after its strategy): the parameter one of the strategy's numeric
    ones, the grid a lin/log grid, N and the tokens integers in their ranges, the extractor one the answer
    rules take; otherwise the sweep is left out with a warning naming the value (the rest still opens)."""
    if not any(key in pairs for key in SWEEP_KEYS):
        return
    if not pairs.get("sweep", ""):
        _rules_part(pairs, cfg, warnings)
        return
    name, grid_text = pairs.get("sweep", ""), pairs.get("sweep_grid", "").strip()
    try:
        n, tokens, extract, known = _answer_settings(pairs, required=True)
        check_param(cfg.strategy, name)
        if grid_text.partition(":")[0] not in ("lin", "log"):
            raise InvalidRequest(f"sweep_grid must be lin:LOW:HIGH:COUNT or log:LOW:HIGH:COUNT, got {grid_text!r:.100}")
        count = len(parse_values(grid_text))
        if n * count > MAX_SWEEP_SAMPLES:
            raise InvalidRequest(f"N x values must be at most {MAX_SWEEP_SAMPLES}, got {n} x {count}")
    except InvalidRequest as err:
        warnings.append(f"ignored the sweep: {err}")
        return
    cfg.sweep, cfg.sweep_grid, cfg.sweep_n, cfg.sweep_tokens = name, grid_text, n, tokens
    cfg.sweep_extract, cfg.sweep_known = extract, known


def _rules_part(pairs: Mapping[str, str], cfg: Config, warnings: list[str]) -> None:
    """The answer rules' settings of a link without a sweep into ``cfg``; left out with a warning naming the
    value where ``_answer_settings`` refuses one."""
    try:
        cfg.sweep_n, cfg.sweep_tokens, cfg.sweep_extract, cfg.sweep_known = _answer_settings(pairs, required=False)
    except InvalidRequest as err:
        warnings.append(f"ignored the answer rules' settings: {err}")


def _answer_settings(pairs: Mapping[str, str], required: bool) -> tuple[int, int, str, str]:
    """(N, tokens, extractor, known answers) of a link, which a sweep and the answer rules share: N and the
    tokens integers in their ranges (0 where absent and not ``required``), the extractor one the rules take,
    the known answers within their limit; InvalidRequest naming the value otherwise."""
    def count(key: str, high: int) -> int:
        return whole(key, pairs.get(key, ""), 1, high) if required or pairs.get(key) else 0

    extract, known = pairs.get("sweep_extract", "").strip(), pairs.get("sweep_known", "")
    n, tokens = count("sweep_n", MAX_PAGE_N), count("sweep_tokens", MAX_TOKENS)
    if extract:
        make_extractor(extract)
    if len(known) > MAX_KNOWN_CHARS:
        raise InvalidRequest(f"the known answer must be at most {MAX_KNOWN_CHARS} characters, got {len(known)}")
    return n, tokens, extract, known


def _branch_part(text: str, forced: str, warnings: list[str]) -> str:
    """The link's ``branch`` steps ("3" or "3,7"), each a step of its forced path; "" with a warning
    naming the value when they are not (the link then restores the forced path as one run)."""
    text = "".join(text.split())
    if not text:
        return ""
    steps = parse_path(forced) if forced else {}
    if not steps:
        warnings.append(f"ignored branch={text!r}: the link has no forced tokens (force=step:token) for it to name")
        return ""
    named = text.split(",")
    allowed = ", ".join(str(k) for k in sorted(steps))
    if not all(s.isdigit() and int(s) in steps for s in named):
        warnings.append(f"ignored branch={text!r}: its steps must be forced steps of the link ({allowed})")
        return ""
    return ",".join(str(k) for k in sorted({int(s) for s in named}))


def split_branch(config: Config) -> tuple[str, str]:
    """(the parent's forced path, the branch's own forced steps) of ``config``'s forced path, both written
    "step:token"; the parent's is the whole path and the branch's "" when the link names no branch."""
    path = parse_path(config.forced) if config.forced else {}
    mine = {int(s) for s in config.branch.split(",") if s.strip().isdigit()} if config.branch else set()
    if not mine or not mine <= set(path):
        return config.forced, ""
    write = lambda part: ",".join(f"{k}:{v}" for k, v in sorted(part.items()))  # noqa: E731
    return (write({k: v for k, v in path.items() if k not in mine}),
            write({k: v for k, v in path.items() if k in mine}))


def _grammar_part(pairs: dict[str, str], warnings: list[str]) -> tuple[str, str]:
    """(kind, text) of the link's grammar, checked as a request checks it; ("", "") with a warning
    when the kind is unknown or the text does not parse (an empty text or kind "none": no grammar)."""
    kind, text = pairs.get("grammar", "").strip(), pairs.get("grammar_text", "")
    if kind in ("", "none") or not text.strip():
        return "", ""
    if kind not in GRAMMAR_KINDS:
        warnings.append(f"ignored grammar: its kind must be one of {', '.join(GRAMMAR_KINDS)}, got {kind!r}")
        return "", ""
    try:
        GrammarSpec(kind, text)
    except InvalidRequest as err:
        warnings.append(f"ignored grammar: {err}")
        return "", ""
    return kind, text


def _strategy_part(pairs: dict[str, str], key: str, prefix: str, strategy: str, params: dict[str, Any],
                   warnings: list[str]) -> tuple[str, dict[str, Any]]:
    """The strategy named by ``key`` and its ``prefix``-ed parameters, each checked like the API does."""
    if key in pairs:
        try:
            get_strategy(pairs[key])
            strategy, params = pairs[key], {}
        except InvalidRequest as err:
            warnings.append(str(err))
    fields = {f.name: f for f in dataclasses.fields(get_strategy(strategy).params)}
    out = {k: v for k, v in params.items() if k in fields}
    for raw_key, raw in pairs.items():
        if not raw_key.startswith(prefix):
            continue
        name = raw_key[len(prefix):]
        if name not in fields:
            warnings.append(f"ignored {raw_key}: {strategy} has no parameter {name!r}")
            continue
        try:
            out[name] = check_value(name, raw, fields[name].metadata, field_kind(fields[name]))
        except InvalidRequest as err:
            warnings.append(f"ignored {raw_key}: {err}")
    return strategy, out
