"""Where an AgentV test's agent works: today's ``environment`` and the earlier ``workspace``,
as our ``workspace`` (and, for a Docker environment, the image and limits of every step).

- ``environment: {type: host, workdir, setup, env}``: the workdir is the template (copied
  fresh for each test); ``setup`` runs once before the first test, in a container, on the
  prepared template, as our ``before_all`` (a workdir that does not exist yet starts empty, as
  AgentV creates it before its setup);
- ``environment: {type: docker, image, resources, workdir}``: every step runs on ``image``
  (under our hardening), ``resources`` become limits; mounts, secrets and GPUs are refused;
- ``workspace: {template, repos, hooks}`` (v4's form, or a file holding it) maps field by
  field (a repository named by a git URL is fetched on the host before the run, into a cache:
  ``gradebox.files.repos``); v4's ``mode`` (``pooled``, ``temp``: every test gets a fresh
  copy here anyway; ``static`` with ``path``: that folder is the template, copied, never
  changed in place);
- v4's ``workspace.docker: {image, timeout, memory, cpus}`` (code graders run in that image):
  graders run on an image of ours, so an image is mapped onto ours by what it is (``python:*``
  onto python, ``node:*`` onto node) and any other refused: nothing is pulled.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from ...core.yamlfile import load_yaml_file, validate
from ...files.repos import refuse_ref, refuse_url
from ...sandbox.defaults import DEFAULT_LIMITS, Limits
from ...sandbox.models import edge_model
from ._base import Where, interpolate_env, is_dir, is_file

__all__ = ["map_environment", "map_workspace", "workspace_docker"]

_HOOK_FIELDS = {"command", "script", "timeout_ms", "timeoutMs", "cwd", "reset"}
_WORKSPACE_FIELDS = {
    "template",
    "repos",
    "hooks",
    "isolation",
    "env",
    "scope",
    "mode",
    "path",
    "docker",
}
_DOCKER_FIELDS = {"image", "timeout", "memory", "cpus"}


def _hook_command(hook: Any, where: Where, loc: tuple[str, ...]) -> Any:
    if hook is None:
        return None
    if isinstance(hook, dict):
        where.unknown(hook, _HOOK_FIELDS, loc, "unknown field of a hook")
        # None for `reset: fast` and the like: every test gets a fresh workspace anyway
        return hook.get("command", hook.get("script"))
    return hook


def _included(value: str, base: Path, env: dict[str, str]) -> tuple[Any, Where, Path]:
    ref = (base / value.strip().removeprefix("file://")).resolve()
    data, lines = load_yaml_file(ref)
    return interpolate_env(data, env), Where(ref, lines), ref.parent


def map_workspace(
    ws: Any, where: Where, loc: tuple[str, ...], base: Path, env: dict[str, str]
) -> dict[str, Any] | None:
    """The earlier form's ``workspace`` (template, repos, hooks) as ours."""
    if ws is None:
        return None
    if isinstance(ws, str) and ws.strip():
        # v4's resolveWorkspaceConfig: a path (file:// or not) to a YAML file holding it
        if not (base / ws.strip().removeprefix("file://")).is_file():
            raise where.error(loc, f"workspace file {ws!r} not found")
        data, inner, folder = _included(ws, base, env)
        return map_workspace(data, inner, (), folder, env)
    if not isinstance(ws, dict):
        raise where.error(loc, "workspace must be a mapping or a workspace file's path")
    where.unknown(ws, _WORKSPACE_FIELDS, loc, "unknown workspace field")
    mode = ws.get("mode")
    if mode is not None and mode not in ("pooled", "temp", "static"):
        raise where.error((*loc, "mode"), "mode is pooled, temp or static")
    out: dict[str, Any] = {}
    if mode == "static":
        if not isinstance(ws.get("path"), str):
            raise where.error((*loc, "path"), "mode: static needs path: the folder to use")
        folder = (base / ws["path"]).resolve()
        if not folder.is_dir():
            raise where.error((*loc, "path"), f"{ws['path']!r} is not a directory")
        out["template"] = str(folder)
    if ws.get("template") is not None:
        out["template"] = str((base / str(ws["template"])).resolve())
    repos = [
        _repo(repo, where, (*loc, "repos", str(i)), base)
        for i, repo in enumerate(ws.get("repos") or [])
    ]
    if repos:
        out["repos"] = repos
    hooks = ws.get("hooks") or {}
    if not isinstance(hooks, dict):
        raise where.error((*loc, "hooks"), "hooks must be a mapping")
    for name, hook in hooks.items():
        if name == "enabled":
            continue
        if name not in ("before_all", "before_each", "after_each", "after_all"):
            raise where.error(
                (*loc, "hooks", name),
                "unknown hook (before_all, before_each, after_each, after_all)",
            )
        command = _hook_command(hook, where, (*loc, "hooks", name))
        if command is not None:
            out[name] = command
    return out


