"""What the console's tests and `make console-shots` share (no tests here): a headless
Chromium driven by selenium, a gateway subprocess with its console, and an audit with a
review queue.

The browser is Debian's ``chromium`` with ``chromium-driver`` (``.ci/run`` installs both);
selenium only talks to the driver and downloads nothing. The audit's three annotators are
scripted (:class:`PersonaAnnotator`, the personas of ``tests/test_audit_endpoint.py``:
derived from the keyword annotator), so a review queue exists without an LLM; their votes
say nothing about any model.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from riskrank.annotators import Annotator, Vote
from riskrank.audit import build_labels, default_side_paths, run_audit, write_review
from riskrank.fileio import write_json
from riskrank.registry import Tool, ToolRegistry
from riskrank.risk import keyword_level
from test_audit_endpoint import persona_level

#: A hang guard for waiting on pages and processes (never an assertion about time).
GUARD_S = 120
CHROMIUM = os.environ.get("RISKRANK_TEST_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = os.environ.get("RISKRANK_TEST_CHROMEDRIVER") or shutil.which("chromedriver") or "/usr/bin/chromedriver"
#: The flags this machine's notes give for a headless Chromium with no network beyond loopback.
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
                  "--disable-default-apps", "--hide-scrollbars", "--force-device-scale-factor=1")


def browser_missing() -> str | None:
    """Why no browser test can run here, or None. CI sets RISKRANK_REQUIRE_BROWSER=1, so a
    missing browser fails there instead of skipping."""
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not (Path(p).is_file() and os.access(p, os.X_OK))]
    if not missing:
        try:
            import selenium  # noqa: F401
        except ImportError:
            return "selenium is not installed (pip install 'riskrank[test]')"
        return None
    return (f"no {' and no '.join(Path(p).name for p in missing)} here: the console's browser tests need Debian's "
            "chromium and chromium-driver (apt-get install chromium chromium-driver; .ci/run installs them)")


class Browser:
    """One headless Chromium with a fresh profile, and the few moves the tests make."""

    def __init__(self, width: int = 1360, height: int = 1000) -> None:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        self.profile = tempfile.mkdtemp(prefix="riskrank-chromium-")
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={self.profile}", f"--window-size={width},{height}"):
            options.add_argument(flag)
        self.driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
        self.driver.set_page_load_timeout(GUARD_S)

    def close(self) -> None:
        self.driver.quit()
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def get(self, url: str) -> None:
        self.driver.get(url)

    def css(self, selector: str) -> Any:
        from selenium.webdriver.common.by import By

        return self.driver.find_element(By.CSS_SELECTOR, selector)

    def all(self, selector: str) -> list[Any]:
        from selenium.webdriver.common.by import By

        return self.driver.find_elements(By.CSS_SELECTOR, selector)

    def submit(self, button: Any) -> None:
        """Click a form's button and wait until the next page has replaced this one (a click
        returns before the browser has navigated)."""
        from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
        from selenium.webdriver.support.ui import WebDriverWait

        page = self.css("html")
        button.click()

        def replaced(_driver: Any) -> bool:
            # selenium's staleness_of, plus the way chromium sometimes says the same thing: an
            # inspector error "Node with given id does not belong to the document" (seen once in CI).
            try:
                page.is_enabled()
            except StaleElementReferenceException:
                return True
            except WebDriverException as exc:
                if "does not belong to the document" in str(exc):
                    return True
                raise
            return False

        WebDriverWait(self.driver, GUARD_S).until(replaced)

    def login(self, console_url: str, name: str, token: str | None = None) -> None:
        """Log in through the console's form (the token, if any, typed into it)."""
        self.get(console_url + "/login")
        self.css("#name").send_keys(name)
        if token is not None:
            self.css("#token").send_keys(token)
        self.submit(self.css("#login"))
        if not self.all("nav.tabs"):  # logged in: the tabs are there
            raise AssertionError(f"login failed at {self.driver.current_url}: {self.css('main').text[:500]}")

    def wait_for(self, url: str, selector: str) -> Any:
        """Reload ``url`` until ``selector`` is on the page (a hang guard, not a timing)."""
        end = time.monotonic() + GUARD_S
        while True:
            self.get(url)
            found = self.all(selector)
            if found:
                return found[0]
            if time.monotonic() > end:
                raise AssertionError(f"{selector!r} never appeared at {url}")
            time.sleep(0.2)

    def wait_until(self, selector: str) -> Any:
        """Wait, without reloading, until ``selector`` is on the page (the page's own script
        reloads it)."""
        from selenium.webdriver.support.ui import WebDriverWait

        WebDriverWait(self.driver, GUARD_S, poll_frequency=0.1).until(lambda d: self.all(selector))
        return self.all(selector)[0]

    def images_loaded(self) -> None:
        """Wait until every image of the page has loaded (the pictures are drawn on request)."""
        from selenium.webdriver.support.ui import WebDriverWait

        script = "return Array.from(document.images).every(i => i.complete && i.naturalWidth > 0)"
        WebDriverWait(self.driver, GUARD_S).until(lambda d: d.execute_script(script))

    def names(self, selector: str) -> list[str]:
        """The ``data-name`` of each element matching ``selector``, in page order."""
        return [e.get_attribute("data-name") for e in self.all(selector)]

    def cookies(self) -> dict[str, str]:
        return {c["name"]: c["value"] for c in self.driver.get_cookies()}

    def shot(self, path: Path, *, full_page: bool = True, max_height: int = 4000) -> Path:
        """A PNG of the page (``full_page``: all of it, through the DevTools protocol, up to
        ``max_height`` CSS pixels; else the window), stored with a 256-colour palette: a
        fraction of the size, and flat UI colours and text survive it."""
        import base64
        import io

        from PIL import Image

        if full_page:
            size = self.driver.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
            clip = {"x": 0, "y": 0, "width": size["width"], "height": min(size["height"], max_height), "scale": 1}
            shot = self.driver.execute_cdp_cmd("Page.captureScreenshot",
                                               {"format": "png", "captureBeyondViewport": True, "clip": clip})
            data = base64.b64decode(shot["data"])
        else:
            data = self.driver.get_screenshot_as_png()
        image = Image.open(io.BytesIO(data)).convert("RGB")
        path.parent.mkdir(parents=True, exist_ok=True)
        image.quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE).save(path, optimize=True)
        return path


