"""deploy/kubernetes: valid, restricted, monitorable, and consistent with the sidecar.

What `kubectl apply -k` would apply is rendered (``_kustomize``: kubectl's own
kustomize when installed) and checked against kubernetes-validate's bundled
schemas (no network) in strict mode, so a misspelt field fails too; every
container against the "restricted" Pod Security Standard; and the ConfigMap
(plus the opt-in overlay's keys) against the sidecar's own config reader.
"""

from __future__ import annotations

import base64
import json
import re
import shutil
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import kubernetes_validate
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from gateway._config.env import apply_environment
from gateway._config.options import GatewayConfig
from gateway.sidecar import SidecarConfig, SidecarProcess
from tests.deploy._kustomize import (
    Document,
    RenderError,
    kubectl,
    load_one,
    render,
    render_in_python,
)

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "deploy" / "kubernetes"
BASE = RECIPE / "base"
OVERLAY = Path("overlays") / "inbound-auth"
OPERATOR_OVERLAY = Path("overlays") / "prometheus-operator"
COMPONENT = Path("components") / "inbound-auth"
KUBERNETES_VERSION = "1.33.0"  # native sidecars (restartable init containers) and preStop sleep
INBOUND_KEY_ID = "AKIDADSERVERTEST"
INBOUND_SECRET = "a-test-secret-of-the-operators-choosing"
# Pod Security Standards, "restricted" profile: the volume types it allows.
RESTRICTED_VOLUMES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}


def _of_kind(documents: list[Document], kind: str) -> Document:
    (found,) = [doc for doc in documents if doc["kind"] == kind]
    return found


@pytest.fixture(scope="module")
def base() -> list[Document]:
    return render(RECIPE)


@pytest.fixture(scope="module")
def operator(base: list[Document]) -> list[Document]:
    """The base with the Prometheus Operator's objects (PodMonitor, PrometheusRule)."""
    return render(RECIPE / OPERATOR_OVERLAY)


@pytest.fixture(scope="module")
def overlay(tmp_path_factory: pytest.TempPathFactory) -> list[Document]:
    """The opt-in overlay, with the key files an operator creates (in a copy of the recipe)."""
    copy = tmp_path_factory.mktemp("recipe") / "kubernetes"
    shutil.copytree(RECIPE, copy)
    _write_keys(copy / COMPONENT)
    return render(copy / OVERLAY)


def _write_keys(component: Path) -> None:
    (component / "inbound-keys.toml").write_text(f'{INBOUND_KEY_ID} = "{INBOUND_SECRET}"\n')
    (component / "access-key-id").write_text(INBOUND_KEY_ID)
    (component / "secret-access-key").write_text(INBOUND_SECRET)


def _pod(documents: list[Document]) -> Document:
    pod: Document = _of_kind(documents, "Deployment")["spec"]["template"]["spec"]
    return pod


def _containers(pod: Document) -> Iterator[Document]:
    yield from pod.get("initContainers", [])
    yield from pod["containers"]


def _sidecar(documents: list[Document]) -> Document:
    (sidecar,) = _pod(documents)["initContainers"]
    return sidecar


def _port(container: Document, name: str) -> int:
    (port,) = [p["containerPort"] for p in container["ports"] if p["name"] == name]
    return int(port)


# -- the rendered recipe --------------------------------------------------------------


def test_every_rendered_manifest_is_valid_against_the_schema(
    base: list[Document], overlay: list[Document]
) -> None:
    for document in [*base, *overlay]:
        kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)


# -- the Prometheus Operator's objects, and the images ---------------------------------


def test_the_operator_overlay_adds_a_pod_monitor_and_a_rule_to_the_base(
    base: list[Document], operator: list[Document]
) -> None:
    kinds = sorted(doc["kind"] for doc in operator)
    assert kinds == sorted([doc["kind"] for doc in base] + ["PodMonitor", "PrometheusRule"])
    for document in operator:
        if document["kind"] not in {"PodMonitor", "PrometheusRule"}:
            kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("kind", ["PodMonitor", "PrometheusRule"])
def test_the_operator_objects_are_valid_against_the_operators_api(
    operator: list[Document], kind: str
) -> None:
    # The Prometheus Operator's models (generated from its CRDs) read the object back
    # unchanged: no field they do not know, none of the wrong type.
    from cloudcoil.models.prometheus_operator import v1

    document = _of_kind(operator, kind)
    model = getattr(v1, kind).model_validate(document)
    assert model.model_dump(by_alias=True, exclude_none=True, mode="json") == document


