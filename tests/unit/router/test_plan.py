"""Planning: routes to attempts on devices, with the documented auto cost model and fallbacks."""

from __future__ import annotations

import pytest

from zest.errors import (
    BadRequestError,
    DeviceUnavailableError,
    ServiceUnavailableError,
    UnknownTaskError,
)
from zest.router import (
    REMOTE_DEVICE,
    Capabilities,
    Device,
    ModelTraits,
    Needs,
    Plan,
    RouteConfig,
    find_route,
    parse_routes,
    peak_priority,
    plan_route,
    tightened,
)

ROUTES = parse_routes(
    """\
version: 1
models:
  small: {engine: llamacpp, source: m.gguf}
routes:
  chat: {kind: chat, model: small}
  autocomplete: {kind: completion, model: small, device: cpu}
""",
    "routes.yaml",
)
CPU = Device("cpu", frozenset({"llamacpp"}), "/proc/cpuinfo")
NPU = Device("npu", frozenset({"llamacpp"}), "emulated", emulated=True, threads=1)
GPU = Device("gpu", frozenset({"llamacpp"}), "emulated", emulated=True, threads=1)
REAL_NPU = Device("npu", frozenset({"onnx-genai"}), "/sys/class/accel")


def devices(*items: Device) -> dict[str, Device]:
    return {d.name: d for d in items}


def route(**fields: object) -> RouteConfig:
    return RouteConfig.model_validate({"kind": "chat", "model": "small", **fields})


def plan(r: RouteConfig, found: dict[str, Device], **kw: object) -> list[tuple[str, str]]:
    result = plan_route("t", r, engine="llamacpp", devices=found, **kw)  # type: ignore[arg-type]
    return [(a.device, a.reason) for a in result.attempts]


def test_auto_on_a_cpu_only_machine() -> None:
    assert plan(route(), devices(CPU)) == [
        ("cpu", "auto: found cpu; shortest queue, fastest first (queued: cpu 0)")
    ]


def test_auto_keeps_short_prompts_on_one_device_and_labels_emulation() -> None:
    attempts = plan(route(), devices(CPU, NPU, GPU), prompt_tokens=100)
    assert attempts == [
        (
            "gpu(emulated)",
            "auto: prompt of 100 tokens < 512; shortest queue, fastest first "
            "(queued: gpu 0, npu 0, cpu 0)",
        ),
        (
            "cpu",
            "fallback to cpu if gpu(emulated) fails before the first token "
            "(on_failure: next, allow_cpu: true)",
        ),
    ]


def test_auto_splits_long_prompts_when_npu_and_gpu_exist() -> None:
    attempts = plan(route(), devices(CPU, NPU, GPU), prompt_tokens=512)
    assert attempts[0] == (
        "npu(emulated)->gpu(emulated)",
        "auto: prompt of 512 tokens >= 512, npu and gpu found: prefill on npu, decode on gpu",
    )


def test_auto_does_not_split_for_an_engine_that_cannot() -> None:
    attempts = plan(route(), devices(CPU, NPU, GPU), prompt_tokens=4000, can_split=False)
    assert attempts[0][0] == "gpu(emulated)"


def test_auto_threshold_is_per_route() -> None:
    r = route(hybrid_min_prompt_tokens=50)
    assert plan(r, devices(CPU, NPU, GPU), prompt_tokens=60)[0][0] == "npu(emulated)->gpu(emulated)"


def test_auto_follows_the_shortest_queue() -> None:
    attempts = plan(route(), devices(CPU, NPU, GPU), load={"gpu": 3, "npu": 1, "cpu": 2})
    assert attempts[0][0] == "npu(emulated)"
    assert attempts[0][1].endswith("(queued: gpu 3, npu 1, cpu 2)")


def test_auto_without_cpu_when_allow_cpu_is_false() -> None:
    result = plan_route("t", route(allow_cpu=False), engine="llamacpp", devices=devices(CPU, NPU))
    assert [a.device for a in result.attempts] == ["npu(emulated)"]
    assert result.removed == ("cpu: allow_cpu is false for route 't'",)


def test_a_pinned_device_that_exists_is_used_with_cpu_behind_it() -> None:
    assert plan(route(device="npu"), devices(CPU, NPU)) == [
        ("npu(emulated)", "device npu pinned by the route"),
        (
            "cpu",
            "fallback to cpu if npu(emulated) fails before the first token "
            "(on_failure: next, allow_cpu: true)",
        ),
    ]


