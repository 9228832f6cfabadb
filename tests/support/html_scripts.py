"""The <script> elements of an HTML page, as a browser's parser splits them."""
from __future__ import annotations

from html.parser import HTMLParser
from typing import Dict, List, Optional, Tuple


class Scripts(HTMLParser):
    """Every <script> element of a page: its attributes and its text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=False)
        self.found: List[Tuple[Dict[str, Optional[str]], str]] = []
        self._open: Optional[Dict[str, Optional[str]]] = None
        self._text: List[str] = []

    def handle_starttag(self, tag, attrs) -> None:
        if tag == "script":
            self._open, self._text = dict(attrs), []

    def handle_data(self, data) -> None:
        if self._open is not None:
            self._text.append(data)

    def handle_endtag(self, tag) -> None:
        if tag == "script" and self._open is not None:
            self.found.append((self._open, "".join(self._text)))
            self._open = None
