"""Save a PNG of a dashboard page as headless Chromium draws it (how dashboards/screenshot.png is made).

    python dashboards/screenshot.py report.html dashboards/screenshot.png --width 1100 --height 1500

Needs the Debian packages chromium and chromium-driver and ``pip install selenium`` (in the
``test`` extra); nothing is downloaded. Exit code 2 with one line when the page or browser is missing.
"""

import argparse
import shutil
import sys
from pathlib import Path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("page", type=Path, help="an HTML file written by eve-search dashboard")
    parser.add_argument("png", type=Path, help="where to write the screenshot")
    parser.add_argument("--width", type=int, default=1100)
    parser.add_argument("--height", type=int, default=1500)
    args = parser.parse_args(argv)
    chromium, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if not args.page.is_file():
        print(f"screenshot.py: argument page: {str(args.page)!r} does not exist", file=sys.stderr)
        return 2
    if not (chromium and driver_path):
        print("screenshot.py: needs chromium and chromedriver on PATH (Debian: chromium chromium-driver)",
              file=sys.stderr)
        return 2
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                     f"--window-size={args.width},{args.height}"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    try:
        driver.get(args.page.resolve().as_uri())
        WebDriverWait(driver, 30).until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready"))
        args.png.parent.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(args.png))
    finally:
        driver.quit()
    print(f"wrote {args.png} ({args.png.stat().st_size // 1024} KiB)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