def test_return_error_keeps_only_the_pinned_device() -> None:
    result = plan_route(
        "t",
        route(device="npu", on_failure="return_error"),
        engine="llamacpp",
        devices=devices(CPU, NPU),
    )
    assert [a.device for a in result.attempts] == ["npu(emulated)"]
    assert result.removed == ("cpu fallback: on_failure is return_error",)


def test_a_missing_device_falls_back_to_cpu_visibly_when_allowed() -> None:
    assert plan(route(device="npu"), devices(CPU)) == [
        ("cpu", "fallback to cpu: npu: npu is not available (found: cpu); allow_cpu is true"),
    ]


def test_a_missing_device_without_fallback_is_a_503_naming_everything() -> None:
    with pytest.raises(ServiceUnavailableError) as info:
        plan_route(
            "accel", route(device="npu", allow_cpu=False), engine="llamacpp", devices=devices(CPU)
        )
    assert info.value.status_code == 503
    assert info.value.code == "device_unavailable"
    assert info.value.message == (
        "route 'accel' needs device 'npu', which is not usable here (found: cpu), and the "
        "fallback to cpu is forbidden by routes.accel.allow_cpu: false: declare the device "
        "(ZEST_EMULATE_DEVICES, e.g. npu=cpu:1, for an emulated one) or change routes.accel.device"
    )


def test_a_device_the_engine_cannot_use_does_not_count() -> None:
    """Found, but not for this engine: the error says so instead of 'declare the device'."""
    with pytest.raises(ServiceUnavailableError) as refused:
        plan_route(
            "t",
            route(device="npu", allow_cpu=False),
            engine="llamacpp",
            devices=devices(CPU, REAL_NPU),
        )
    assert refused.value.message == (
        "route 't' needs device 'npu', which cannot run engine 'llamacpp' here (npu: npu cannot "
        "run engine 'llamacpp' (it runs onnx-genai)), and the fallback to cpu is forbidden by "
        "routes.t.allow_cpu: false: route the model to a device that runs it (routes.t.device) "
        "or use a model of an engine the device runs"
    )


def test_an_emulated_gpu_is_named_as_running_only_cpu_thread_engines() -> None:
    with pytest.raises(ServiceUnavailableError) as refused:
        plan_route(
            "t",
            route(device="gpu", allow_cpu=False),
            engine="onnx-genai",
            devices=devices(CPU, GPU),
        )
    assert "gpu(emulated) cannot run engine 'onnx-genai' (it runs llamacpp): an emulated " in (
        refused.value.message
    )
    assert "declare the device" not in refused.value.message


@pytest.mark.parametrize("device", ["hybrid", "npu->gpu"])
def test_hybrid_places_prefill_and_decode(device: str) -> None:
    result = plan_route(
        "t", route(device=device), engine="llamacpp", devices=devices(CPU, NPU, GPU)
    )
    placement = result.first.placement
    assert (placement.prefill.name, placement.decode.name, placement.split) == ("npu", "gpu", True)
    assert result.first.device == "npu(emulated)->gpu(emulated)"


def test_hybrid_needs_both_devices() -> None:
    attempts = plan(route(device="hybrid"), devices(CPU, NPU))
    assert attempts == [
        (
            "cpu",
            "fallback to cpu: hybrid: gpu is not available "
            "(found: cpu, npu(emulated)); allow_cpu is true",
        )
    ]


def test_an_unknown_task_lists_the_known_ones() -> None:
    with pytest.raises(UnknownTaskError) as info:
        find_route("chatt", "chat", ROUTES)
    assert info.value.status_code == 404
    assert info.value.message == (
        "unknown task 'chatt': use one of autocomplete, chat (GET /v1/models lists them)"
    )


def test_the_endpoint_must_match_the_route_kind() -> None:
    with pytest.raises(BadRequestError) as info:
        find_route("autocomplete", "chat", ROUTES)
    assert info.value.message == (
        "task 'autocomplete' is a completion route: call /v1/completions "
        "or POST /v1/tasks/autocomplete instead"
    )


def test_models_are_addressable_only_when_exposed() -> None:
    with pytest.raises(UnknownTaskError):
        find_route("small", "chat", ROUTES)
    exposed = ROUTES.model_copy(update={"expose_models": True})
    assert find_route("small", "completion", exposed).kind == "completion"


