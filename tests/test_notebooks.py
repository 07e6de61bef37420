"""Every notebook executes top to bottom, headless, on the committed results; it draws its figures inline,
is committed with its outputs, and keeps devices apart (no CPU-interpreter row in a GPU table)."""
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))
# committed executed, with inline figures from the committed GPU results
SHOWN = [p for p in NOTEBOOKS if p.name.startswith(("01_", "02_"))]


def _outputs(nb, kind):
    """Every output of the notebook's code cells with this MIME type (or stream text, kind='stream')."""
    out = []
    for cell in nb.cells:
        for o in cell.get("outputs", []) if cell.cell_type == "code" else []:
            if kind == "stream" and o.get("output_type") == "stream":
                out.append(o["text"])
            elif kind in o.get("data", {}):
                out.append(o["data"][kind])
    return out


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs(path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    if path in SHOWN:
        assert not any("matplotlib.use(" in c.source for c in nb.cells), "a non-interactive backend draws nothing"
        assert _outputs(nb, "image/png"), "the notebook shows no figure"
        shown = "".join(_outputs(nb, "text/plain") + _outputs(nb, "stream"))
        assert "cpu-interpreter" not in shown


@pytest.mark.parametrize("path", SHOWN, ids=[p.name for p in SHOWN])
def test_notebook_is_committed_with_outputs(path):
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(c.get("execution_count") for c in code), "commit the notebook executed"
    assert _outputs(nb, "image/png") and not any(o.get("output_type") == "error" for c in code for o in c.outputs)


def test_step_time_table_has_a_device_column():
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.read(next(p for p in NOTEBOOKS if p.name.startswith("02")), as_version=4)
    src = "".join(c.source for c in nb.cells if c.cell_type == "code")
    assert 'pivot_table(index=["device", "model", "depth"]' in src
    tables = [t for t in _outputs(nb, "text/plain") if "depth" in t and "backend" in t]
    assert tables and all(t.lstrip().startswith("backend") and "device" in t for t in tables)
