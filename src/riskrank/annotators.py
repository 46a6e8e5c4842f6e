"""Risk annotators for the audit (paper Section 4.2, Appendix A).

An annotator gives a tool one rubric level 1..5 from its name and description. Three kinds,
named on the command line:

* ``openai:<model>`` (or ``openai:<model>@<base-url>``): any OpenAI-compatible
  chat-completions endpoint, asked Appendix A's prompt verbatim. The answer must be a single
  integer; anything else is re-asked once, then recorded as a failure (no vote). 429, 5xx,
  timeouts and connection errors are retried with exponential backoff (``Retry-After`` is
  honoured); other 4xx answers (bad key, unknown model) stop the run, because every further
  request would fail the same way.
* ``keyword``: :func:`riskrank.risk.keyword_level`, the transparent rubric-word annotator,
  with its evidence.
* ``head``: the shipped base model's risk head (riskrank-base, trained on every audited tool
  of UltraTool and Seal-Tools); ``head:<checkpoint>``: the learned risk head of a ``riskrank train`` checkpoint applied to
  a new registry, f_risk mapped to the nearest level. ``head:crossfit`` (benchmarks only) is
  the same head trained in k folds over tools, each tool scored by a model that never saw its
  label.

Every annotator has a ``name`` (the command-line spec) and a ``config`` fingerprint (prompt,
keyword lists, checkpoint weights ...). The vote log keys votes by both, so a rerun with the
same annotator reuses its votes and a changed annotator re-annotates.

Heavy libraries (httpx, torch, the encoder) are imported inside the annotators that need them,
so ``riskrank audit --annotator keyword`` starts in well under a second.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from riskrank.errors import RiskrankError
from riskrank.registry import DEFAULT_TOOL_TEMPLATE, Tool
from riskrank.risk import ANNOTATION_PROMPT, LEVEL_PATTERNS, PERMISSION_PATTERNS, keyword_level

DEFAULT_BASE_URL = "https://api.openai.com/v1"
ENV_BASE_URL = "OPENAI_BASE_URL"
ENV_API_KEY = "OPENAI_API_KEY"

#: The most of an endpoint's answer sent back in the re-ask; the most kept as evidence.
MAX_ANSWER_CHARS = 2000
SHOWN_ANSWER_CHARS = 200
_SURROGATE = re.compile("[\ud800-\udfff]")


def _shown(answer: str | None) -> str:
    """An answer as evidence: quoted, at most SHOWN_ANSWER_CHARS of it (an endpoint's 5 MB
    answer would make the label file too big to load), its length said where cut."""
    if answer is None or len(answer) <= SHOWN_ANSWER_CHARS:
        return repr(answer)
    return f"{answer[:SHOWN_ANSWER_CHARS]!r}... ({len(answer):,} characters)"


#: Sent after a malformed answer (the one re-ask of the protocol).
REASK_PROMPT = "Your answer was not a single integer. Return only one integer in {1,2,3,4,5}."

# One integer 1-5; tolerated around it: whitespace, quotes/backticks/asterisks, an "L" prefix
# (the rubric names levels L1..L5) and a final full stop. "3 or 4", "Level: 3", "6" are not.
_ANSWER = re.compile(r"""^[\s"'`*]*L?([1-5])\.?[\s"'`*]*$""", re.IGNORECASE)


class AnnotatorError(RiskrankError):
    """An annotator cannot run at all (bad spec, endpoint refuses the key or the model)."""

    code = "annotator_error"


@dataclass(frozen=True)
class Vote:
    """One annotator's level for one tool; ``evidence`` says why (keywords, f_risk, the
    model's raw answer)."""

    level: int
    evidence: str = ""


@dataclass(frozen=True)
class Failure:
    """An annotator could not give a level for one tool (recorded in the log, not a vote, so
    a rerun retries it)."""

    error: str


def tool_key(tool: Tool) -> str:
    """Identity of what an annotator saw: a changed description invalidates old votes."""
    return hashlib.sha256(f"{tool.name}\x00{tool.description}".encode()).hexdigest()[:16]


def _sha(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:12]


def parse_level(text: str | None) -> int | None:
    """The level in a model's answer, or None when the answer is not a single integer 1-5."""
    if not isinstance(text, str):
        return None
    m = _ANSWER.match(text)
    return int(m.group(1)) if m else None


def annotation_prompt(tool: Tool) -> str:
    """Appendix A's prompt for one tool."""
    return ANNOTATION_PROMPT.format(tool_name=tool.name, tool_description=tool.description)


class Annotator:
    """Base class: ``annotate(tools)`` yields ``(position in tools, Vote | Failure)`` as
    each tool is done (any order), so the caller can log every vote the moment it exists."""

    name: str = "annotator"
    config: str = ""
    slow: bool = False
    """True when each vote takes noticeable time (a progress bar is worth showing)."""
    deterministic: bool = False
    """True when the same tools always get the same votes and rerunning costs little: a
    resumed audit then recomputes this annotator's logged votes instead of trusting them."""

    def annotate(self, tools: Sequence[Tool]) -> Iterator[tuple[int, Vote | Failure]]:
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "config": self.config}