def test_the_pod_monitor_scrapes_the_admin_port_of_the_pods_with_the_sidecar(
    operator: list[Document],
) -> None:
    monitor = _of_kind(operator, "PodMonitor")["spec"]
    pod_labels = _of_kind(operator, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert monitor["selector"]["matchLabels"].items() <= pod_labels.items()
    (endpoint,) = monitor["podMetricsEndpoints"]
    assert (endpoint["port"], endpoint["path"]) == ("admin", "/metrics")
    assert "admin" in {p["name"] for p in _sidecar(operator)["ports"]}
    # SageMakerGatewayDown finds the sidecars by this label.
    assert "sagemaker-gateway/sidecar" in monitor["podTargetLabels"]


def test_the_prometheus_rule_holds_the_alert_rules_of_deploy_prometheus(
    operator: list[Document],
) -> None:
    alerts = yaml.safe_load((ROOT / "deploy" / "prometheus" / "alerts.yml").read_text())
    assert _of_kind(operator, "PrometheusRule")["spec"]["groups"] == alerts["groups"]


def test_the_images_come_from_the_kustomization_and_can_be_pinned(tmp_path: Path) -> None:
    images = load_one(BASE / "kustomization.yaml")["images"]
    assert {image["name"] for image in images} == {"sagemaker-gateway", "ad-server"}
    rendered = render(RECIPE)
    assert _sidecar(rendered)["image"] == "sagemaker-gateway:0.1.0"
    # A digest set in images: is what every pod runs.
    copy = tmp_path / "kubernetes"
    shutil.copytree(RECIPE, copy)
    kustomization = load_one(copy / "base" / "kustomization.yaml")
    digest = "sha256:" + "0" * 64
    kustomization["images"][0] = {
        "name": "sagemaker-gateway",
        "newName": "registry.internal/sagemaker-gateway",
        "digest": digest,
    }
    (copy / "base" / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    pinned = _sidecar(render(copy))["image"]
    assert pinned == f"registry.internal/sagemaker-gateway@{digest}"


def test_the_base_lists_every_manifest_beside_it() -> None:
    kustomization = load_one(BASE / "kustomization.yaml")
    files = {path.name for path in BASE.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == files


def test_the_default_apply_deploys_no_secret_and_needs_none(base: list[Document]) -> None:
    assert not [doc for doc in base if doc["kind"] == "Secret"]
    rendered = json.dumps(base)
    assert "secretKeyRef" not in rendered and '"secret":' not in rendered
    assert {doc["kind"] for doc in base} >= {
        "Deployment",
        "ConfigMap",
        "ServiceAccount",
        "Service",
        "PodDisruptionBudget",
        "NetworkPolicy",
    }


def test_the_overlay_refuses_to_render_until_the_operator_creates_the_keys(
    tmp_path: Path,
) -> None:
    copy = tmp_path / "kubernetes"
    shutil.copytree(RECIPE, copy)
    for name in ("inbound-keys.toml", "access-key-id", "secret-access-key"):
        (copy / COMPONENT / name).unlink(missing_ok=True)
    with pytest.raises(RenderError, match=r"inbound-keys\.toml"):
        render(copy / OVERLAY)
    # And the files it asks for are never committed.
    ignored = (RECIPE / COMPONENT / ".gitignore").read_text().split()
    assert {"inbound-keys.toml", "access-key-id", "secret-access-key"} <= set(ignored)


@pytest.mark.skipif(kubectl() is None, reason="compares the Python renderer with kubectl's")
def test_the_python_renderer_agrees_with_kubectl(tmp_path: Path) -> None:
    copy = tmp_path / "kubernetes"
    shutil.copytree(RECIPE, copy)
    _write_keys(copy / COMPONENT)
    for directory in (copy, copy / OVERLAY, copy / OPERATOR_OVERLAY):
        assert _canonical(render(directory)) == _canonical(render_in_python(directory))


def _canonical(documents: list[Document]) -> list[str]:
    """Documents compared as kustomize means them: named items in any order, data unwrapped."""
    # kustomize suffixes a generated Secret's name with a hash of its content.
    text = json.dumps(documents)
    text = re.sub(r"(sagemaker-gateway-inbound)-[a-z0-9]{10}", r"\1", text).replace("\\n", "")
    return sorted(json.dumps(_sorted(doc), sort_keys=True) for doc in json.loads(text))


def _sorted(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _sorted(item) for key, item in value.items()}
    if isinstance(value, list):
        items = [_sorted(item) for item in value]
        if all(isinstance(item, dict) and "name" in item for item in items):
            return sorted(items, key=lambda item: str(item["name"]))
        return items
    return value


# -- Pod Security "restricted" ----------------------------------------------------------


@pytest.mark.parametrize("variant", ["base", "overlay"])
def test_every_container_meets_the_restricted_pod_security_standard(
    variant: str, request: pytest.FixtureRequest
) -> None:
    pod = _pod(request.getfixturevalue(variant))
    pod_context = pod.get("securityContext", {})
    for flag in ("hostNetwork", "hostPID", "hostIPC"):
        assert not pod.get(flag), flag
    for volume in pod.get("volumes", []):
        kinds = set(volume) - {"name"}
        assert kinds <= RESTRICTED_VOLUMES, (volume["name"], kinds)
    for container in _containers(pod):
        problems = _restricted_problems(container.get("securityContext", {}), pod_context)
        assert not problems, f"{container['name']}: {problems}"


def _restricted_problems(context: Document, pod_context: Document) -> list[str]:
    """What the restricted profile refuses in one container (its context over the pod's)."""

    def effective(key: str) -> Any:
        return context.get(key, pod_context.get(key))

    problems = []
    if effective("runAsNonRoot") is not True:
        problems.append("runAsNonRoot must be true")
    if effective("runAsUser") == 0:
        problems.append("runAsUser must not be 0")
    if context.get("allowPrivilegeEscalation") is not False:
        problems.append("allowPrivilegeEscalation must be false")
    if context.get("privileged"):
        problems.append("privileged")
    capabilities = context.get("capabilities", {})
    if "ALL" not in capabilities.get("drop", []):
        problems.append("capabilities must drop ALL")
    if set(capabilities.get("add", [])) - {"NET_BIND_SERVICE"}:
        problems.append("capabilities may add only NET_BIND_SERVICE")
    if (effective("seccompProfile") or {}).get("type") not in {"RuntimeDefault", "Localhost"}:
        problems.append("seccompProfile must be RuntimeDefault")
    return problems


def test_the_restricted_check_catches_what_the_old_ad_server_container_lacked() -> None:
    # The ad-server container once had no securityContext at all.
    pod_context = {"runAsNonRoot": True, "runAsUser": 10001}
    assert set(_restricted_problems({}, pod_context)) == {
        "allowPrivilegeEscalation must be false",
        "capabilities must drop ALL",
        "seccompProfile must be RuntimeDefault",
    }


# -- probes, scraping, startup order --------------------------------------------------------


def _config_map_toml(documents: list[Document]) -> dict[str, Any]:
    return tomllib.loads(_of_kind(documents, "ConfigMap")["data"]["gateway.toml"])


def _admin_port(documents: list[Document]) -> int:
    host, _, port = _config_map_toml(documents)["sidecar"]["admin_listen"].rpartition(":")
    assert host == "0.0.0.0"  # the kubelet and Prometheus come from outside the pod
    return int(port)


def test_probes_and_the_scrape_annotations_point_at_the_admin_port(base: list[Document]) -> None:
    admin = _admin_port(base)
    sidecar = _sidecar(base)
    assert _port(sidecar, "admin") == admin
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert sidecar[probe]["httpGet"]["port"] == "admin", probe
    assert sidecar["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert sidecar["livenessProbe"]["httpGet"]["path"] == "/livez"
    annotations = _of_kind(base, "Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == str(admin)
    assert annotations["prometheus.io/path"] == "/metrics"


def test_the_app_starts_only_once_the_sidecar_is_ready(base: list[Document]) -> None:
    # A native sidecar (restartable init container): the kubelet starts the
    # next containers only after its startupProbe succeeds, so that probe must
    # ask for readiness, as the Kubernetes guide says, not mere liveness.
    sidecar = _sidecar(base)
    assert sidecar["restartPolicy"] == "Always"
    assert sidecar["startupProbe"]["httpGet"]["path"] == "/readyz"
    probe = sidecar["startupProbe"]
    assert probe["periodSeconds"] * probe["failureThreshold"] >= 30
    guide = " ".join((ROOT / "docs" / "how-to" / "kubernetes.md").read_text().split())
    assert "only once its startup probe on `/readyz` succeeds" in guide


def test_the_network_policy_opens_the_admin_port_to_monitoring_only(base: list[Document]) -> None:
    policy = _of_kind(base, "NetworkPolicy")["spec"]
    pod_labels = _of_kind(base, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert policy["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert policy["policyTypes"] == ["Ingress"]
    sources = {
        port["port"]: rule.get("from") for rule in policy["ingress"] for port in rule["ports"]
    }
    assert sources.keys() == {"http", "admin"}  # not the sidecar's traffic port
    (monitoring,) = sources["admin"]
    assert monitoring == {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}
    }
    app_ports = {p["name"] for p in _pod(base)["containers"][0]["ports"]}
    assert "http" in app_ports and "admin" in {p["name"] for p in _sidecar(base)["ports"]}


def test_the_service_and_the_disruption_budget_select_the_pods(base: list[Document]) -> None:
    pod_labels = _of_kind(base, "Deployment")["spec"]["template"]["metadata"]["labels"]
    service = _of_kind(base, "Service")["spec"]
    assert service["selector"].items() <= pod_labels.items()
    app_ports = {p["name"] for p in _pod(base)["containers"][0]["ports"]}
    assert {port["targetPort"] for port in service["ports"]} <= app_ports
    budget = _of_kind(base, "PodDisruptionBudget")["spec"]
    assert budget["selector"]["matchLabels"].items() <= pod_labels.items()
    replicas = _of_kind(base, "Deployment")["spec"]["replicas"]
    assert budget["maxUnavailable"] < replicas


# -- the sidecar's own config ------------------------------------------------------------


def _sidecar_config(
    documents: list[Document], tmp_path: Path
) -> tuple[GatewayConfig, SidecarConfig]:
    """The ConfigMap's file with the sidecar container's environment, as the sidecar reads them.

    A mounted Secret is written where the pod mounts it, under ``tmp_path``.
    """
    mapping = _config_map_toml(documents)
    merged = apply_environment(mapping, _sidecar_environment(documents, tmp_path)).mapping
    gateway_config = GatewayConfig.from_mapping(merged)
    sidecar_section = dict(gateway_config.sections["sidecar"])
    return gateway_config, SidecarConfig.from_mapping(sidecar_section)


def _sidecar_environment(documents: list[Document], tmp_path: Path) -> dict[str, str]:
    """The sidecar container's variables, its mounted Secrets' paths mapped under ``tmp_path``."""
    environment = {item["name"]: item["value"] for item in _sidecar(documents).get("env", [])}
    mounts = _mounted_secrets(documents, tmp_path)
    for name, value in environment.items():
        for mount_path, local in mounts.items():
            if value.startswith(mount_path):
                environment[name] = str(local) + value.removeprefix(mount_path)
    return environment


def _mounted_secrets(documents: list[Document], tmp_path: Path) -> dict[str, Path]:
    secrets = {doc["metadata"]["name"]: doc["data"] for doc in documents if doc["kind"] == "Secret"}
    volumes = {v["name"]: v["secret"] for v in _pod(documents)["volumes"] if "secret" in v}
    mounts: dict[str, Path] = {}
    for mount in _sidecar(documents)["volumeMounts"]:
        if mount["name"] not in volumes:
            continue
        volume = volumes[mount["name"]]
        local = tmp_path / mount["name"]
        local.mkdir()
        for item in volume["items"]:
            content = base64.b64decode(secrets[volume["secretName"]][item["key"]])
            (local / item["path"]).write_bytes(content)
        mounts[mount["mountPath"]] = local
    return mounts


def test_the_config_map_makes_a_valid_loopback_sidecar(
    base: list[Document], tmp_path: Path
) -> None:
    gateway_config, sidecar = _sidecar_config(base, tmp_path)
    host, _, _ = sidecar.listen.rpartition(":")
    assert host == "127.0.0.1"  # the ad server in the same pod only
    assert sidecar.auth.mode == "none"
    sidecar.check_bind(host)  # the sidecar agrees to start without keys on loopback
    app_env = {item["name"]: item.get("value") for item in _pod(base)["containers"][0]["env"]}
    assert app_env["AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME"] == f"http://{sidecar.listen}"
    assert sidecar.workers == int(_sidecar(base)["resources"]["requests"]["cpu"])
    assert gateway_config.region == "us-east-1"


def test_the_overlay_makes_a_sigv4_sidecar_on_the_pod_address(
    overlay: list[Document], tmp_path: Path
) -> None:
    _, sidecar = _sidecar_config(overlay, tmp_path)
    host, _, port = sidecar.listen.rpartition(":")
    assert host == "0.0.0.0"
    assert sidecar.auth.mode == "sigv4"
    assert sidecar.auth.credentials == {INBOUND_KEY_ID: INBOUND_SECRET}
    sidecar.check_bind(host)
    assert _port(_sidecar(overlay), "traffic") == int(port)
    # The ad server signs with the pair the sidecar accepts.
    secret = _of_kind(overlay, "Secret")
    app_env = {item["name"]: item for item in _pod(overlay)["containers"][0]["env"]}
    for variable, key in (
        ("AWS_ACCESS_KEY_ID", "access-key-id"),
        ("AWS_SECRET_ACCESS_KEY", "secret-access-key"),
    ):
        reference = app_env[variable]["valueFrom"]["secretKeyRef"]
        assert reference == {"name": secret["metadata"]["name"], "key": key}
    # Only labelled client pods reach the traffic port.
    (rule,) = [
        rule
        for rule in _of_kind(overlay, "NetworkPolicy")["spec"]["ingress"]
        if rule["ports"][0]["port"] == "traffic"
    ]
    assert rule["from"] == [{"podSelector": {"matchLabels": {"sagemaker-gateway/client": "true"}}}]


def test_drain_and_grace_fit_the_termination_grace_period(
    base: list[Document], tmp_path: Path
) -> None:
    _, sidecar = _sidecar_config(base, tmp_path)
    pod = _pod(base)
    (app,) = pod["containers"]
    pre_stop = app["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert pre_stop == sidecar.drain_s
    needed = pre_stop + sidecar.drain_s + sidecar.shutdown_grace_s
    assert pod["terminationGracePeriodSeconds"] > needed
    # The readiness probe notices the drain well within drain_s.
    probe = _sidecar(base)["readinessProbe"]
    assert probe["periodSeconds"] * probe["failureThreshold"] < sidecar.drain_s


def test_the_sidecar_keeps_a_read_only_root_and_a_cpu_request(base: list[Document]) -> None:
    sidecar = _sidecar(base)
    assert sidecar["securityContext"]["readOnlyRootFilesystem"] is True
    assert any(mount["mountPath"] == "/tmp" for mount in sidecar["volumeMounts"])
    assert "cpu" in sidecar["resources"]["requests"]


# -- scraped as Prometheus would ---------------------------------------------------------

# Prometheus's scrape request: its Accept header, no credentials.
_PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
    "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)


@pytest.mark.parametrize("recipe", ["base", "overlay"])
def test_prometheus_scrapes_the_sidecar_the_recipe_runs(
    recipe: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """The ConfigMap (and the overlay's Secret) as written, its workers included; only the
    addresses are this machine's free loopback ports and the upstream a local dead one."""
    documents: list[Document] = request.getfixturevalue(recipe)
    config_file = tmp_path / "gateway.toml"
    config_file.write_text(_of_kind(documents, "ConfigMap")["data"]["gateway.toml"])
    environment = {
        **_sidecar_environment(documents, tmp_path),
        "SAGEMAKER_GATEWAY__ENDPOINT_URL": "http://127.0.0.1:1",
        "AWS_ACCESS_KEY_ID": "AKIDPODROLE",  # the pod's role, as the SDK would find it
        "AWS_SECRET_ACCESS_KEY": "pod-role-secret",
    }
    sidecar = SidecarProcess.start(config_file, "127.0.0.1:0", [], environment)
    try:
        assert sidecar.admin_url is not None
        scrape = httpx.get(
            f"{sidecar.admin_url}/metrics", headers={"Accept": _PROMETHEUS_ACCEPT}, timeout=10
        )
        traffic_scrape = httpx.get(f"{sidecar.url}/metrics", timeout=10)
    finally:
        sidecar.stop()
    assert scrape.status_code == 200, scrape.text
    families = {family.name for family in text_string_to_metric_families(scrape.text)}
    assert "sagemaker_gateway_sidecar_requests" in families
    # Inbound auth guards the traffic port only: the overlay's keys are needed there.
    assert traffic_scrape.status_code == (403 if recipe == "overlay" else 200)
