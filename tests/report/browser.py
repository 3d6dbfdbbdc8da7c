"""Open a report in headless Chromium (Debian's chromium and chromium-driver) with Selenium."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

CHROMIUM = ("/usr/bin/chromium", "/usr/bin/chromium-browser")
DRIVER = "/usr/bin/chromedriver"


def browser_missing() -> str | None:
    if not any(Path(p).exists() for p in CHROMIUM) or not (Path(DRIVER).exists() or shutil.which("chromedriver")):
        return "Debian chromium and chromium-driver are not installed (the README's test command installs them)"
    return None


def open_report(path: Path, screenshot: Path) -> dict[str, Any]:
    """Load ``path`` offline; return the console log, every image's state and the screenshot's pixels."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = next(p for p in CHROMIUM if Path(p).exists())
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,2000",
              "--proxy-server=http://127.0.0.1:9", "--proxy-bypass-list=<-loopback>"):  # no network: must not need it
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=opts, service=Service(DRIVER if Path(DRIVER).exists() else shutil.which("chromedriver")))
    try:
        driver.get(path.resolve().as_uri())
        images = driver.execute_script(
            "return Array.from(document.images).map(i => ({src: i.src.slice(0, 30), complete: i.complete,"
            " width: i.naturalWidth, height: i.naturalHeight}));")
        title = driver.title
        text = driver.execute_script("return document.body.innerText;")
        driver.save_screenshot(str(screenshot))
        log = driver.get_log("browser")
    finally:
        driver.quit()
    return {"images": images, "log": log, "title": title, "text": text}


def blank(png: Path) -> bool:
    """True when the screenshot is a single colour (nothing rendered)."""
    from PIL import Image

    with Image.open(png) as im:
        extrema = im.convert("L").getextrema()
    return extrema[0] == extrema[1]
