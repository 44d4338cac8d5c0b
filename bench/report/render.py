"""``mhab report``: the sections rendered as report.md (figures beside it) and a self-contained
report.html, written atomically, then published where the runs were logged to MLflow."""

from __future__ import annotations

import base64
import html
from pathlib import Path

from bench.records.atomic import atomic_write, atomic_write_text
from bench.records.table import read_records
from bench.report.publish import publish_report
from bench.report.sections import Section, build


def to_markdown(sections: list[Section], image_dir: str = "report_files") -> tuple[str, dict[str, bytes]]:
    lines = ["# mha-bench report", ""]
    images: dict[str, bytes] = {}
    for s in sections:
        lines += [f"## {s.title}", ""]
        for block in s.markdown:
            lines += [block, ""]
        for i, (caption, png) in enumerate(s.figures):
            name = f"{image_dir}/{s.key}-{i}.png"
            images[name] = png
            lines += [f"![{caption}]({name})", "", f"*{caption}*", ""]
    return "\n".join(lines), images


def to_html(sections: list[Section]) -> str:
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        "<title>mha-bench report</title>",
        "<style>body{font-family:sans-serif;max-width:1100px;margin:auto;padding:1em}"
        "table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:2px 6px;"
        "font-size:13px}img{max-width:100%}figcaption{font-size:13px;color:#444}</style>",
        "</head><body>",
        "<h1>mha-bench report</h1>",
        "<nav><ul>",
    ]
    parts += [f'<li><a href="#{s.key}">{html.escape(s.title)}</a></li>' for s in sections]
    parts.append("</ul></nav>")
    for s in sections:
        parts.append(f'<section id="{s.key}"><h2>{html.escape(s.title)}</h2>')
        parts += s.html
        for caption, png in s.figures:
            data = base64.b64encode(png).decode()
            parts.append(
                f'<figure><img src="data:image/png;base64,{data}" alt="{html.escape(caption)}">'
                f"<figcaption>{html.escape(caption)}</figcaption></figure>"
            )
        parts.append("</section>")
    parts.append("</body></html>")
    return "\n".join(parts)


def write_report(results_dir: str | Path) -> list[Path]:
    results_dir = Path(results_dir)
    all_records = read_records(results_dir)
    sections = build(results_dir, all_records)
    markdown, images = to_markdown(sections)
    for name, png in images.items():
        atomic_write(results_dir / name, lambda f, data=png: f.write(data))
    written = [
        atomic_write_text(results_dir / "report.md", markdown),
        atomic_write_text(results_dir / "report.html", to_html(sections)),
    ]
    publish_report(results_dir, all_records, written)
    return written
