"""A real browser for the page tests: Debian's headless Chromium driven by Selenium through Debian's chromedriver.

``make setup-test`` installs ``chromium`` and ``chromium-driver`` with apt-get (never a browser
download at test time: Selenium is given both paths, so its driver manager stays idle). Chromium
starts with the flags that keep it off the network (no background networking, no component
updates, no sync), so any request a page makes is the page's own, and the performance log
records every request; :meth:`Browser.open` returns those that leave ``file://`` and ``data:``.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-default-apps", "--window-size=1280,1000", "--hide-scrollbars")
# chrome-untrusted: is the browser's own new-tab page, which the first load of a session may still request.
LOCAL_SCHEMES = ("file:", "data:", "about:", "chrome:", "chrome-untrusted:", "devtools:")


def missing() -> str:
    """Why no browser test can run here (``""`` when Chromium, chromedriver and Selenium are all present)."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if not Path(path).exists():
            return f"{path} is not installed (make setup-test installs Debian's chromium and chromium-driver)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[test]')"
    return ""


@dataclass(frozen=True)
class Opened:
    """What a page did when it opened: its console errors and the requests that left the disk."""

    console_errors: tuple[str, ...]
    remote_requests: tuple[str, ...]


class Browser:
    """One headless Chromium for a test session (``with Browser() as b: ...``)."""

    def __enter__(self) -> "Browser":
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        self._profile = tempfile.mkdtemp(prefix="lab-chromium-")
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for flag in FLAGS:
            options.add_argument(flag)
        options.add_argument(f"--user-data-dir={self._profile}")
        options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
        self.driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.driver.quit()
        finally:
            shutil.rmtree(self._profile, ignore_errors=True)

    def open(self, page: Path) -> Opened:
        """Load ``page`` from disk and wait for it; return its console errors and remote requests."""
        self.driver.get_log("browser"), self.driver.get_log("performance")  # drop what an earlier page left
        self.driver.get(Path(page).resolve().as_uri())
        self.driver.execute_script("return document.readyState")
        errors = tuple(e["message"] for e in self.driver.get_log("browser") if e.get("level") == "SEVERE")
        remote = []
        for entry in self.driver.get_log("performance"):
            message = json.loads(entry["message"])["message"]
            if message.get("method") == "Network.requestWillBeSent":
                url = message["params"]["request"]["url"]
                if not url.startswith(LOCAL_SCHEMES):
                    remote.append(url)
        return Opened(errors, tuple(remote))

    def screenshot(self, path: Path) -> Path:
        """The whole page as a PNG at ``path`` (the window stretched to the page's height, at most 6000 px)."""
        height = self.driver.execute_script("return document.documentElement.scrollHeight")
        self.driver.set_window_size(1280, max(600, min(int(height), 6000)))
        self.driver.save_screenshot(str(path))
        self.driver.set_window_size(1280, 1000)
        return path

    def hover(self, css: str) -> None:
        """Move the mouse onto the first element matching ``css``."""
        from selenium.webdriver import ActionChains
        from selenium.webdriver.common.by import By

        ActionChains(self.driver).move_to_element(self.driver.find_element(By.CSS_SELECTOR, css)).perform()

    def focus(self, css: str) -> None:
        """Give keyboard focus to the first element matching ``css`` (as Tab would)."""
        self.driver.execute_script("document.querySelector(arguments[0]).focus()", css)

    def visible(self, css: str) -> bool:
        """Whether the first element matching ``css`` is displayed."""
        from selenium.webdriver.common.by import By

        return self.driver.find_element(By.CSS_SELECTOR, css).is_displayed()

    def script(self, code: str, *args: object) -> object:
        return self.driver.execute_script(code, *args)
