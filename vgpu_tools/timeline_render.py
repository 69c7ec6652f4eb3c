"""A trace-event JSON (`vgpu timeline`'s) drawn without a browser: as an SVG picture
(one row per thread with its spans, the counters as step graphs, the flows as
arrows; `vgpu timeline --from FILE.json --svg FILE.svg`) or as text for a terminal
(`--text`)."""
from __future__ import annotations

import html
import zlib

GPU_PID = 1 << 30  # vgpu_tools.timeline's track group of the rings

ROW, GAP, LABEL, COUNTER = 22, 6, 190, 40
COLORS = {"job": "#e8743b", "userq": "#e8743b", "ioctl": "#5b8ff9", "kernel": "#19a979", "memcpy": "#945ecf",
          "sync": "#c9a227"}


def _color(cat: str, name: str) -> str:
    if cat in COLORS:
        return COLORS[cat]
    return f"hsl({zlib.crc32(name.encode()) % 360},55%,55%)"


def render_svg(trace: dict, width: int = 1400, title: str = "") -> str:
    """The SVG text of `trace` (a dict with "traceEvents")."""
    events = trace["traceEvents"]
    spans = [e for e in events if e.get("ph") == "X"]
    counters = [e for e in events if e.get("ph") == "C"]
    if not spans:
        return f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="40"><text x="10" y="25">' \
               f'no spans</text></svg>'
    t0 = min(e["ts"] for e in spans)
    t1 = max(e["ts"] + e["dur"] for e in spans)
    scale = (width - LABEL - 10) / max(t1 - t0, 1.0)

    def x(ts: float) -> float:
        return LABEL + (ts - t0) * scale

    pnames = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"}
    tnames = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
              if e.get("ph") == "M" and e["name"] == "thread_name"}
    order = sorted({(e["pid"], e["tid"]) for e in spans}, key=lambda k: (k[0] != GPU_PID, k[0], k[1]))
    out, y = [], 34
    rows: dict[tuple[int, int], float] = {}
    last_pid = None
    for key in order:
        if key[0] != last_pid:
            last_pid = key[0]
            out.append(f'<text x="4" y="{y + 12}" font-weight="bold">{html.escape(pnames.get(key[0], str(key[0])))}</text>')
            y += ROW
        rows[key] = y
        out.append(f'<text x="14" y="{y + 15}">{html.escape(tnames.get(key, str(key[1])))}</text>')
        out.append(f'<line x1="{LABEL}" x2="{width - 10}" y1="{y + ROW}" y2="{y + ROW}" stroke="#eee"/>')
        y += ROW + GAP
    for e in spans:
        ry = rows[(e["pid"], e["tid"])]
        w = max(e["dur"] * scale, 1.0)
        out.append(f'<rect x="{x(e["ts"]):.1f}" y="{ry + 2}" width="{w:.1f}" height="{ROW - 4}" '
                   f'fill="{_color(e.get("cat", ""), e["name"])}"><title>{html.escape(e["name"])}</title></rect>')
        if w > 7 * len(e["name"]) * 0.75:
            out.append(f'<text x="{x(e["ts"]) + 2:.1f}" y="{ry + 15}" fill="white" font-size="11">'
                       f'{html.escape(e["name"])}</text>')
    # counters: a step graph per name
    for name in sorted({c["name"] for c in counters}):
        pts = sorted((c["ts"], next(iter(c["args"].values()))) for c in counters if c["name"] == name)
        top = max(v for _, v in pts) or 1
        path, prev = [], None
        for ts, v in pts:
            cx = min(max(x(ts), LABEL), width - 10)
            cy = y + COUNTER - COUNTER * v / top
            path.append(f"{cx:.1f},{prev if prev is not None else cy:.1f} {cx:.1f},{cy:.1f}")
            prev = cy
        path.append(f"{width - 10},{prev:.1f}")
        out.append(f'<text x="14" y="{y + COUNTER / 2 + 5}">{html.escape(name)}</text>')
        out.append(f'<polyline fill="none" stroke="#555" points="{" ".join(path)}"/>')
        y += COUNTER + GAP
    # flows: s -> f arrows
    starts = {e["id"]: e for e in events if e.get("ph") == "s"}
    for f in (e for e in events if e.get("ph") == "f"):
        s = starts.get(f["id"])
        if s is None or (s["pid"], s["tid"]) not in rows or (f["pid"], f["tid"]) not in rows:
            continue
        out.append(f'<line x1="{x(s["ts"]):.1f}" y1="{rows[(s["pid"], s["tid"])] + ROW / 2}" '
                   f'x2="{x(f["ts"]):.1f}" y2="{rows[(f["pid"], f["tid"])] + ROW / 2}" stroke="#333" '
                   f'stroke-width="0.8" marker-end="url(#arrow)"/>')
    # time axis
    step = _tick(t1 - t0)
    axis, t = [], 0.0
    while t <= t1 - t0:
        axis.append(f'<line x1="{x(t0 + t):.1f}" x2="{x(t0 + t):.1f}" y1="20" y2="{y}" stroke="#ddd"/>'
                    f'<text x="{x(t0 + t) + 2:.1f}" y="16" font-size="11">{t / 1000:g} ms</text>')
        t += step
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{y + 10}" font-family="sans-serif" '
            f'font-size="12"><defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6" '
            f'markerHeight="6" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#333"/></marker></defs>'
            f'<rect width="100%" height="100%" fill="white"/>'
            + (f'<text x="4" y="14" font-weight="bold">{html.escape(title)}</text>' if title else ""))
    return head + "".join(axis) + "".join(out) + "</svg>\n"


