"""Small Sphinx fixes for the book's website (loaded via `_config.yml`: sphinx.local_extensions).

- Inline scripts added by extensions during the build (sphinx-thebe's
  `const THEBE_JS_URL = ...`, sphinx-togglebutton's selector) end up twice in
  every page with Sphinx 7.4, once registered with the file name `None` and once
  with `""`. The second `const` declaration is a JavaScript error on every page.
  This drops exact duplicates (same file, same attributes, same inline body).
- Bibliography labels in the author-year form of the in-text citations: the
  text cites "[Vaswani et al., 2017]", so the references page lists that entry
  under the same label instead of a number ("[37]") the reader cannot match.
  `_config.yml` selects it as `bibtex_default_style: book_author_year`.
- The theme's colour mode: without a `default_mode`, pydata-sphinx-theme logs
  "Got invalid theme mode" as an error on every page; "auto" (follow the
  reader's system setting) is what it falls back to anyway. And one search
  field: an unset `navbar_persistent` adds a header bar with a second one.
- Code keeps its indentation when a narrow screen wraps it (issue 36): a small
  script puts each line of a code cell in a `<span class="ab-line">` that carries
  the line's indentation (`--indent`), and book.css hangs the wrapped rest of the
  line under it instead of at the left margin. `ab.show_source` writes the same
  spans itself (src/attention_book/book/source.py).
- Accessibility of the theme's pages (issue 38; tests/test_accessibility.py runs
  axe-core on every page): once the site is written, `accessible_pages` gives the
  navigation's fold buttons (`<summary>`) a name ("Sections of <chapter>"), lets
  the search button be named by its visible text ("Search Ctrl+K") instead of an
  `aria-label` that leaves out part of it, gives the references' entries the role
  their list expects (`listitem`, not the deprecated `doc-biblioentry`), and
  copies each figure's text equivalent from its PNG (tEXt `ab-alt`, written by
  src/attention_book/core/plot.py) into its `alt` attribute, where Sphinx would
  put the file's path.
- Explorers' phone copies out of the page (issue 38): an explorer's output carries its frames'
  phone copies inline (`<script class="ab-explorer-phone">`, src/attention_book/book/explorer.py);
  `explorer_phone_files` writes each copy to `_static/explorers/<name>/<hash>.png` and leaves the
  file names in the page, so the copies weigh nothing until a phone's player loads the one on show.
- A practice notebook on every exercises page (issues 36, 37): a learner had no notebook to work in
  (the page's download holds the solutions, its Colab button opens the repository's notebook).
  `practice_notebooks` finds the committed notebooks (the staged ones are the website's edition,
  solutions folded in) and writes the student edition of each `notebooks/chNN_exercises.ipynb`,
  without the hidden checks of the book's own answers (scripts/student_edition.py's
  `practice_edition`), to `_static/practice/chNN_exercises.ipynb`; `add_practice_line` puts one
  line with a download link to it right under the page's title.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import html
import json
import math
import os
import posixpath
import re
import sys
from pathlib import Path
from typing import Any

from pybtex.plugin import register_plugin
from pybtex.richtext import Text
from pybtex.style.formatting.plain import Style as PlainStyle
from pybtex.style.labels import BaseLabelStyle


def _key(script: Any) -> tuple:
    filename = getattr(script, "filename", script) or ""
    attributes = getattr(script, "attributes", {}) or {}
    return (str(filename), tuple(sorted((k, str(v)) for k, v in attributes.items())))


def _last_name(person) -> str:
    latex = " ".join(person.prelast_names + person.last_names)
    return Text.from_latex(latex).render_as("text").strip() or "Anon."


def author_year(entry) -> str:
    """ "Last", "Last and Other" or "Last et al.", then ", year"."""
    people = entry.persons.get("author") or entry.persons.get("editor") or []
    names = [_last_name(p) for p in people]
    if not names:
        who = re.sub(r"[{}]", "", entry.fields.get("title", "Anon."))
    elif len(names) == 1:
        who = names[0]
    elif len(names) == 2:
        who = f"{names[0]} and {names[1]}"
    else:
        who = f"{names[0]} et al."
    return f"{who}, {entry.fields.get('year', 'n.d.')}"


class AuthorYearLabels(BaseLabelStyle):
    def format_labels(self, sorted_entries):
        labels = [author_year(e) for e in sorted_entries]
        seen: dict[str, int] = {}
        for label in labels:
            seen[label] = seen.get(label, 0) + 1
        counter: dict[str, int] = {}
        for label in labels:  # "Devlin et al., 2019a", "... 2019b" when two share a label
            if seen[label] > 1:
                counter[label] = counter.get(label, 0) + 1
                yield label + "abcdefghijklmnopqrstuvwxyz"[counter[label] - 1]
            else:
                yield label


class AuthorYearStyle(PlainStyle):
    default_label_style = "book_author_year"
    default_sorting_style = "author_year_title"


register_plugin("pybtex.style.labels", "book_author_year", AuthorYearLabels)
register_plugin("pybtex.style.formatting", "book_author_year", AuthorYearStyle)


def dedupe_scripts(app, pagename, templatename, context, doctree) -> None:
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, unique = set(), []
    for script in scripts:
        key = _key(script)
        if key not in seen:
            seen.add(key)
            unique.append(script)
    scripts[:] = unique


def default_theme_mode(app, config) -> None:
    context = dict(config.html_context or {})  # the theme reads it from the page context
    context.setdefault("default_mode", "auto")
    config.html_context = context
    # pydata-sphinx-theme 0.17 fills an unset navbar_persistent with its search field, which puts
    # a whole header bar above the page holding a second "Search Ctrl+K" at 1280 px (a reader saw
    # two stacked); the book theme's own search (sidebar, and the article header's button on a
    # phone) stays.
    options = dict(config.html_theme_options or {})
    options.setdefault("navbar_persistent", [])
    config.html_theme_options = options


# Pygments closes its spans at every line end, so each line's HTML stands alone.
# A line wraps at its spaces; a word longer than LONG_WORD characters
# (`torch.bmm(self.dropout(self.attention_weights),`) also gets break opportunities
# (`<wbr>`, which adds no text: copying the code gives the source unchanged) after `.`,
# `(`, `[` and `,` and before `=`, never inside a name or a number, so that on a phone
# no 88-character line makes its code box scroll (tests/test_site_layout.py).
CODE_LINES_JS = """
var LONG_WORD = 16;
function breakAfter(text, i) {  // may the line break between text[i - 1] and text[i]?
  var before = text[i - 1], after = text[i];
  if (".([,".indexOf(before) >= 0) {
    if (/[)\\],.]/.test(after)) { return false; }  // `()`, `[]`, `),`: keep the pair together
    if (/^[^\\s()\\[\\]]{1,3}[)\\]]/.test(text.slice(i, i + 5))) { return false; }  // nor `[i]`, `(x)`
    return !(before === "." && (/[0-9]/.test(after) || /[0-9]/.test(text[i - 2] || "")));
  }
  return after === "=" && !/[=!<>+\\-*\\/%&|^:@]/.test(before) && text[i + 1] !== "=";
}
function breakLongWords(line) {
  var nodes = [], text = "";
  var walker = document.createTreeWalker(line, NodeFilter.SHOW_TEXT);
  for (var node = walker.nextNode(); node; node = walker.nextNode()) {
    nodes.push([node, text.length]);
    text += node.data;
  }
  var breaks = [], word = /\\S+/g, m;
  while ((m = word.exec(text)) !== null) {
    if (m[0].length <= LONG_WORD) { continue; }
    for (var i = m.index + 1; i < m.index + m[0].length; i++) {
      if (breakAfter(text, i)) { breaks.push(i); }
    }
  }
  for (var b = breaks.length - 1, n = nodes.length - 1; b >= 0; b--) {  // last first: offsets stay valid
    while (nodes[n][1] >= breaks[b]) { n--; }  // the text node holding the break (never at its start)
    var rest = nodes[n][0].splitText(breaks[b] - nodes[n][1]);
    rest.parentNode.insertBefore(document.createElement("wbr"), rest);
  }
}
document.addEventListener("DOMContentLoaded", function () {
  // Code cells, and the Python blocks of the prose (an exercise's scaffold, scripts/editions.py).
  document.querySelectorAll("div.cell_input pre, div.highlight-python pre").forEach(function (pre) {
    if (pre.querySelector(".ab-line")) { return; }
    var lines = pre.innerHTML.split("\\n");
    if (lines.length > 1 && lines[lines.length - 1] === "") { lines.pop(); }
    pre.innerHTML = lines.map(function (html) {
      var text = html.replace(/<[^>]*>/g, "");
      var indent = text.length - text.replace(/^ +/, "").length;
      html = html.replace(/^((?:<span[^>]*>(?:<\\/span>)?)*)( +)/, '$1<span class="ab-indent">$2</span>');
      return '<span class="ab-line" style="--indent: ' + indent + 'ch">' + html + "\\n</span>";
    }).join("");
    pre.querySelectorAll(".ab-line").forEach(breakLongWords);
  });
  document.querySelectorAll(".ab-source pre .ab-line").forEach(breakLongWords);  // ab.show_source
  // A printed output whose lines line up in columns (two or more lines with a run of two
  // spaces inside: a table, a tensor) keeps its lines whole on a phone and scrolls in its box
  // (book.css); prose-like output (a message, a sentence) wraps as on the desktop.
  document.querySelectorAll("div.cell_output pre").forEach(function (pre) {
    var lines = pre.textContent.split("\\n").filter(function (l) { return l.trim(); });
    var aligned = lines.filter(function (l) { return /\\S {2,}\\S/.test(l); }).length;
    if (lines.length >= 2 && aligned >= 2) { pre.classList.add("ab-columns"); }
  });
});
"""


# A figure or explorer frame kept wider than a phone's column (so that its text stays legible),
# and on a phone a printed output or a code line too long for the column (book.css), scrolls
# sideways inside its own box; a box that scrolls is reachable by keyboard (Tab, then the arrow
# keys) and named, and only while it scrolls.
SCROLL_BOXES_JS = """
(function () {
  var boxes = [["#main-content div.cell_output, .ab-explorer-frame", "Figure, scrolls sideways", "img"],
               ["#main-content div.cell_output pre", "Output, scrolls sideways", null],
               ["#main-content div.cell_input pre", "Code, scrolls sideways", null]];
  function mark() {
    boxes.forEach(function (kind) {
      document.querySelectorAll(kind[0]).forEach(function (box) {
        if (kind[2] && !box.querySelector(kind[2])) { return; }
        if (box.scrollWidth > box.clientWidth + 1) {
          if (box.classList.contains("ab-scrolls")) { return; }
          box.tabIndex = 0;
          box.setAttribute("role", "group");
          box.setAttribute("aria-label", kind[1]);
          box.classList.add("ab-scrolls");
        } else if (box.classList.contains("ab-scrolls")) {
          box.removeAttribute("tabindex");
          box.removeAttribute("role");
          box.removeAttribute("aria-label");
          box.classList.remove("ab-scrolls");
        }
      });
    });
  }
  window.addEventListener("load", mark);
  window.addEventListener("resize", mark);
})();
"""


ALT_TEXT_KEY = "ab-alt"  # = attention_book.core.plot.ALT_TEXT_KEY (the build does not import the package)
TEXT_SIZE_KEY = "ab-min-text-px"  # = attention_book.core.plot.TEXT_SIZE_KEY
MIN_TEXT_PX = 9.0  # = attention_book.core.plot.MIN_TEXT_PX
PHONE_PNG_KEY = "ab-phone-png"  # = attention_book.core.plot.PHONE_PNG_KEY
PHONE_MEDIA = "(max-width: 600px)"  # where a figure's phone copy replaces it (book.css)
NO_ALT_TEXT = "Figure (no description recorded)"
_NAV_SUMMARY = re.compile(
    r'(<a class="[^"]*reference internal[^"]*"[^>]*>(?P<title>(?:(?!</a>).)*)</a>\s*<details(?:\s[^>]*)?>\s*)<summary>', re.DOTALL)
_SUMMARY = re.compile(r"<summary(?P<attrs>[^>]*)>(?P<inner>(?:(?!</summary>).)*)</summary>", re.DOTALL)
_SEARCH_BUTTON = re.compile(r'(<button\b[^>]*?)\s+aria-label="Search"([^>]*>\s*<i [^>]*></i>\s*'
                            r'<span class="search-button__default-text">)')
_THEME_ICON = re.compile(r'<i class="theme-switch [^>]*>')
_IMG = re.compile(r"<picture\b.*?</picture>|<img\b[^>]*>", re.DOTALL)
_ATTR = re.compile(r'\b(src|alt)="([^"]*)"')


def _text(fragment: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


def png_alt_text(path: Path) -> str | None:
    """The text equivalent a PNG carries (tEXt/iTXt `ab-alt`), None if it has none."""
    try:
        from PIL import Image

        with Image.open(path) as image:
            text = getattr(image, "text", {}).get(ALT_TEXT_KEY)
    except (OSError, ValueError):
        return None
    return " ".join(text.split()) if text else None


def png_phone_width(path: Path) -> int:
    """The narrowest width (CSS px) at which the PNG's smallest text (tEXt `ab-min-text-px`)
    is still MIN_TEXT_PX high; 0 without a record (= attention_book.book.explorer.phone_width)."""
    try:
        from PIL import Image

        with Image.open(path) as image:
            px, natural = getattr(image, "text", {}).get(TEXT_SIZE_KEY), image.width
    except (OSError, ValueError):
        return 0
    try:
        px = float(px)
    except (TypeError, ValueError):
        return 0
    return min(natural, math.ceil(natural * MIN_TEXT_PX / px)) if px > 0 else 0


def png_phone_copy(path: Path) -> Path | None:
    """Write the phone copy a figure's PNG carries (tEXt `ab-phone-png`, from
    attention_book.core.plot.phone_png: the plots restacked for a 390 px column) next to it as
    `<name>-phone.png`; None if it carries none. Figures without one (hand-placed diagrams, and
    the explorers' frames, which are not notebook figures) keep --ab-phone-width and scroll."""
    import base64
    import binascii

    try:
        from PIL import Image

        with Image.open(path) as image:
            text = getattr(image, "text", {}).get(PHONE_PNG_KEY)
    except (OSError, ValueError):
        return None
    if not text:
        return None
    target = path.with_name(path.stem + "-phone.png")
    if not target.exists():
        try:
            target.write_bytes(base64.b64decode(text, validate=True))
        except (binascii.Error, ValueError, OSError):
            return None
    return target


def _phone_picture(tag: str, page: Path, path: Path, src: str) -> str:
    """``tag`` inside a `<picture>` whose phone source is the PNG's phone copy, if it has one."""
    phone = png_phone_copy(path)
    if phone is None:
        return tag
    phone_src = src.rsplit("/", 1)[0] + "/" + phone.name if "/" in src else phone.name
    width = png_phone_width(phone)
    if width:
        small = f"--ab-phone-small-width: {width}px"
        tag = (tag.replace('style="', f'style="{small}; ', 1) if 'style="' in tag
               else tag.replace("<img", f'<img style="{small}"', 1))
    return (f'<picture class="ab-phone-picture"><source media="{PHONE_MEDIA}" srcset="{phone_src}">'
            f"{tag}</picture>")


def _fix_img(tag: str, page: Path) -> str:
    tag = _fix_img_attrs(tag, page)
    attrs = dict(_ATTR.findall(tag))
    src = attrs.get("src", "")
    if src.endswith(".png") and not src.startswith("data:") and "ab-phone-small-width" not in tag:
        return _phone_picture(tag, page, (page.parent / src).resolve(), src)
    return tag


def _fix_img_attrs(tag: str, page: Path) -> str:
    attrs = dict(_ATTR.findall(tag))
    src, alt = attrs.get("src", ""), attrs.get("alt")
    path = (page.parent / src).resolve() if src.endswith(".png") and not src.startswith("data:") else None
    if path is not None and "--ab-phone-width" not in tag:  # legible on a phone: see book.css
        width = png_phone_width(path)
        if width:
            tag = tag.replace("<img", f'<img style="--ab-phone-width: {width}px"', 1)
    if src.startswith("data:") or (alt and alt != src and not re.search(r"\.(png|jpe?g|svg|gif)$", alt)):
        return tag  # an inline image (the explorers name theirs) or an alt a person wrote
    text = png_alt_text(path) if path is not None else None
    new = html.escape(text or NO_ALT_TEXT, quote=True)
    if alt is None:
        return tag.replace("<img", f'<img alt="{new}"', 1)
    return tag.replace(f'alt="{alt}"', f'alt="{new}"', 1)


def _fix_summary(m: re.Match) -> str:
    """A fold's `<summary>`: named by its own words where it has some (sphinx-togglebutton's
    "Show code" had the name "Toggle hidden content"), else by an aria-label."""
    attrs, inner = m.group("attrs"), m.group("inner")
    if _text(inner):
        attrs = re.sub(r'\s*aria-label="[^"]*"', "", attrs)
    elif "aria-label=" not in attrs:
        attrs += ' aria-label="Show or hide more"'
    return f"<summary{attrs}>{inner}</summary>"


def accessible_html(text: str, page: Path) -> str:
    """One written page with the fixes listed in the module's docstring."""
    text = _NAV_SUMMARY.sub(
        lambda m: m.group(1) + f'<summary aria-label="Sections of {html.escape(_text(m.group("title")))}">', text)
    text = _SUMMARY.sub(_fix_summary, text)
    # The colour-mode button's icons carry titles ("Light", "Dark", "System Settings") that
    # would count as its text; its name is its aria-label, "Color mode".
    # (Font Awesome turns each title into an SVG <title>.) Drop the titles.
    text = _THEME_ICON.sub(lambda m: re.sub(r'\s+title="[^"]*"', "", m.group(0)), text)
    text = _SEARCH_BUTTON.sub(r"\1\2", text)
    text = text.replace('role="doc-biblioentry"', 'role="listitem"')
    return _IMG.sub(lambda m: m.group(0) if m.group(0).startswith("<picture") else _fix_img(m.group(0), page),
                    text)


PHONE_COPIES_CLASS = "ab-explorer-phone"  # = attention_book.book.explorer.PHONE_COPIES_CLASS
EXPLORER_COPIES_DIR = "explorers"  # under the site's _static: one folder per explorer
_PHONE_COPIES = re.compile(rf'<script type="application/json" class="{PHONE_COPIES_CLASS}">(.*?)</script>',
                           re.DOTALL)


def explorer_phone_files(text: str, page: Path, static: Path) -> str:
    """``text`` (a written page) with its explorers' inline phone copies written to files under
    ``static`` (the site's _static) and replaced by their names: ``{"base": the folder relative
    to the page, "files": [name or ""], "widths": [...]}``, which the player reads. A copy's
    name is its content's hash, so a rebuilt page reuses the files it had."""

    def written(m: re.Match) -> str:
        try:
            data = json.loads(m.group(1))
            name = data["name"]
            copies = data["copies"]
        except (ValueError, KeyError, TypeError):
            return m.group(0)  # already written out, or not ours
        if not re.fullmatch(r"ch\d\d\.[a-z0-9_]+", str(name)):
            return m.group(0)
        folder = static / EXPLORER_COPIES_DIR / name
        files = []
        for copy in copies:
            try:
                png = base64.b64decode(copy, validate=True) if copy else b""
            except (binascii.Error, ValueError):
                png = b""
            if not png:
                files.append("")
                continue
            target = folder / (hashlib.sha256(png).hexdigest()[:20] + ".png")
            if not target.is_file():
                folder.mkdir(parents=True, exist_ok=True)
                target.write_bytes(png)
            files.append(target.name)
        base = Path(os.path.relpath(folder, page.parent)).as_posix() + "/"
        blob = json.dumps({"base": base, "files": files, "widths": data.get("widths", [])},
                          separators=(",", ":")).replace("</", "<\\/")
        return f'<script type="application/json" class="{PHONE_COPIES_CLASS}">{blob}</script>'

    return _PHONE_COPIES.sub(written, text)


def accessible_pages(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    for page in Path(app.outdir).rglob("*.html"):
        if "_static" in page.relative_to(app.outdir).parts:
            continue
        text = page.read_text(encoding="utf-8")
        fixed = accessible_html(explorer_phone_files(text, page, Path(app.outdir) / "_static"), page)
        if fixed != text:
            page.write_text(fixed, encoding="utf-8")


PRACTICE_DIR = "practice"  # under the site's _static: one practice notebook per exercises page
_EXERCISES = re.compile(r"notebooks/(?P<name>ch\d\d_exercises)")


def _student_edition(root: Path):
    """scripts/student_edition.py of the repository at ``root`` (the build does not install it)."""
    import importlib

    scripts = str(root / "scripts")
    if scripts not in sys.path:
        sys.path.insert(0, scripts)
    return importlib.import_module("student_edition")


def committed_root(srcdir: Path) -> Path | None:
    """The repository whose notebooks the book at ``srcdir`` was staged from: ``srcdir`` itself
    or the nearest folder above it holding notebooks/ and scripts/student_edition.py (a staging
    folder, `_stage`, sits in the repository; scripts/stage.py)."""
    for folder in (srcdir, *srcdir.parents):
        if (folder / "notebooks").is_dir() and (folder / "scripts" / "student_edition.py").is_file():
            return folder
    return None


def write_practice(notebooks: Path, static: Path, executed: list[Path] = ()) -> list[Path]:
    """The practice notebook of every committed ``notebooks/chNN_exercises.ipynb`` written to
    ``static``/practice/ (raises SystemExit if a solution line would survive), its
    {glue:text} roles showing the values the page shows: those glued by the first of
    ``executed`` (folders of executed notebooks, or of myst-nb's ``<page>.glue.json``) that
    holds any for that notebook (else neutral words; student_edition.render_roles)."""
    edition = _student_edition(notebooks.parent)
    glued = {}
    for path in sorted(notebooks.glob("ch[0-9][0-9]_exercises.ipynb")):
        for folder in executed:
            for found in (folder / path.name, folder / path.with_suffix(".glue.json").name):
                try:
                    values = edition.glued_values(json.loads(found.read_text(encoding="utf-8")))
                except (OSError, ValueError):
                    continue
                if values:
                    glued[path.name] = values
                    break
            if path.name in glued:
                break
    return edition.build_practice(notebooks, static / PRACTICE_DIR, glued)


def _staged_from(staged: Path, committed: Path) -> bool:
    """Was the staged notebook made from this committed one (its key starts with the SHA-1 of
    the committed file, scripts/stage.py)? True for a notebook built in place (no key)."""
    try:
        key = json.loads(staged.read_text(encoding="utf-8"))["metadata"]["attention_book"]["source_sha1"]
    except (OSError, ValueError, KeyError, TypeError):
        return True
    return str(key).split("-")[0] == hashlib.sha1(committed.read_bytes()).hexdigest()


def practice_notebooks(app) -> None:
    """builder-inited: write the practice notebooks of the book's exercises pages to a folder
    that Sphinx copies into the site's _static (and remember which pages get the line)."""
    from sphinx.util import logging

    app.ab_practice = set()
    pages = sorted(Path(app.srcdir).glob("notebooks/ch[0-9][0-9]_exercises.ipynb"))
    if not pages or app.builder.format != "html":
        return
    logger = logging.getLogger(__name__)
    root = committed_root(Path(app.srcdir))
    if root is None:
        logger.warning("practice notebooks: no committed notebooks/ above %s; no exercises page offers one",
                       app.srcdir)
        return
    out = Path(app.doctreedir).parent / "_ab_practice"  # beside the doctrees, outside the site
    if out.exists():
        for old in out.rglob("*.ipynb"):
            old.unlink()
    executed = [Path(app.srcdir) / "notebooks",  # staged and run (make book: nbmake --overwrite)
                Path(app.outdir).parent / "jupyter_execute" / "notebooks"]  # myst-nb's, an earlier build's
    written = {p.name for p in write_practice(root / "notebooks", out, executed)}
    for page in pages:
        if page.name not in written:
            logger.warning("practice notebooks: %s has no committed notebook in %s", page.name, root / "notebooks")
        elif not _staged_from(page, root / "notebooks" / page.name):
            logger.warning("practice notebooks: %s was staged from another version of %s; stage again",
                           page.name, root / "notebooks" / page.name)
        else:
            app.ab_practice.add(page.stem)
    app.config.html_static_path = [*app.config.html_static_path, str(out)]


def practice_line(docname: str) -> str:
    """The line under an exercises page's title: a download link to its practice notebook."""
    name = _EXERCISES.fullmatch(docname).group("name") + ".ipynb"
    href = posixpath.relpath(f"_static/{PRACTICE_DIR}/{name}", posixpath.dirname(docname) or ".")
    return (f'<p class="ab-practice">Practice notebook: <a class="ab-practice-link" href="{html.escape(href)}" '
            f'download="{name}">download {name}</a> — the exercises without answers, ready to run '
            "(in Colab: File › Upload notebook).</p>")


def add_practice_line(app, doctree, docname: str) -> None:
    """doctree-resolved (after size_banner's line, so this one sits right under the title)."""
    match = _EXERCISES.fullmatch(docname)
    if match is None or match.group("name") not in getattr(app, "ab_practice", ()):
        return
    from docutils import nodes

    line = nodes.raw("", practice_line(docname), format="html")
    sections = list(doctree.findall(nodes.section))
    if sections and sections[0].children and isinstance(sections[0][0], nodes.title):
        sections[0].insert(1, line)
    else:
        doctree.insert(0, line)


def setup(app):
    import kernel_poll  # notebook execution during the build: see kernel_poll.py

    kernel_poll.install()
    app.connect("config-inited", default_theme_mode)
    # Late priority: after every extension has added its scripts to the page.
    app.connect("html-page-context", dedupe_scripts, priority=900)
    app.add_js_file(None, body=CODE_LINES_JS)
    app.add_js_file(None, body=SCROLL_BOXES_JS)
    app.connect("build-finished", accessible_pages)
    app.connect("builder-inited", practice_notebooks)
    app.connect("doctree-resolved", add_practice_line, priority=600)  # after size_banner's (500)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
