"""The ATTENTION tab in a real browser: headless Chromium drives TensorBoard, started by the project's
launcher on a run trained inside the tests, and every check compares what the page shows with the backend's
JSON.

Needs chromium, chromedriver and selenium; skipped without them (``apt-get install chromium chromium-driver``,
``pip install selenium``). The fixtures and helpers are in tests/helpers/browser.py; the DOM hooks used here
are listed at the top of ``viz/tab/static/index.js``.
"""



from tests.helpers.browser import (
    LINE_MIN_WEIGHT,
    answers_rewritten,
    board,
    cells,
    css,
    driver,
    highlighted,
    open_tab,
    page_errors,
    pytestmark,
    tab,
    tokens,
    wait,
)

__all__ = ["board", "driver", "pytestmark", "tab"]  # the browser tests' fixtures and marks, used here


def test_grid_shows_every_head_and_the_detail_the_api_tokens(tab):
    driver, api, run = tab
    step = run["steps"][-1]
    data = api.get("attention", run=run["run"], step=step, sentence=0)
    for kind in ("cross", "encoder", "decoder"):
        css(driver, f"#kind-{kind}")[0].click()
        wait(driver, lambda k=kind: css(driver, f'#detail[data-kind="{k}"]'),
             f"the detail never showed {kind}")
        layers, heads = run["num_layers"][kind], run["num_heads"]
        assert cells(driver) == {(layer, head) for layer in range(layers) for head in range(heads)}
        css(driver, f'.head-cell[data-layer="{layers - 1}"][data-head="{heads - 1}"]')[0].click()
        wait(driver,
             lambda shown=f'#detail[data-layer="{layers - 1}"][data-head="{heads - 1}"]': css(driver, shown),
             "clicking a head did not open it")
        assert tokens(driver, "row") == data["kinds"][kind]["rows"]
        assert tokens(driver, "col") == data["kinds"][kind]["cols"]
        assert css(driver, "#detail")[0].get_attribute("data-step") == str(step)


def test_hovering_a_token_lights_its_row_and_column_and_its_lines(tab):
    from selenium.webdriver.common.action_chains import ActionChains

    driver, api, run = tab
    step = run["steps"][-1]
    data = api.get("attention", run=run["run"], step=step, sentence=0)
    hover = ActionChains(driver)
    css(driver, "#kind-encoder")[0].click()
    wait(driver, lambda: css(driver, '#detail[data-kind="encoder"]'), "the encoder never showed")
    i = 1
    hover.move_to_element(css(driver, f'#detail .token[data-axis="row"][data-index="{i}"]')[0]).perform()
    expected = {("token", "row", i), ("token", "col", i), ("band", "row", i), ("band", "col", i)}
    wait(driver, lambda: highlighted(driver) == expected, f"hovering row token {i} lit {highlighted(driver)}")
    lit_lines = {(e.get_attribute("data-side"), e.get_attribute("data-index"))
                 for e in css(driver, "#lines-view .lv-token.highlight")}
    assert lit_lines == {("query", str(i)), ("key", str(i))}
    hover.move_to_element(css(driver, "#grid")[0]).perform()
    wait(driver, lambda: not highlighted(driver), "leaving the token did not clear the highlight")

    # Decoder: the token generated at row i is read at column i + 1, and that is the column that lights up.
    css(driver, "#kind-decoder")[0].click()
    wait(driver, lambda: css(driver, '#detail[data-kind="decoder"]'), "the decoder never showed")
    hover.move_to_element(css(driver, f'#detail .token[data-axis="row"][data-index="{i}"]')[0]).perform()
    expected = {("token", "row", i), ("token", "col", i + 1), ("band", "row", i), ("band", "col", i + 1)}
    wait(driver, lambda: highlighted(driver) == expected,
         f"hovering decoder row {i} lit {highlighted(driver)}")
    rows, cols = data["kinds"]["decoder"]["rows"], data["kinds"]["decoder"]["cols"]
    assert cols[i + 1] == rows[i]
    assert {t.get_attribute("textContent") for t in css(driver, "#detail .token.highlight")} == {rows[i]}

    # Cross-attention: a target word lights only its row; in the lines view a query shows only its own lines.
    css(driver, "#kind-cross")[0].click()
    wait(driver, lambda: css(driver, '#detail[data-kind="cross"]'), "the cross-attention never showed")
    hover.move_to_element(css(driver, f'#detail .token[data-axis="row"][data-index="{i}"]')[0]).perform()
    wait(driver, lambda: highlighted(driver) == {("token", "row", i), ("band", "row", i)},
         f"hovering a cross row token lit {highlighted(driver)}")
    hover.move_to_element(
        css(driver, f'#lines-view .lv-token[data-side="query"][data-index="{i}"]')[0]
    ).perform()
    wait(driver, lambda: highlighted(driver) == {("token", "row", i), ("band", "row", i)},
         "hovering a query of the lines view did not light its matrix row")
    weights = data["kinds"]["cross"]["weights"][0][0][i]
    assert len(css(driver, "#lines-view line")) == sum(w >= LINE_MIN_WEIGHT for w in weights)