# -- an audit with a review queue --------------------------------------------------------------------------
class PersonaAnnotator(Annotator):
    """A scripted annotator: ``strict`` = the keyword level, ``lenient`` = one lower from L3
    up, ``noisy`` = the keyword level moved by -1/0/+1 (test_audit_endpoint's personas)."""

    deterministic = True

    def __init__(self, persona: str) -> None:
        self.name = self.persona = persona
        self.config = f"persona:{persona}"

    def annotate(self, tools: Sequence[Tool]) -> Iterator[tuple[int, Vote]]:
        for i, t in enumerate(tools):
            base, why = keyword_level(t.name, t.description)
            level = persona_level(self.persona, t.name, t.description)
            shift = {0: "", 1: " moved up one", -1: " moved down one"}[level - base] if abs(level - base) <= 1 else ""
            yield i, Vote(level, f"keyword level L{base}{shift}: " + "; ".join(why[:2]))


PERSONAS = ("strict", "lenient", "noisy")


def persona_audit(registry: ToolRegistry, out: Path) -> tuple[Path, Path]:
    """``riskrank audit`` with three scripted annotators: the label file and its review queue."""
    votes, review = default_side_paths(out)
    run = run_audit(registry, [PersonaAnnotator(p) for p in PERSONAS], votes)
    labels, queue = build_labels(registry, run, source=registry.source)
    write_json(out, labels, ensure_ascii=False)
    write_review(review, queue)
    return out, review


# -- a gateway with its console, as a subprocess -------------------------------------------------------------
def wait_for_line(path: Path, needle: str) -> str:
    """The first line of ``path`` holding ``needle`` (a hang guard only)."""
    end = time.monotonic() + GUARD_S
    while time.monotonic() < end:
        text = path.read_text() if path.exists() else ""
        for line in text.splitlines():
            if needle in line:
                return line
        time.sleep(0.05)
    raise AssertionError(f"{needle!r} never appeared in {path}: {text[-800:]}")


def console_url(errlog: Path) -> str:
    """The console's URL from the server's log line ``console at http://HOST:PORT/console``."""
    line = wait_for_line(errlog, "console at ")
    return line.split("console at ", 1)[1].split()[0]


def write_policy(path: Path, **policy: Any) -> Path:
    path.write_text(json.dumps({"max_level": 4, "confirm_level": 3, **policy}))
    return path


def python_env() -> dict[str, str]:
    keep = ("RISKRANK_CACHE", "HF_HUB_OFFLINE", "PYTHONPATH", "PATH", "HOME", "XDG_CONFIG_HOME")
    return {k: os.environ[k] for k in keep if k in os.environ}


def riskrank_argv(*args: str) -> list[str]:
    """`riskrank ARGS` as a user runs it (the real encoder)."""
    return [sys.executable, "-c", "from riskrank.cli import entry; entry()", *args]
