#!/usr/bin/env python3
"""Drives the receiptq dashboard in a real headless Chromium (Debian's chromium + chromium-driver,
through Selenium), as an operator at 3 a.m. would: log in, find the dead letters a mock App Store
made by answering 21004, filter them, fix the shared secret, bulk-retry them, watch them validate.

Run by Tests/SystemTests/BrowserTests.swift, which starts the system, makes the dead letters,
and checks afterwards that every receipt ended valid in Postgres. Every page visited is saved as
a PNG in RQ_SCREENSHOTS. Exit 0 when every check held; 1 (with the failing check, the page's URL
and a screenshot named failure.png) otherwise.

Environment:
  RQ_BASE_URL        the API, e.g. http://127.0.0.1:8080
  RQ_ADMIN_USER      RQ_ADMIN_PASSWORD: the dashboard credentials
  RQ_MOCK_URL        the mock App Store, e.g. http://127.0.0.1:9090 (POST /mock/secrets)
  RQ_BUNDLE_ID       RQ_APP_ID: the app whose jobs died
  RQ_GOOD_SECRET     the shared secret that fixes them
  RQ_JOB_IDS         the dead jobs' ids, comma separated
  RQ_SCRIPT_USER     a user identifier holding markup, which must show as text
  RQ_SCREENSHOTS     directory for the screenshots
"""

import json
import os
import sys
import time
import urllib.parse
import urllib.request

from selenium import webdriver
from selenium.common.exceptions import (
    NoAlertPresentException,
    NoSuchElementException,
    StaleElementReferenceException,
    WebDriverException,
)
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import Select, WebDriverWait

BASE = os.environ["RQ_BASE_URL"].rstrip("/")
USER = os.environ["RQ_ADMIN_USER"]
PASSWORD = os.environ["RQ_ADMIN_PASSWORD"]
MOCK = os.environ["RQ_MOCK_URL"].rstrip("/")
BUNDLE_ID = os.environ["RQ_BUNDLE_ID"]
APP_ID = os.environ["RQ_APP_ID"].lower()
GOOD_SECRET = os.environ["RQ_GOOD_SECRET"]
JOB_IDS = [job.lower() for job in os.environ["RQ_JOB_IDS"].split(",")]
SCRIPT_USER = os.environ["RQ_SCRIPT_USER"]
SHOTS = os.environ["RQ_SCREENSHOTS"]

checks = 0


class CheckFailed(Exception):
    pass


def check(condition, what):
    global checks
    if not condition:
        raise CheckFailed(what)
    checks += 1


def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = os.environ.get("RQ_CHROMIUM", "/usr/bin/chromium")
    for argument in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root, where Chromium's sandbox cannot start
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1280,900",
        "--lang=en-US",
    ):
        options.add_argument(argument)
    # The browser's own log, to catch CSP violations (a page that needed a script or a style).
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # An explicit driver path: Selenium Manager would otherwise try to download one.
    service = Service(executable_path=os.environ.get("RQ_CHROMEDRIVER", "/usr/bin/chromedriver"))
    return webdriver.Chrome(service=service, options=options)


def shot(driver, name):
    # The whole page, not just the window: the lists are long.
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1280, max(900, min(height + 40, 4000)))
    driver.save_screenshot(os.path.join(SHOTS, name + ".png"))
    driver.set_window_size(1280, 900)


def navigate(driver, find, expect=None):
    """Clicks the element `find()` returns and waits for the page it leads to: a click returns before
    a form's POST and its redirect are done, and on a busy machine the old page would still be the
    one read. Found afresh for each try: on a loaded run Chromium once replaced the document between
    the finding and the click ("Node with given id does not belong to the document"), and the click
    then never happened, so it is tried again on the page that is there. With `expect`, the page
    reached must have it in its URL, else the click is made again: the overview refreshes itself
    every 10 s, and a refresh that lands first replaces the page the click was made on."""
    for attempt in range(5):
        old = driver.find_element(By.TAG_NAME, "html")
        try:
            find().click()
        except WebDriverException as error:
            if not replaced(error) or attempt == 4:
                raise
            loaded(driver)
            continue
        WebDriverWait(driver, 20).until(expected_conditions.staleness_of(old))
        loaded(driver)
        if expect is None or expect in driver.current_url:
            return
    raise CheckFailed("no page with %r in its URL after 5 clicks (at %s)" % (expect, driver.current_url))