def open_map(driver) -> tuple[int, int | None]:
    """The layer and head (None for a layer's own map) of the enlarged map; it opens on the best-aligned."""
    detail = css(driver, "#detail")[0]
    head = detail.get_attribute("data-head")
    return int(detail.get_attribute("data-layer")), None if head == "" else int(head)


def test_step_slider_shows_the_chosen_step_and_its_weights(tab):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    driver, api, run = tab
    first = run["steps"][0]
    slider = css(driver, "#step-slider")[0]
    slider.send_keys(Keys.HOME)
    wait(driver, lambda: css(driver, "#detail")[0].get_attribute("data-step") == str(first),
         "the slider did not change the shown step")
    assert f"step {first}" in css(driver, "#step-label")[0].text
    # The value under the mouse is the API's weight at that step (cross, the open head, the middle cell).
    layer, head = open_map(driver)
    answer = api.get("attention", run=run["run"], step=first, sentence=0)
    weights = answer["kinds"]["cross"]["weights"][layer][head]
    canvas = css(driver, "#detail .matrix canvas")[0]
    rows, cols = len(weights), len(weights[0])
    i, j = rows // 2, cols // 2
    box = canvas.rect
    x = (j + 0.5) * box["width"] / cols - box["width"] / 2
    y = (i + 0.5) * box["height"] / rows - box["height"] / 2
    ActionChains(driver).move_to_element_with_offset(canvas, round(x), round(y)).perform()
    tooltip = wait(driver, lambda: css(driver, ".tooltip")[0].text, "no tooltip over the map")
    assert tooltip.split()[0] == f"{weights[i][j]:.4f}"


def test_statistics_table_sorts_and_marks_the_best_aligned_head(tab):
    driver, api, run = tab
    step = run["statistics_steps"][-1]
    stats = api.get("statistics", run=run["run"], step=step)["kinds"]["cross"]

    def order():
        return [(int(r.get_attribute("data-layer")), int(r.get_attribute("data-head")))
                for r in css(driver, "#stats-table tbody tr")]

    def column(name):
        return [stats[name][layer][head] for layer, head in order()]

    header = {th.get_attribute("data-key") for th in css(driver, "#stats-table th")}
    # Beside the head statistics, the AER of every explanation method with heads (./explanations).
    scores = api.get("explanations", run=run["run"], step=run["explanation_steps"][-1])["methods"]
    methods = {f"aer:{name}" for name, m in scores.items() if m["head_aer"]}
    assert header == {"layer", "head", *stats, *methods}
    # Cross-attention with gold alignments: agreement, best first, and the best head marked in table and grid.
    assert css(driver, '#stats-table th[data-key="agreement"]')[0].get_attribute("aria-sort") == "descending"
    agreement = column("agreement")
    assert agreement == sorted(agreement, reverse=True)
    best = order()[0]
    assert stats["agreement"][best[0]][best[1]] == max(max(row) for row in stats["agreement"])
    assert "best" in css(driver, "#stats-table tbody tr")[0].get_attribute("class")
    assert cells(driver, ".best") == {best}
    for direction in ("ascending", "descending"):
        css(driver, '#stats-table th[data-key="entropy"]')[0].click()
        wait(driver, lambda d=direction: css(driver, '#stats-table th[data-key="entropy"]')[0]
             .get_attribute("aria-sort") == d, f"entropy was not sorted {direction}")
        entropy = column("entropy")
        assert entropy == sorted(entropy, reverse=direction == "descending")
    layer, head = order()[-1]
    css(driver, "#stats-table tbody tr")[-1].click()
    wait(driver, lambda: css(driver, f'#detail[data-layer="{layer}"][data-head="{head}"]'),
         "clicking a row did not open its head")


def test_gold_links_and_comparing_two_steps(tab):
    from selenium.webdriver.support.ui import Select

    driver, api, run = tab
    step = run["steps"][-1]
    gold = api.get("attention", run=run["run"], step=step, sentence=0)["gold"]
    matrix = css(driver, "#detail .matrix")[0]
    assert int(matrix.get_attribute("data-gold-cells")) == len(gold) > 0
    css(driver, "#gold-toggle")[0].click()
    wait(driver, lambda: css(driver, "#detail .matrix")[0].get_attribute("data-gold-cells") == "0",
         "the gold toggle did not hide the gold links")
    Select(css(driver, "#compare-step")[0]).select_by_value(str(run["steps"][0]))
    wait(driver, lambda: len(css(driver, "#detail .matrix")) == 2, "comparing did not show a second map")
    assert f"step {run['steps'][0]}" in css(driver, "#detail .panel-cap")[1].text


