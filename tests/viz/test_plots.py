"""Figures and the HTML head view: right sizes, not blank, tokens escaped, data intact.

Shapes: L layers, H heads, S source and T target length.
"""

import base64
import json
import re
from html.parser import HTMLParser

import numpy as np
import pytest
import torch

from tests.conftest import REPO
from viz.headview import write_head_view
from viz.plots import attention_grid, attention_heatmap, layer_head_matrix

SOURCE = ["<s>", "a", "<b>", "&amp;", '"q"', "</script>", "</s>"]  # S = 7, every kind of HTML trouble
TARGET = ["<s>", "x", "y'", "</s>"]  # T = 4
TARGET_IN, TARGET_OUT = ["<s>", "x", "y'", "z"], ["x", "y'", "z", "</s>"]  # what the decoder reads/generates


def softmax_maps(*shape: int) -> torch.Tensor:
    return torch.softmax(torch.randn(*shape, generator=torch.Generator().manual_seed(0)), dim=-1)


def render(fig) -> np.ndarray:
    """The (height, width, 3) uint8 pixels of a figure, as SummaryWriter.add_figure draws them (Agg)."""
    fig.canvas.draw()
    return np.asarray(fig.canvas.buffer_rgba())[..., :3]


def assert_image(image: np.ndarray, height: int, width: int) -> None:
    assert image.dtype == np.uint8
    assert image.shape == (height, width, 3)
    assert image.var() > 0  # not blank


def test_heatmap_is_four_inches_at_80_dpi():
    image = render(attention_heatmap(softmax_maps(4, 7), TARGET, SOURCE, "cross 1/1"))
    assert_image(image, 320, 320)


def test_heatmap_grows_for_thirty_tokens():
    tokens = [f"tok{i}" for i in range(30)]
    image = render(attention_heatmap(softmax_maps(30, 30), tokens, tokens))
    assert_image(image, 400, 400)


def test_heatmap_rejects_token_count_mismatch():
    with pytest.raises(ValueError, match="key_tokens has 4 tokens but the map has 7 positions"):
        attention_heatmap(softmax_maps(4, 7), TARGET, TARGET)


def test_attention_grid_of_two_layers_by_three_heads():
    fig = attention_grid([softmax_maps(3, 4, 7), softmax_maps(3, 4, 7)], TARGET, SOURCE, "cross")
    assert len(fig.axes) == 2 * 3 + 1  # panels and the colour bar
    assert [ax.get_title() for ax in fig.axes[:3]] == ["head 1", "head 2", "head 3"]
    assert [fig.axes[i].get_ylabel() for i in (0, 3)] == ["layer 1", "layer 2"]
    image = render(fig)
    assert image.dtype == np.uint8 and image.ndim == 3 and image.shape[2] == 3
    assert image.var() > 0


def test_attention_grid_rejects_layers_of_different_shapes():
    with pytest.raises(ValueError, match="layers differ in shape"):
        attention_grid([softmax_maps(3, 4, 7), softmax_maps(2, 4, 7)], TARGET, SOURCE)


