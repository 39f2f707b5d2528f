"""What the browser tests share: one headless Chromium per module and a fresh 1400 x 900 page per test, whose
uncaught JavaScript errors fail the test (a module may define its own ``page`` instead)."""

import pytest
from support.browser import launch_chromium

WINDOW = {"width": 1400, "height": 900}


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        yield browser
        browser.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport=WINDOW, accept_downloads=True)
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    yield page
    context.close()
    assert not errors, errors