def test_your_sentence_is_translated_like_the_api_and_shows_every_head(tab):
    from selenium.webdriver.common.keys import Keys

    driver, api, run = tab
    text = run["sentences"][0]["source"]
    box = css(driver, "#translate-input")[0]
    box.send_keys(text, Keys.ENTER)
    assert not css(driver, "#translate-button")[0].is_enabled()  # disabled while the request runs
    # The first translation loads the checkpoint (torch, Lightning) in TensorBoard's process: seconds, more on
    # a busy machine.
    wait(driver, lambda: css(driver, "#translation"), "no translation appeared", seconds=90)
    wait(driver, lambda: css(driver, "#translate-button")[0].is_enabled(), "the button stayed disabled")
    # The page asks for the run's validation beam unless another is chosen, and says which it used.
    assert css(driver, "#translate-beam")[0].get_attribute("value") == "run"
    expected = api.get("translate", run=run["run"], text=text, beam="run")
    assert css(driver, "#translation")[0].text == expected["translation"]
    assert f"beam {expected['beam']}, the run's validation beam" in css(driver, ".banner")[0].text
    assert css(driver, "#detail")[0].get_attribute("data-mode") == "custom"
    assert not css(driver, "#step-slider")[0].is_enabled()
    layers = run["num_layers"]["cross"]
    assert cells(driver) == {(layer, head) for layer in range(layers) for head in range(run["num_heads"])}
    assert tokens(driver, "row") == expected["kinds"]["cross"]["rows"]
    assert tokens(driver, "col") == expected["kinds"]["cross"]["cols"]
    # The backend's error line is shown as it is.
    box.clear()
    box.send_keys("a" * 201, Keys.ENTER)
    error = api.get("translate", run=run["run"], text="a" * 201, beam=1)
    assert error["status"] == 400
    wait(driver, lambda: error["error"] in css(driver, "#message")[0].text, "the API's error was not shown")
    css(driver, "#back-to-probes")[0].click()
    wait(driver, lambda: css(driver, "#detail")[0].get_attribute("data-mode") == "probe",
         "going back did not show the probe sentences")
    assert css(driver, "#step-slider")[0].is_enabled()


def test_head_view_file_draws_with_the_tabs_lines_and_heatmaps(driver, tmp_path):
    """The standalone head view (viz/headview.py), opened from disk: the tab's lines.js draws one line group
    per chosen head, heatmap.js one map per head, and hovering a query leaves only that query's lines."""
    import torch
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.support.ui import Select

    from viz.headview import write_head_view

    cross = torch.softmax(torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(0)) * 3, dim=-1)
    path = write_head_view(  # H = 2, T = 3, S = 4
        tmp_path / "view.html", source_tokens=["a", "b", "c", "</s>"], target_in_tokens=["<s>", "x", "y"],
        target_out_tokens=["x", "y", "</s>"], encoder=None, decoder=None, cross=[cross],
    )
    driver.switch_to.default_content()
    driver.get(path.as_uri())
    wait(driver, lambda: len(css(driver, "#view .lines-svg g[data-head]")) == 2, "the lines view never drew")
    for h in range(2):
        lines = css(driver, f'#view g[data-head="head {h + 1}"] line')
        assert len(lines) == int((cross[h] >= LINE_MIN_WEIGHT).sum())
    assert len(css(driver, "#maps canvas")) == 2
    assert [o.text for o in Select(css(driver, "#kind")[0]).options] == ["cross-attention"]

    i = 1
    query = css(driver, f'#view .lv-token[data-side="query"][data-index="{i}"]')[0]
    ActionChains(driver).move_to_element(query).perform()
    expected = int((cross[:, i] >= LINE_MIN_WEIGHT).sum())
    wait(driver, lambda: len(css(driver, "#view line")) == expected, "hovering a query kept other lines")
    css(driver, "#heads input")[0].click()  # head 1 off
    wait(driver, lambda: len(css(driver, "#maps canvas")) == 1, "unticking a head kept its map")
    assert [g.get_attribute("data-head") for g in css(driver, "#view g[data-head]")] == ["head 2"]


# -- the explanation lab -------------------------------------------------------------------------------------


def choose_method(driver, name: str) -> None:
    from selenium.webdriver.support.ui import Select

    Select(css(driver, "#method-select")[0]).select_by_value(name)
    wait(driver, lambda: css(driver, f'#detail[data-method="{name}"]'), f"the detail never showed {name}")


