// Draws each <div class="chart" data-chart="NAME"> from the JSON in #chart-NAME
// ({"x": [unix seconds], "lines": {"label": [values or null]}}) with the vendored uPlot.
(function () {
  "use strict";
  var colors = ["#1f6feb", "#d1242f", "#1a7f37", "#9a6700", "#8250df", "#bf3989", "#0a7ea4", "#57606a"];
  document.querySelectorAll("div.chart[data-chart]").forEach(function (el) {
    var source = document.getElementById("chart-" + el.dataset.chart);
    if (!source || typeof uPlot === "undefined") return;
    var doc = JSON.parse(source.textContent);
    var names = Object.keys(doc.lines);
    if (doc.x.length === 0 || names.length === 0) {
      el.textContent = "Nothing to draw yet.";
      return;
    }
    var series = [{}];
    var data = [doc.x];
    names.forEach(function (name, i) {
      series.push({ label: name, stroke: colors[i % colors.length], width: 2, spanGaps: false,
                    points: { show: doc.x.length <= 31 } });
      data.push(doc.lines[name]);
    });
    var opts = {
      width: Math.max(320, el.clientWidth || 800),
      height: 260,
      series: series,
      axes: [{}, { label: el.dataset.yLabel || "", size: 70 }],
      scales: { x: { time: true } },
      legend: { live: true },
    };
    el.textContent = "";
    new uPlot(opts, data, el);
  });
})();
