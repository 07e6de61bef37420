"""Download the studies' data sets from their canonical public locations, verified, unpacked atomically.

    python -m bench.data.fetch mnist sgemm ag_news cifar10     # into .data/<name>
    python -m bench.data.fetch all --root /data --base-url https://mirror.example/files

Each data set is a :class:`Dataset`: the files to download (with the checksums their publishers give)
and the files it leaves in ``<root>/<name>`` (with checksums where known). The steps, none of which
leaves anything a loader would take until the last one:

1. each file is downloaded into a hidden temporary folder in ``root`` (a file already placed in ``root``
   by hand under its canonical name is used instead: e.g. when Google Drive asks for a confirmation);
2. its size is checked against Content-Length and its checksum against the published one; on a mismatch
   the download is deleted and a one-line :class:`FetchError` names the file, the expected and the
   actual checksum;
3. the wanted members are extracted into a second hidden temporary folder and checked again;
4. that folder is renamed to ``<root>/<name>`` (or, when that folder already exists, its files are
   moved in one by one, each with an atomic rename).

A data set whose files are all present in ``<root>/<name>`` is not downloaded again. ``base_url`` (or
$TRITON_PLAYGROUND_DATA_URL) replaces the hosts: every file is then fetched from
``<base_url>/<file name>`` (a mirror folder holding the files under their canonical names).
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import http.client
import io
import os
import shutil
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
import zipfile
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence

from bench.data.common import DataError, one_line_errors

BASE_URL_ENV = "TRITON_PLAYGROUND_DATA_URL"
CHUNK = 1 << 20


class FetchError(DataError):
    """A download that failed, was cut short, or does not match its published checksum."""


@dataclasses.dataclass(frozen=True)
class Remote:
    """One file to download: its canonical name, where it is published (tried in order), and its
    published checksum as ``"md5:<hex>"`` or ``"sha256:<hex>"`` (None where none is published)."""

    filename: str
    urls: tuple[str, ...]
    checksum: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class Dataset:
    """A data set: the files to download, how to unpack them into a folder, and what that folder holds.

    unpack(downloads, staging): ``downloads`` maps each Remote's filename to its verified local path;
    it writes the data set's files into the empty folder ``staging``.
    files: relative path in ``<root>/<name>`` -> checksum (``"md5:<hex>"`` / ``"sha256:<hex>"``) or None.
    All of them present means the data set is there.
    """

    name: str
    remotes: tuple[Remote, ...]
    unpack: Callable[[Mapping[str, Path], Path], None]
    files: Mapping[str, Optional[str]]


# --------------------------------------------------------------------------------------------------
# Unpacking: only named members are written, flattened into the staging folder (no path from an
# archive is ever used as a path on disk).
# --------------------------------------------------------------------------------------------------
def copy_files(downloads: Mapping[str, Path], staging: Path) -> None:
    """The downloads are the data set's files (MNIST's four .gz files)."""
    for name, path in downloads.items():
        shutil.copyfile(path, staging / name)


def tar_members(folder: str, members: Sequence[str]) -> Callable[[Mapping[str, Path], Path], None]:
    """Extract ``<folder>/<member>`` of the one downloaded tar(.gz) into ``staging/<member>``."""

    def unpack(downloads: Mapping[str, Path], staging: Path) -> None:
        (archive,) = downloads.values()
        wanted = {f"{folder}/{m}": m for m in members}
        found = set()
        try:
            with tarfile.open(archive, "r:*") as tar:
                for info in tar:
                    name = info.name[2:] if info.name.startswith("./") else info.name
                    if name in wanted and info.isfile():
                        with tar.extractfile(info) as src, open(staging / wanted[name], "wb") as dst:
                            shutil.copyfileobj(src, dst, CHUNK)
                        found.add(name)
        except (tarfile.TarError, OSError, EOFError) as e:
            raise FetchError(f"cannot unpack {archive.name}: {e}") from None
        missing = sorted(set(wanted) - found)
        if missing:
            raise FetchError(f"archive {archive.name} lacks {', '.join(missing)}")

    return unpack


def zip_members(members: Sequence[str], required: Sequence[str]) -> Callable[[Mapping[str, Path], Path], None]:
    """Extract the members of the one downloaded zip whose base name is in ``members`` (looking inside
    zips nested in it too) into ``staging/<base name>``; those in ``required`` must be there."""

    def extract(zf: zipfile.ZipFile, staging: Path, found: set) -> None:
        for info in zf.infolist():
            base = info.filename.rsplit("/", 1)[-1]
            if base in members and base not in found and not info.is_dir():
                with zf.open(info) as src, open(staging / base, "wb") as dst:
                    shutil.copyfileobj(src, dst, CHUNK)
                found.add(base)
            elif base.endswith(".zip"):
                with zipfile.ZipFile(io.BytesIO(zf.read(info))) as inner:
                    extract(inner, staging, found)

    def unpack(downloads: Mapping[str, Path], staging: Path) -> None:
        (archive,) = downloads.values()
        found: set = set()
        try:
            with zipfile.ZipFile(archive) as zf:
                extract(zf, staging, found)
        except (zipfile.BadZipFile, OSError, EOFError) as e:
            raise FetchError(f"cannot unpack {archive.name}: {e}") from None
        missing = [m for m in required if m not in found]
        if missing:
            raise FetchError(f"archive {archive.name} lacks {', '.join(missing)}")

    return unpack


# --------------------------------------------------------------------------------------------------
# The canonical sources
# --------------------------------------------------------------------------------------------------
MNIST_FILES = {
    "train-images-idx3-ubyte.gz": "md5:f68b3c2dcbeaaa9fbdd348bbdeb94873",
    "train-labels-idx1-ubyte.gz": "md5:d53e105ee54ea40749a09fcbcd1e9432",
    "t10k-images-idx3-ubyte.gz": "md5:9fb629c4189551a2d022fa330f9573f3",
    "t10k-labels-idx1-ubyte.gz": "md5:ec29112dd5afa0611ce80d1b7f02629c",
}
CIFAR10_BATCHES = {
    "data_batch_1": "md5:c99cafc152244af753f735de768cd75f",
    "data_batch_2": "md5:d4bba439e000b95fd0a9bffe97cbabec",
    "data_batch_3": "md5:54ebc095f3ab1f0389bbae665268c751",
    "data_batch_4": "md5:634d18415352ddfa80567beed471001a",
    "data_batch_5": "md5:482c414d41f54cd18b22e5b47cb7c3cb",
    "test_batch": "md5:40351d587109b95175f43aff81a1287e",
}

DATASETS: dict[str, Dataset] = {
    # The torchvision mirror of LeCun's files (the original host asks for a login now).
    "mnist": Dataset(
        "mnist",
        tuple(Remote(f, (f"https://ossci-datasets.s3.amazonaws.com/mnist/{f}",), c) for f, c in MNIST_FILES.items()),
        copy_files, {f: None for f in MNIST_FILES}),
    # UCI publishes no checksum of the zip; the CSV inside is checked (sha256 of the canonical file).
    "sgemm": Dataset(
        "sgemm",
        (Remote("sgemm+gpu+kernel+performance.zip",
                ("https://archive.ics.uci.edu/static/public/440/sgemm+gpu+kernel+performance.zip",)),),
        zip_members(("sgemm_product.csv", "Readme.txt"), required=("sgemm_product.csv",)),
        {"sgemm_product.csv": "sha256:b545b908c203eaa4d0b78c88e3a7196857efc34da3b6da9be774f017f2b5e960"}),
    # The archive torchtext downloaded (Google Drive); fast.ai's S3 copy has the same md5.
    "ag_news": Dataset(
        "ag_news",
        (Remote("ag_news_csv.tar.gz",
                ("https://drive.google.com/uc?export=download&id=0Bz8a_Dbh9QhbUDNpeUdjb0wxRms",
                 "https://s3.amazonaws.com/fast-ai-nlp/ag_news_csv.tgz"),
                "md5:2c2d85915f1ca34b29e754ce3b403c81"),),
        tar_members("ag_news_csv", ("train.csv", "test.csv", "classes.txt", "readme.txt")),
        {"train.csv": "md5:b1a00f826fdfbd249f79597b59e1dc12", "test.csv": "md5:d52ea96a97a2d943681189a97654912d",
         "classes.txt": None}),
    "cifar10": Dataset(
        "cifar10",
        (Remote("cifar-10-python.tar.gz", ("https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",),
                "md5:c58f30108f718f92721af3b95e74349a"),),
        tar_members("cifar-10-batches-py", (*CIFAR10_BATCHES, "batches.meta")),
        {**CIFAR10_BATCHES, "batches.meta": None}),
}


# --------------------------------------------------------------------------------------------------
# Download, verify, place
# --------------------------------------------------------------------------------------------------
def file_digest(path: Path, algorithm: str) -> str:
    h = hashlib.new(algorithm)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def verify(path: Path, checksum: Optional[str], origin: str = "", *, delete: bool = True) -> None:
    """Raise FetchError (deleting ``path`` if ``delete``) unless its digest is ``checksum``."""
    if checksum is None:
        return
    algorithm, expected = checksum.split(":", 1)
    actual = file_digest(path, algorithm)
    if actual != expected.lower():
        if delete:
            path.unlink(missing_ok=True)
        raise FetchError(f"checksum mismatch for {path.name}{origin}: expected {algorithm} {expected}, "
                         f"got {actual}" + ("; the file was deleted" if delete else ""))


def _progress(label: str, done: int, total: int, final: bool = False) -> None:
    size = f"{done / 1e6:.1f}" + (f"/{total / 1e6:.1f}" if total else "") + " MB"
    if sys.stderr.isatty():
        print(f"\r  {label}: {size}", end="\n" if final else "", file=sys.stderr, flush=True)
    elif final:
        print(f"  {label}: {size}", file=sys.stderr, flush=True)


def download(url: str, dest: Path, label: str) -> None:
    """Stream ``url`` into ``dest``; a short read or an HTML page instead of the file is a FetchError."""
    request = urllib.request.Request(url, headers={"User-Agent": "triton-playground-data-fetch"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response, open(dest, "wb") as out:
            if "text/html" in response.headers.get("Content-Type", ""):
                raise FetchError(f"{url} sent an HTML page instead of {label}")
            total = int(response.headers.get("Content-Length") or 0)
            done, last = 0, 0.0
            while block := response.read(CHUNK):
                out.write(block)
                done += len(block)
                if time.monotonic() - last > 0.5:
                    _progress(label, done, total)
                    last = time.monotonic()
    except http.client.IncompleteRead:
        raise FetchError(f"download of {label} from {url} was cut short") from None
    except (urllib.error.URLError, http.client.HTTPException, OSError) as e:
        reason = e.reason if type(e) is urllib.error.URLError else e
        raise FetchError(f"could not download {label} from {url}: {reason}") from None
    if total and done != total:
        raise FetchError(f"download of {label} from {url} was cut short: {done} of {total} bytes")
    _progress(label, done, total, final=True)


def is_present(dataset: Dataset, target: Path) -> bool:
    return target.is_dir() and all((target / f).is_file() for f in dataset.files)


def _get(remote: Remote, root: Path, workdir: Path, base_url: Optional[str]) -> Path:
    """A verified local copy of ``remote``: one placed by hand in ``root``, else a fresh download."""
    placed = root / remote.filename
    if placed.is_file():
        print(f"  using {placed} (already there)", file=sys.stderr)
        verify(placed, remote.checksum, f" in {root} (placed by hand)", delete=False)
        return placed
    urls = (f"{base_url.rstrip('/')}/{remote.filename}",) if base_url else remote.urls
    failures = []
    for url in urls:
        dest = workdir / remote.filename
        print(f"  {url}", file=sys.stderr)
        try:
            download(url, dest, remote.filename)
            verify(dest, remote.checksum, f" from {url}")
            return dest
        except FetchError as e:  # try the next location; report every failure if none works
            dest.unlink(missing_ok=True)
            failures.append(str(e))
    hint = "" if base_url else f"; or put {remote.filename} into {root} by hand and re-run"
    raise FetchError("; ".join(failures) + hint)


def _place(staging: Path, target: Path) -> None:
    """Move the staged files into ``target``: one rename of the folder, or file by file if it exists."""
    if not target.exists():
        try:
            os.rename(staging, target)
            return
        except OSError:  # another process placed it meanwhile: merge below
            pass
    target.mkdir(parents=True, exist_ok=True)
    for f in staging.iterdir():
        os.replace(f, target / f.name)


def fetch(name: str, root: Path | str = ".data", *, base_url: str | None = None,
          manifest: Mapping[str, Dataset] | None = None) -> Path:
    """Download data set ``name`` (mnist, sgemm, ag_news, cifar10) into ``<root>/<name>`` unless its files
    are there already; returns that folder. ``base_url`` (default: $TRITON_PLAYGROUND_DATA_URL) replaces
    the canonical hosts; ``manifest`` replaces the table of data sets (:data:`DATASETS`)."""
    table = DATASETS if manifest is None else manifest
    if name not in table:
        raise FetchError(f"unknown data set {name!r}; choose from {', '.join(table)}")
    dataset = table[name]
    base_url = base_url or os.environ.get(BASE_URL_ENV) or None
    root = Path(root)
    target = root / name
    if is_present(dataset, target):
        print(f"{name}: already in {target}", file=sys.stderr)
        return target
    print(f"{name}: fetching into {target}", file=sys.stderr)
    root.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(dir=root, prefix=f".{name}.download-"))
    staging = Path(tempfile.mkdtemp(dir=root, prefix=f".{name}.partial-"))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(staging, 0o777 & ~umask)  # it becomes <root>/<name>: an ordinary folder, not mkdtemp's 0700
    try:
        downloads = {r.filename: _get(r, root, workdir, base_url) for r in dataset.remotes}
        dataset.unpack(downloads, staging)
        for rel, checksum in dataset.files.items():
            if not (staging / rel).is_file():
                raise FetchError(f"{name}: unpacking gave no {rel}")
            verify(staging / rel, checksum, f" (unpacked from {', '.join(downloads)})")
        _place(staging, target)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        shutil.rmtree(staging, ignore_errors=True)
    print(f"{name}: ready in {target}", file=sys.stderr)
    return target


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.data.fetch", description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="+", choices=[*DATASETS, "all"], metavar="NAME",
                        help=f"data sets to fetch: {', '.join(DATASETS)} or all")
    parser.add_argument("--root", default=".data", help="folder to put <name>/ in (default .data)")
    parser.add_argument("--base-url", default=None,
                        help=f"fetch every file from BASE_URL/<file name> (a mirror; also ${BASE_URL_ENV})")
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error")
    args = parser.parse_args(argv)
    names = list(DATASETS) if "all" in args.names else list(dict.fromkeys(args.names))
    with one_line_errors(args.debug):
        for name in names:
            fetch(name, args.root, base_url=args.base_url)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
