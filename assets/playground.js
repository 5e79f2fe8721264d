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
  setInterval(hook, 600);
})();
