// The one chart component of the portal and the console: draws every
// <div data-chart-spec="ID"> from the JSON in <script id="ID"> (written by {% chart %},
// sluice/templatetags/charts.py) with uPlot (static/vendor/uplot-*/). Time runs along a UTC
// axis; hovering shows each series' value at that moment; limits (an allocation's guarantee,
// a pool's floor) are dashed lines labelled with their name and value. The scale is chosen on
// the server (sluice/charts.py), so the page's text and the drawing agree.
(() => {
  "use strict";

  const PALETTE = { brand: "#0b5cad", bad: "#a4161a", ok: "#1d6b32", warn: "#7a4b00",
                    violet: "#5b3a9c" };
  const INK = "#1b1f24", MUTED = "#4d5560", GRID = "#e3e7ec";
  const FONT = "12px system-ui, -apple-system, 'Segoe UI', Roboto, Arial, sans-serif";
  const INTEGER_STEPS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1e3, 2e3, 5e3, 1e4, 2e4, 5e4, 1e5,
                         2e5, 5e5, 1e6, 2e6, 5e6, 1e7, 2e7, 5e7, 1e8, 2e8, 5e8, 1e9, 1e10];

  // The same writing of numbers as the template filters (sluice/templatetags/numbers.py).
  const fixed = (decimals) => new Intl.NumberFormat("en-US", {
    minimumFractionDigits: decimals, maximumFractionDigits: decimals });
  const tick = new Intl.NumberFormat("en-US", { maximumFractionDigits: 2 });
  const compact = new Intl.NumberFormat("en-US", { notation: "compact",
                                                   maximumFractionDigits: 1 });
  const MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov",
                  "Dec"];
  const utc = (seconds) => new Date(seconds * 1000).toISOString().slice(0, 16)
    .replace("T", " ") + " UTC";

  function axisSize(u, values, axisIdx, cycleNum) {
    // Wide enough for the longest tick label, measured in the axis font.
    const axis = u.axes[axisIdx];
    if (cycleNum > 1) return axis._size;
    let size = axis.ticks.size + axis.gap + 4;
    const longest = (values || []).reduce((a, b) => (b.length > a.length ? b : a), "");
    if (longest) {
      u.ctx.font = FONT;
      size += u.ctx.measureText(longest).width;
    }
    return Math.ceil(size);
  }

  // A limit is a whole number of tokens/s or ms: written without decimals.
  const limitText = (value) => fixed(Number.isInteger(value) ? 0 : 1).format(value);

  function limitsDraw(u, spec) {
    const ctx = u.ctx, ratio = uPlot.pxRatio, lineHeight = 15 * ratio;
    const left = u.bbox.left, right = u.bbox.left + u.bbox.width;
    ctx.save();
    ctx.font = FONT.replace("12px", `${12 * ratio}px`);
    ctx.textAlign = "right";
    ctx.textBaseline = "bottom";
    // Top to bottom; a label that would overlap the one above goes under its own line.
    const lines = spec.limits.map((limit) => ({ limit,
      y: Math.round(u.valToPos(limit.value, "y", true)) })).sort((a, b) => a.y - b.y);
    let lowestLabel = -Infinity;
    for (const { limit, y } of lines) {
      ctx.strokeStyle = INK;
      ctx.lineWidth = 1.5 * ratio;
      ctx.setLineDash([6 * ratio, 4 * ratio]);
      ctx.beginPath();
      ctx.moveTo(left, y);
      ctx.lineTo(right, y);
      ctx.stroke();
      const label = `${limit.name} ${limitText(limit.value)} ${spec.unit}`;
      const width = ctx.measureText(label).width;
      const above = y - 3 * ratio - lowestLabel >= lineHeight;
      const base = above ? y - 3 * ratio : y + lineHeight;
      lowestLabel = base;
      ctx.fillStyle = "rgba(255, 255, 255, 0.9)";
      ctx.fillRect(right - width - 6 * ratio, base - 13 * ratio, width + 6 * ratio, 14 * ratio);
      ctx.fillStyle = INK;
      ctx.fillText(label, right - 3 * ratio, base);
    }
    ctx.restore();
  }

  // Time ticks in UTC, 24-hour clock; the date under the first tick and wherever it changes.
  function timeTicks(u, splits, axisIdx, space, increment) {
    let lastDay = "";
    return splits.map((seconds) => {
      const iso = new Date(seconds * 1000).toISOString();
      const day = `${MONTHS[Number(iso.slice(5, 7)) - 1]} ${Number(iso.slice(8, 10))}`;
      if (increment >= 86400) return day;
      const time = iso.slice(11, 16);
      const label = day !== lastDay ? `${time}\n${day}` : time;
      lastDay = day;
      return label;
    });
  }

  function options(spec, width) {
    const format = (v) => fixed(spec.decimals).format(v);
    const bars = spec.series.some((s) => s.bars);
    const axis = { stroke: MUTED, font: FONT, labelFont: FONT, grid: { stroke: GRID, width: 1 },
                   ticks: { stroke: GRID, width: 1 } };
    return {
      width, height: 220,
      tzDate: (seconds) => uPlot.tzDate(new Date(seconds * 1000), "Etc/UTC"),
      // Bars start at their bucket: the last one needs a bucket's room on the right.
      scales: { x: { time: true, range: (u, min, max) => [min, max + (bars ? spec.step : 0)] },
                y: { range: [0, spec.yMax] } },
      legend: { live: true },
      cursor: { drag: { x: true, y: false } },
      series: [
        { label: "Time (UTC)", value: (u, v) => (v == null ? "–" : utc(v)) },
        ...spec.series.map((s) => {
          const colour = PALETTE[s.color] || PALETTE.brand;
          return {
            label: s.name, stroke: colour, width: s.bars ? 1 : 2,
            fill: s.bars ? `${colour}cc` : `${colour}1a`,
            paths: s.bars ? uPlot.paths.bars({ size: [0.8, 48], align: 1 }) : undefined,
            points: { show: false },
            value: (u, v) => (v == null ? "–" : `${format(v)} ${spec.unit}`),
          };
        }),
      ],
      axes: [
        { ...axis, label: "UTC", labelSize: 18, space: 64, values: timeTicks },
        { ...axis, label: spec.unit, labelSize: 18, size: axisSize,
          incrs: spec.decimals ? undefined : INTEGER_STEPS,
          values: (u, splits) => splits.map((v) => (v >= 1e6 ? compact : tick).format(v)) },
      ],
      hooks: { draw: [(u) => limitsDraw(u, spec)] },
    };
  }

  function chartDraw(plot) {
    const source = document.getElementById(plot.dataset.chartSpec);
    if (!source || plot.dataset.drawn) return;
    plot.dataset.drawn = "true";
    const spec = JSON.parse(source.textContent);
    const data = [spec.x, ...spec.series.map((s) => s.values)];
    const chart = new uPlot(options(spec, plot.clientWidth || 600), data, plot);
    new ResizeObserver(() => {
      if (plot.clientWidth && plot.clientWidth !== chart.width) {
        chart.setSize({ width: plot.clientWidth, height: chart.height });
      }
    }).observe(plot);
  }

  function chartsDraw(root) {
    root.querySelectorAll("[data-chart-spec]").forEach(chartDraw);
  }

  document.addEventListener("DOMContentLoaded", () => chartsDraw(document));
  // htmx swaps in fresh fragments (the portal's live usage every 10 s): draw their charts.
  document.addEventListener("htmx:load", (event) => chartsDraw(event.target));
})();
