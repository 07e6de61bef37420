"""bench.data.fetch against a local HTTP server (127.0.0.1, port 0) serving tiny generated files in each
data set's real layout: a good download (verified, unpacked, loadable), a download cut short, a checksum
mismatch (of the download and of an unpacked file), a re-run that downloads nothing, one-line CLI errors.
Checksums of the generated files are given through ``fetch(..., manifest=...)``."""
import dataclasses
import gzip
import hashlib
import http.server
import io
import os
import re
import tarfile
import threading
import zipfile
from types import SimpleNamespace

import numpy as np
import pytest

from bench.data import ag_news
from bench.data import cifar10
from bench.data import common
from bench.data import fetch
from bench.data import mnist
from bench.data import sgemm


@pytest.fixture
def server():
    """Serves ``files`` (name -> bytes) at /<name>; names in ``cut`` send half the body after announcing
    the whole length; ``html`` names answer with an HTML page. ``requests`` logs every GET."""
    state = SimpleNamespace(files={}, cut=set(), html=set(), requests=[])

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            name = self.path.lstrip("/")
            state.requests.append(name)
            body = state.files.get(name)
            if body is None:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/html" if name in state.html else "application/octet-stream")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body[: len(body) // 2] if name in state.cut else body)

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    yield state
    httpd.shutdown()
    httpd.server_close()
    thread.join()


