"""What the tests read of a head view (``viz/headview.py``'s standalone HTML): its tags and the JSON of its
data scripts."""

from html.parser import HTMLParser


class HeadViewParser(HTMLParser):
    """Fed a head view's HTML: ``tags``, every start tag in order; ``scripts``, the text of each
    ``application/json`` script (the maps and their tokens)."""

    def __init__(self):
        super().__init__()
        self.tags, self.scripts, self._in_json = [], [], False

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self._in_json = tag == "script" and ("type", "application/json") in attrs

    def handle_data(self, data):
        if self._in_json:
            self.scripts.append(data)
            self._in_json = False