def loaded(driver):
    WebDriverWait(driver, 20).until(lambda d: d.execute_script("return document.readyState") == "complete")


def replaced(error):
    """Whether Chromium replaced the document under a command (a redirect still settling, a refresh)."""
    return isinstance(error, StaleElementReferenceException) or "does not belong to the document" in str(error)


def type_into(driver, by, name, value):
    """Types `value` into the field found afresh: after a form's redirect Chromium may still replace
    the document under the first command sent to it (a loaded CI run failed typing the username
    after the refused login: "Node with given id does not belong to the document"). Cleared before
    each try, so a try cut short leaves no half-typed value."""
    for attempt in range(5):
        try:
            field = driver.find_element(by, name)
            field.clear()
            field.send_keys(value)
            return
        except WebDriverException as error:
            if not replaced(error) or attempt == 4:
                raise
            loaded(driver)


def text(driver, css):
    """The element's text, found and read in one script so that no document can come between the two:
    read in two commands, a CI run once met a node of the page a redirect had just replaced."""
    for attempt in range(5):
        try:
            value = driver.execute_script(
                "const element = document.querySelector(arguments[0]); return element === null ? null : element.innerText", css
            )
        except WebDriverException as error:
            if not replaced(error) or attempt == 4:
                raise
            loaded(driver)
            continue
        if value is None:
            raise NoSuchElementException("no element " + css + " on " + driver.current_url)
        return value.strip()


def no_scripts_ran(driver):
    """No <script> element exists and no alert opened: the markup in the data stayed text."""
    check(not driver.find_elements(By.TAG_NAME, "script"), "a <script> element is in the page " + driver.current_url)
    try:
        driver.switch_to.alert
        raise CheckFailed("an alert opened on " + driver.current_url)
    except NoAlertPresentException:
        pass


def csp_violations(driver):
    return [
        entry["message"]
        for entry in driver.get_log("browser")
        if "Content Security Policy" in entry.get("message", "") or "Refused to" in entry.get("message", "")
    ]


