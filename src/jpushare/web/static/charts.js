// Draws each <div class="chart" data-chart="NAME"> from the JSON in #chart-NAME
// ({"x": [unix seconds], "lines": {"label": [values or null]}, "units": {"label": "unit"}})
// with the vendored uPlot: one y axis per unit (left, then right), the legend showing the
// last point until the pointer moves over the chart.
(function () {
  "use strict";
  // The CLI's and the pages' one number format (client/formatting.py `amount`): whole
  // numbers with separators from 100 up, at most two decimals below.
  function amount(v) {
    if (Math.abs(v) >= 100) return Math.round(v).toLocaleString("en-US");
    return String(Math.round(v * 100) / 100);
  }
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
    var units = [];
    var series = [{}];
    var data = [doc.x];
    names.forEach(function (name, i) {
      var unit = (doc.units && doc.units[name]) || "";
      if (units.indexOf(unit) < 0) units.push(unit);
      series.push({ label: name, scale: unit, stroke: colors[i % colors.length], width: 2,
                    value: function (u, v) { return v == null ? "—" : amount(v) + " " + unit; },
                    points: { show: doc.x.length <= 31, size: 7 } });
      data.push(doc.lines[name]);
    });
    var axes = [{}];
    units.forEach(function (unit, i) {
      axes.push({ scale: unit, label: unit, size: 70, side: i === 0 ? 3 : 1,
                  grid: { show: i === 0 } });
    });
    var scales = { x: { time: true } };
    units.forEach(function (unit) {
      scales[unit] = { range: function (u, lo, hi) {
        if (unit === "%") return [0, 100];  // a rate reads best on its whole scale
        return [0, hi > 0 ? hi * 1.1 : 1];
      } };
    });
    el.textContent = "";
    var plot = new uPlot({
      width: Math.max(320, el.clientWidth || 800),
      height: 260,
      series: series,
      axes: axes,
      scales: scales,
      // The pages print times in UTC: so do the charts' axes and legends.
      tzDate: function (ts) { return uPlot.tzDate(new Date(ts * 1e3), "Etc/UTC"); },
    }, data, el);
    // After uPlot's own first legend update (which shows no point): show the last one.
    setTimeout(function () { plot.setLegend({ idx: doc.x.length - 1 }); }, 0);
  });
})();
