// One look for the console's charts (Chart.js, loaded before this file): axes with titles and units,
// values on hover, and an explicit empty state instead of a blank frame.
//
// Markup: <figure class="chart"><div class="chart-box"><canvas></canvas></div>
//         <p class="chart-empty muted" hidden>Not enough data yet: …</p></figure>
// Data reaches a page through json_script blocks (or a websocket message) and goes into the chart's
// data; Chart.js draws text on the canvas, so nothing here is ever parsed as HTML.
(function () {
  "use strict";
  const COLOURS = ["#2f5bea", "#067647", "#b54708", "#912018", "#6938ef", "#0e9384", "#c11574", "#475467"];

  Chart.defaults.animation = false;
  Chart.defaults.maintainAspectRatio = false;
  Chart.defaults.font.family = 'system-ui, -apple-system, "Segoe UI", sans-serif';
  Chart.defaults.plugins.legend.position = "bottom";
  Chart.defaults.plugins.legend.labels.boxWidth = 12;

  function parts(canvas) {
    const figure = canvas.closest("figure.chart");
    return {box: canvas.closest(".chart-box"), empty: figure && figure.querySelector(".chart-empty")};
  }

  const HarnessCharts = {
    COLOURS,
    colour: (i) => COLOURS[i % COLOURS.length],

    // Draw `config` on `canvas` (or update the chart already there). With `hasData` false the chart is
    // hidden and the figure's empty state shows, with `empty` as its text when given.
    render(canvas, config, {hasData = true, empty = null} = {}) {
      const {box, empty: emptyNode} = parts(canvas);
      let chart = Chart.getChart(canvas);
      if (!hasData) {
        if (chart) chart.destroy();
        if (box) box.hidden = true;
        if (emptyNode) {
          emptyNode.hidden = false;
          if (empty) emptyNode.textContent = empty;
        }
        canvas.dataset.state = "empty";
        return null;
      }
      if (box) box.hidden = false;
      if (emptyNode) emptyNode.hidden = true;
      if (chart && chart.config.type === config.type) {
        chart.data = config.data;
        chart.options = config.options || {};
        chart.update("none");
      } else {
        if (chart) chart.destroy();
        chart = new Chart(canvas, config);
      }
      canvas.dataset.state = "drawn";
      canvas.dataset.points = String(config.data.datasets.reduce(
        (n, d) => n + d.data.filter((v) => v !== null && v !== undefined).length, 0));
      return chart;
    },

    // An axis with a title that names its unit.
    axis(title, extra = {}) {
      return Object.assign({title: {display: true, text: title}}, extra);
    },

    percent(value, digits = 1) {
      return value === null || value === undefined || Number.isNaN(value) ? "—" : Number(value).toFixed(digits) + "%";
    },

    data(id) {
      const node = document.getElementById(id);
      return node ? JSON.parse(node.textContent) : null;
    },
  };
  window.HarnessCharts = HarnessCharts;
})();
