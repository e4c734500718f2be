"""Small Sphinx fixes for the book's website (loaded via `_config.yml`: sphinx.local_extensions).

- Inline scripts added by extensions during the build (sphinx-thebe's
  `const THEBE_JS_URL = ...`, sphinx-togglebutton's selector) end up twice in
  every page with Sphinx 7.4, once registered with the file name `None` and once
  with `""`. The second `const` declaration is a JavaScript error on every page.
  This drops exact duplicates (same file, same attributes, same inline body).
- The theme's colour mode: without a `default_mode`, pydata-sphinx-theme logs
  "Got invalid theme mode" as an error on every page; "auto" (follow the
  reader's system setting) is what it falls back to anyway.
"""

from __future__ import annotations

from typing import Any


def _key(script: Any) -> tuple:
    filename = getattr(script, "filename", script) or ""
    attributes = getattr(script, "attributes", {}) or {}
    return (str(filename), tuple(sorted((k, str(v)) for k, v in attributes.items())))


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


def setup(app):
    app.connect("config-inited", default_theme_mode)
    # Late priority: after every extension has added its scripts to the page.
    app.connect("html-page-context", dedupe_scripts, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
