// Drives the Swarm console in headless Chromium, as a person would:
// signs in, submits a mission from the form, watches its tasks turn
// completed in the graph without reloading, approves a pending shell call
// from the page, opens the report. Run by tests/tests/console.rs:
//
//   node console.mjs <base-url> <token> <mission.json> <screenshot-dir>
//
// Prints one line per step; exits 1 with the reason when a step fails.
import { chromium } from "playwright-core";
import { readFileSync, mkdirSync } from "node:fs";
import { join } from "node:path";

const [base, token, missionFile, shots] = process.argv.slice(2);
const mission = readFileSync(missionFile, "utf8");
mkdirSync(shots, { recursive: true });
const executablePath = process.env.CHROMIUM || "/usr/bin/chromium";

const step = (what) => console.log("step: " + what);
function check(ok, why) {
  if (!ok) throw new Error(why);
}

const browser = await chromium.launch({ executablePath, args: ["--no-sandbox"] });
const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
const problems = [];
page.on("pageerror", (e) => problems.push("page error: " + e.message));
page.on("console", (m) => { if (m.type() === "error") problems.push("console: " + m.text()); });
page.on("response", (r) => { if (r.status() >= 400) problems.push(r.status() + " from " + r.url()); });
const shot = (name) => page.screenshot({ path: join(shots, name + ".png"), fullPage: true });

try {
  step("the console asks for a token");
  await page.goto(base + "/");
  check(page.url().includes("/login"), "not sent to sign in: " + page.url());
  await page.getByLabel("Token").fill("not-the-token-at-all");
  await page.getByRole("button", { name: "Sign in" }).click();
  check(page.url().includes("/login"), "a wrong token was let in");
  await page.getByLabel("Token").fill(token);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.waitForURL(base + "/");

  step("submit a mission from the form");
  await page.getByText("New mission").click();
  await page.getByLabel("Or a plan, as JSON").fill(mission);
  await shot("1-form");
  await page.getByRole("button", { name: "Submit" }).click();
  await page.waitForURL(/\/swarms\/[0-9a-f-]+$/);
  const swarmUrl = page.url();
  const swarmId = swarmUrl.split("/").pop();
  console.log("swarm: " + swarmId);

  step("what the mission says is text, never markup");
  const injected = await page.evaluate(() => document.querySelectorAll("main img, main script").length);
  check(injected === 0, "the mission's markup became elements");
  const heading = await page.locator("h1").textContent();
  check(heading.includes("<img"), "the mission's text is not shown as written: " + heading);

  step("task a turns completed in the graph without a reload");
  await page.evaluate(() => { window.__sameDocument = true; });
  await page.waitForSelector('.swarm-graph .node[data-task="a"][data-status="completed"]', { timeout: 30000 });
  check(await page.evaluate(() => window.__sameDocument === true), "the page was reloaded");

  step("the shell call waits for approval, shown on the page");
  const approve = page.locator("#waiting button.approve");
  await approve.waitFor({ state: "visible", timeout: 30000 });
  const args = await page.locator("#waiting pre.args").textContent();
  check(args.includes("console-approved"), "the approval does not show the command: " + args);
  check(await page.evaluate(() => window.__sameDocument === true), "the page was reloaded");
  await shot("2-waiting");

  step("approve it from the page");
  await page.getByLabel("Reason (optional)").fill("looks safe");
  await approve.click();
  await page.waitForURL(/done=/);
  await page.evaluate(() => { window.__sameDocument = true; });

  step("every task turns completed, live");
  for (const t of ["b", "c", "d"]) {
    await page.waitForSelector(`.swarm-graph .node[data-task="${t}"][data-status="completed"]`, { timeout: 60000 });
  }
  await page.locator("#report-link").waitFor({ state: "visible", timeout: 30000 });
  check(await page.evaluate(() => window.__sameDocument === true), "the page was reloaded");
  const status = await page.locator("#swarm-status").textContent();
  check(status.includes("Completed"), "the swarm's status reads " + status);
  const bars = await page.locator(".swarm-timeline rect.bar").count();
  check(bars >= 4, "the timeline has " + bars + " bars, fewer than the tasks");
  await shot("3-swarm");

  step("a task's steps open beside the graph");
  await page.locator('.swarm-graph .node[data-task="b"]').click();
  await page.locator("#task-panel .task-detail").waitFor({ timeout: 10000 });
  const detail = await page.locator("#task-panel").textContent();
  check(detail.includes("console-approved"), "task b's output is not in its details");
  await shot("4-task");

  step("a narrow screen");
  await page.setViewportSize({ width: 375, height: 800 });
  const wide = await page.evaluate(() => document.documentElement.scrollWidth);
  check(wide <= 400, "the page is " + wide + " px wide on a 375 px screen");
  await shot("5-narrow");
  await page.setViewportSize({ width: 1280, height: 900 });

  step("the report opens");
  await page.locator("#report-link").click();
  await page.waitForURL(/\/report$/);
  check((await page.locator("h2#graph-heading").count()) === 1, "the report has no graph");
  check((await page.locator("svg.swarm-graph").count()) === 1, "the report's graph is not inline SVG");
  await shot("6-report");

  step("the list shows the swarm, and the agents page the workers");
  await page.goto(base + "/");
  const row = page.locator(`tr[data-swarm="${swarmId}"]`);
  check((await row.locator(".status").textContent()).includes("Completed"), "the list's row is not completed");
  await page.goto(base + "/agents");
  check((await page.locator("td", { hasText: /^worker$/ }).count()) >= 1, "no worker on the agents page");
  await shot("7-agents");

  check(problems.length === 0, "the pages reported errors:\n" + problems.join("\n"));
  console.log("done");
} catch (e) {
  await shot("failure").catch(() => {});
  console.error("failed: " + e.message);
  if (problems.length) console.error(problems.join("\n"));
  await browser.close();
  process.exit(1);
}
await browser.close();