# --- fallback chains, remote models, strict privacy --------------------------------------------

TRAITS = {
    "small": ModelTraits("llamacpp", Capabilities(split=True)),
    "tiny": ModelTraits("llamacpp", Capabilities(split=True)),
    "upstream": ModelTraits("remote"),
}


def chain(r: RouteConfig, found: dict[str, Device], **kw: object) -> Plan:
    return plan_route(
        "t",
        r,
        engine=TRAITS[r.model].engine,
        can_split=TRAITS[r.model].can_split,
        devices=found,
        models=TRAITS,
        **kw,  # type: ignore[arg-type]
    )


def test_the_chain_follows_the_route_and_its_cpu_fallback() -> None:
    r = route(
        device="npu",
        privacy="allow_remote",
        fallback=[{"model": "tiny", "device": "cpu"}, {"model": "upstream"}],
    )
    result = chain(r, devices(CPU, NPU))
    assert [(a.model, a.device, a.engine, a.reason) for a in result.attempts] == [
        ("small", "npu(emulated)", "llamacpp", "device npu pinned by the route"),
        (
            "small",
            "cpu",
            "llamacpp",
            "fallback to cpu if npu(emulated) fails before the first token "
            "(on_failure: next, allow_cpu: true)",
        ),
        ("tiny", "cpu", "llamacpp", "fallback 1 (tiny): device cpu pinned by the fallback entry"),
        (
            "upstream",
            "remote",
            "remote",
            "fallback 2 (upstream): remote model: an OpenAI-compatible upstream",
        ),
    ]
    assert result.attempts[3].remote
    assert result.attempts[3].placement.decode == REMOTE_DEVICE


def test_a_remote_model_is_never_placed_on_the_cpu() -> None:
    r = RouteConfig.model_validate(
        {"kind": "chat", "model": "upstream", "privacy": "allow_remote", "device": "auto"}
    )
    result = chain(r, devices(CPU, NPU, GPU))
    assert [(a.device, a.reason) for a in result.attempts] == [
        ("remote", "remote model: an OpenAI-compatible upstream")
    ]


def test_chain_entries_use_the_auto_cost_model() -> None:
    r = route(device="cpu", fallback=[{"model": "tiny"}])
    result = chain(r, devices(CPU, NPU, GPU), load={"gpu": 2, "npu": 0})
    assert [(a.model, a.device) for a in result.attempts] == [
        ("small", "cpu"),
        ("tiny", "npu(emulated)"),
    ]
    assert result.attempts[1].reason == (
        "fallback 1 (tiny): auto: prompt of 0 tokens < 512; shortest queue, fastest first "
        "(queued: gpu 2, npu 0, cpu 0)"
    )


def test_a_duplicate_chain_entry_is_left_out() -> None:
    r = route(device="npu", fallback=[{"model": "small", "device": "cpu"}])
    result = chain(r, devices(CPU, NPU))
    assert [a.device for a in result.attempts] == ["npu(emulated)", "cpu"]
    assert result.removed == ("fallback 1 (small): cpu: already attempt 2",)


def test_an_unplaceable_route_gives_way_to_its_chain_and_says_so() -> None:
    r = route(
        device="npu", allow_cpu=False, privacy="allow_remote", fallback=[{"model": "upstream"}]
    )
    result = chain(r, devices(CPU))
    [attempt] = result.attempts
    assert attempt.model == "upstream"
    assert attempt.skipped == (
        "small on npu: device unavailable: npu is not available (found: cpu)",
    )
    assert result.removed == ("npu: npu is not available (found: cpu)",)


def test_a_chain_entry_on_a_missing_device_runs_on_cpu_when_allowed() -> None:
    r = route(device="cpu", fallback=[{"model": "tiny", "device": "gpu"}])
    result = chain(r, devices(CPU))
    assert [(a.model, a.device, a.reason, a.skipped) for a in result.attempts] == [
        ("small", "cpu", "device cpu pinned by the route", ()),
        (
            "tiny",
            "cpu",
            "fallback 1 (tiny): fallback to cpu: gpu: gpu is not available (found: cpu); "
            "allow_cpu is true",
            ("tiny on gpu: device unavailable: gpu is not available (found: cpu)",),
        ),
    ]