def value_under_mouse(driver, matrix, i: int, j: int) -> str:
    """The tooltip's value over cell (i, j) of the detail view's first map (drawn from ``matrix``)."""
    from selenium.webdriver.common.action_chains import ActionChains

    canvas = css(driver, "#detail .matrix canvas")[0]
    rows, cols = len(matrix), len(matrix[0])
    box = canvas.rect
    x = (j + 0.5) * box["width"] / cols - box["width"] / 2
    y = (i + 0.5) * box["height"] / rows - box["height"] / 2
    ActionChains(driver).move_to_element(css(driver, "#grid")[0]).perform()  # a fresh mousemove over the cell
    ActionChains(driver).move_to_element_with_offset(canvas, round(x), round(y)).perform()
    return wait(driver, lambda: css(driver, ".tooltip")[0].text, "no tooltip over the map").split()[0]


def badges(driver) -> dict[tuple[int, int | None], float]:
    """(layer, head or None for a layer's map) -> the AER badge of that grid map."""
    found = {}
    for cell in css(driver, "#grid .head-cell, #grid .layer-cell"):
        badge = cell.find_elements("css selector", ".aer-badge")
        head = cell.get_attribute("data-head")
        if badge:
            found[int(cell.get_attribute("data-layer")), None if head is None else int(head)] = float(
                badge[0].get_attribute("data-aer"))
    return found


def test_choosing_a_method_shows_its_maps_and_their_aer_badges(tab):
    driver, api, run = tab
    step = run["steps"][-1]
    options = [(o.get_attribute("value"), o.text) for o in css(driver, "#method-select option")]
    assert options == [(m["name"], m["label"]) for m in run["methods"]]
    assert len(options) > 2  # the tiny config logs every method: the selector is not a lone "attention"
    i, j = 1, 1
    shown = {}
    for method in run["methods"]:
        name = method["name"]
        choose_method(driver, name)
        answer = api.get("explanation", run=run["run"], step=step, sentence=0, method=name)
        assert answer["method"] == name and answer["aer"] is not None  # the toy data has gold links
        heads = answer["per_head"]
        if method["per_head"]:
            assert cells(driver) == {(layer, head) for layer in range(len(heads))
                                     for head in range(len(heads[0]))}
            expected = {(layer, head): aer for layer, row in enumerate(answer["aer"]["per_head"])
                        for head, aer in enumerate(row)}
            layer, head = open_map(driver)
            assert head is not None  # a head's map is open
            matrix, open_aer = heads[layer][head], answer["aer"]["per_head"][layer][head]
        else:  # one map per layer: no head cells, the layers' own maps
            assert heads is None and not cells(driver)
            expected = {}
            layer, head = open_map(driver)
            assert head is None  # a layer's own map is open
            matrix, open_aer = answer["per_layer"][layer], answer["aer"]["per_layer"][layer]
        expected |= {(layer, None): aer for layer, aer in enumerate(answer["aer"]["per_layer"])}
        assert badges(driver) == expected
        badge = css(driver, "#detail .detail-head .aer-badge")[0]
        assert float(badge.get_attribute("data-aer")) == open_aer
        assert value_under_mouse(driver, matrix, i, j) == f"{matrix[i][j]:.4f}"
        shown[name] = (matrix[i][j], open_aer, tuple(sorted(expected.items(), key=repr)))
    # The maps and their badges change with the method (the methods do not all agree on this sentence).
    assert len({value for value, _, _ in shown.values()}) > 1
    assert len({grid for _, _, grid in shown.values()}) > 1


def test_the_explanations_summary_names_the_leader_and_since_when(tab):
    driver, api, run = tab
    step = run["explanation_steps"][-1]
    answer = api.get("explanations", run=run["run"], step=step)
    leader = css(driver, "#explain-summary #leader")[0]
    assert leader.get_attribute("data-method") == answer["leader"]["method"]
    assert leader.get_attribute("data-since") == str(answer["leader"]["since_step"])
    assert answer["methods"][answer["leader"]["method"]]["label"] in leader.text
    for name, scores in answer["methods"].items():
        row = css(driver, f'#explain-table tr[data-method="{name}"]')[0]
        assert row.find_elements("css selector", ".best-layer")[0].text == scores["best"]["layer"]
        assert row.find_elements("css selector", ".best-aer")[0].text == f"{scores['best']['aer']:.3f}"
    # A click on a method shows its maps.
    other = next(name for name in answer["methods"] if name != "attention")
    css(driver, f'#explain-table tr[data-method="{other}"]')[0].click()
    wait(driver, lambda: css(driver, f'#detail[data-method="{other}"]'), "clicking a method did not show it")


