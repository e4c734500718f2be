"""Data sets: a registry of names, verified downloads, one cache directory.

A registered data set has one or more *files*, each with URL(s) and a hash.
:func:`fetch` returns the local path of a file, downloading it (streamed, with a
progress bar, retried) into :func:`attention_book.core.config.data_dir` when it is
missing, and re-downloading it when the cached copy fails its hash check. Offline, it
raises :class:`DataUnavailableError` that says what to download and where to
put it.

Some data sets also name *local files*: already-extracted files (for example
``fra-eng/fra.txt``) that, when placed in the data directory by hand, are used
as they are. :func:`find_local` looks for those first.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from ..core.checks import check_int
from ..core.config import DATA_ENV, data_dir

__all__ = [
    "DataFile",
    "Dataset",
    "DATA_HUB",
    "DataUnavailableError",
    "register",
    "fetch",
    "find_local",
    "file_hash",
    "extract_member",
    "read_utf8",
]

D2L_DATA = "http://d2l-data.s3-accelerate.amazonaws.com/"
FASHION_MNIST = "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"


class DataUnavailableError(RuntimeError):
    """A data file is neither cached nor downloadable right now."""


@dataclass(frozen=True)
class DataFile:
    """One file of a data set: where to get it and how to check it.

    ``known_hash`` is ``'<algorithm>:<hex digest>'`` (``sha1``, ``sha256``, ``md5``).
    """

    fname: str
    urls: tuple[str, ...]
    known_hash: str

    def __post_init__(self):
        algo, _, digest = self.known_hash.partition(":")
        if algo not in ("sha1", "sha256", "md5") or not digest:
            raise ValueError(f"known_hash must look like 'sha1:<hex>', got {self.known_hash!r}")
        if not self.urls:
            raise ValueError(f"{self.fname}: at least one URL is needed")


@dataclass(frozen=True)
class Dataset:
    name: str
    files: tuple[DataFile, ...]
    description: str = ""
    local_files: tuple[str, ...] = field(default_factory=tuple)
    licence: str = ""


DATA_HUB: dict[str, Dataset] = {}


def register(dataset: Dataset) -> Dataset:
    """Add (or replace) a data set in the registry."""
    DATA_HUB[dataset.name] = dataset
    return dataset


def _lookup(name: str) -> Dataset:
    if name not in DATA_HUB:
        known = ", ".join(sorted(DATA_HUB)) or "(none)"
        raise KeyError(f"no data set named {name!r} is registered; known data sets: {known}")
    return DATA_HUB[name]


def file_hash(path: str | os.PathLike, algorithm: str = "sha1") -> str:
    """Hex digest of a file, read in chunks."""
    h = hashlib.new(algorithm)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _hash_ok(path: Path, known_hash: str) -> bool:
    algo, _, digest = known_hash.partition(":")
    return file_hash(path, algo) == digest.lower()


def find_local(name: str, member: str | None = None) -> Path | None:
    """A hand-placed local file of data set ``name`` in the data directory, if any.

    ``member`` picks one of the data set's ``local_files``; by default the first.
    """
    ds = _lookup(name)
    if not ds.local_files:
        return None
    wanted = member if member is not None else ds.local_files[0]
    if wanted not in ds.local_files:
        raise ValueError(f"{wanted!r} is not a local file of {name!r}; it has {list(ds.local_files)}")
    path = data_dir() / wanted
    return path if path.is_file() else None


def fetch(name: str, fname: str | None = None, progress: bool = True, retries: int = 2) -> Path:
    """Local path of a verified file of the registered data set ``name``.

    A cached file whose hash matches is used as is. A cached file whose hash does
    not match is downloaded again (and never used silently). Without a network,
    :class:`DataUnavailableError` explains which file to fetch and where to put it.
    """
    retries = check_int("retries", retries, minimum=0)
    ds = _lookup(name)
    if fname is None:
        if len(ds.files) != 1:
            raise ValueError(f"{name!r} has several files; pass fname= one of {[f.fname for f in ds.files]}")
        entry = ds.files[0]
    else:
        matches = [f for f in ds.files if f.fname == fname]
        if not matches:
            raise ValueError(f"{name!r} has no file {fname!r}; it has {[f.fname for f in ds.files]}")
        entry = matches[0]
    folder = data_dir()
    target = folder / entry.fname
    if target.is_file():
        if _hash_ok(target, entry.known_hash):
            return target
        corrupt = f"the cached file {target} does not match its {entry.known_hash.split(':')[0]} hash"
    else:
        corrupt = ""
    return _download(entry, folder, progress=progress, retries=retries, why=corrupt)


def _download(entry: DataFile, folder: Path, progress: bool, retries: int, why: str) -> Path:
    import pooch

    target = folder / entry.fname
    try:
        folder.mkdir(parents=True, exist_ok=True)
        writable = os.access(folder, os.W_OK)
    except OSError:
        writable = False
    if not writable:
        raise DataUnavailableError(
            (why + "; " if why else "")
            + f"cannot download {entry.fname}: the data directory {folder} is not writable. "
            f"Set {DATA_ENV} to a writable directory, or place a verified copy there."
        )
    errors = []
    for url in entry.urls:
        try:
            downloader = pooch.HTTPDownloader(progressbar=progress, timeout=60)
            fetcher = pooch.create(
                path=folder,
                base_url="",
                registry={entry.fname: entry.known_hash},
                urls={entry.fname: url},
                retry_if_failed=retries,
            )
            return Path(fetcher.fetch(entry.fname, downloader=downloader))
        except Exception as err:  # network errors, hash mismatch after download, …
            errors.append(f"{url}: {type(err).__name__}: {err}")
    detail = "\n  ".join(errors)
    raise DataUnavailableError(
        (why + ", and " if why else "")
        + f"{entry.fname} could not be downloaded.\n  {detail}\n"
        f"Download it yourself from {entry.urls[0]} (expected {entry.known_hash}) and put it at {target} "
        f"(or point {DATA_ENV} at a directory that has it)."
    )


def extract_member(archive: Path, member: str, dest: Path) -> Path:
    """Extract one member of a zip archive to ``dest`` (once) and return its path.

    Safe when several processes do it at once (say, three notebooks started
    together on a fresh data directory): each writes its own temporary file
    beside ``dest`` and moves it into place with one atomic :func:`os.replace`,
    so a reader sees either no file or the whole file, never a partial one, and
    no process's rename can fail because another one already moved "its" file.
    """
    dest = Path(dest)
    if dest.is_file():
        return dest
    with zipfile.ZipFile(archive) as zf:
        try:
            data = zf.read(member)
        except KeyError:
            raise DataUnavailableError(f"{archive} has no member {member!r}; the archive may be corrupt") from None
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=dest.name + ".", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, dest)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return dest


def read_utf8(path: str | os.PathLike) -> str:
    """The text of a UTF-8 file, without a leading byte-order mark.

    A file that is not UTF-8 raises ``ValueError`` naming the file and the
    offending byte position (Python's own error names neither the file nor
    what to do).
    """
    try:
        return Path(path).read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as err:
        raise ValueError(
            f"{path} is not UTF-8 text (byte {err.start}: {err.object[err.start:err.start + 4]!r} "
            f"cannot be decoded: {err.reason}); save it as UTF-8 or replace it with a fresh copy"
        ) from err


# --- the book's data sets -------------------------------------------------------------

register(Dataset(
    name="fra-eng",
    files=(DataFile("fra-eng.zip", (D2L_DATA + "fra-eng.zip",), "sha1:94646ad1522d915e7b0f9296181140edcf86a4f5"),),
    description="English–French sentence pairs (Tatoeba, via manythings.org/anki), as packaged by d2l.",
    local_files=("fra-eng/fra.txt",),
    licence="CC-BY 2.0 (France); credit the Tatoeba project",
))

register(Dataset(
    name="time-machine",
    files=(DataFile("timemachine.txt", (D2L_DATA + "timemachine.txt",), "sha1:090b5e7e70c295757f55df93cb0a180b9691891a"),),
    description="H. G. Wells, The Time Machine (Project Gutenberg text, as packaged by d2l).",
    licence="public domain",
))