def test_allow_cpu_false_keeps_chain_entries_off_the_cpu() -> None:
    r = route(device="npu", allow_cpu=False, fallback=[{"model": "tiny"}])
    result = chain(r, devices(CPU, NPU))
    assert [(a.model, a.device) for a in result.attempts] == [
        ("small", "npu(emulated)"),
        ("tiny", "npu(emulated)"),
    ]
    assert "cpu" not in {d.name for a in result.attempts for d in a.placement.devices}


def test_strict_privacy_removes_every_remote_attempt() -> None:
    r = route(
        device="cpu", privacy="allow_remote", fallback=[{"model": "upstream"}, {"model": "tiny"}]
    )
    result = chain(r, devices(CPU), strict_privacy=True)
    assert [(a.model, a.device) for a in result.attempts] == [("small", "cpu"), ("tiny", "cpu")]
    assert result.removed == (
        "fallback 1 (upstream): remote: ZEST_PRIVACY=strict: no remote engine may be reached",
    )
    assert result.attempts[1].skipped == (
        "upstream on remote: privacy: ZEST_PRIVACY=strict: no remote engine may be reached",
    )


def test_strict_privacy_on_a_remote_only_route_is_a_503_naming_the_policy() -> None:
    r = RouteConfig.model_validate({"kind": "chat", "model": "upstream", "privacy": "allow_remote"})
    with pytest.raises(DeviceUnavailableError) as info:
        chain(r, devices(CPU), strict_privacy=True)
    assert info.value.message == (
        "route 't' runs only on the remote model 'upstream', which is left out: remote: "
        "ZEST_PRIVACY=strict: no remote engine may be reached: add a local model to "
        "routes.t.fallback"
    )
    assert info.value.removed == ("remote: ZEST_PRIVACY=strict: no remote engine may be reached",)


def test_a_local_only_route_never_plans_a_remote_attempt() -> None:
    # Validation refuses such a file; the planner holds the line too.
    r = route(device="cpu", fallback=[{"model": "upstream"}])
    result = chain(r, devices(CPU))
    assert [a.model for a in result.attempts] == ["small"]
    assert result.removed == ("fallback 1 (upstream): remote: route 't' is local_only",)


def test_a_route_tightened_by_a_local_only_caller_names_the_caller() -> None:
    """The target allows remote attempts: it is the caller's local_only that leaves them out,
    and the fix may be the caller's."""
    caller = route(device="cpu")
    r = RouteConfig.model_validate({"kind": "chat", "model": "upstream", "privacy": "allow_remote"})
    with pytest.raises(DeviceUnavailableError) as info:
        chain(tightened(r, caller, "private"), devices(CPU))
    reason = (
        "remote: the request came from route 'private', which is local_only, and keeps that "
        "privacy here (route 't' allows remote attempts; privacy only tightens along a rule)"
    )
    assert info.value.message == (
        f"route 't' runs only on the remote model 'upstream', which is left out: {reason}: add "
        "a local model to routes.t.fallback, or set routes.private.privacy: allow_remote"
    )
    mixed = route(device="cpu", fallback=[{"model": "upstream"}], privacy="allow_remote")
    result = chain(tightened(mixed, caller), devices(CPU))  # a condition's caller, unnamed
    assert result.removed == (
        "fallback 1 (upstream): remote: the request came from a local_only route and keeps "
        "that privacy here (route 't' allows remote attempts; privacy only tightens along a "
        "rule)",
    )
    assert tightened(mixed, mixed, "open") is mixed  # nothing to tighten: the route as it is


def test_a_chain_that_cannot_run_anywhere_names_every_reason() -> None:
    r = route(device="npu", allow_cpu=False, fallback=[{"model": "tiny", "device": "gpu"}])
    with pytest.raises(DeviceUnavailableError) as info:
        chain(r, devices(CPU))
    assert info.value.message == (
        "route 't': no attempt can run here (found: cpu): npu: npu is not available "
        "(found: cpu); fallback 1 (tiny): gpu: gpu is not available (found: cpu): change "
        "routes.t.device or routes.t.fallback"
    )


EXPOSED = """\
version: 1
expose_models: EXPOSE
models:
  small: {engine: llamacpp, source: m.gguf}
  upstream: {engine: remote, base_url: 'http://127.0.0.1:9/v1', model: x}
routes:
  chat: {kind: chat, model: small}
"""