def test_the_statistics_table_shows_each_methods_aer_column_as_the_route(tab):
    driver, api, run = tab
    scores = api.get("explanations", run=run["run"], step=run["explanation_steps"][-1])["methods"]
    with_heads = {name: m["head_aer"] for name, m in scores.items() if m["head_aer"]}
    assert "shift_att" in with_heads
    for name, head_aer in with_heads.items():
        for row in css(driver, "#stats-table tbody tr"):
            layer, head = int(row.get_attribute("data-layer")), int(row.get_attribute("data-head"))
            cell = row.find_elements("css selector", f'td[data-key="aer:{name}"]')[0]
            assert cell.get_attribute("textContent") == f"{head_aer[layer][head]:.3f}"
    # Sorting by a method's AER puts its lowest first (lower is better).
    key = "aer:shift_att"
    css(driver, f'#stats-table th[data-key="{key}"]')[0].click()
    wait(driver, lambda: css(driver, f'#stats-table th[data-key="{key}"]')[0].get_attribute("aria-sort")
         == "ascending", "the method's AER column was not sorted")
    column = [float(td.get_attribute("textContent"))
              for td in css(driver, f'#stats-table td[data-key="{key}"]')]
    assert column == sorted(column)
    # The statistic columns' headings and descriptions are the route's definitions.
    definitions = api.get("statistics", run=run["run"], step=run["statistics_steps"][-1])["definitions"]
    for d in definitions:
        th = css(driver, f'#stats-table th[data-key="{d["name"]}"]')
        if th:
            assert th[0].get_attribute("title") == d["description"]
            assert th[0].get_attribute("textContent").startswith(d["short"])


def test_the_logit_lens_shows_the_routes_top_tokens_for_a_hovered_row(tab):
    from selenium.webdriver.common.action_chains import ActionChains

    driver, api, run = tab
    lens = api.get("lens", run=run["run"], step=run["steps"][-1], sentence=0)
    for kind in ("cross", "decoder"):
        css(driver, f"#kind-{kind}")[0].click()
        wait(driver, lambda k=kind: css(driver, f'#detail[data-kind="{k}"]'), f"the {kind} maps never showed")
        for i in (1, len(lens["rows"]) - 1):
            token = css(driver, f'#detail .token[data-axis="row"][data-index="{i}"]')[0]
            ActionChains(driver).move_to_element(token).perform()
            wait(driver, lambda r=i: css(driver, f'#lens-panel[data-row="{r}"]'),
                 f"the lens did not show row {i}")
            for layer in range(len(lens["layers"])):
                row = css(driver, f'#lens-panel tr.lens-layer[data-layer="{layer}"]')[0]
                tops = row.find_elements("css selector", ".lens-top")
                assert [t.get_attribute("data-token") for t in tops] == lens["top_tokens"][layer][i]
                produced = {t.get_attribute("data-token") for t in tops
                            if "produced" in t.get_attribute("class")}
                assert produced == {lens["rows"][i]} & set(lens["top_tokens"][layer][i])
                bar = row.find_elements("css selector", ".lens-bar")[0]
                assert float(bar.get_attribute("data-prob")) == lens["produced_prob"][layer][i]
                assert f"#{lens['produced_rank'][layer][i] + 1}" in row.text  # ranks counted from 1
    css(driver, "#kind-encoder")[0].click()
    wait(driver, lambda: css(driver, '#detail[data-kind="encoder"]'), "the encoder never showed")
    assert not css(driver, "#lens-panel")  # the lens reads the decoder: no panel for encoder maps


def test_your_sentence_with_a_method_shows_that_methods_map(tab):
    from selenium.webdriver.common.keys import Keys

    driver, api, run = tab
    text = run["sentences"][1]["source"]
    choose_method(driver, "value_norms")
    css(driver, "#translate-input")[0].send_keys(text, Keys.ENTER)
    wait(driver, lambda: css(driver, "#translation") and css(driver, '#detail[data-mode="custom"]'),
         "no translation appeared", seconds=90)
    expected = api.get("translate", run=run["run"], text=text, beam=1, method="value_norms")
    explanation = expected["explanation"]
    assert css(driver, "#detail")[0].get_attribute("data-method") == "value_norms"
    assert tokens(driver, "row") == explanation["rows"]
    layer, head = open_map(driver)
    matrix = explanation["per_head"][layer][head]
    i, j = len(matrix) // 2, len(matrix[0]) // 2  # the translation may be short: the middle cell
    assert value_under_mouse(driver, matrix, i, j) == f"{matrix[i][j]:.4f}"
    assert "no AER" in css(driver, "#detail .no-aer")[0].text  # no gold links for a typed sentence
    assert not css(driver, "#grid .aer-badge")
    # Another method asks again, for that method's map of the same translation.
    choose_method(driver, "grad_x_input")
    expected = api.get("translate", run=run["run"], text=text, beam=1, method="grad_x_input")["explanation"]
    assert css(driver, "#detail")[0].get_attribute("data-mode") == "custom"
    assert len(css(driver, "#grid .layer-cell")) == len(expected["layers"])
    matrix = expected["per_layer"][open_map(driver)[0]]
    assert value_under_mouse(driver, matrix, i, j) == f"{matrix[i][j]:.4f}"
    # Integrated Gradients' steps beyond what the route allows: the route's message is shown.
    choose_method(driver, "value_norms")
    choose_method(driver, "integrated_gradients")
    steps = css(driver, "#ig-steps")[0]
    steps.clear()
    steps.send_keys("1000")
    box = css(driver, "#translate-input")[0]
    box.send_keys(Keys.ENTER)
    error = api.get("translate", run=run["run"], text=text, beam=1, method="integrated_gradients",
                    ig_steps=1000)
    assert error["status"] == 400
    wait(driver, lambda: error["error"] in css(driver, "#message")[0].text, "the route's error was not shown")


