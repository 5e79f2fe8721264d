// Decoding Playground: a click on a bar of an overview chart selects that step.
// Gradio draws plotly charts itself; this finds them and forwards plotly_click as a
// window event that the matching text panel turns into a Gradio event (see ui.text_js).
(() => {
  const hook = () => {
    for (const gd of document.querySelectorAll('[id^="pg-overview-"] .js-plotly-plot')) {
      if (gd.dataset.pgHooked || typeof gd.on !== 'function') continue;
      gd.dataset.pgHooked = '1';
      const group = gd.closest('[id^="pg-overview-"]').id.slice('pg-overview-'.length);
      gd.on('plotly_click', (ev) => {
        const pt = ev && ev.points && ev.points[0];
        const step = pt ? Math.round(Number(pt.x)) : NaN;
        if (Number.isFinite(step)) window.dispatchEvent(new CustomEvent('pg-select-' + group, {detail: step}));
      });
    }
  };
  // a redrawn chart is a new plot: hook it as soon as it appears, so no click on it is lost
  new MutationObserver(hook).observe(document.documentElement, {childList: true, subtree: true});
  setInterval(hook, 600);
})();

// A click on a bar of the Explore distribution chart continues the run with that token (a branch):
// the bar's first custom datum is its token id; the branches panel turns the event into a Gradio event
// (see ui_branches.BRANCH_JS).
(() => {
  const hook = () => {
    for (const gd of document.querySelectorAll('#pg-dist .js-plotly-plot')) {
      if (gd.dataset.pgBranchHooked || typeof gd.on !== 'function') continue;
      gd.dataset.pgBranchHooked = '1';
      gd.on('plotly_click', (ev) => {
        const pt = ev && ev.points && ev.points[0];
        const id = pt && pt.customdata ? Number(Array.isArray(pt.customdata) ? pt.customdata[0] : pt.customdata) : NaN;
        if (Number.isInteger(id)) window.dispatchEvent(new CustomEvent('pg-branch', {detail: id}));
      });
    }
  };
  new MutationObserver(hook).observe(document.documentElement, {childList: true, subtree: true});
  setInterval(hook, 600);
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
