"""Rendering deploy/kubernetes as `kubectl apply -k` would.

With ``kubectl`` on the PATH the real ``kubectl kustomize`` renders; without
it, a small renderer of the subset the recipe uses (resources, components with
resources, a secretGenerator from files, strategic-merge patches keyed by
``name``, ``images``).
``test_kubernetes.py`` checks that both agree wherever kubectl is installed.
"""

from __future__ import annotations

import base64
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

Document = dict[str, Any]


def kubectl() -> str | None:
    return shutil.which("kubectl")


def render(directory: Path) -> list[Document]:
    """The documents `kubectl kustomize directory` prints (kubectl if installed)."""
    tool = kubectl()
    if tool is None:
        return render_in_python(directory)
    result = subprocess.run(
        [tool, "kustomize", str(directory)], capture_output=True, text=True, timeout=120
    )
    if result.returncode != 0:
        raise RenderError(result.stderr.strip())
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


class RenderError(Exception):
    """kustomize refused the directory (e.g. a generator's file is missing)."""


def render_in_python(directory: Path) -> list[Document]:
    kustomization = load_one(directory / "kustomization.yaml")
    documents: list[Document] = []
    for resource in kustomization.get("resources", []):
        path = directory / resource
        documents += render_in_python(path) if path.is_dir() else _load_all(path)
    for component in kustomization.get("components", []):
        documents = _apply_component(directory / component, documents)
    return [_with_images(doc, kustomization.get("images", [])) for doc in documents]


def _with_images(document: Document, images: list[Document]) -> Document:
    """``images:`` applied to a document's containers: a new name, tag or digest by name."""
    pod = document.get("spec", {}).get("template", {}).get("spec")
    if not images or pod is None:
        return document
    for container in [*pod.get("initContainers", []), *pod.get("containers", [])]:
        name = container["image"].split("@")[0]
        if ":" in name.rsplit("/", 1)[-1]:
            name = name.rsplit(":", 1)[0]
        for image in images:
            if image["name"] != name:
                continue
            new = image.get("newName", name)
            if "digest" in image:
                new += f"@{image['digest']}"
            elif "newTag" in image:
                new += f":{image['newTag']}"
            else:
                new += container["image"][len(name) :]
            container["image"] = new
    return document


def _apply_component(directory: Path, documents: list[Document]) -> list[Document]:
    component = load_one(directory / "kustomization.yaml")
    assert component["kind"] == "Component"
    documents = documents + [
        _secret(directory, gen) for gen in component.get("secretGenerator", [])
    ]
    for resource in component.get("resources", []):
        documents += _load_all(directory / resource)
    for patch in component.get("patches", []):
        documents = [_patched(doc, load_one(directory / patch["path"])) for doc in documents]
    return documents


def _secret(directory: Path, generator: Document) -> Document:
    data = {}
    for name in generator["files"]:
        path = directory / name
        if not path.exists():
            raise RenderError(f"secretGenerator: {path}: no such file or directory")
        data[name] = base64.b64encode(path.read_bytes()).decode()
    labels = generator.get("options", {}).get("labels", {})
    metadata: Document = {"name": generator["name"], **({"labels": labels} if labels else {})}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata,
        "type": "Opaque",
        "data": data,
    }


def _patched(document: Document, patch: Document) -> Document:
    same = (document["kind"], document["metadata"]["name"]) == (
        patch["kind"],
        patch["metadata"]["name"],
    )
    if not same:
        return document
    merged = merge(document, patch)
    assert isinstance(merged, dict)
    return merged


def merge(base: Any, patch: Any) -> Any:
    """Strategic merge for the recipe's patches: maps merge, lists of named items merge by name."""
    if isinstance(base, dict) and isinstance(patch, dict):
        merged = dict(base)
        for key, value in patch.items():
            merged[key] = merge(base[key], value) if key in base else value
        return merged
    if isinstance(base, list) and isinstance(patch, list) and _named(base) and _named(patch):
        by_name = {item["name"]: item for item in base}
        for item in patch:
            name = item["name"]
            by_name[name] = merge(by_name[name], item) if name in by_name else item
        return list(by_name.values())
    return patch


def _named(items: list[Any]) -> bool:
    return bool(items) and all(isinstance(item, dict) and "name" in item for item in items)


def _load_all(path: Path) -> list[Document]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def load_one(path: Path) -> Document:
    (document,) = _load_all(path)
    return document