def test_signed_scores_are_drawn_on_a_diverging_scale(tab):
    """The page's own heatmap module, run in the page: a signed map is drawn blue below 0, white at 0 and red
    above, on its largest magnitude; unsigned weights keep the fixed 0..1 scale."""
    driver, api, _ = tab
    answer = driver.execute_async_script("""
      const [url, done] = arguments;
      import(url).then(({drawMatrix, scaleOf}) => {
        const matrix = [[-0.5, 0, 2]];
        const canvas = document.createElement("canvas");
        const options = scaleOf(matrix, true);
        drawMatrix(canvas, matrix, 30, 10, options);
        const ctx = canvas.getContext("2d");
        const pixel = (x) => Array.from(ctx.getImageData(x * devicePixelRatio, 5, 1, 1).data.slice(0, 3));
        done({options, pixels: [5, 15, 25].map(pixel), weights: scaleOf([[0.2, 0.5]]),
              scores: scaleOf([[0.2, 0.5]], false, {weights: false})});
      }, (error) => done({error: String(error)}));
    """, f"{api.base}/data/plugin/attention/static/heatmap.js")
    assert "error" not in answer, answer
    assert answer["options"] == {"scale": 2, "signed": True}
    negative, zero, positive = answer["pixels"]
    assert negative[2] > negative[0] + 40  # blue
    assert zero == [247, 247, 247]  # white
    assert positive[0] > positive[2] + 40  # red, the largest magnitude: the darkest red
    assert positive == [103, 0, 31]
    assert answer["weights"] == {"scale": 1, "signed": False}
    assert answer["scores"] == {"scale": 0.5, "signed": False}


# -- what the page makes of awkward answers ------------------------------------------------------------------

# Every cross statistic of the head of highest agreement trades places with the last head's: the best-aligned
# head is then not the first one, whatever the tiny run learnt.
BEST_HEAD_LAST = """(route, answer) => {
  if (route !== "statistics") return answer;
  const cross = answer.kinds.cross;
  const agreement = cross.agreement;
  let [l, h] = [0, 0];
  agreement.forEach((row, i) => row.forEach((v, j) => { if (v > agreement[l][h]) [l, h] = [i, j]; }));
  const [L, H] = [agreement.length - 1, agreement[0].length - 1];
  for (const values of Object.values(cross)) [values[l][h], values[L][H]] = [values[L][H], values[l][h]];
  return answer;
}"""


def shown_map(driver) -> tuple[str, str]:
    detail = css(driver, "#detail")[0]
    return detail.get_attribute("data-layer"), detail.get_attribute("data-head")


def test_the_open_map_is_the_best_aligned_head_until_one_is_chosen(board, driver):
    from selenium.webdriver.common.keys import Keys

    with answers_rewritten(driver, BEST_HEAD_LAST):
        driver, _, run = open_tab(board, driver)
        best = cells(driver, ".best")
        assert len(best) == 1 and best != {(0, 0)}
        ((layer, head),) = best
        assert shown_map(driver) == (str(layer), str(head))
        assert cells(driver, ".selected") == best
        assert css(driver, "#best-head")[0].text == f"L{layer + 1} H{head + 1}"
        # A map the user opens stays open at another step.
        css(driver, '#grid .head-cell[data-layer="0"][data-head="0"]')[0].click()
        wait(driver, lambda: shown_map(driver) == ("0", "0"), "clicking a head did not open it")
        css(driver, "#step-slider")[0].send_keys(Keys.HOME)
        wait(driver, lambda: css(driver, "#detail")[0].get_attribute("data-step") == str(run["steps"][0]),
             "the slider did not change the shown step")
        assert shown_map(driver) == ("0", "0")
        assert page_errors(driver) == []


