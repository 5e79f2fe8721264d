// Decoding Playground: clicks on charts. Gradio draws plotly charts itself; forwardClicks finds those under
// `selector` (a redrawn chart is a new plot: each is hooked as soon as it appears, so no click on it is
// lost, and marked with `flag`) and forwards a plotly_click as the window event `name(chart)` with
// `pick(point)` as its detail, which a Gradio component's js_on_load turns into a Gradio event.
(() => {
const forwardClicks = (selector, flag, name, pick) => {
  const hook = () => {
    for (const gd of document.querySelectorAll(selector + ' .js-plotly-plot')) {
      if (gd.dataset[flag] || typeof gd.on !== 'function') continue;
      gd.dataset[flag] = '1';
      gd.on('plotly_click', (ev) => {
        const pt = ev && ev.points && ev.points[0];
        const detail = pt ? pick(pt) : NaN;
        if (Number.isFinite(detail)) window.dispatchEvent(new CustomEvent(name(gd), {detail}));
      });
    }
  };
  new MutationObserver(hook).observe(document.documentElement, {childList: true, subtree: true});
  setInterval(hook, 600);
};
const stepOf = (pt) => Math.round(Number(pt.x));

// A click on a bar of an overview chart selects that step (the group's text panel: see ui.text_js).
forwardClicks('[id^="pg-overview-"]', 'pgHooked',
              (gd) => 'pg-select-' + gd.closest('[id^="pg-overview-"]').id.slice('pg-overview-'.length), stepOf);

// A click on a bar of the Explore distribution chart continues the run with that token (a branch):
// the bar's first custom datum is its token id (see ui_branches.BRANCH_JS).
forwardClicks('#pg-dist', 'pgBranchHooked', () => 'pg-branch', (pt) => {
  const id = pt.customdata !== undefined ? Number(Array.isArray(pt.customdata) ? pt.customdata[0] : pt.customdata) : NaN;
  return Number.isInteger(id) ? id : NaN;
});

// A click on a step of the lockstep chart opens both models' distributions at that step: the point's x is
// the step (see ui.whatif.PAIR_JS).
forwardClicks('#pg-pair-plot', 'pgPairHooked', () => 'pg-pair-select', stepOf);

// A click on a point of the sweep chart opens that value's samples: every trace has one point per value done,
// in order, so the point's number is the value's index (see ui.sweep_panel.POINT_JS).
forwardClicks('#pg-sweep-plot', 'pgSweepHooked', () => 'pg-sweep-select', (pt) => pt.pointNumber);
})();

// A number typed beyond a slider's range is set to the nearest end by the slider: say so beside it,
// so a value the person typed is never changed silently.
(() => {
  const note = (input, text) => {
    const block = input.closest('.block') || input.parentElement;
    let el = block.querySelector(':scope > .pg-clamp');
    if (!el) {
      el = document.createElement('div');
      el.className = 'pg-clamp';
      el.setAttribute('role', 'status');
      block.appendChild(el);
    }
    el.textContent = text;
    clearTimeout(el._pgTimer);
    el._pgTimer = setTimeout(() => el.remove(), 8000);
  };
  document.addEventListener('change', (ev) => {
    const input = ev.target;
    if (!(input instanceof HTMLInputElement) || input.type !== 'number') return;
    if (input.min === '' && input.max === '') return;
    const value = Number(input.value), low = Number(input.min), high = Number(input.max);
    if (!Number.isFinite(value)) return;
    const label = (input.closest('.block')?.querySelector('[data-testid="block-info"], label span')?.textContent
                   || input.getAttribute('aria-label') || 'value').trim();
    if (input.min !== '' && value < low) note(input, `${label}: ${input.value} is below this control's range [${low}, ${high}]; set to ${low}.`);
    else if (input.max !== '' && value > high) note(input, `${label}: ${input.value} is above this control's range [${low}, ${high}]; set to ${high}.`);
  }, true);
})();

