"""An SVG beside a report, inlined in its page only as written anew from its checked XML tree.

:func:`inline_svg` parses the file, refuses anything a plot does not hold (a script, an event handler,
a non-SVG element, a stylesheet but matplotlib's own, an outside reference) and writes the tree again
with every text and attribute escaped, so what the browser's HTML parser builds is what the check read.
An SVG it refuses is shown as an ``<img>`` (:func:`lab.views.files.read_report`), which runs no script.
"""

from __future__ import annotations

import html
import re
import xml.etree.ElementTree as ElementTree

def svg_body(text: str) -> str:
    """An SVG file's ``<svg>`` element alone (no XML declaration or DOCTYPE, which HTML does not take)."""
    start = text.find("<svg")
    return text[start:] if start >= 0 else ""


# What an inlined SVG may hold: SVG's drawing elements by local name, so no element runs script, embeds a document,
# animates an attribute or leaves SVG for HTML (an HTML parser reads <p>, <img> ... inside an <svg> as HTML). No event
# handler, and every link and url(...) inside the page (#...). The lab's own plots (matplotlib's SVG, the study's
# linked points) hold nothing else. <metadata> (matplotlib's RDF) is dropped, never shown.
SVG_ELEMENTS = frozenset({
    "svg", "g", "defs", "symbol", "use", "path", "rect", "circle", "ellipse", "line", "polyline", "polygon",
    "text", "tspan", "textpath", "title", "desc", "clippath", "mask", "pattern", "marker",
    "lineargradient", "radialgradient", "stop", "style", "a", "image", "filter", "feblend", "fecolormatrix",
    "fecomponenttransfer", "fecomposite", "feflood", "fefunca", "fefuncb", "fefuncg", "fefuncr",
    "fegaussianblur", "femerge", "femergenode", "femorphology", "feoffset", "fetile"})
# Elements whose content an HTML parser reads as HTML (SVG's HTML integration points): they may hold text only.
SVG_TEXT_ONLY = frozenset({"title", "desc", "style"})
# The one stylesheet an inlined SVG may carry: matplotlib's own. A <style> applies to the whole page, so any other
# (restyling or blanking the page) sends the SVG to an <img>, where its styles stay inside it.
MATPLOTLIB_SVG_STYLE = "*{stroke-linejoin: round; stroke-linecap: butt}"
_SVG_NS = "http://www.w3.org/2000/svg"
# Namespaced attributes an HTML parser maps back to the same namespace (the HTML standard's "adjust foreign
# attributes"), so writing them with these prefixes reads the same in both parsers.
_SVG_ATTRIBUTE_PREFIXES = {"http://www.w3.org/1999/xlink": "xlink:", "http://www.w3.org/XML/1998/namespace": "xml:"}
_SVG_URL = re.compile(r"url\s*\(\s*['\"]?\s*([^)'\"\s]*)", re.IGNORECASE)
# The CSS functions an attribute (a presentation attribute, ``style``, ``transform``) may call: url(#...) and the
# transforms matplotlib writes. Any other (``image-set("http://...")``, ``src()``, ``cross-fade()``) may name a file
# with no url( for the check to find; and no backslash, whose CSS escape (``u\72l(``) spells url( unseen.
_SVG_FUNCTION = re.compile(r"([A-Za-z0-9_-]*)\s*\(")
SVG_CSS_FUNCTIONS = frozenset({"url", "translate", "rotate", "scale", "matrix", "skewx", "skewy", "rgb", "rgba"})
# What the outer <svg> (a CSS box of the page) may carry: its size and coordinates. overflow="visible" or a transform
# there (presentation attributes, as a style would be) lays the drawing over the rest of the page.
SVG_OUTER_ATTRIBUTES = frozenset({"width", "height", "viewbox", "version", "preserveaspectratio"})
_SVG_DATA_IMAGE = re.compile(r"data:image/(png|jpeg|gif|webp);", re.IGNORECASE)
# Markup an XML parser reads as a comment or a declaration but an HTML parser may end early (<!--> ...):
# refused, so the file's own reading is never in doubt.
_SVG_MARKUP_DECLARATION = re.compile(r"<\?|<!(?!--|\[CDATA\[)|<!-->|<!---", re.IGNORECASE)


