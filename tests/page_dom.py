"""A small DOM over :mod:`html.parser` for the page tests (find elements by tag and class), and a 1x1 PNG.

Shared by ``tests/unit/test_views_*.py``: a page's data is checked against its report without a browser.
"""

from __future__ import annotations

from html.parser import HTMLParser

# A 1x1 PNG: a plot as a report holds it.
PNG = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000"
                    "1f15c4890000000d4944415478da63f8cfc0f01f0005000201a5b3d1c50000000049454e44ae426082")
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class Node:
    def __init__(self, tag: str, attrs: dict[str, str], parent: "Node | None"):
        self.tag, self.attrs, self.parent, self.children, self.text = tag, attrs, parent, [], ""

    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    def all(self, tag: str, cls: str | None = None) -> list["Node"]:
        out = []
        for c in self.children:
            if c.tag == tag and (cls is None or cls in c.classes()):
                out.append(c)
            out += c.all(tag, cls)
        return out

    def text_all(self) -> str:
        return self.text + "".join(c.text_all() for c in self.children)


class Tree(HTMLParser):
    """A small DOM over html.parser: enough to find elements by tag and class."""

    def __init__(self, html: str):
        super().__init__(convert_charrefs=True)
        self.root = self.at = Node("#root", {}, None)
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        node = Node(tag, {k: v or "" for k, v in attrs}, self.at)
        self.at.children.append(node)
        if tag not in VOID:
            self.at = node

    def handle_startendtag(self, tag, attrs):
        self.at.children.append(Node(tag, {k: v or "" for k, v in attrs}, self.at))

    def handle_endtag(self, tag):
        node = self.at
        while node is not self.root and node.tag != tag:
            node = node.parent
        if node is not self.root:
            self.at = node.parent

    def handle_data(self, data):
        self.at.text += data