// The modebar's camera saves the chart as it reads, without its in-chart buttons (basis, scale, zoom):
// a copy of the figure, its updatemenus left out, goes to plotly's image export in the camera's place.
(() => {
  const copy = (value) => { try { return structuredClone(value); } catch (e) { return JSON.parse(JSON.stringify(value)); } };
  document.addEventListener('click', (ev) => {
    const button = ev.target instanceof Element && ev.target.closest('.modebar-btn[data-title^="Download plot"]');
    const gd = button && button.closest('.js-plotly-plot');
    if (!gd || !window.Plotly || typeof window.Plotly.downloadImage !== 'function') return;
    ev.preventDefault();
    ev.stopPropagation();
    const layout = copy(gd.layout || {});
    layout.updatemenus = [];
    const full = gd._fullLayout || {};
    const own = (gd._context && gd._context.toImageButtonOptions) || {};
    window.Plotly.downloadImage({data: copy(gd.data || []), layout}, {
      format: own.format || 'png', scale: own.scale || 1, filename: own.filename || 'newplot',
      width: own.width || full.width, height: own.height || full.height});
  }, true);
})();

// The slides view (body.pg-slides; the chosen chart's element id in data-pg-slide-id): the chart fills the
// screen's height on a projector's screen (a phone keeps its own). Its height grows, and what sits above or
// under the plot at a fraction of its height (buttons, legend, notes) keeps its distance in pixels; leaving
// the view, or choosing another chart, gives the chart its own layout back. A chart Gradio redraws (another
// step) is sized afresh.
(() => {
  const placed = (layout) => {
    const out = {};
    (layout.updatemenus || []).forEach((m, i) => { if (typeof m.y === 'number') out[`updatemenus[${i}].y`] = m.y; });
    if (layout.legend && typeof layout.legend.y === 'number') out['legend.y'] = layout.legend.y;
    (layout.annotations || []).forEach((a, i) => {
      if (a.yref === 'paper' && typeof a.y === 'number' && (a.y < 0 || a.y > 1)) out[`annotations[${i}].y`] = a.y;
    });
    return out;
  };
  const fit = () => {
    const body = document.body;
    const on = body.classList.contains('pg-slides') && window.innerWidth >= 700;
    const chosen = on ? document.getElementById(body.dataset.pgSlideId || '') : null;
    for (const gd of document.querySelectorAll('#pg-main .js-plotly-plot')) {
      const full = gd._fullLayout, layout = gd.layout;
      if (!full || !layout || !window.Plotly) continue;
      const fitted = gd._pgFit && layout.height === gd._pgFit.height;
      if (chosen && chosen.contains(gd) && gd.offsetParent !== null) {
        const top = gd.getBoundingClientRect().top + window.scrollY;
        const height = Math.max(320, Math.floor(window.innerHeight - top - 10));
        const style = getComputedStyle(chosen);
        const width = Math.floor(chosen.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight));
        if (fitted && Math.abs(height - gd._pgFit.height) < 2 && Math.abs(width - gd._pgFit.width) < 2) continue;
        const own = fitted ? gd._pgFit.own : {height: full.height, width: layout.width ?? null, ...placed(layout)};
        const margin = full.margin || {t: 0, b: 0};
        const ratio = Math.max(1, own.height - margin.t - margin.b) / Math.max(1, height - margin.t - margin.b);
        const update = {height, width};
        for (const [key, y] of Object.entries(own)) {
          if (key !== 'height' && key !== 'width') update[key] = y < 0.5 ? y * ratio : 1 - (1 - y) * ratio;  // px from its edge kept
        }
        gd._pgFit = {height, width, own};
        window.Plotly.relayout(gd, update);
      } else if (fitted) {
        const own = gd._pgFit.own;
        delete gd._pgFit;
        window.Plotly.relayout(gd, own);
      }
    }
  };
  let queued = false;
  const soon = () => { if (!queued) { queued = true; requestAnimationFrame(() => { queued = false; fit(); }); } };
  new MutationObserver(soon).observe(document.documentElement, {childList: true, subtree: true, attributes: true,
                                                                 attributeFilter: ['class', 'data-pg-slide-id']});
  window.addEventListener('resize', soon);
  // Escape leaves the view, through its checkbox (so the page's own state follows)
  document.addEventListener('keydown', (ev) => {
    if (ev.key !== 'Escape' || !document.body.classList.contains('pg-slides')) return;
    const box = document.querySelector('#pg-slides input[type=checkbox]');
    if (box) box.click();
  });
})();