# --------------------------------------------------------------------------------------------------
# Tiny files in each data set's published layout: (served files, files the data set folder should hold)
# --------------------------------------------------------------------------------------------------
def _tar(folder, members):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(f"{folder}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _idx_bytes(tmp_path, name, array):
    return mnist.write_idx(tmp_path / name, array, gz=True).read_bytes()


def _mnist(tmp_path, rng):
    files = {}
    for split, n in (("train", 6), ("test", 4)):
        images, labels = mnist.SPLITS[split]
        files[images + ".gz"] = _idx_bytes(tmp_path, images + ".gz", rng.integers(0, 256, (n, 28, 28), dtype=np.uint8))
        files[labels + ".gz"] = _idx_bytes(tmp_path, labels + ".gz", rng.integers(0, 10, n, dtype=np.uint8))
    return files, files


def _sgemm(tmp_path, rng):
    csv = sgemm.write_synthetic(tmp_path / "sgemm_product.csv", rows=30, gz=False).read_bytes()
    inner = io.BytesIO()  # the CSV inside a zip inside the zip: the layout some copies of the archive have
    with zipfile.ZipFile(inner, "w") as z:
        z.writestr("sgemm_product.csv", csv)
        z.writestr("Readme.txt", "SGEMM GPU kernel performance")
    outer = io.BytesIO()
    with zipfile.ZipFile(outer, "w") as z:
        z.writestr("sgemm_product_dataset.zip", inner.getvalue())
    return {"sgemm+gpu+kernel+performance.zip": outer.getvalue()}, {"sgemm_product.csv": csv}


def _ag_news(tmp_path, rng):
    def rows(n):
        return "".join(f'"{1 + i % 4}","Title {i}, with ""quotes""","Text {i}"\n' for i in range(n)).encode()
    contents = {"train.csv": rows(12), "test.csv": rows(8), "classes.txt": b"World\nSports\nBusiness\nSci/Tech\n",
                "readme.txt": b"AG News"}
    return {"ag_news_csv.tar.gz": _tar("ag_news_csv", contents)}, contents


def _cifar10(tmp_path, rng):
    contents = {}
    for name in fetch.CIFAR10_BATCHES:
        n = 3 if name == "test_batch" else 2
        path = cifar10.write_python_batch(tmp_path / name, rng.integers(0, 256, (n, 3, 32, 32), dtype=np.uint8),
                                          rng.integers(0, 10, n))
        contents[name] = path.read_bytes()
    contents["batches.meta"] = b"meta"
    return {"cifar-10-python.tar.gz": _tar("cifar-10-batches-py", contents)}, contents


MAKERS = {"mnist": _mnist, "sgemm": _sgemm, "ag_news": _ag_news, "cifar10": _cifar10}


def _digest(template, data):
    algorithm = (template or "md5:").split(":")[0]
    return f"{algorithm}:{hashlib.new(algorithm, data).hexdigest()}"


def _manifest(name, served, contents):
    """The real entry of ``name`` with the checksums of the generated files."""
    ds = fetch.DATASETS[name]
    remotes = tuple(dataclasses.replace(r, checksum=_digest(r.checksum, served[r.filename])) for r in ds.remotes)
    files = {rel: (_digest(c, contents[rel]) if c else None) for rel, c in ds.files.items()}
    return {name: dataclasses.replace(ds, remotes=remotes, files=files)}


def _setup(name, tmp_path, server):
    (tmp_path / "make").mkdir()
    served, contents = MAKERS[name](tmp_path / "make", np.random.default_rng(0))
    server.files.update(served)
    return served, contents, _manifest(name, served, contents)


def _load(name, folder, contents):
    if name == "mnist":
        return len(mnist.load(folder)[0])
    if name == "sgemm":
        return sgemm.read_csv(folder)[0].shape[0]
    if name == "ag_news":
        md5 = {f: hashlib.md5(contents[f]).hexdigest() for f in ("train.csv", "test.csv")}
        return len(ag_news.load(folder, expected_md5=md5).train)
    return len(cifar10.load(folder).train)


LOADERS = {"mnist": mnist.load, "sgemm": sgemm.load, "ag_news": ag_news.load, "cifar10": cifar10.load}


def _assert_nothing_left(root, name):
    assert not (root / name).exists()
    if root.exists():
        assert list(root.iterdir()) == []  # no temporary folders either
    with pytest.raises(common.DataNotFoundError):
        LOADERS[name](root / name)


ROWS = {"mnist": 6, "sgemm": 30, "ag_news": 12, "cifar10": 10}


@pytest.mark.parametrize("name", list(MAKERS))
def test_download_verify_unpack_then_rerun_downloads_nothing(name, tmp_path, server):
    _, contents, manifest = _setup(name, tmp_path, server)
    root = tmp_path / "data"
    target = fetch.fetch(name, root, base_url=server.url, manifest=manifest)
    assert target == root / name and _load(name, target, contents) == ROWS[name]
    assert sorted(p.name for p in root.iterdir()) == [name]  # the temporary folders are gone
    for rel, data in contents.items():
        if rel in fetch.DATASETS[name].files:
            assert (target / rel).read_bytes() == data
    n = len(server.requests)
    assert n == len(fetch.DATASETS[name].remotes)
    assert fetch.fetch(name, root, base_url=server.url, manifest=manifest) == target
    assert len(server.requests) == n


@pytest.mark.parametrize("name", list(MAKERS))
def test_download_cut_short_leaves_nothing(name, tmp_path, server):
    served, _, manifest = _setup(name, tmp_path, server)
    server.cut.add(sorted(served)[0])
    root = tmp_path / "data"
    with pytest.raises(fetch.FetchError, match=re.escape(sorted(served)[0]) + ".*cut short"):
        fetch.fetch(name, root, base_url=server.url, manifest=manifest)
    _assert_nothing_left(root, name)


def test_checksum_mismatch_names_file_and_both_sums(tmp_path, server):
    served, _, manifest = _setup("cifar10", tmp_path, server)
    good = served["cifar-10-python.tar.gz"]
    bad = good[:-10] + bytes(10)
    server.files["cifar-10-python.tar.gz"] = bad
    root = tmp_path / "data"
    with pytest.raises(fetch.FetchError) as e:
        fetch.fetch("cifar10", root, base_url=server.url, manifest=manifest)
    msg = str(e.value)
    assert "\n" not in msg and "cifar-10-python.tar.gz" in msg
    assert hashlib.md5(good).hexdigest() in msg and hashlib.md5(bad).hexdigest() in msg
    _assert_nothing_left(root, "cifar10")


def test_unpacked_file_checksum_mismatch(tmp_path, server):
    _, _, manifest = _setup("sgemm", tmp_path, server)
    ds = manifest["sgemm"]
    wrong = {"sgemm": dataclasses.replace(ds, files={"sgemm_product.csv": "sha256:" + "0" * 64})}
    root = tmp_path / "data"
    with pytest.raises(fetch.FetchError, match="checksum mismatch for sgemm_product.csv.*expected sha256 0000"):
        fetch.fetch("sgemm", root, base_url=server.url, manifest=wrong)
    _assert_nothing_left(root, "sgemm")


def test_http_error_and_html_page(tmp_path, server):
    _, _, manifest = _setup("ag_news", tmp_path, server)
    root = tmp_path / "data"
    with pytest.raises(fetch.FetchError, match="could not download ag_news_csv.tar.gz .*Not Found"):
        fetch.fetch("ag_news", root, base_url=server.url + "/nowhere", manifest=manifest)
    server.html.add("ag_news_csv.tar.gz")  # what Google Drive sends when it wants a confirmation
    with pytest.raises(fetch.FetchError, match="HTML page instead of ag_news_csv.tar.gz"):
        fetch.fetch("ag_news", root, base_url=server.url, manifest=manifest)
    _assert_nothing_left(root, "ag_news")


def test_file_placed_by_hand_is_used_and_kept(tmp_path, server):
    served, contents, manifest = _setup("ag_news", tmp_path, server)
    root = tmp_path / "data"
    root.mkdir()
    (root / "ag_news_csv.tar.gz").write_bytes(b"not the archive")
    with pytest.raises(fetch.FetchError, match="checksum mismatch for ag_news_csv.tar.gz in .*placed by hand"):
        fetch.fetch("ag_news", root, base_url=server.url, manifest=manifest)
    assert (root / "ag_news_csv.tar.gz").exists() and not (root / "ag_news").exists()
    (root / "ag_news_csv.tar.gz").write_bytes(served["ag_news_csv.tar.gz"])
    target = fetch.fetch("ag_news", root, base_url=server.url, manifest=manifest)
    assert server.requests == [] and _load("ag_news", target, contents) == 12


def test_fills_a_folder_that_holds_part_of_the_data(tmp_path, server, monkeypatch):
    """The shared test-only AG News copy in .data/ag_news: fetch adds train.csv next to it; the base URL
    comes from $TRITON_PLAYGROUND_DATA_URL."""
    _, contents, manifest = _setup("ag_news", tmp_path, server)
    root = tmp_path / "data"
    (root / "ag_news").mkdir(parents=True)
    (root / "ag_news" / "test.csv.gz").write_bytes(gzip.compress(contents["test.csv"]))
    monkeypatch.setenv(fetch.BASE_URL_ENV, server.url)
    target = fetch.fetch("ag_news", root, manifest=manifest)
    assert (target / "train.csv").read_bytes() == contents["train.csv"] and (target / "test.csv.gz").exists()
    assert sorted(p.name for p in root.iterdir()) == ["ag_news"]


def test_cli_prints_one_line_errors(tmp_path, server, capsys):
    """The real table: the tiny files do not match the published MNIST md5s."""
    served, _, _ = _setup("mnist", tmp_path, server)
    args = ["mnist", "--root", str(tmp_path / "data"), "--base-url", server.url]
    with pytest.raises(SystemExit) as e:
        fetch.main(args)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    first = fetch.DATASETS["mnist"].remotes[0].filename
    assert err[-1].startswith(f"error: checksum mismatch for {first} from {server.url}/{first}: expected md5 "
                              f"{fetch.MNIST_FILES[first][4:]}, got {hashlib.md5(served[first]).hexdigest()}")
    assert not any("Traceback" in line for line in err)
    with pytest.raises(fetch.FetchError):
        fetch.main(args + ["--debug"])
    _assert_nothing_left(tmp_path / "data", "mnist")
    with pytest.raises(fetch.FetchError, match="unknown data set 'imagenet'; choose from mnist, sgemm"):
        fetch.fetch("imagenet", tmp_path)


def test_not_found_messages_name_paths_and_fetch_command(tmp_path):
    with pytest.raises(common.DataNotFoundError) as e:
        common.find_dir("cifar10", "CIFAR-10", None, lambda p: False)
    msg = str(e.value)
    for root in common.default_roots("cifar10"):
        assert str(root) in msg
    assert "python -m bench.data.fetch cifar10" in msg and "--download" in msg and "\n" not in msg
    for name, loader in LOADERS.items():
        with pytest.raises(common.DataNotFoundError, match=f"python -m bench.data.fetch {name}"):
            loader(tmp_path / "absent")


def test_published_checksums_match_the_shared_copies(tmp_path, server):
    """The real table, no injected checksums: the canonical MNIST files and the UCI CSV (in a zip as UCI
    serves it) from ../shared/data pass verification and load."""
    shared = common.default_roots("mnist")[1].parent
    if not (shared / "mnist" / "train-images-idx3-ubyte.gz").is_file() or not (shared / "sgemm").is_dir():
        pytest.skip("shared data not available")
    for name in fetch.MNIST_FILES:
        server.files[name] = (shared / "mnist" / name).read_bytes()
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_STORED) as z:
        z.writestr("sgemm_product.csv", gzip.decompress((shared / "sgemm" / "sgemm_product.csv.gz").read_bytes()))
    server.files["sgemm+gpu+kernel+performance.zip"] = archive.getvalue()
    root = tmp_path / "data"
    test = mnist.load_split("test", fetch.fetch("mnist", root, base_url=server.url))
    assert len(test) == 10_000
    assert sgemm.read_csv(fetch.fetch("sgemm", root, base_url=server.url))[0].shape == (sgemm.EXPECTED_ROWS, 14)