def test_layer_head_matrix_annotates_every_cell():
    values = torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.5, 0.6, 0.7, float("nan")]])  # (L, H) = (2, 4)
    fig = layer_head_matrix(values, "entropy", vmin=0, vmax=1)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.texts] == ["0.10", "0.20", "0.30", "0.40", "0.50", "0.60", "0.70", "n/a"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["1", "2"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "2", "3", "4"]
    assert_image(render(fig), 160, 272)


class _Page(HTMLParser):
    """Collects the shown tokens, the JSON blob and the title of a head view page."""

    def __init__(self):
        super().__init__()
        self.tokens, self.json, self.title, self._in = [], "", "", None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "span" and attrs.get("class") == "tok":
            self._in = "tok"
        elif tag == "script" and attrs.get("type") == "application/json":
            self._in = "json"
        elif tag == "title":
            self._in = "title"

    def handle_endtag(self, tag):
        self._in = None

    def handle_data(self, data):
        if self._in == "tok":
            self.tokens.append(data)
        elif self._in == "json":
            self.json += data
        elif self._in == "title":
            self.title += data


def write_example(path, **kwargs):
    return write_head_view(
        path,
        source_tokens=SOURCE,
        target_in_tokens=TARGET_IN,
        target_out_tokens=TARGET_OUT,
        encoder=[softmax_maps(2, 7, 7)] * 3,  # L = 3, H = 2
        decoder=[softmax_maps(2, 4, 4)] * 3,
        cross=[softmax_maps(2, 4, 7)] * 3,
        title="<demo> & 'x'",
        **kwargs,
    )


def test_head_view_escapes_tokens_and_embeds_nested_json(tmp_path):
    document = write_example(tmp_path / "view.html").read_text(encoding="utf-8")
    assert "&lt;/script&gt;" in document and "&amp;amp;" in document and "&quot;q&quot;" in document
    assert document.count("</script>") == 2  # the JSON blob's and the code's; no token closes a script
    assert "http" not in document.replace('"http://www.w3.org/2000/svg"', "")  # nothing fetched

    page = _Page()
    page.feed(document)
    page.close()
    assert page.title == "<demo> & 'x'"
    assert page.tokens == SOURCE + TARGET_OUT
    data = json.loads(page.json)
    assert (data["source"], data["target"]) == (SOURCE, TARGET_OUT)
    shapes = {kind: (data["kinds"][kind]["queries"], data["kinds"][kind]["keys"]) for kind in data["kinds"]}
    # Rows of decoder and cross maps are the generated tokens, decoder columns the tokens read
    # (analysis.axes).
    assert shapes == {
        "encoder": (SOURCE, SOURCE), "decoder": (TARGET_OUT, TARGET_IN), "cross": (TARGET_OUT, SOURCE)
    }
    cross = data["kinds"]["cross"]["layers"]  # [L][H][T][S]
    assert (len(cross), len(cross[0]), len(cross[0][0]), len(cross[0][0][0])) == (3, 2, 4, 7)
    assert torch.allclose(torch.tensor(cross[0]), softmax_maps(2, 4, 7), atol=5e-5)


def test_head_view_refuses_to_overwrite(tmp_path):
    path = write_example(tmp_path / "view.html")
    with pytest.raises(FileExistsError, match="view.html already exists; pass overwrite=True"):
        write_example(path)
    path.write_text("old")
    write_example(path, overwrite=True)
    assert path.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


def test_head_view_rejects_maps_that_do_not_match_the_tokens(tmp_path):
    with pytest.raises(ValueError, match=r"cross\[0\] must have shape \(H, 4, 7\).*got \(2, 7, 4\)"):
        write_head_view(
            tmp_path / "bad.html",
            source_tokens=SOURCE,
            target_in_tokens=TARGET_IN,
            target_out_tokens=TARGET_OUT,
            encoder=None,
            decoder=None,
            cross=[softmax_maps(2, 7, 4)],
        )
    assert not (tmp_path / "bad.html").exists()


def test_heatmap_and_grid_colours_span_zero_to_one_whatever_the_weights():
    faint = torch.full((4, 7), 0.1)  # a map far from the colour range's ends
    assert attention_heatmap(faint, TARGET, SOURCE).axes[0].images[0].get_clim() == (0.0, 1.0)
    grid = attention_grid([faint.expand(2, 4, 7)], TARGET, SOURCE)
    assert {ax.images[0].get_clim() for ax in grid.axes[:2]} == {(0.0, 1.0)}


def test_head_view_rounds_weights_to_four_decimals(tmp_path):
    cross = torch.tensor([[[0.123456, 0.876544]]])  # (H, T, S) = (1, 1, 2)
    page = _Page()
    page.feed(
        write_head_view(
            tmp_path / "view.html", source_tokens=["a", "b"], target_in_tokens=["<s>"],
            target_out_tokens=["x"], encoder=None, decoder=None,
            cross=[cross],
        ).read_text(encoding="utf-8")
    )
    assert json.loads(page.json)["kinds"]["cross"]["layers"] == [[[[0.1235, 0.8765]]]]


def test_head_view_is_drawn_by_the_tabs_own_modules(tmp_path):
    """The file embeds the ATTENTION tab's lines.js, heatmap.js and style.js byte for byte and imports what it
    draws with from them, so that the head view and the tab cannot drift apart."""
    document = write_example(tmp_path / "view.html").read_text(encoding="utf-8")
    module = r'import \{([\w, ]+)\} from "data:text/javascript;base64,([A-Za-z0-9+/=]+)"'
    embedded = re.findall(module, document)
    static = REPO / "viz" / "tab" / "static"
    assert [(names, base64.b64decode(code)) for names, code in embedded] == [
        ("HEAD_COLOURS, linesView", (static / "lines.js").read_bytes()),
        ("colourBar, drawMatrix", (static / "heatmap.js").read_bytes()),
        ("CSS", (static / "style.js").read_bytes()),
    ]
    assert "linesView({rows: kind.queries, cols: kind.keys, heads" in document  # the tab's lines view draws
    assert "<line" not in document and "createElementNS" not in document  # and no lines view of its own