def fix_secret():
    """The operator's fix, on Apple's side of the mock: the app's secret is right again."""
    body = json.dumps({"bundle_id": BUNDLE_ID, "shared_secret": GOOD_SECRET}).encode()
    request = urllib.request.Request(MOCK + "/mock/secrets", data=body, method="POST", headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        check(response.status == 204, "the mock took the fixed secret")


def run(driver):
    # 1. Every page sends a stranger to the login form.
    driver.get(BASE + "/admin/dead")
    check(driver.current_url.endswith("/admin/login"), "redirected to the login form")
    shot(driver, "01-login")
    type_into(driver, By.NAME, "username", USER)
    type_into(driver, By.NAME, "password", "not-the-password")
    navigate(driver, lambda: driver.find_element(By.ID, "login"))
    check(text(driver, "#problem") == "Wrong username or password.", "a wrong password is refused")
    type_into(driver, By.NAME, "username", USER)
    type_into(driver, By.NAME, "password", PASSWORD)
    navigate(driver, lambda: driver.find_element(By.ID, "login"))
    check(driver.current_url.endswith("/admin"), "logged in, on the overview")

    # 2. The overview shows the dead letters.
    check(int(text(driver, "#dead")) >= len(JOB_IDS), "the overview counts the dead letters")
    check(text(driver, "#circuit") == "closed", "the circuit is closed")
    check(driver.find_elements(By.CSS_SELECTOR, "svg.chart"), "the chart is drawn")
    shot(driver, "02-overview")

    # 3. The dead letters, filtered by app and error code through the form.
    navigate(driver, lambda: driver.find_element(By.LINK_TEXT, "Dead letters " + text(driver, "#nav-dead")), expect="/admin/dead")
    check("/admin/dead" in driver.current_url, "on the dead letters")
    Select(driver.find_element(By.ID, "filter-app")).select_by_value(APP_ID)
    code = driver.find_element(By.ID, "filter-error-code")
    code.clear()
    code.send_keys("shared_secret_mismatch")
    navigate(driver, lambda: driver.find_element(By.ID, "apply-filter"))
    check("error_code=shared_secret_mismatch" in driver.current_url, "the filter is in the URL")
    check(text(driver, "#matching") == str(len(JOB_IDS)), "every dead letter of the app matches")
    rows = driver.find_elements(By.CSS_SELECTOR, "tr.entry")
    check(sorted(row.get_attribute("id")[4:] for row in rows) == sorted(JOB_IDS), "the rows are the jobs that died")
    users = [element.text for element in driver.find_elements(By.CSS_SELECTOR, ".user")]
    check(SCRIPT_USER in users, "the user identifier with markup shows as text")
    no_scripts_ran(driver)
    shot(driver, "03-dead-letters")

    # 4. One job in detail: Apple's 21004, the receipt truncated.
    navigate(driver, lambda: driver.find_element(By.CSS_SELECTOR, "#row-" + JOB_IDS[0] + " a[href^='/admin/dead/']"))
    statuses = [cell.text for cell in driver.find_elements(By.CSS_SELECTOR, "#calls .apple-status")]
    check("21004" in statuses, "the audit trail shows Apple's 21004")
    envelope = text(driver, "#envelope")
    check("<receipt: MII" in envelope and "the rest not shown" in envelope, "the receipt is truncated")
    check(GOOD_SECRET not in driver.page_source, "no shared secret on the page")
    shot(driver, "04-dead-letter-detail")
    old = driver.find_element(By.TAG_NAME, "html")
    driver.back()
    WebDriverWait(driver, 20).until(expected_conditions.staleness_of(old))
    loaded(driver)

    # 5. The secret is fixed; two selected jobs are retried, then all that still match.
    fix_secret()
    for job in JOB_IDS[:2]:
        driver.find_element(By.CSS_SELECTOR, "#row-" + job + " input[type=checkbox]").click()
    navigate(driver, lambda: driver.find_element(By.ID, "retry-selected"))
    check(text(driver, "#notice") == "2 jobs sent back to the queue.", "the selected jobs were retried")
    left = len(JOB_IDS) - 2
    if left > 0:
        check(text(driver, "#matching") in (str(left), "0"), "the others still wait")
    shot(driver, "05-retried-selected")
    if driver.find_elements(By.ID, "retry-all"):
        navigate(driver, lambda: driver.find_element(By.ID, "retry-all"))
        check("sent back to the queue." in text(driver, "#notice"), "the rest were retried")

    # 6. Watch them validate: the dead letters empty out and the chart counts them as valid.
    deadline = time.time() + 30
    while True:
        driver.get(BASE + "/admin/dead?app_id=" + APP_ID)
        if driver.find_elements(By.ID, "empty"):
            break
        if time.time() > deadline:
            raise CheckFailed("the retried jobs left the dead letters within 30 s")
        time.sleep(0.5)
    shot(driver, "06-dead-letters-empty")
    driver.get(BASE + "/admin")
    # Read in one script: the overview refreshes itself every 10 s, and on a loaded machine one item
    # at a time once met a node of the page the refresh had replaced.
    items = driver.execute_script("return Array.from(document.querySelectorAll('.legend li'), li => li.innerText.trim())")
    legend = {item.rsplit(" ", 1)[0]: item.rsplit(" ", 1)[-1] for item in items}
    check(int(legend.get("valid", "0")) >= len(JOB_IDS), "the chart counts the validations: %r" % legend)
    shot(driver, "07-overview-after")
    navigate(driver, lambda: driver.find_element(By.LINK_TEXT, "Retries " + text(driver, "#nav-retries")), expect="/admin/retries")
    check("/admin/retries" in driver.current_url, "on the retries")
    shot(driver, "08-retries")

    # 7. The entitlements page: the admin names what the app unlocks, through the form.
    navigate(driver, lambda: driver.find_element(By.LINK_TEXT, "Entitlements"), expect="/admin/entitlements")
    Select(driver.find_element(By.ID, "entitlements-app")).select_by_value(APP_ID)
    navigate(driver, lambda: driver.find_element(By.ID, "entitlements-show"))
    type_into(driver, By.ID, "define-id", "browser_pro")
    type_into(driver, By.ID, "define-products", "com.example.browser.monthly, com.example.browser.yearly")
    navigate(driver, lambda: driver.find_element(By.ID, "define-save"))
    check(text(driver, "#notice").startswith("Saved"), "the entitlement was saved")
    check("com.example.browser.yearly" in text(driver, "#entitlement-browser_pro"), "the catalogue lists its products")
    shot(driver, "09-entitlements")

    # 7a. The revenue page: the app's days as SVG charts and a table (or, with nothing counted, says so).
    navigate(driver, lambda: driver.find_element(By.LINK_TEXT, "Revenue"), expect="/admin/revenue")
    Select(driver.find_element(By.ID, "revenue-app")).select_by_value(APP_ID)
    navigate(driver, lambda: driver.find_element(By.ID, "revenue-show"))
    sections = driver.find_elements(By.CSS_SELECTOR, "section.revenue")
    check(sections or driver.find_elements(By.ID, "revenue-empty"), "the revenue page shows the app's figures or says none")
    check(all(section.find_elements(By.CSS_SELECTOR, "svg.chart") for section in sections), "each currency has its charts")
    shot(driver, "09b-revenue")

    # 7b. The customer view: the operator erases the user whose receipts were retried, after ticking
    # the confirmation, and the customer is gone.
    driver.get(BASE + "/admin/customers?" + urllib.parse.urlencode({"q": SCRIPT_USER, "by": "user", "app_id": APP_ID}))
    loaded(driver)
    check(driver.find_elements(By.ID, "customer-receipts"), "the customer view lists the user's receipts")
    driver.find_element(By.ID, "confirm-erase").click()
    shot(driver, "10-customer-before-erasure")
    navigate(driver, lambda: driver.find_element(By.ID, "erase-customer"))
    check(text(driver, "#notice").startswith("Customer erased"), "the erasure is confirmed")
    driver.get(BASE + "/admin/customers?" + urllib.parse.urlencode({"q": SCRIPT_USER, "by": "user", "app_id": APP_ID}))
    loaded(driver)
    # What is left is the erasure's own event, which names the user for the backend.
    check(not driver.find_elements(By.ID, "customer-receipts"), "no receipt is stored for the user any more")
    check("customer.erased" in driver.page_source, "the customer.erased event is listed")
    shot(driver, "11-customer-erased")

    # 8. Nothing the pages needed was blocked by the CSP.
    violations = csp_violations(driver)
    check(not violations, "no Content-Security-Policy violation: %r" % violations)

    # 9. Log out: the dashboard is closed again.
    driver.get(BASE + "/admin")
    navigate(driver, lambda: driver.find_element(By.CSS_SELECTOR, "form.logout button"))
    check(driver.current_url.endswith("/admin/login"), "logged out")
    driver.get(BASE + "/admin/dead")
    check(driver.current_url.endswith("/admin/login"), "the dead letters need a login again")


def main():
    os.makedirs(SHOTS, exist_ok=True)
    driver = browser()
    try:
        run(driver)
    except (CheckFailed, Exception) as error:  # noqa: BLE001 - any failure fails the run, with a picture
        try:
            driver.save_screenshot(os.path.join(SHOTS, "failure.png"))
        except Exception:  # noqa: BLE001
            pass
        print("browser test: FAILED after %d checks: %s (at %s)" % (checks, error, driver.current_url), file=sys.stderr)
        return 1
    finally:
        driver.quit()
    print("browser test: %d checks passed; screenshots in %s" % (checks, SHOTS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