_OUR_IMAGES = {"python": "python", "node": "node"}


def _our_image(image: str) -> str | None:
    """A Docker Hub image an AgentV file names (v4's ``workspace.docker.image``, 5.x's
    ``environment.image``) as ours, by what it is (``python:3.11-slim`` is python), or None:
    nothing is pulled."""
    image = image.strip()
    name = image.rsplit("/", 1)[-1].split(":", 1)[0].split("@", 1)[0]
    official = "/" not in image or image.startswith("docker.io/library/")
    return _OUR_IMAGES.get(name) if official else None


def workspace_docker(
    ws: Any, where: Where, loc: tuple[str, ...], base: Path, env: dict[str, str]
) -> dict[str, Any]:
    """v4's ``workspace.docker`` as the graders' settings (``image``, ``limits``,
    ``timeout``); ``{}`` when there is none."""
    if isinstance(ws, str) and ws.strip():
        path = base / ws.strip().removeprefix("file://")
        if not path.is_file():
            return {}
        ws, where, base = _included(ws, base, env)
        loc = ()
    spec = ws.get("docker") if isinstance(ws, dict) else None
    if spec is None:
        return {}
    at = (*loc, "docker")
    if not isinstance(spec, dict) or not isinstance(spec.get("image"), str):
        raise where.error(at, "docker is {image, timeout?, memory?, cpus?}")
    where.unknown(spec, _DOCKER_FIELDS, at, "not a field of workspace.docker")
    image = spec["image"].strip()
    ours = _our_image(image)
    if ours is None:
        raise where.refuse(
            (*at, "image"),
            f"the workspace image {image!r}",
            "gradebox pulls no image: its graders run on its own images (python, node, "
            "shell); name one of those, or a Dockerfile as {build: ...} in a gradebox suite",
        )
    settings: dict[str, Any] = {"image": ours}
    # v4's memory and cpus cap the container: here a cap below our defaults is kept, and one
    # above them changes nothing (raising a limit is a privilege only --allow grants).
    limits: dict[str, Any] = {}
    size = _docker_bytes(spec.get("memory"), where, (*at, "memory"))
    if size is not None and size < DEFAULT_LIMITS.memory:
        limits["memory"] = size
    cpus = spec.get("cpus")
    if isinstance(cpus, int | float) and not isinstance(cpus, bool) and cpus < DEFAULT_LIMITS.cpus:
        limits["cpus"] = float(cpus)
    if limits:
        settings["limits"] = _checked(limits, where, at)
    timeout = spec.get("timeout")
    if isinstance(timeout, int | float) and not isinstance(timeout, bool) and timeout > 0:
        settings["timeout"] = f"{float(timeout)}s"
    return settings


# AgentV's resolveRepoCloneUrl: a GitHub `org/name` is its https URL.
_GITHUB_SHORTHAND = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")