class KeywordAnnotator(Annotator):
    """Rubric words, permission categories and MCP annotations (:func:`keyword_level`)."""

    deterministic = True

    def __init__(self) -> None:
        self.name = "keyword"
        self.config = _sha({"levels": LEVEL_PATTERNS, "permissions": PERMISSION_PATTERNS})

    def annotate(self, tools: Sequence[Tool]) -> Iterator[tuple[int, Vote | Failure]]:
        for i, t in enumerate(tools):
            level, evidence = keyword_level(t.name, t.description, dict(t.annotations) if t.annotations else None)
            yield i, Vote(int(level), "; ".join(evidence) or "no risk keyword")


class HeadAnnotator(Annotator):
    """The risk head of a checkpoint, on the new registry's own embeddings."""

    deterministic = True

    def __init__(self, checkpoint: str | Path, *, encoder: Any = None, name: str | None = None) -> None:
        from riskrank.checkpoint import load_checkpoint, read_sidecar

        path = Path(checkpoint)
        meta = read_sidecar(path)  # the encoder's name; load_checkpoint names any problem
        if encoder is None or isinstance(encoder, str):
            from riskrank.encoder import Encoder

            encoder = Encoder(encoder or meta.get("encoder", {}).get("name"), progress=False)
        self.encoder = encoder
        self.checkpoint = load_checkpoint(path, encoder_identity=encoder.identity)
        self.template = self.checkpoint.meta.get("training_data", {}).get("tool_template") or DEFAULT_TOOL_TEMPLATE
        self.name = name or f"head:{checkpoint}"
        self.config = str(self.checkpoint.meta.get("weights_sha256", ""))[:12] or _sha(str(path.resolve()))

    def annotate(self, tools: Sequence[Tool]) -> Iterator[tuple[int, Vote | Failure]]:
        if not tools:
            return
        from riskrank.heads import HeadScorer
        from riskrank.risk import level_from_score

        emb = self.encoder.encode([t.text(self.template) for t in tools], desc="encoding tools")
        f_risk = HeadScorer(self.checkpoint.model, emb).level_score  # the (r - 1) / 4 head: levels
        for i, (lvl, f) in enumerate(zip(level_from_score(f_risk), f_risk, strict=True)):
            yield i, Vote(int(lvl), f"f_risk={float(f):.3f}")


class CrossfitHeadAnnotator(Annotator):
    """``head:crossfit``: the risk head trained in ``n_folds`` folds over the tools of a
    labelled benchmark; each tool's level comes from the model whose training hid its label
    (:func:`riskrank.training.crossfit_risk_levels`)."""

    def __init__(self, benchmark: Any, *, encoder: Any = None, n_folds: int = 5, seed: int = 42, progress: bool = True) -> None:
        if benchmark is None:
            raise AnnotatorError("head:crossfit needs a labelled benchmark with training queries: use --dataset")
        if encoder is None or isinstance(encoder, str):
            from riskrank.encoder import Encoder

            encoder = Encoder(encoder, progress=progress)
        self.benchmark = benchmark
        self.encoder = encoder
        self.n_folds, self.seed, self.progress = n_folds, seed, progress
        self.name = "head:crossfit"
        reg = benchmark.registry
        self.config = _sha({"folds": n_folds, "seed": seed, "labels": reg.risk_levels.tolist(), "registry": reg.fingerprint(),
                            "encoder": encoder.identity})
        self._levels: dict[str, tuple[int, float]] | None = None

    def annotate(self, tools: Sequence[Tool]) -> Iterator[tuple[int, Vote | Failure]]:
        if not tools:
            return
        if self._levels is None:
            from riskrank.training import crossfit_risk_levels

            b = self.benchmark
            qs = b.train if b.train is not None else next(iter(b.splits.values()))
            levels, f_risk, _ = crossfit_risk_levels(b.registry, qs.texts, qs.gold, encoder=self.encoder,
                                                     n_folds=self.n_folds, seed=self.seed, progress=self.progress)
            self._levels = {t.name: (int(lv), float(f)) for t, lv, f in zip(b.registry, levels, f_risk, strict=True)}
        for i, t in enumerate(tools):
            if t.name not in self._levels:
                yield i, Failure(f"{t.name!r} is not in the benchmark registry")
            else:
                lv, f = self._levels[t.name]
                yield i, Vote(lv, f"f_risk={f:.3f} (cross-fitted)")