def test_grid_captions_fit_under_their_maps(tab):
    """The default run's shape (3 layers × 4 heads, and each layer's map) drawn by the page's own grid module:
    each caption stays on one line inside its map's cell, whole or shortened, with the statistic's full name
    and value in its tooltip; in a wide and in a narrow window."""
    driver, api, run = tab
    stats = api.get("statistics", run=run["run"], step=run["statistics_steps"][-1])
    agreement = [[0.8312, 0.0417, 0.5, 0.125], [0.9, 0.25, 0.3333, 0.0612], [0.75, 0.1, 0.2, 0.05]]
    stats["kinds"]["cross"] = {"agreement": agreement}
    try:
        for width in (800, 1400):  # each a change of size: the page redraws
            driver.execute_script("document.querySelector('#grid .head-cell').dataset.old = 'yes'")
            driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                                   {"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": False})
            # The page redraws after a resize: draw the test's grid after that.
            wait(driver, lambda: not css(driver, "#grid .head-cell[data-old]"), "no redraw after resizing")
            answer = driver.execute_async_script("""
              const [url, stats, done] = arguments;
              import(url).then(({drawGrid}) => {
                const [L, H, T] = [3, 4, 9];
                const map = () => Array.from({length: T}, () => Array(T).fill(1 / T));
                const set = {kind: "cross", method: null, label: null, weights: true, signed: false,
                  rows: Array(T).fill("w"), cols: Array(T).fill("w"),
                  layers: ["layer 1", "layer 2", "layer 3"],
                  heads: H, perHead: Array.from({length: L}, () => Array.from({length: H}, map)),
                  perLayer: Array.from({length: L}, map), aer: null, gold: null};
                drawGrid({step: stats.step}, set, stats, null);
                const grid = document.getElementById("grid");
                done({grid: [grid.scrollWidth, grid.clientWidth],
                  caps: [...grid.querySelectorAll(".head-cell")].map((cell) => {
                    const cap = cell.querySelector(".cap");
                    return {text: cap.textContent, title: cap.title,
                      fits: cap.scrollWidth <= cap.clientWidth && cap.scrollHeight <= cap.clientHeight,
                      inside: cap.getBoundingClientRect().right <= cell.getBoundingClientRect().right};
                  })});
              }, (error) => done({error: String(error)}));
            """, f"{api.base}/data/plugin/attention/static/grid.js", stats)
            assert "error" not in answer, answer
            scroll_width, client_width = answer["grid"]
            assert scroll_width <= client_width
            values = [f"{v:.3f}" for row in agreement for v in row]
            assert [cap["text"].split()[-1] for cap in answer["caps"]] == values
            for cap, value in zip(answer["caps"], values):
                assert cap["fits"] and cap["inside"], (width, cap)
                assert cap["title"].startswith(f"agreement {value}")
    finally:
        driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                               {"width": 1400, "height": 900, "deviceScaleFactor": 1, "mobile": False})


def test_missing_values_are_drawn_blank_by_the_heatmap_and_lines_modules(tab):
    """A diverged run's maps hold NaN, which the routes answer as null: such a cell is left white (not the
    colour of 0, not the previous cell's colour), no number is written in it and no line drawn for it."""
    driver, api, _ = tab
    static = f"{api.base}/data/plugin/attention/static"
    answer = driver.execute_async_script("""
      const [heatmapUrl, linesUrl, done] = arguments;
      Promise.all([import(heatmapUrl), import(linesUrl)]).then(([{drawMatrix, scaleOf}, {linesView}]) => {
        const matrix = [[0.9, null, NaN]];
        const canvas = document.createElement("canvas");
        drawMatrix(canvas, matrix, 90, 30, {numbers: true, ...scaleOf(matrix)});
        const ctx = canvas.getContext("2d");
        const pixel = (x) => Array.from(ctx.getImageData(x * devicePixelRatio, 3, 1, 1).data.slice(0, 3));
        const lines = linesView({rows: ["a"], cols: ["x", "y", "z"],
          heads: [{label: "h", colour: "#000", matrix: [[0.5, null, NaN]]}]}).node;
        done({pixels: [15, 45, 75].map(pixel), weights: scaleOf(matrix),
              signed: scaleOf([[null, -2, NaN]], true),
              lines: lines.querySelectorAll("line").length, nan: lines.outerHTML.includes("NaN")});
      }, (error) => done({error: String(error)}));
    """, f"{static}/heatmap.js", f"{static}/lines.js")
    assert "error" not in answer, answer
    filled, empty, nan = answer["pixels"]
    assert filled != [255, 255, 255]
    assert empty == nan == [255, 255, 255]
    assert answer["weights"] == {"scale": 1, "signed": False}
    assert answer["signed"] == {"scale": 2, "signed": True}
    assert answer["lines"] == 1 and not answer["nan"]