def _repo(repo: Any, where: Where, loc: tuple[str, ...], base: Path) -> dict[str, Any]:
    """One ``workspace.repos`` entry as ours: AgentV's ``{path, repo, commit | base_commit,
    ancestor}`` (both trees' ``parseRepoConfig``; ``repo`` a clone URL or GitHub's
    ``org/name``), or the earlier ``{path, source: {type: git, url} | {type: local, path},
    checkout: {ref, base_commit}}``. A URL is fetched on the host before the run
    (``gradebox.files.repos``); a local one is copied."""
    if not isinstance(repo, dict) or "path" not in repo:
        raise where.error(loc, "a repo needs a path")
    if repo.get("sparse"):
        raise where.refuse(
            (*loc, "sparse"),
            "a sparse checkout",
            "the whole tree of the commit is checked out; drop sparse",
        )
    source = repo.get("source") if isinstance(repo.get("source"), dict) else {}
    kind = source.get("type") or ("git" if repo.get("repo") else None)
    checkout = repo.get("checkout") if isinstance(repo.get("checkout"), dict) else {}
    ref = (
        repo.get("commit")
        or repo.get("base_commit")
        or checkout.get("base_commit")
        or checkout.get("ref")
    )
    if repo.get("commit") and repo.get("base_commit") and repo["commit"] != repo["base_commit"]:
        raise where.error(
            (*loc, "base_commit"), "commit and base_commit must match when both are set"
        )
    if ref is not None and not isinstance(ref, str):
        ref = str(ref)
    ancestor = repo.get("ancestor")
    if ancestor is not None:
        if not isinstance(ancestor, int) or isinstance(ancestor, bool) or ancestor < 0:
            raise where.error((*loc, "ancestor"), "ancestor is a count of commits back (0 or more)")
        if ancestor:
            ref = f"{ref or 'HEAD'}~{ancestor}"
    if kind == "local":
        local = source.get("path")
        if not isinstance(local, str):
            raise where.error((*loc, "source", "path"), "a local repo names its path")
        path = (base / local).resolve()
        if not is_dir(path):
            raise where.error((*loc, "source", "path"), f"{local!r} is not a directory")
        return {"path": str(repo["path"]), "source": str(path), "ref": ref}
    url = repo.get("repo") if kind == "git" and repo.get("repo") else source.get("url")
    if kind != "git" or not isinstance(url, str) or not url.strip():
        raise where.error(loc, "a repo names repo: a git URL (or source: {type: local, path})")
    url = url.strip()
    if _GITHUB_SHORTHAND.match(url):
        url = f"https://github.com/{url}.git"
    field = (*loc, "repo") if repo.get("repo") else (*loc, "source", "url")
    why = refuse_url(url)
    if why is not None:
        raise where.error(field, f"refused: {why}")
    why = refuse_ref(ref) if ref else None
    if why is not None:
        raise where.error(loc, f"refused: {why}")
    return {"path": str(repo["path"]), "source": url, "ref": ref}


def map_environment(
    spec: Any,
    where: Where,
    loc: tuple[str, ...],
    base: Path,
    env: dict[str, str],
    suite_dir: Path,
) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """``(workspace, step settings)`` of today's ``environment``; the settings (``image``,
    ``limits``) apply to every step of a Docker environment."""
    if spec is None:
        return None, {}
    if isinstance(spec, str) and spec.strip().startswith("file://"):
        data, inner, folder = _included(spec, base, env)
        return map_environment(data, inner, (), folder, env, suite_dir)
    if not isinstance(spec, dict):
        raise where.error(loc, "environment must be a mapping or a file:// reference")
    kind = spec.get("type", "host")
    allowed = {"type", "workdir", "setup", "env", "reset"}
    if kind == "docker":
        allowed |= {"image", "context", "dockerfile", "resources", "mounts", "secrets"}
    elif kind != "host":
        raise where.error((*loc, "type"), f"environment type {kind!r}: host or docker")
    where.unknown(spec, allowed, loc, f"not a field of a {kind} environment")
    if kind == "docker":
        return {}, _docker(spec, where, loc, base)
    out: dict[str, Any] = {}
    workdir = spec.get("workdir")
    folder = (base / str(workdir)).resolve() if workdir is not None else None
    if folder is not None and is_dir(folder):
        out["template"] = str(folder)
    setup = spec.get("setup")
    if setup is not None:
        if not isinstance(setup, dict):
            raise where.error((*loc, "setup"), "setup is {command, cwd, timeout_ms}")
        command = _hook_command(setup, where, (*loc, "setup"))
        if not (isinstance(command, str) and command.strip()) and not (
            isinstance(command, list) and command and all(isinstance(c, str) for c in command)
        ):
            raise where.error(
                (*loc, "setup", "command"),
                'setup.command is a non-empty argv list (["bash", "-lc", "..."] for a shell)',
            )
        cwd = setup.get("cwd")
        here = (folder or base) / cwd if isinstance(cwd, str) else base
        if command is not None:
            out["before_all"] = _relative_to(command, Path(os.path.normpath(here)), suite_dir)
    return out, {}


