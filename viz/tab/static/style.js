// The tab's style sheet, injected as one <style> element (inline styles are allowed by TensorBoard's CSP).
export const CSS = `
:root { --ink: #212529; --muted: #6c757d; --line: #dee2e6; --soft: #f1f3f5; --accent: #1c7ed6;
        --lit: #ffe066; --gold: #f76707; --bad: #c92a2a; --sup: #7048e8; }
* { box-sizing: border-box; }
body { margin: 0; font: 13px/1.4 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
       color: var(--ink); background: #fff; }
button, select, input { font: inherit; color: inherit; }
#app { padding: 10px 16px 16px; }
.toolbar { display: flex; flex-wrap: wrap; align-items: center; gap: 8px 18px; padding-bottom: 6px; }
.toolbar.second { padding-bottom: 8px; border-bottom: 1px solid var(--line); }
.toolbar label.ctl { display: inline-flex; align-items: center; gap: 6px; color: var(--muted); }
.toolbar select { max-width: 360px; padding: 3px 4px; border: 1px solid #ced4da; border-radius: 4px; background: #fff; }
.toolbar select:disabled, .toolbar input:disabled { opacity: .5; }
.seg { display: inline-flex; border: 1px solid #ced4da; border-radius: 5px; overflow: hidden; }
.seg button { border: 0; background: #fff; padding: 4px 11px; cursor: pointer; border-left: 1px solid #ced4da; }
.seg button:first-child { border-left: 0; }
.seg button.active { background: var(--accent); color: #fff; }
.step-ctl { display: inline-flex; align-items: center; gap: 8px; }
#step-slider { width: 340px; accent-color: var(--accent); }
#step-label { font-variant-numeric: tabular-nums; min-width: 118px; color: var(--ink); }
#step-label .of { color: var(--muted); }
.icon-btn { border: 1px solid #ced4da; background: #fff; border-radius: 4px; width: 28px; height: 26px;
            cursor: pointer; line-height: 1; padding: 0; }
.icon-btn:disabled { opacity: .4; cursor: default; }
.translate { display: inline-flex; align-items: center; gap: 6px; margin-left: auto; }
#translate-input { width: 300px; padding: 4px 7px; border: 1px solid #ced4da; border-radius: 4px; }
#ig-steps { width: 56px; padding: 3px 5px; border: 1px solid #ced4da; border-radius: 4px; }
#translate-button { padding: 4px 12px; border: 1px solid var(--accent); background: var(--accent); color: #fff;
                    border-radius: 4px; cursor: pointer; }
#translate-button:disabled { opacity: .55; cursor: default; }
.note { color: var(--muted); font-size: 12px; }
.colour-bar { display: inline-flex; align-items: center; gap: 4px; color: var(--muted); font-size: 11px; }
.gold-key { display: inline-block; width: 11px; height: 11px; border: 2px solid var(--gold); vertical-align: -1px; }
#message { margin: 8px 0 0; padding: 6px 10px; border-radius: 4px; background: #fff5f5; color: var(--bad);
           border: 1px solid #ffc9c9; }
#message:empty { display: none; }
.banner { margin: 8px 0 0; padding: 6px 10px; border-radius: 4px; background: #e7f5ff; border: 1px solid #a5d8ff;
          display: flex; align-items: center; gap: 12px; flex-wrap: wrap; }
.banner b { font-weight: 600; }
.banner button { margin-left: auto; border: 1px solid #74c0fc; background: #fff; border-radius: 4px; padding: 3px 10px;
                 cursor: pointer; }
#translation { font-weight: 600; }
.main { display: flex; gap: 22px; margin-top: 10px; align-items: flex-start; }
.left { flex: 0 0 456px; min-width: 0; }
.right { flex: 1 1 auto; min-width: 0; }
h2 { font-size: 13px; font-weight: 600; margin: 4px 0 6px; }
h2 .sub { font-weight: 400; color: var(--muted); margin-left: 6px; }
.hint { color: var(--muted); font-size: 12px; margin: -2px 0 6px; }
.best-line { margin: 0 0 8px; padding: 4px 8px; background: #fff4e6; border: 1px solid #ffd8a8; border-radius: 4px; }
.best-line button { border: 0; background: none; color: var(--accent); cursor: pointer; padding: 0; font-weight: 600; }
#grid { display: grid; gap: 4px; align-items: center; justify-items: center; }
#grid .axis { color: var(--muted); font-size: 11px; }
.head-cell, .layer-cell { position: relative; padding: 3px; border: 2px solid transparent; border-radius: 4px; cursor: pointer;
             display: flex; flex-direction: column; align-items: center; }
.head-cell:hover, .layer-cell:hover { border-color: #adb5bd; }
.head-cell.selected, .layer-cell.selected { border-color: var(--ink); }
.head-cell.peek { border-color: var(--accent); }
.head-cell canvas, .layer-cell canvas { display: block; box-shadow: 0 0 0 1px #e9ecef; }
.layer-cell { background: #f8f9fa; }
.head-cell .cap, .layer-cell .cap { font-size: 10px; color: var(--muted); height: 13px; line-height: 13px;
                  font-variant-numeric: tabular-nums; white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
.aer-badge { display: inline-block; font-size: 10px; line-height: 14px; padding: 0 5px; border-radius: 7px;
             background: #fff4e6; color: #a34a00; border: 1px solid #ffd8a8; font-variant-numeric: tabular-nums;
             white-space: nowrap; }
.detail-head .aer-badge { font-size: 12px; line-height: 18px; padding: 0 8px; border-radius: 9px; }
.no-aer { font-style: italic; }
.ctl.dim select { opacity: .55; }
.head-cell .badge, .layer-cell .badge { position: absolute; top: -7px; right: -7px; background: var(--gold); color: #fff; font-size: 10px;
                    border-radius: 8px; padding: 0 5px; line-height: 15px; }
.head-cell .dot, .layer-cell .dot { position: absolute; top: -5px; left: -5px; width: 11px; height: 11px; border-radius: 50%;
                  border: 2px solid #fff; }
table#stats-table { border-collapse: collapse; width: 100%; font-variant-numeric: tabular-nums; font-size: 12px; }
#stats-table th { text-align: right; font-weight: 600; padding: 4px 6px; border-bottom: 1px solid var(--line);
                  cursor: pointer; white-space: nowrap; user-select: none; position: sticky; top: 0; background: #fff; }
#stats-table th:first-child, #stats-table th:nth-child(2) { text-align: left; }
#stats-table th .arrow { color: var(--accent); font-size: 10px; margin-left: 2px; }
#stats-table th:hover { color: var(--accent); }
#stats-table td { text-align: right; padding: 3px 6px; border-bottom: 1px solid #f1f3f5; }
#stats-table th.method { color: #a34a00; }
#stats-table th.method small { font-weight: 400; margin-left: 2px; }
#stats-table th.method.shown, #stats-table th.method.shown small { text-decoration: underline; }
#stats-table td:first-child, #stats-table td:nth-child(2) { text-align: left; }
#stats-table tbody tr { cursor: pointer; }
#stats-table tbody tr:hover { background: #f8f9fa; }
#stats-table tr.selected td { background: #e7f5ff; }
#stats-table tr.best td:first-child::before { content: "★ "; color: var(--gold); }
#stats-table tr.best td { font-weight: 600; }
#stats-table tr.supervised td { box-shadow: inset 0 1px 0 var(--sup), inset 0 -1px 0 var(--sup); }
.sup-key { color: var(--sup); font-weight: 600; }
.run-summary { margin: 6px 0 0; padding: 3px 8px; background: #f3f0ff; border: 1px solid #d0bfff; border-radius: 4px;
               font-size: 12px; }
.head-cell.supervised { outline: 2px dashed var(--sup); outline-offset: -2px; }
.head-cell .sup-badge { position: absolute; top: -7px; left: 8px; background: var(--sup); color: #fff; font-size: 10px;
                        border-radius: 8px; padding: 0 5px; line-height: 15px; }
#explain-table td.reported-aer { text-align: right; white-space: nowrap; }
#explain-table td.reported-aer small { color: var(--muted); margin-left: 4px; }
.stats-wrap { max-height: 360px; overflow: auto; border: 1px solid var(--line); border-radius: 4px; }
/* Layer and head stay in view while the table scrolls sideways to the methods' columns. */
#stats-table th:first-child, #stats-table td:first-child { position: sticky; left: 0; background: #fff; z-index: 1; }
#stats-table th:nth-child(2), #stats-table td:nth-child(2) { position: sticky; left: 42px; background: #fff; z-index: 1; }
#stats-table th:first-child, #stats-table td:first-child { min-width: 30px; box-sizing: content-box; }
#stats-table th:first-child, #stats-table th:nth-child(2) { z-index: 2; }
.detail-head { display: flex; align-items: baseline; gap: 10px; flex-wrap: wrap; }
.detail-head h2 { font-size: 15px; margin: 0; }
.chips { display: flex; gap: 6px; flex-wrap: wrap; }
.chip { background: var(--soft); border-radius: 10px; padding: 1px 8px; font-size: 12px;
        font-variant-numeric: tabular-nums; }
.chip span { color: var(--muted); }
.trend { display: inline-flex; align-items: center; gap: 6px; }
.trend-svg { cursor: pointer; background: #f8f9fa; border-radius: 3px; }
.trend-svg polyline { fill: none; stroke: var(--accent); stroke-width: 1.5; }
.trend-svg circle { fill: var(--gold); }
.kind-help { margin-top: 4px; }
.detail-tools { display: flex; align-items: center; gap: 14px; margin: 6px 0 8px; color: var(--muted);
                flex-wrap: wrap; }
.detail-tools select { padding: 2px 4px; border: 1px solid #ced4da; border-radius: 4px; background: #fff; }
.detail-body { display: flex; gap: 22px; align-items: flex-start; flex-wrap: wrap; }
.panel-cap { font-size: 12px; color: var(--muted); margin-bottom: 2px; }
.panel-cap b { color: var(--ink); font-weight: 600; }
.matrix { position: relative; }
.matrix canvas { position: absolute; cursor: crosshair; }
.token { position: absolute; overflow: hidden; white-space: nowrap; text-overflow: ellipsis; cursor: default;
         border-radius: 3px; color: #343a40; }
.token[data-axis="row"] { text-align: right; padding-right: 5px; }
/* Column labels read bottom to top. Sideways: vertical writing would set Chinese and Japanese characters
   upright, and the turn would then stand them on their heads. Labels of Han, kana and Hangul (.upright)
   stand upright instead, read top to bottom as in vertical writing, ending next to the map. */
.token[data-axis="col"] { writing-mode: vertical-rl; text-orientation: sideways; transform: rotate(180deg);
                          text-align: start; padding-top: 5px; }
.token[data-axis="col"].upright { text-orientation: upright; transform: none; text-align: end; padding-top: 0;
                                  padding-bottom: 5px; }
.token.hl-soft { background: #fff3bf; }
.token.highlight, .token:hover { background: var(--lit); color: #000; font-weight: 600; }
.band { position: absolute; pointer-events: none; display: none; border: 2px solid #000; border-radius: 2px;
        box-shadow: 0 0 0 1px #fff; }
.band.highlight { display: block; }
.axis-name { position: absolute; font-size: 11px; color: var(--muted); }
.lines-panel { flex: 0 0 300px; width: 300px; }
.lines-panel.below { flex-basis: 100%; }
.lines-svg { display: block; }
.lines-svg .lv-head { font-size: 11px; fill: #868e96; }
.lines-svg .lv-hit { fill: transparent; }
.lines-svg .lv-token { cursor: default; }
.lines-svg .lv-token text { fill: #343a40; }
.lines-svg .lv-token:hover .lv-hit, .lines-svg .lv-token.highlight .lv-hit { fill: var(--lit); }
.lines-svg .lv-token.highlight text { font-weight: 600; fill: #000; }
.lines-svg line { stroke-linecap: round; }
.legend { display: flex; flex-wrap: wrap; gap: 6px; margin-top: 6px; align-items: center; }
.legend .item { display: inline-flex; align-items: center; gap: 5px; padding: 1px 6px; border: 1px solid var(--line);
                border-radius: 10px; font-size: 12px; }
.legend .sw { width: 12px; height: 4px; border-radius: 2px; }
.legend .rm { border: 0; background: none; cursor: pointer; color: var(--muted); padding: 0 0 0 2px;
              font-size: 13px; line-height: 1; }
#explain-summary { margin: 0 0 12px; }
#explain-summary h2 { margin-top: 0; }
.leader { margin: 0 0 6px; padding: 4px 8px; background: #ebfbee; border: 1px solid #b2f2bb; border-radius: 4px; }
#explain-table { border-collapse: collapse; width: 100%; font-size: 12px; font-variant-numeric: tabular-nums; }
#explain-table th { text-align: left; font-weight: 600; padding: 2px 6px; border-bottom: 1px solid var(--line);
                    color: var(--muted); }
#explain-table td { padding: 2px 6px; border-bottom: 1px solid #f1f3f5; }
#explain-table td.best-aer { text-align: right; }
#explain-table tbody tr { cursor: pointer; }
#explain-table tbody tr:hover { background: #f8f9fa; }
#explain-table tr.shown td { background: #e7f5ff; }
#explain-table tr.lead td.method-name::before { content: "★ "; color: var(--gold); }
#explain-table tr.lead td { font-weight: 600; }
.spark { display: block; }
.spark polyline { fill: none; stroke: var(--accent); stroke-width: 1.3; }
.spark circle { fill: var(--gold); }
#lens-panel { flex: 0 0 auto; max-width: 100%; }
#lens-panel h3 { font-size: 13px; font-weight: 600; margin: 0 0 2px; }
#lens-panel h3 .sub { font-weight: 400; color: var(--muted); margin-left: 6px; font-size: 12px; }
.lens-overview { display: grid; gap: 1px; margin: 4px 0 8px; align-items: end; }
.lens-overview .lens-col { writing-mode: vertical-rl; text-orientation: sideways; transform: rotate(180deg);
                           font-size: 11px; height: 56px;
                           overflow: hidden; text-overflow: ellipsis; white-space: nowrap; text-align: start;
                           color: #343a40; justify-self: center; }
.lens-overview .lens-col.upright { text-orientation: upright; transform: none; text-align: end; }
.lens-overview .lens-rowname { font-size: 11px; color: var(--muted); text-align: right; padding-right: 4px;
                               white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
.lens-cell { height: 18px; box-shadow: 0 0 0 1px #e9ecef inset; cursor: crosshair; }
.lens-cell.on { box-shadow: 0 0 0 2px #000 inset; }
.lens-where { margin: 0 0 4px; }
.lens-where b.produced, .lens-top.produced { background: var(--lit); }
.lens-table { border-collapse: collapse; font-size: 12px; font-variant-numeric: tabular-nums; }
.lens-table th { text-align: left; font-weight: 600; color: var(--muted); padding: 2px 6px;
                 border-bottom: 1px solid var(--line); }
.lens-table td { padding: 2px 6px; border-bottom: 1px solid #f1f3f5; white-space: nowrap; }
.lens-top { display: inline-block; padding: 0 5px; margin-right: 4px; border-radius: 3px; background: var(--soft); }
.lens-top small, .lens-prob small { color: var(--muted); margin-left: 3px; }
.lens-top.produced { font-weight: 600; }
.lens-bar { display: inline-block; width: 70px; height: 8px; background: var(--soft); border-radius: 2px;
            vertical-align: middle; overflow: hidden; }
.lens-bar span { display: block; height: 100%; background: var(--accent); }
.tooltip { position: fixed; pointer-events: none; background: rgba(33,37,41,.94); color: #fff; padding: 4px 8px;
           border-radius: 4px; font-size: 12px; z-index: 10; white-space: nowrap; display: none; }
.tooltip b { font-size: 13px; font-variant-numeric: tabular-nums; }
.empty { margin: 60px auto; max-width: 560px; text-align: center; color: var(--muted); font-size: 14px; }
.empty h1 { font-size: 18px; color: var(--ink); font-weight: 600; }
.empty code { background: var(--soft); padding: 1px 5px; border-radius: 3px; color: var(--ink); }
.empty ul { display: inline-block; text-align: left; padding-left: 18px; }
#run-select option.unavailable { color: var(--muted); }
.loading { color: var(--muted); font-size: 12px; visibility: hidden; }
.loading.on { visibility: visible; }
`;