class _RateLimiter:
    """At most ``per_minute`` request starts per minute, shared by the worker threads."""

    def __init__(self, per_minute: float | None, *, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.interval = 60.0 / per_minute if per_minute else 0.0
        self._next = 0.0
        self._lock = threading.Lock()
        self._clock, self._sleep = clock, sleep  # injectable: the tests run it on a fake clock

    def wait(self) -> float:
        """Block until this request may start; returns the start time it was given."""
        if not self.interval:
            return self._clock()
        with self._lock:
            now = self._clock()
            start = max(now, self._next)
            self._next = start + self.interval
        if start > now:
            self._sleep(start - now)
        return start


@dataclass
class OpenAIAnnotator(Annotator):
    """An OpenAI-compatible ``/chat/completions`` endpoint as an annotator.

    ``base_url`` and ``api_key`` default to $OPENAI_BASE_URL / $OPENAI_API_KEY (the key may
    be absent for a local server). ``retries`` transient failures per request are retried
    after ``backoff * 2**attempt`` seconds (plus jitter, capped by ``max_backoff``);
    ``rate_limit`` caps request starts per minute; ``workers`` requests run at once.
    """

    model: str
    base_url: str | None = None
    api_key: str | None = None
    timeout: float = 60.0
    retries: int = 5
    backoff: float = 1.0
    max_backoff: float = 60.0
    rate_limit: float | None = None
    workers: int = 4
    temperature: float | None = 0.0
    spec: str | None = None
    client: Any = field(default=None, repr=False)
    stats: dict[str, int] = field(default_factory=lambda: {"requests": 0, "retries": 0, "reasks": 0, "failures": 0})

    def __post_init__(self) -> None:
        self.slow = True
        if not self.model:
            raise AnnotatorError("openai annotator needs a model: openai:<model>")
        self.base_url = (self.base_url or os.environ.get(ENV_BASE_URL) or DEFAULT_BASE_URL).rstrip("/")
        if not self.base_url.startswith(("http://", "https://")):
            raise AnnotatorError(f"base URL {self.base_url!r} must start with http:// or https://")
        if self.api_key is None:
            self.api_key = os.environ.get(ENV_API_KEY)
        for name in ("timeout", "backoff", "max_backoff"):
            if not getattr(self, name) >= 0:
                raise AnnotatorError(f"{name} must be >= 0")
        if self.retries < 0 or self.workers < 1:
            raise AnnotatorError("retries must be >= 0 and workers >= 1")
        if self.rate_limit is not None and self.rate_limit <= 0:
            raise AnnotatorError("rate limit must be a positive number of requests per minute")
        self.name = self.spec or f"openai:{self.model}"
        # The key is not part of the fingerprint: rotating it must not re-annotate.
        self.config = _sha({"prompt": ANNOTATION_PROMPT, "reask": REASK_PROMPT, "model": self.model,
                            "temperature": self.temperature})
        self._limiter = _RateLimiter(self.rate_limit)
        self._stop = threading.Event()
        self._stats_lock = threading.Lock()

    def _count(self, key: str) -> None:
        with self._stats_lock:
            self.stats[key] += 1

    def _client(self):
        if self.client is None:
            import httpx

            headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
            self.client = httpx.Client(base_url=self.base_url, headers=headers, timeout=self.timeout)
        return self.client

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None

    def _delay(self, attempt: int, retry_after: str | None) -> float:
        if retry_after:
            try:
                return min(self.max_backoff, max(0.0, float(retry_after)))
            except ValueError:
                pass  # an HTTP date; fall back to our own schedule
        return min(self.max_backoff, self.backoff * 2**attempt * (1.0 + 0.25 * random.random()))

    def complete(self, messages: list[dict[str, str]]) -> str | None:
        """One chat completion with retries; the assistant's text (None when it sent none).
        Raises :class:`AnnotatorError` for answers no retry can fix (401, 404, ...) and
        :class:`_Transient` when the retries are spent."""
        import httpx

        body: dict[str, Any] = {"model": self.model, "messages": messages}
        if self.temperature is not None:
            body["temperature"] = self.temperature
        last = "no request made"
        for attempt in range(self.retries + 1):
            if self._stop.is_set():
                raise _Transient("stopped")
            if attempt:
                self._count("retries")
            self._limiter.wait()
            retry_after = None
            try:
                self._count("requests")
                resp = self._client().post("/chat/completions", json=body)
            except httpx.TimeoutException:
                last = f"timed out after {self.timeout:g}s"
            except httpx.TransportError as exc:
                last = f"connection error ({type(exc).__name__}: {exc})"
            else:
                if resp.status_code == 200:
                    try:
                        data = resp.json()
                        content = data["choices"][0]["message"].get("content")
                        return content if isinstance(content, str) else None
                    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
                        last = "200 with a body that is not a chat completion"
                elif resp.status_code == 429 or resp.status_code >= 500:
                    last = f"HTTP {resp.status_code}"
                    retry_after = resp.headers.get("retry-after")
                else:
                    detail = resp.text.strip().replace("\n", " ")[:200]
                    hint = " (check --api-key / $OPENAI_API_KEY)" if resp.status_code in (401, 403) else ""
                    raise AnnotatorError(
                        f"{self.name}: {self.base_url}/chat/completions answered HTTP {resp.status_code}{hint}: {detail}"
                    )
            if attempt < self.retries and self._stop.wait(self._delay(attempt, retry_after)):
                raise _Transient("stopped")
        raise _Transient(f"{last} (gave up after {self.retries + 1} attempts)")

    def annotate_one(self, tool: Tool) -> Vote | Failure:
        messages = [{"role": "user", "content": annotation_prompt(tool)}]
        try:
            answer = self.complete(messages)
            level = parse_level(answer)
            if level is None:
                self._count("reasks")
                # what it said, sent back as text that can be sent (no lone surrogate) and bounded
                said = _SURROGATE.sub("\ufffd", (answer or "")[:MAX_ANSWER_CHARS])
                messages += [{"role": "assistant", "content": said}, {"role": "user", "content": REASK_PROMPT}]
                second = self.complete(messages)
                level = parse_level(second)
                if level is None:
                    self._count("failures")
                    return Failure(f"malformed answers {_shown(answer)} and {_shown(second)}")
                return Vote(level, f"answer {_shown(answer)}, re-asked: {_shown(second)}")
            return Vote(level, f"answer {_shown(answer)}")
        except _Transient as exc:
            self._count("failures")
            return Failure(str(exc))

    def annotate(self, tools: Sequence[Tool]) -> Iterator[tuple[int, Vote | Failure]]:
        if not tools:
            return
        self._stop.clear()
        pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="annotate")
        pending: dict[Future, int] = {}
        it = iter(enumerate(tools))
        try:
            # Keep at most 2 * workers requests queued so an interrupt leaves little behind.
            def fill() -> None:
                while len(pending) < 2 * self.workers:
                    nxt = next(it, None)
                    if nxt is None:
                        return
                    pending[pool.submit(self.annotate_one, nxt[1])] = nxt[0]

            fill()
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    i = pending.pop(fut)
                    yield i, fut.result()
                fill()
        finally:
            # Interrupted (Ctrl-C, an AnnotatorError, the consumer stopped): no new requests;
            # requests in flight finish or fail fast, their votes are simply not logged.
            self._stop.set()
            pool.shutdown(wait=True, cancel_futures=True)