# The last number of every row of numbers in every answer becomes null, as the routes answer a diverged run's
# NaN: the last key of every attention row, the last head of every statistic, the last layer's AER, the value
# of the newest point of every method's history, the last of the logit lens's top probabilities.
NULL_LAST = """(route, answer) => {
  const blank = (x, key) => {
    if (key === "gold") return x;
    if (Array.isArray(x)) {
      if (x.length && x.every((v) => typeof v === "number")) {
        return x.map((v, k) => (k === x.length - 1 ? null : v));
      }
      return x.map((v) => blank(v, key));
    }
    if (x && typeof x === "object") {
      return Object.fromEntries(Object.entries(x).map(([k, v]) => [k, blank(v, k)]));
    }
    return x;
  };
  return blank(answer, null);
}"""


def test_a_diverged_runs_null_values_are_drawn_blank_and_tabled_as_dashes(board, driver):
    from selenium.webdriver.common.action_chains import ActionChains

    with answers_rewritten(driver, NULL_LAST):
        driver, api, run = open_tab(board, driver)
        last = run["num_heads"] - 1
        wait(driver, lambda: css(driver, f'#stats-table tr[data-head="{last}"] td[data-key="entropy"]'),
             "the statistics table never drew")
        for cell in css(driver, f'#stats-table tr[data-head="{last}"] td[data-key="entropy"]'):
            assert cell.get_attribute("textContent") == "–"
        # The open map's last column holds nulls: its tooltip says so.
        weights = api.get("attention", run=run["run"], step=run["steps"][-1], sentence=0)["kinds"]["cross"]
        shown = [[None if j == len(row) - 1 else v for j, v in enumerate(row)]
                 for row in weights["weights"][int(shown_map(driver)[0])][int(shown_map(driver)[1])]]
        assert value_under_mouse(driver, shown, 1, len(shown[0]) - 1) == "–"
        # Every other view of the same answers: a method's maps, the logit lens, the other kinds.
        choose_method(driver, "shift_att")
        token = css(driver, '#detail .token[data-axis="row"][data-index="1"]')[0]
        ActionChains(driver).move_to_element(token).perform()
        wait(driver, lambda: css(driver, '#lens-panel[data-row="1"]'), "the lens did not show row 1")
        for kind in ("decoder", "encoder"):
            css(driver, f"#kind-{kind}")[0].click()
            wait(driver, lambda k=kind: css(driver, f'#detail[data-kind="{k}"]'),
                 f"the {kind} maps never showed")
        assert page_errors(driver) == []
        assert driver.execute_script("""
          return [...document.querySelectorAll("*")].some((n) => n.childElementCount === 0
            && n.textContent.includes("NaN") || [...n.attributes].some((a) => a.value.includes("NaN")));
        """) is False


RENAMED_VOCABULARY = """(route, answer) => route !== "vocabulary" ? answer : {...answer,
  kinds: answer.kinds.map((k) => ({...k, short: `${k.short}!`, label: `renamed ${k.label}`,
                                   help: `help of ${k.name}`})),
  methods: answer.methods.map((m) => ({...m, takes_steps: !m.weights && !m.gradients})),
  beam: {default: "the run's", max: 3}, ig_steps: {...answer.ig_steps, default: 5, max: 7}}"""


def test_the_page_names_kinds_and_limits_as_the_vocabulary_route_does(board, driver):
    """The page spells no kind, label or limit of its own, and tells methods apart by the properties the
    route gives them: renamed in the route's answer, renamed on the page; the steps asked of the methods
    the answer says take them."""
    api = board[1]
    vocabulary = api.get("vocabulary")
    with answers_rewritten(driver, RENAMED_VOCABULARY):
        driver = open_tab(board, driver)[0]
        for kind in vocabulary["kinds"]:
            button = css(driver, f"#kind-{kind['name']}")[0]
            assert button.text == f"{kind['short']}!"
            assert button.get_attribute("title") == f"Renamed {kind['label']}"
        css(driver, "#kind-decoder")[0].click()
        wait(driver, lambda: css(driver, '#detail[data-kind="decoder"]'), "the detail never showed decoder")
        assert any(title.text.startswith("Renamed decoder self-attention") for title in css(driver, "h2"))
        assert "help of decoder" in css(driver, "#detail .kind-help")[0].text
        beams = [o.get_attribute("value") for o in css(driver, "#translate-beam option")]
        assert beams == ["the run's", "1", "2", "3"]
        assert css(driver, "#translate-beam")[0].get_attribute("value") == "the run's"
        steps = css(driver, "#ig-steps")[0]
        assert (steps.get_attribute("value"), steps.get_attribute("max")) == ("5", "7")
        label = steps.find_element("xpath", "..")
        # The answer's takes_steps, not the registry's (the shown method, the first, last: a change).
        for method in reversed(vocabulary["methods"]):
            choose_method(driver, method["name"])
            assert label.is_displayed() == (not method["weights"] and not method["gradients"]), method["name"]
        assert page_errors(driver) == []
