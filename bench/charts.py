"""The report's pictures (SVG, matplotlib)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402
from tracecsv import read_shaping, read_trace  # noqa: E402

# Keep the SVG text as text, and the files stable from run to run.
plt.rcParams["svg.fonttype"] = "none"
plt.rcParams["svg.hashsalt"] = "sluice-bench"


_thousands = matplotlib.ticker.FuncFormatter(lambda x, _: f"{x:,.0f}")


def _trailing_counts(times_ms: list[int], window_ms: int, end_ms: int) -> tuple[list[float], list[int]]:
    """Events in the trailing window, sampled every 10 ms: (seconds, counts)."""
    xs, ys = [], []
    for t in range(0, end_ms, 10):
        xs.append(t / 1000)
        ys.append(sum(1 for e in times_ms if t - window_ms < e <= t))
    return xs, ys


def throughput(by_conc: dict, limiter: dict, path: Path, title: str):
    """Requests/s of every row, one bar per concurrency, with the no-op wasm
    filter's level marked; the limiter alone in a panel of its own."""
    concs = sorted(by_conc)
    ids = list(dict.fromkeys(i for c in concs for i in by_conc[c]))
    labels = {s.row_id: s.label for c in concs for s in by_conc[c].values()}
    height = 0.8 / max(1, len(concs))
    panels = 2 if limiter else 1
    fig, axes = plt.subplots(panels, 1, figsize=(10, 0.36 * len(ids) + 1.6 + (1.4 if limiter else 0)),
                             gridspec_kw={"height_ratios": [len(ids) + 1, 3][:panels]}, squeeze=False)
    ax = axes[0][0]
    colors = ["#4C72B0", "#DD8452", "#55A868"]
    for k, c in enumerate(concs):
        ys = [i + k * height for i in range(len(ids))]
        vals = [by_conc[c][i].rps if i in by_conc[c] else 0 for i in ids]
        ax.barh(ys, vals, height=height, color=colors[k % len(colors)], label=f"--concurrency {c}")
        noop = by_conc[c].get("noop-wasm")
        if noop:
            ax.axvline(noop.rps, color=colors[k % len(colors)], linestyle=":", linewidth=1)
    ax.set_yticks([i + height * (len(concs) - 1) / 2 for i in range(len(ids))])
    ax.set_yticklabels([labels[i] for i in ids], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("requests per second (median; dotted: no-op wasm filter)")
    ax.set_title(title, fontsize=10)
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(axis="x", alpha=0.3)
    ax.xaxis.set_major_formatter(_thousands)
    if limiter:
        lx = axes[1][0]
        names = [s.label for s in limiter.values()]
        lx.barh(range(len(names)), [s.rps for s in limiter.values()], color="#8172B3", height=0.6)
        lx.set_yticks(range(len(names)))
        lx.set_yticklabels(names, fontsize=8)
        lx.invert_yaxis()
        lx.set_xlabel("checks per second (median)")
        lx.grid(axis="x", alpha=0.3)
        lx.xaxis.set_major_formatter(_thousands)
    fig.tight_layout()
    fig.savefig(path, metadata={"Date": None})
    plt.close(fig)




def algorithms(trace_csv: str, path: Path):
    """One panel per algorithm: every arrival (admitted or denied) and the
    number admitted in the trailing window, against the limit."""
    requests, window_ms, per_algo = read_trace(trace_csv)
    fig, axes = plt.subplots(len(per_algo), 1, figsize=(10, 1.7 * len(per_algo) + 0.8), sharex=True)
    end_ms = max(t for rows in per_algo.values() for t, _ in rows) + window_ms // 2
    for ax, (algo, rows) in zip(axes, per_algo.items()):
        admitted = [t for t, a in rows if a]
        denied = [t for t, a in rows if not a]
        xs, ys = _trailing_counts(admitted, window_ms, end_ms)
        ax.plot(xs, ys, color="#4C72B0", linewidth=1.2, label=f"admitted in the last {window_ms / 1000:g} s")
        ax.axhline(requests, color="#C44E52", linestyle="--", linewidth=1,
                   label=f"limit: {requests} per {window_ms / 1000:g} s")
        top = max(max(ys, default=0), requests) * 1.15 + 2
        ax.scatter([t / 1000 for t in admitted], [top] * len(admitted), marker="|", color="#55A868", s=60,
                   label="arrival, admitted")
        ax.scatter([t / 1000 for t in denied], [top + 2.5] * len(denied), marker="|", color="#8C8C8C", s=60,
                   label="arrival, denied")
        for b in range(0, end_ms, window_ms):
            ax.axvline(b / 1000, color="#CCCCCC", linewidth=0.8, zorder=0)
        ax.set_ylim(0, top + 5)
        ax.set_ylabel(algo.replace("_", " "), fontsize=9)
        ax.text(0.995, 0.05, f"{len(admitted)} of {len(rows)} admitted", transform=ax.transAxes,
                ha="right", fontsize=8)
    axes[0].legend(loc="upper center", bbox_to_anchor=(0.5, 1.6), ncol=4, fontsize=8, frameon=False)
    axes[-1].set_xlabel("time (s); vertical lines: fixed-window boundaries")
    fig.suptitle("One bursty trace through each algorithm (sluice-core decisions)", fontsize=10, y=0.995)
    fig.tight_layout()
    fig.savefig(path, metadata={"Date": None})
    plt.close(fig)




def shaping(shaping_csv: str, path: Path):
    """One panel per mode of one GCRA limit (reject, soft, delay, elastic):
    every arrival (admitted, borrowed, delayed with a line to when it was
    served, or denied) and the number served in the trailing window, against
    the limit."""
    params, per_mode = read_shaping(shaping_csv)
    requests, window_ms = params["limit"], params["window_ms"]
    soft = params.get("soft_percent", 0)
    max_delay_s = params.get("max_delay_ms", 0) / 1000
    ceiling = params.get("ceiling", 0)
    titles = {"reject": "reject (plain)", "soft": f"soft_percent: {soft}",
              "delay": f"delay, max_delay: {max_delay_s:g} s",
              "elastic": f"elastic, ceiling: {ceiling}\npool: {params.get('pool', 0)} per "
                         f"{params.get('pool_window_ms', 0) / 1000:g} s"}
    fig, axes = plt.subplots(len(per_mode), 1, figsize=(10, 1.9 * len(per_mode) + 0.8), sharex=True)
    end_ms = max(max(t, s or 0) for rows in per_mode.values() for t, _, s in rows) + window_ms // 2
    for ax, (mode, rows) in zip(axes, per_mode.items()):
        served = sorted(s for _, _, s in rows if s is not None)
        xs, ys = _trailing_counts(served, window_ms, end_ms)
        ax.plot(xs, ys, color="#4C72B0", linewidth=1.2, label=f"served in the last {window_ms / 1000:g} s")
        ax.axhline(requests, color="#C44E52", linestyle="--", linewidth=1,
                   label=f"limit: {requests} per {window_ms / 1000:g} s")
        if mode == "soft" and soft:
            ax.axhline(requests + requests * soft // 100, color="#C44E52", linestyle=":", linewidth=1,
                       label=f"soft allowance: +{soft} %")
        if mode == "elastic" and ceiling:
            ax.axhline(ceiling, color="#8172B2", linestyle=":", linewidth=1, label=f"elastic ceiling: {ceiling}")
        top = max(max(ys, default=0), requests) * 1.15 + 2
        admitted = [t for t, o, _ in rows if o == "admitted"]
        delayed = [(t, s) for t, o, s in rows if o == "delayed" and s is not None]
        denied = [t for t, o, _ in rows if o == "denied"]
        borrowed = [t for t, o, _ in rows if o == "borrowed"]
        ax.scatter([t / 1000 for t in admitted], [top] * len(admitted), marker="|", color="#55A868", s=60,
                   label="arrival, admitted")
        if borrowed:
            ax.scatter([t / 1000 for t in borrowed], [top] * len(borrowed), marker="|", color="#8172B2", s=60,
                       label="arrival, borrowed from the pool")
        if delayed:
            for t, s in delayed:
                ax.plot([t / 1000, s / 1000], [top + 2.5, top], color="#DD8452", linewidth=0.7, alpha=0.8)
            ax.scatter([t / 1000 for t, _ in delayed], [top + 2.5] * len(delayed), marker="|", color="#DD8452",
                       s=60, label="arrival, delayed")
            ax.scatter([s / 1000 for _, s in delayed], [top] * len(delayed), marker="v", color="#DD8452", s=14,
                       label="delayed arrival, served")
        ax.scatter([t / 1000 for t in denied], [top + 5] * len(denied), marker="|", color="#8C8C8C", s=60,
                   label="arrival, denied")
        ax.set_ylim(0, top + 7.5)
        ax.set_ylabel(titles.get(mode, mode), fontsize=9)
        note = f"{len(admitted)} admitted"
        if borrowed:
            note += f", {len(borrowed)} borrowed"
        if delayed:
            note += f", {len(delayed)} delayed"
        ax.text(0.995, 0.05, f"{note}, {len(denied)} denied of {len(rows)}", transform=ax.transAxes,
                ha="right", fontsize=8)
    handles = {}
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lab, h)
    axes[0].legend(list(handles.values()), list(handles), loc="upper center", bbox_to_anchor=(0.5, 1.55),
                   ncol=4, fontsize=8, frameon=False)
    axes[-1].set_xlabel("time (s)")
    fig.suptitle("One bursty trace through one gcra limit four ways (sluice-core decisions)", fontsize=10, y=0.995)
    fig.tight_layout()
    fig.savefig(path, metadata={"Date": None})
    plt.close(fig)