class _Transient(Exception):
    """Retries exhausted for one tool: a Failure, not a reason to stop the run."""


ANNOTATOR_KINDS = ("openai:<model>[@<base-url>]", "keyword", "head (the base model's risk head)", "head:<checkpoint>", "head:crossfit")


def make_annotator(spec: str, *, benchmark: Any = None, encoder: Any = None, openai_options: dict[str, Any] | None = None,
                   crossfit: dict[str, Any] | None = None) -> Annotator:
    """Build an annotator from its command-line spec (see :data:`ANNOTATOR_KINDS`)."""
    spec = spec.strip()
    kind, _, arg = spec.partition(":")
    if kind == "keyword" and not arg:
        return KeywordAnnotator()
    if kind == "openai" and arg:
        # the base URL follows the last '@' when it is one (a model name may hold '@': claude-3-5-sonnet@20240620)
        model, at, url = arg.rpartition("@")
        if not at or "://" not in url:
            model, url = arg, ""
        opts = dict(openai_options or {})
        if url:
            opts["base_url"] = url
        return OpenAIAnnotator(model=model, spec=spec, **opts)
    if spec == "head" or spec == "head:base":
        from riskrank.base import default_checkpoint

        base = default_checkpoint()
        if base is None:
            raise AnnotatorError("annotator 'head': no base model in this installation (build it with `make base-model`), "
                                 "or name a checkpoint: head:<checkpoint>")
        return HeadAnnotator(base, encoder=encoder, name="head")
    if kind == "head" and arg == "crossfit":
        return CrossfitHeadAnnotator(benchmark, encoder=encoder, **(crossfit or {}))
    if kind == "head" and arg:
        return HeadAnnotator(arg, encoder=encoder, name=spec)
    raise AnnotatorError(f"unknown annotator {spec!r}; use {', '.join(ANNOTATOR_KINDS)}")