def test_next_location_after_a_failure(tmp_path, server):
    """A data set published in two places (AG News: Google Drive, then fast.ai's S3 copy): a failure at the
    first (here a wrong file) moves on to the second; the folder placed is an ordinary one."""
    served, contents, manifest = _setup("ag_news", tmp_path, server)
    server.files["wrong/ag_news_csv.tar.gz"] = b"a different file"
    ds = manifest["ag_news"]
    remote = dataclasses.replace(ds.remotes[0], urls=(f"{server.url}/wrong/ag_news_csv.tar.gz",
                                                      f"{server.url}/ag_news_csv.tar.gz"))
    table = {"ag_news": dataclasses.replace(ds, remotes=(remote,))}
    target = fetch.fetch("ag_news", tmp_path / "data", manifest=table)
    assert server.requests == ["wrong/ag_news_csv.tar.gz", "ag_news_csv.tar.gz"]
    assert _load("ag_news", target, contents) == 12 and target.stat().st_mode & 0o055 == 0o055 & ~_umask()
    server.files["ag_news_csv.tar.gz"] = b"also wrong"
    with pytest.raises(fetch.FetchError, match="mismatch for ag_news_csv.tar.gz from .*wrong.*; checksum mismatch .*; "
                                               "or put ag_news_csv.tar.gz into .* by hand"):
        fetch.fetch("ag_news", tmp_path / "other", manifest=table)


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask
