"""Saving and loading memory banks: plain JSON and ``.npy`` files, written atomically.

A bank folder holds ``bank.json`` (Core, entries, segment layout), ``vectors.npy`` (float32,
one row per entry in insertion order) and, for large segments, ``graph-<i>-<type>.npy`` (the
serialised HNSW graph as bytes), so a loaded bank searches exactly like the saved one.

``bank.json`` also holds a SHA-256 checksum of every file in the folder (``checksums``): of each
``.npy`` file's bytes, and of ``bank.json``'s own content (its fields other than ``checksums``,
serialised canonically). ``load`` checks each one before using the file, so a flipped byte is an
error naming the damaged file instead of wrong vectors or a wrong memory. Banks saved before
checksums existed have no ``checksums`` field and load unchecked.

A save writes a complete sibling folder first, then swaps it in with two renames
(``membuilder.plumbing.json_files.atomic_dir``, flushed to disk). A crash before the swap leaves
the old folder untouched; a crash between the two renames leaves the old folder under a ``.old``
name, which ``load`` finds and uses. Either way the previous bank survives.

This module reads and writes a bank's parts and never imports ``MemoryBank``: ``MemoryBank.save``
and ``MemoryBank.load`` call it and assemble the bank.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from membuilder.memory.core import Compressor, CoreBlock, CoreEvent
from membuilder.memory.embedding_cache import EmbeddingCache
from membuilder.memory.entry import MEMORY_TYPES, Entry
from membuilder.memory.segment import Segment
from membuilder.plumbing.json_files import atomic_dir, left_aside, load_json_file

FORMAT = "memgym-bank"
VERSION = 1


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def content_checksum(meta: dict) -> str:
    """The checksum of ``bank.json``'s content: every field but ``checksums``, serialised
    canonically (sorted keys, no spaces), so it does not depend on how the file was laid out."""
    content = {k: v for k, v in meta.items() if k != "checksums"}
    text = json.dumps(content, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return _sha256(text.encode("utf-8"))


def save_bank(bank, path: Path) -> Path:
    path = Path(path)
    with atomic_dir(path, fsync=True) as tmp:
        segments = bank.store.segments()
        layout = []
        for i, seg in enumerate(segments):
            graphs = {}
            for mtype, blob in seg.graph_blobs().items():
                name = f"graph-{i}-{mtype}.npy"
                np.save(tmp / name, blob, allow_pickle=False)
                graphs[mtype] = name
            layout.append({"size": len(seg), "graphs": graphs})
        vectors = bank.store.vectors()
        seqs = np.concatenate([s.seqs for s in segments]) if segments else np.zeros(0, np.int64)
        np.save(tmp / "vectors.npy", vectors, allow_pickle=False)
        np.save(tmp / "seqs.npy", seqs, allow_pickle=False)
        meta = {
            "format": FORMAT,
            "version": VERSION,
            "dim": bank.store.dim,
            "embedder": getattr(bank.cache.embedder, "name", None),
            "next_id": bank._next_id,
            "next_seq": bank.store._next_seq,
            "core": {
                "text": bank.core.text,
                "limit": bank.core.limit,
                "compress_target": bank.core.compress_target,
                "events": [e.to_dict() for e in bank.core.events],
            },
            "segments": layout,
            "entries": [e.to_dict() for e in bank.store.entries()],
        }
        # Checksums of the files written above and of this file's content, saved with them in the
        # temporary folder, so they are swapped in together.
        checksums = {child.name: _sha256(child.read_bytes()) for child in sorted(tmp.iterdir())}
        checksums["bank.json"] = content_checksum(meta)
        meta["checksums"] = checksums
        with open(tmp / "bank.json", "w", encoding="utf-8") as f:
            json.dump(meta, f, ensure_ascii=False, indent=1)
    return path


def _recover(path: Path) -> Path:
    """The folder to read: the bank itself, or the old copy a save left mid-swap."""
    if (path / "bank.json").exists():
        return path
    for old in left_aside(path):
        if (old / "bank.json").exists():
            return old
    raise FileNotFoundError(f"no memory bank at {path} (expected {path / 'bank.json'})")


@dataclass
class BankParts:
    """What a bank folder holds, checked and ready to assemble into a ``MemoryBank``."""

    cache: EmbeddingCache  # seeded with every stored entry's vector
    core: CoreBlock
    chain: tuple[Segment, ...]  # the store's sealed segments, oldest first
    next_seq: int
    next_id: int


_GRAPH_NAME = re.compile(r"graph-\d+-[A-Za-z_]+\.npy")


def _load_npy(folder: Path, name: str, checksums: dict | None) -> np.ndarray:
    """``folder/name`` as an array; with ``checksums`` (from ``bank.json``), its bytes are checked first."""
    path = folder / name
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ValueError(f"{path}: missing; the bank is incomplete") from None
    except OSError as exc:
        raise ValueError(f"{path}: not readable ({exc})") from None
    if checksums is not None:
        expected = checksums.get(name)
        if expected is None:
            raise ValueError(f"{path}: bank.json holds no checksum for this file")
        if _sha256(data) != expected:
            raise ValueError(f"{path}: damaged: its SHA-256 does not match the checksum saved in bank.json")
    try:
        return np.load(io.BytesIO(data), allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise ValueError(f"{path}: not a readable .npy array ({exc})") from None


def _field(meta: dict, key: str, kinds: tuple[type, ...], where: str, default=None):
    value = meta.get(key, default)
    if not isinstance(value, kinds) or (bool not in kinds and isinstance(value, bool)):
        names = "/".join(k.__name__ for k in kinds)
        raise ValueError(f"{where}: field '{key}' must be {names}, got {type(value).__name__}")
    return value


def read_bank(path: Path, embedder=None, cache: EmbeddingCache | None = None,
              compressor: Compressor | None = None) -> BankParts:
    """The parts of the bank at ``path``. Every fault is a ``ValueError`` naming the file (and
    field): damaged JSON or ``.npy``, wrong types, vectors that are not finite, repeated ids,
    graph file names that would lead outside the folder."""
    folder = _recover(Path(path))
    meta_file = folder / "bank.json"
    try:
        meta = load_json_file(meta_file)  # depth and size checked before parsing: a bank may come from anyone
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise ValueError(f"{meta_file}: not valid JSON ({type(exc).__name__}: {exc})") from None
    if not isinstance(meta, dict):
        raise ValueError(f"{meta_file}: expected an object, got {type(meta).__name__}")
    if meta.get("format") != FORMAT:
        raise ValueError(f"{meta_file}: field 'format' is {meta.get('format')!r}, expected {FORMAT!r}")
    if meta.get("version") != VERSION:
        raise ValueError(f"{meta_file}: field 'version' is {meta.get('version')!r}; this MemGym reads {VERSION}")
    checksums = meta.get("checksums")  # None: saved before checksums existed
    if checksums is not None:
        checksums = _field(meta, "checksums", (dict,), str(meta_file))
        if not all(isinstance(v, str) for v in checksums.values()):
            raise ValueError(f"{meta_file}: field 'checksums' must map file names to strings")
        if checksums.get("bank.json") != content_checksum(meta):
            raise ValueError(f"{meta_file}: damaged: its content does not match the checksum saved in it "
                             "(after editing it by hand, remove its 'checksums' field)")
    dim = _field(meta, "dim", (int,), str(meta_file))
    if cache is None:
        cache = EmbeddingCache(embedder, dim=dim)
    if cache.dim != dim:
        raise ValueError(f"{meta_file}: bank vectors have dim {dim} but the embedder gives {cache.dim}")

    raw_entries = _field(meta, "entries", (list,), str(meta_file), [])
    entries = []
    for i, d in enumerate(raw_entries):
        if not isinstance(d, dict):
            raise ValueError(f"{meta_file}: entries[{i}]: expected an object, got {type(d).__name__}")
        entries.append(Entry.from_dict(d, where=f"{meta_file}: entries[{i}]"))
    ids = [e.id for e in entries]
    if len(set(ids)) != len(ids):
        repeated = next(x for x in ids if ids.count(x) > 1)
        raise ValueError(f"{meta_file}: field 'entries' repeats the id {repeated!r}")
    vectors = _load_npy(folder, "vectors.npy", checksums)
    seqs = _load_npy(folder, "seqs.npy", checksums)
    if vectors.shape != (len(entries), dim) or seqs.shape != (len(entries),):
        raise ValueError(
            f"{folder}: vectors.npy {vectors.shape} / seqs.npy {seqs.shape} do not match {len(entries)} entries of dim {dim}"
        )
    if vectors.dtype.kind != "f" or seqs.dtype.kind not in "iu":
        raise ValueError(f"{folder}: vectors.npy must hold floats and seqs.npy integers "
                         f"(got {vectors.dtype} and {seqs.dtype})")
    if not np.isfinite(vectors).all():
        row = int(np.flatnonzero(~np.isfinite(vectors).all(axis=1))[0])
        raise ValueError(f"{folder / 'vectors.npy'}: row {row} (entry {ids[row]!r}) is not finite (NaN or inf)")
    if len(np.unique(seqs)) != len(seqs):
        raise ValueError(f"{folder / 'seqs.npy'}: repeats a sequence number")
    segments = _field(meta, "segments", (list,), str(meta_file), [])
    for k, seg_meta in enumerate(segments):
        where = f"{meta_file}: segments[{k}]"
        if not isinstance(seg_meta, dict):
            raise ValueError(f"{where}: expected an object, got {type(seg_meta).__name__}")
        if _field(seg_meta, "size", (int,), where) < 0:
            raise ValueError(f"{where}: field 'size' is negative")
        for t, name in _field(seg_meta, "graphs", (dict,), where, {}).items():
            # Names come from the file: only a plain graph file name inside this folder is read.
            if not isinstance(name, str) or not _GRAPH_NAME.fullmatch(name):
                raise ValueError(f"{where}: graph file name {name!r} for {t!r} is not a graph-<i>-<type>.npy "
                                 "name inside the bank folder")
    sizes = [s["size"] for s in segments]
    if sum(sizes) != len(entries):
        raise ValueError(f"{meta_file}: field 'segments' covers {sum(sizes)} entries, the file holds {len(entries)}")

    # Quoted memories (UPDATE/MERGE) are looked up by text; seeding the cache saves re-embedding them.
    cache.put([e.text for e in entries], vectors)
    core = _field(meta, "core", (dict,), str(meta_file), {}) or {}
    default = CoreBlock()
    where = f"{meta_file}: core"
    events = _field(core, "events", (list,), where, [])
    try:
        core_events = [CoreEvent(**e) for e in events]
    except TypeError as exc:
        raise ValueError(f"{where}: field 'events' holds a malformed event ({exc})") from None
    core_block = CoreBlock(
        text=_field(core, "text", (str,), where, ""),
        limit=_field(core, "limit", (int,), where, default.limit),
        compressor=compressor,
        compress_target=_field(core, "compress_target", (int,), where, default.compress_target),
        events=core_events,
    )
    chain, start = [], 0
    for seg_meta in segments:
        end = start + seg_meta["size"]
        graphs = {t: _load_npy(folder, name, checksums) for t, name in seg_meta.get("graphs", {}).items() if t in MEMORY_TYPES}
        chain.append(Segment(entries[start:end], vectors[start:end], seqs[start:end], graphs))
        start = end
    next_seq = _field(meta, "next_seq", (int,), str(meta_file), len(entries))
    next_id = _field(meta, "next_id", (int,), str(meta_file), len(entries))
    return BankParts(cache, core_block, tuple(chain), next_seq, next_id)