def _relative_to(command: Any, cwd: Path, suite_dir: Path) -> Any:
    """Arguments that name a file from the setup's cwd, named from the suite's folder (where
    our hooks resolve them); the rest as written."""
    if not isinstance(command, list):
        return command
    out = []
    for arg in command:
        text = str(arg)
        # normpath, not resolve: the setup's own cwd may not exist yet (it makes it).
        candidate = Path(os.path.normpath(cwd / text))
        if not Path(text).is_absolute() and ("/" in text or "." in text) and is_file(candidate):
            out.append(os.path.relpath(candidate, suite_dir))
        else:
            out.append(text)
    return out


def _docker(spec: dict[str, Any], where: Where, loc: tuple[str, ...], base: Path) -> dict[str, Any]:
    for key, why in (
        (
            "mounts",
            "host folders are never mounted into a step; copy them into the workspace template",
        ),
        (
            "secrets",
            "secrets never enter a container; call models through a script grader's model proxy",
        ),
    ):
        if spec.get(key):
            raise where.refuse((*loc, key), f"a Docker environment's {key}", why)
    settings: dict[str, Any] = {}
    if isinstance(spec.get("image"), str):
        # python:* and node:* are our images, as in v4's workspace.docker; another (an
        # image of yours, built or loaded here) as named: nothing is pulled
        settings["image"] = _our_image(spec["image"]) or spec["image"]
    elif isinstance(spec.get("context"), str):
        context = (base / spec["context"]).resolve()
        dockerfile = spec.get("dockerfile")
        settings["image"] = {
            "build": str(context / dockerfile) if isinstance(dockerfile, str) else str(context),
            "context": str(context),
        }
    else:
        raise where.error(loc, "a Docker environment names an image or a build context")
    resources = spec.get("resources") or {}
    if not isinstance(resources, dict):
        raise where.error((*loc, "resources"), "resources is {cpus, memory}")
    if resources.get("gpu"):
        raise where.refuse(
            (*loc, "resources", "gpu"),
            "GPUs in a Docker environment",
            "steps run without devices; drop gpu",
        )
    limits: dict[str, Any] = {}
    size = _docker_bytes(resources.get("memory"), where, (*loc, "resources", "memory"))
    if size is not None:
        limits["memory"] = size
    if isinstance(resources.get("cpus"), int | float):
        limits["cpus"] = float(resources["cpus"])
    if limits:
        settings["limits"] = _checked(limits, where, (*loc, "resources"))
    return settings


def _checked(limits: dict[str, Any], where: Where, at: tuple[str, ...]) -> dict[str, Any]:
    """``limits`` checked as every grader's are (their floors), each at the field of the file it
    came from (``memory``, ``cpus`` under ``at``): checked later, a refusal named a grader's
    ``limits``, which the file never wrote."""
    validate(edge_model(Limits), limits, file=str(where.path), lines=where.lines, prefix=at)
    return limits


def _docker_bytes(value: Any, where: Where, loc: tuple[str, ...]) -> int | None:
    """Docker's sizes: a number of bytes, or with b, k, m or g (powers of 1024); None for
    none given."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        size = value
    else:
        text = str(value).strip().lower().removesuffix("b") or "0"
        scale = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}.get(text[-1], 1)
        number = text[:-1] if text[-1] in "kmg" else text
        try:
            size = int(float(number) * scale)
        except (ValueError, OverflowError):  # OverflowError: inf, 1e400
            size = -1
    if size < 0:  # -1g too: a size, here or in Limits (sandbox.models), is never below 0
        raise where.error(loc, f"{value!r} is not a size (2g)")
    return size
