"""deploy/kubernetes: valid against the Kubernetes schemas, and consistent with the sidecar.

Schemas are kubernetes-validate's bundled copies (no network): strict mode,
so a misspelt field fails too.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from gateway._config import GatewayConfig
from gateway._config_env import apply_environment
from gateway.sidecar import SidecarConfig

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "deploy" / "kubernetes" / "base"
KUBERNETES_VERSION = "1.33.0"  # native sidecars (restartable init containers) and preStop sleep


def _documents() -> list[dict[str, Any]]:
    documents = []
    for path in sorted(MANIFESTS.glob("*.yaml")):
        documents += [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    return documents


def _of_kind(kind: str) -> dict[str, Any]:
    (found,) = [doc for doc in _documents() if doc["kind"] == kind]
    return found


@pytest.mark.parametrize(
    "document",
    [doc for doc in _documents() if doc["kind"] != "Kustomization"],
    ids=lambda doc: f"{doc['kind']}/{doc['metadata']['name']}",
)
def test_every_manifest_is_valid_against_the_schema(document: dict[str, Any]) -> None:
    kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)


def test_the_kustomization_lists_every_manifest() -> None:
    kustomization = _of_kind("Kustomization")
    files = {path.name for path in MANIFESTS.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == files


def _pod() -> dict[str, Any]:
    pod: dict[str, Any] = _of_kind("Deployment")["spec"]["template"]["spec"]
    return pod


def _sidecar_config(tmp_path: Path) -> tuple[GatewayConfig, SidecarConfig]:
    """The ConfigMap's file, with the Secret's file where the pod mounts it."""
    config_map = _of_kind("ConfigMap")["data"]["gateway.toml"]
    secret = _of_kind("Secret")["stringData"]["inbound-keys.toml"]
    keys = tmp_path / "inbound-keys.toml"
    keys.write_text(secret)
    mounted = "/var/run/secrets/sagemaker-gateway/inbound-keys.toml"
    assert mounted in config_map
    mapping = tomllib.loads(config_map.replace(mounted, str(keys)))
    container = _pod()["initContainers"][0]
    environment = {item["name"]: item["value"] for item in container.get("env", [])}
    gateway_config = GatewayConfig.from_mapping(apply_environment(mapping, environment).mapping)
    return gateway_config, SidecarConfig.from_mapping(gateway_config.sections["sidecar"])


def test_the_sidecar_is_a_native_sidecar_with_probes_on_livez_and_readyz() -> None:
    (sidecar,) = _pod()["initContainers"]
    assert sidecar["restartPolicy"] == "Always"
    assert sidecar["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert sidecar["livenessProbe"]["httpGet"]["path"] == "/livez"
    assert sidecar["securityContext"]["readOnlyRootFilesystem"] is True
    assert any(mount["mountPath"] == "/tmp" for mount in sidecar["volumeMounts"])
    assert "cpu" in sidecar["resources"]["requests"]


def test_the_config_map_and_secret_make_a_valid_sidecar_config(tmp_path: Path) -> None:
    gateway_config, sidecar = _sidecar_config(tmp_path)
    assert sidecar.auth.mode == "sigv4"
    secret = _of_kind("Secret")["stringData"]
    assert sidecar.auth.credentials == {secret["access-key-id"]: secret["secret-access-key"]}
    # Probes reach the port the sidecar listens on, from outside the pod's loopback.
    host, _, port = sidecar.listen.rpartition(":")
    assert host == "0.0.0.0"
    (container,) = _pod()["initContainers"]
    assert container["ports"][0]["containerPort"] == int(port)
    sidecar.check_bind(host)  # inbound auth is on: the sidecar agrees to start
    # workers = the CPU request.
    assert sidecar.workers == int(container["resources"]["requests"]["cpu"])
    assert gateway_config.region == "us-east-1"


def test_drain_and_grace_fit_the_termination_grace_period(tmp_path: Path) -> None:
    _, sidecar = _sidecar_config(tmp_path)
    pod = _pod()
    (app,) = pod["containers"]
    pre_stop = app["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert pre_stop == sidecar.drain_s
    needed = pre_stop + sidecar.drain_s + sidecar.shutdown_grace_s
    assert pod["terminationGracePeriodSeconds"] > needed
    # The readiness probe notices the drain well within drain_s.
    probe = pod["initContainers"][0]["readinessProbe"]
    assert probe["periodSeconds"] * probe["failureThreshold"] < sidecar.drain_s