def inline_svg(body: str) -> str | None:
    """``body`` (an SVG file from ``<svg`` on) as markup a page may inline, or None when it must be an ``<img>``.

    The file is parsed as XML (expat), checked, and written anew from the parsed tree: every element by its local
    name, every text and attribute value escaped, no comment, CDATA section or processing instruction kept. So an
    HTML parser (the browser's) reads exactly the elements the check saw: a CDATA section in a ``<title>`` that an
    HTML parser would end early, or any markup hidden from the XML parser, reaches the page as text. Checked:
    only :data:`SVG_ELEMENTS` in SVG's namespace, text only in :data:`SVG_TEXT_ONLY`, no ``on*`` attribute, every
    ``href``/``src`` and ``url(...)`` inside the page (``#...``; an ``<image>`` may also take a PNG/JPEG/GIF/WebP
    data URI), no ``@import`` or ``javascript:``, no stylesheet but :data:`MATPLOTLIB_SVG_STYLE`, no CSS function in an attribute
    but :data:`SVG_CSS_FUNCTIONS` and no backslash (a CSS escape), the outer ``<svg>`` holding only
    :data:`SVG_OUTER_ATTRIBUTES` (no style, overflow or transform that lays it over the page), no attribute in a namespace other than xlink's and xml's. Anything else is shown as an ``<img>``, where an SVG runs no script,
    loads nothing and styles nothing outside itself.

    >>> inline_svg('<svg xmlns="http://www.w3.org/2000/svg"><title><![CDATA[</title><img src=x>]]></title></svg>')
    '<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink"><title>&lt;/title&gt;&lt;img src=x&gt;</title></svg>'
    >>> inline_svg('<svg xmlns="http://www.w3.org/2000/svg"><style>svg{display:none}</style></svg>') is None
    True
    """
    lowered = body.lower()
    if not body or "javascript:" in lowered or "@import" in lowered or _SVG_MARKUP_DECLARATION.search(body):
        return None
    try:
        root = ElementTree.fromstring(body)  # expat: no external entities; entity expansion bounded (2.4+)
    except (ElementTree.ParseError, ValueError, RecursionError):
        return None
    if root.tag != f"{{{_SVG_NS}}}svg":
        return None
    out: list[str] = []
    try:
        _write_svg_element(root, out, top=True)
    except (_NotInert, RecursionError):
        return None
    return "".join(out)


class _NotInert(Exception):
    """An SVG holds what :func:`inline_svg` does not inline."""


def _write_svg_element(element: ElementTree.Element, out: list[str], top: bool = False) -> None:
    """Append ``element`` (checked) and its content to ``out`` as HTML-safe markup; raise :class:`_NotInert`."""
    tag = element.tag if isinstance(element.tag, str) else ""
    if not tag.startswith(f"{{{_SVG_NS}}}"):
        raise _NotInert(tag)
    name = tag.rsplit("}", 1)[1]
    lower = name.lower()
    if lower == "metadata":
        return
    if lower not in SVG_ELEMENTS:
        raise _NotInert(name)
    if lower in SVG_TEXT_ONLY and len(element):
        raise _NotInert(name)
    if lower == "style" and (element.text or "").strip() != MATPLOTLIB_SVG_STYLE:
        raise _NotInert(name)
    attributes = [f'xmlns="{_SVG_NS}" xmlns:xlink="http://www.w3.org/1999/xlink"'] if top else []
    for key, value in element.attrib.items():
        namespace, _, local = key[1:].partition("}") if key.startswith("{") else ("", "", key)
        if namespace and namespace not in _SVG_ATTRIBUTE_PREFIXES:
            raise _NotInert(key)
        if local.lower().startswith("on") or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]*", local):
            raise _NotInert(key)
        if top and (namespace or local.lower() not in SVG_OUTER_ATTRIBUTES):  # a CSS box of the page: kept in it
            raise _NotInert(key)
        if "\\" in value or any(f and f.lower() not in SVG_CSS_FUNCTIONS for f in _SVG_FUNCTION.findall(value)):
            raise _NotInert(key)
        if local.lower() in ("href", "src") and not (
                value.startswith("#") or (lower == "image" and _SVG_DATA_IMAGE.match(value))):
            raise _NotInert(key)
        if any(not ref.startswith("#") for ref in _SVG_URL.findall(value)):
            raise _NotInert(key)
        attributes.append(f'{_SVG_ATTRIBUTE_PREFIXES.get(namespace, "")}{local}="{html.escape(value, quote=True)}"')
    text = element.text or ""
    if any(not ref.startswith("#") for ref in _SVG_URL.findall(text)):
        raise _NotInert(name)
    out.append(f"<{name}{''.join(' ' + a for a in attributes)}>{html.escape(text, quote=False)}")
    for child in element:
        _write_svg_element(child, out)
        out.append(html.escape(child.tail or "", quote=False))
    out.append(f"</{name}>")