def _tick(span_us: float) -> float:
    """A round tick step giving 5 to 10 ticks over `span_us` microseconds."""
    step = 1.0
    while span_us / step > 10:
        for m in (2, 2.5, 2):
            step *= m
            if span_us / step <= 10:
                break
    return step


# Text: one character per column; the span's kind decides the character.
TEXT_MARKS = {"job": "#", "userq": "#", "kernel": "K", "memcpy": "=", "sync": "~"}
IOCTL_MARKS = {"AMDGPU_CS": "C", "AMDGPU_WAIT_CS": "W", "AMDGPU_WAIT_FENCES": "W", "SYNCOBJ_WAIT": "W",
               "SYNCOBJ_TIMELINE_WAIT": "W", "AMDGPU_GEM_CREATE": "G", "AMDGPU_GEM_VA": "V"}
SPARK = " ▁▂▃▄▅▆▇█"


def render_text(trace: dict, width: int = 100) -> str:
    """`trace` as lines of text `width` columns wide: a row per thread, a sparkline
    per counter, a time axis and a legend."""
    events = trace["traceEvents"]
    spans = [e for e in events if e.get("ph") == "X"]
    if not spans:
        return "no spans\n"
    label = 22
    cols = width - label - 1
    t0 = min(e["ts"] for e in spans)
    t1 = max(e["ts"] + e["dur"] for e in spans)
    scale = cols / max(t1 - t0, 1.0)
    pnames = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"}
    tnames = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
              if e.get("ph") == "M" and e["name"] == "thread_name"}
    rows: dict = {}
    # the marks that matter most drawn last, so they stay visible where spans share a column
    rank = {"-": 0, "G": 1, "V": 1, "=": 2, "~": 2, "C": 3, "W": 3, "K": 4, "#": 4}

    def mark_of(e) -> str:
        return TEXT_MARKS.get(e.get("cat", ""), IOCTL_MARKS.get(e["name"], "-"))

    for e in sorted(spans, key=lambda e: (rank[mark_of(e)], -e["dur"])):
        row = rows.setdefault((e["pid"], e["tid"]), [" "] * cols)
        c0 = min(int((e["ts"] - t0) * scale), cols - 1)
        c1 = max(c0 + 1, min(int((e["ts"] + e["dur"] - t0) * scale), cols))
        row[c0:c1] = [mark_of(e)] * (c1 - c0)
    step = _tick(t1 - t0)
    axis = [" "] * cols
    t = 0.0
    while t <= t1 - t0:
        text = f"|{t / 1000:g} ms"
        c = int(t * scale)
        if c + len(text) <= cols:
            axis[c:c + len(text)] = list(text)
        t += step
    out = [" " * label + " " + "".join(axis)]
    last_pid = None
    for key in sorted(rows, key=lambda k: (k[0] != GPU_PID, k[0], k[1])):
        if key[0] != last_pid:
            last_pid = key[0]
            out.append(pnames.get(key[0], str(key[0]))[:width])
        out.append(f"  {tnames.get(key, str(key[1]))[:label - 2]:<{label - 2}} " + "".join(rows[key]).rstrip())
    for name in sorted({e["name"] for e in events if e.get("ph") == "C"}):
        pts = sorted((e["ts"], next(iter(e["args"].values()))) for e in events
                     if e.get("ph") == "C" and e["name"] == name)
        top = max(v for _, v in pts) or 1
        line, value, i = [], 0, 0  # nothing before the first sample
        for c in range(cols):
            peak = value  # the highest value the column saw: a short pulse stays visible
            while i < len(pts) and pts[i][0] < t0 + (c + 1) / scale:
                value = pts[i][1]
                peak = max(peak, value)
                i += 1
            line.append(SPARK[round(8 * peak / top)])
        out.append(f"  {name[:label - 2]:<{label - 2}} " + "".join(line).rstrip())
    out.append("")
    out.append("# job on a ring or a user-queue run   K kernel launch   = memcpy/memset   ~ synchronize   "
               "C CS   W wait   G GEM_CREATE   V GEM_VA   - other ioctl")
    return "\n".join(out) + "\n"