def test_a_remote_model_is_reachable_by_id_only_when_exposed_explicitly() -> None:
    local_only = parse_routes(EXPOSED.replace("EXPOSE", "true"), "routes.yaml")
    assert find_route("small", "chat", local_only).privacy == "local_only"
    with pytest.raises(UnknownTaskError) as refused:
        find_route("upstream", "chat", local_only)
    assert refused.value.message == (
        "model 'upstream' is remote, and expose_models: true lets clients name local models "
        "only: route a task to it (privacy: allow_remote), or set expose_models: all"
    )
    everything = parse_routes(EXPOSED.replace("EXPOSE", "all"), "routes.yaml")
    assert find_route("upstream", "chat", everything).privacy == "allow_remote"


# --- capabilities: an attempt whose engine cannot honour the request is left out ----------------

FULL = Capabilities(logprobs=True, logit_bias=True, structured_output=True, tools=True)
ABLE = {
    "small": ModelTraits("onnx-genai", Capabilities(structured_output=True, tools=True)),
    "tiny": ModelTraits("llamacpp", FULL),
    "upstream": ModelTraits("remote", Capabilities(structured_output=True, tools=True)),
}


CPU_ALL = Device("cpu", frozenset({"llamacpp", "onnx-genai"}), "/proc/cpuinfo")


def capable_chain(r: RouteConfig, needs: Needs) -> Plan:
    found = devices(CPU_ALL)
    return plan_route("t", r, engine="onnx-genai", devices=found, models=ABLE, needs=needs)


def test_an_attempt_that_cannot_give_logprobs_is_left_out_with_its_reason() -> None:
    r = route(device="cpu", fallback=[{"model": "tiny", "device": "cpu"}])
    result = capable_chain(r, Needs(logprobs=True))
    assert [(a.model, a.device) for a in result.attempts] == [("tiny", "cpu")]
    assert result.removed == ("any device: engine 'onnx-genai' cannot honour logprobs",)
    assert result.first.skipped == (
        "small on any device: capability: engine 'onnx-genai' cannot honour logprobs",
    )


def test_the_same_request_without_the_need_keeps_every_attempt() -> None:
    r = route(device="cpu", fallback=[{"model": "tiny", "device": "cpu"}])
    assert [a.model for a in capable_chain(r, Needs()).attempts] == ["small", "tiny"]


def test_no_attempt_able_to_honour_the_request_is_a_400_naming_each() -> None:
    r = route(device="cpu", privacy="allow_remote", fallback=[{"model": "upstream"}])
    with pytest.raises(BadRequestError) as caught:
        capable_chain(r, Needs(logprobs=True, logit_bias=True))
    assert caught.value.param == "logprobs"
    assert caught.value.message == (
        "task 't' has no attempt that can honour logprobs and logit_bias: small (onnx-genai) "
        "cannot honour logprobs and logit_bias; upstream (remote) cannot honour logprobs and "
        "logit_bias: remove logprobs and logit_bias from the request, or route the task to a "
        "model whose engine honours it (docs/policies.md, Engines and their capabilities)"
    )


def test_a_capable_attempt_lost_to_its_device_is_still_a_503() -> None:
    r = route(device="cpu", fallback=[{"model": "tiny", "device": "gpu"}], allow_cpu=False)
    with pytest.raises(DeviceUnavailableError):
        capable_chain(r, Needs(logprobs=True))


def test_needs_name_the_request_fields_that_ask() -> None:
    needs = Needs(structured_output=True, fill_in_middle=True, multiple_choices=True)
    assert needs.missing(Capabilities()) == ("response_format", "suffix", "n")
    assert needs.missing(Capabilities(structured_output=True)) == ("suffix", "n")


def test_image_parts_leave_out_every_text_only_attempt_and_keep_a_remote_one() -> None:
    able = {**ABLE, "upstream": ModelTraits("remote", Capabilities(images=True))}
    r = route(device="cpu", privacy="allow_remote", fallback=[{"model": "upstream"}])
    found = devices(CPU_ALL)
    result = plan_route(
        "t", r, engine="onnx-genai", devices=found, models=able, needs=Needs(images=True)
    )
    assert [(a.model, a.device) for a in result.attempts] == [("upstream", "remote")]
    assert result.removed == ("any device: engine 'onnx-genai' cannot honour images",)


def test_image_parts_sent_to_a_text_only_route_are_a_400_naming_it() -> None:
    with pytest.raises(BadRequestError) as caught:
        capable_chain(route(device="cpu"), Needs(images=True))
    assert caught.value.param == "images"
    assert caught.value.message == (
        "task 't' has no attempt that can honour images: small (onnx-genai) cannot honour "
        "images: remove images from the request, or route the task to a model whose engine "
        "honours it (docs/policies.md, Engines and their capabilities)"
    )


# --- room: a device's reported free memory against what one load of the model holds ------

BIG_GPU = Device("gpu", frozenset({"llamacpp"}), "ggml", memory_free=8_000_000_000)
SMALL_GPU = Device("gpu", frozenset({"llamacpp"}), "ggml", memory_free=100_000_000)


def sized(device_bytes: int | None) -> dict[str, ModelTraits]:
    return {"small": ModelTraits("llamacpp", Capabilities(split=True), device_bytes)}


def test_auto_places_a_model_on_a_gpu_with_room_for_it() -> None:
    result = plan_route(
        "t", route(), engine="llamacpp", devices=devices(CPU, BIG_GPU), models=sized(300_000_000)
    )
    assert [a.device for a in result.attempts] == ["gpu", "cpu"]


def test_auto_passes_over_a_gpu_without_room_and_says_why() -> None:
    result = plan_route(
        "t", route(), engine="llamacpp", devices=devices(CPU, SMALL_GPU), models=sized(300_000_000)
    )
    assert [a.device for a in result.attempts] == ["cpu"]
    assert result.removed == (
        "gpu: 'small' needs about 300 MB (weights and KV cache) and gpu reports 100 MB free",
    )


def test_auto_does_not_split_onto_a_gpu_without_room() -> None:
    result = plan_route(
        "t",
        route(),
        engine="llamacpp",
        devices=devices(CPU, NPU, SMALL_GPU),
        models=sized(300_000_000),
        prompt_tokens=4000,
    )
    assert result.attempts[0].device == "npu(emulated)"


def test_a_pinned_gpu_without_room_follows_the_fallback_policy() -> None:
    pinned = route(device="gpu")
    found = devices(CPU, SMALL_GPU)
    result = plan_route("t", pinned, engine="llamacpp", devices=found, models=sized(300_000_000))
    assert [a.device for a in result.attempts] == ["cpu"]
    assert "gpu reports 100 MB free" in result.attempts[0].reason
    strict = route(device="gpu", allow_cpu=False)
    with pytest.raises(DeviceUnavailableError, match="reports 100 MB free"):
        plan_route("t", strict, engine="llamacpp", devices=found, models=sized(300_000_000))


def test_room_is_not_judged_without_both_figures_nor_on_emulated_devices() -> None:
    unknown_size = plan_route(
        "t", route(), engine="llamacpp", devices=devices(CPU, SMALL_GPU), models=sized(None)
    )
    assert unknown_size.attempts[0].device == "gpu"
    emulated = Device("gpu", frozenset({"llamacpp"}), "emulated", emulated=True, threads=1,
                      memory_free=1)  # fmt: skip
    on_threads = plan_route(
        "t", route(), engine="llamacpp", devices=devices(CPU, emulated), models=sized(10**9)
    )
    assert on_threads.attempts[0].device == "gpu(emulated)"


def test_the_peak_priority_on_a_model_counts_the_clients_that_may_raise_a_route() -> None:
    """A batch keeps lower prompts' steps short while a request at the peak may arrive: a named
    client's offset raises the routes it may call (and only those), within the bound."""
    routes = parse_routes(
        """\
version: 1
models:
  small: {engine: llamacpp, source: m.gguf}
  other: {engine: llamacpp, source: o.gguf}
routes:
  autocomplete: {kind: completion, model: small, priority: 50}
  chat: {kind: chat, model: small, priority: 10}
  summarize: {kind: chat, model: other, fallback: [{model: small}]}
clients:
  editor: {key_env: EDITOR_KEY, tasks: [chat], priority: 60}
  batch: {key_env: BATCH_KEY, tasks: "*", priority: -100}
""",
        "routes.yaml",
    )
    assert peak_priority(routes, "small") == 70  # chat 10 + the editor's 60 over autocomplete
    assert peak_priority(routes, "other") == 0  # summarize: the batch client only lowers it
    assert peak_priority(routes, "none") is None
