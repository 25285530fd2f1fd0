// SPDX-License-Identifier: Apache-2.0
// Drives the web UI in a headless browser (puppeteer-core against the system browser, no
// download) for tests/e2e/test_ui.sh and bench/ui_render.sh: Chromium over the DevTools
// protocol (BROWSER=chromium, the default; CHROMIUM=path, default /usr/bin/chromium) or
// Firefox over WebDriver BiDi (BROWSER=firefox; FIREFOX=path, default /usr/bin/firefox-esr).
// Prints one line per check: "PASS description", "FAIL description" or "DIAG text"; exits 0
// unless the browser could not run at all.
//
// Usage: [BROWSER=chromium|firefox] node ui_browser.mjs SCENARIO BASE_URL TOKEN [key=value...]
//   empty                       a server without data: every view says so, no errors
//   wrongtoken                  a refused token: a clear message, then the form recovers
//   views job=J host=H diag=N   every view of a server fed by the agent and simjob
//   huge comm=C stacks=N        a profile of N distinct stacks: render time, responsiveness
//   bench comm=C rounds=R       first-render times only (DIAG lines with the numbers)
import puppeteer from 'puppeteer-core';

const [scenario, base, token, ...rest] = process.argv.slice(2);
const opt = Object.fromEntries(rest.map((a) => a.split(/=(.*)/s).slice(0, 2)));
const BROWSER = process.env.BROWSER || 'chromium';
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const FIREFOX = process.env.FIREFOX || '/usr/bin/firefox-esr';
let failures = 0;

function result(ok, desc) {
  if (!ok) failures++;
  console.log(`${ok ? 'PASS' : 'FAIL'} ${desc}`);
}
function diag(text) {
  console.log(`DIAG ${text}`);
}

async function newPage(browser, { allow401 = false } = {}) {
  const page = await browser.newPage();
  await page.setViewport({ width: 1400, height: 1000 });
  page.errors = [];
  page.urls = [];
  page.on('console', (m) => {
    if (m.type() !== 'error') return;
    // A refused token is an expected 401 when the scenario is about it.
    if (allow401 && /status of 401/.test(m.text())) return;
    page.errors.push(m.text());
  });
  page.on('pageerror', (e) => page.errors.push('page error: ' + e.message));
  page.on('requestfailed', (r) => page.errors.push(`request failed: ${r.url()} ${r.failure()?.errorText}`));
  page.on('request', (r) => page.urls.push(r.url()));
  page.on('response', (r) => {
    if (r.status() >= 500) page.errors.push(`${r.status()} from ${r.url()}`);
  });
  return page;
}

// Opens (or moves the page to) `fragment` and waits until the app's render of it is done.
async function show(page, fragment, timeout = 30000) {
  const before = await page.evaluate(() => (window.sysomRendered ? window.sysomRendered.n : 0)).catch(() => 0);
  if (page.url().startsWith(base + '/ui/')) {
    await page.evaluate((f) => { location.hash = f; }, fragment);
  } else {
    await page.goto(`${base}/ui/#${fragment}`, { waitUntil: 'load' });
  }
  await page.waitForFunction((n) => window.sysomRendered && window.sysomRendered.n > n, { timeout }, before);
  return page.evaluate(() => window.sysomRendered);
}

const text = (page, sel) => page.$eval(sel, (e) => e.innerText).catch(() => '');

function noErrors(page, what) {
  result(page.errors.length === 0, `${what}: no console errors${page.errors.length ? ' (' + page.errors.slice(0, 3).join(' | ') + ')' : ''}`);
  page.errors.length = 0;
}

async function login(page, fragment) {
  return show(page, `token=${encodeURIComponent(token)}&${fragment}`);
}

async function empty(browser) {
  const page = await newPage(browser);
  let r = await login(page, 'view=fleet');
  result(r.view === 'fleet' && !r.status, `empty server: fleet view renders (status '${r.status}')`);
  const t = await text(page, 'main');
  result(/No node has sent data yet/.test(t) && /No training job seen/.test(t) && /No open incident/.test(t),
    'empty server: fleet says there are no nodes, jobs or incidents');
  r = await show(page, 'view=flamegraph&from=-1h');
  result(/No cpu data for these filters/.test(await text(page, '#flame')), 'empty server: the flame graph says there is no cpu data');
  const kinds = await page.$$eval('#flame-kinds option', (o) => o.map((x) => x.value));
  result(['cpu', 'off-cpu', 'wall', 'gpu-launch', 'gpu-time'].every((k) => kinds.includes(k)), `empty server: the flame graph kinds are offered (${kinds.join(', ')})`);
  await show(page, 'view=flamegraph&kind=nosuchkind');
  const st = await text(page, '#status');
  result(/must be cpu, gpu-launch, gpu-time, off-cpu or wall/.test(st), `empty server: an unknown kind gets the server's list of kinds ('${st}')`);
  page.errors = page.errors.filter((e) => !/status of 400/.test(e)); // that answer is a 400
  await show(page, 'view=job');
  result(/No training job seen/.test(await text(page, 'main')), 'empty server: the job view says there is no job');
  await show(page, 'view=job&job=nosuchjob');
  result(/no job 'nosuchjob'/.test(await text(page, '#status')), "empty server: an unknown job is named in the error ('no job ...')");
  page.errors = page.errors.filter((e) => !/status of 404/.test(e)); // that answer is a 404
  await show(page, 'view=diagnosis');
  result(/No incident/.test(await text(page, 'main')), 'empty server: the diagnosis view says there is no incident');
  noErrors(page, 'empty server');
}

async function wrongtoken(browser) {
  const page = await newPage(browser, { allow401: true });
  await show(page, 'token=not-the-token&view=fleet');
  const form = await page.$eval('#token-form', (f) => !f.hidden);
  const msg = await text(page, '#token-message');
  const status = await text(page, '#status');
  result(form && /refused the API token/.test(msg), `wrong token: the token form says it was refused ('${msg}')`);
  result(/401/.test(status) && /invalid bearer token/.test(status), `wrong token: the status line gives the server's reason ('${status}')`);
  result(!page.url().includes('not-the-token'), 'wrong token: the token is removed from the address');
  await page.type('#token-input', token);
  const before = await page.evaluate(() => window.sysomRendered.n);
  await page.click('#token-form button[type=submit]');
  await page.waitForFunction((n) => window.sysomRendered.n > n, { timeout: 30000 }, before);
  const hidden = await page.$eval('#token-form', (f) => f.hidden);
  result(hidden && /Nodes/.test(await text(page, 'main')), 'wrong token: a valid token typed in the form loads the fleet view');
  noErrors(page, 'wrong token');
}

// Frame labels of the flame graph on the page (the <title> of every drawn frame).
const frames = (page, sel = '#flame') => page.$$eval(`${sel} svg g title`, (t) => t.map((x) => x.textContent));

async function views(browser) {
  const page = await newPage(browser);
  const job = opt.job;
  let r = await login(page, 'view=fleet');
  result(r.view === 'fleet' && !r.status, `fleet view renders (status '${r.status}')`);
  result(!page.url().includes(token) && await page.evaluate(() => sessionStorage.getItem('sysom-token')) === token,
    'the #token= fragment is stored for the tab and removed from the address');
  const fleet = await text(page, 'main');
  result(fleet.includes(opt.host), `fleet lists the agent's node (${opt.host})`);
  result(fleet.includes(job), `fleet lists the job (${job})`);
  result(opt.diag ? fleet.includes('#' + opt.diag) : true, `fleet lists the open incident #${opt.diag}`);
  noErrors(page, 'fleet');

  await show(page, `view=flamegraph&job=${encodeURIComponent(job)}&from=-10m`);
  let f = await frames(page);
  result(f.some((x) => x.startsWith('rank_main')) && f.some((x) => x.startsWith('simjob_backward_cpu')),
    `CPU flame graph of the job shows rank_main and simjob_backward_cpu (${f.length} frames)`);
  await page.type('#flame-search', 'simjob_backward');
  await page.waitForFunction(() => /frames match/.test(document.querySelector('#flame-details').textContent), { timeout: 10000 })
    .then(() => result(true, 'search: the details line counts the frames that match'))
    .catch(() => result(false, 'search: the details line counts the frames that match'));
  const highlighted = await page.$$eval('#flame svg g rect', (rs) => rs.filter((x) => /e600e6|230, 0, 230/i.test(x.getAttribute('fill') || x.style.fill)).length);
  result(highlighted > 0, `search: matching frames are highlighted (${highlighted})`);
  // Zoom: a click on rank_main makes it span the whole width.
  const widthBefore = await page.$eval('#flame svg', (s) => s.getAttribute('width'));
  await page.evaluate(() => {
    const g = [...document.querySelectorAll('#flame svg g')].find((x) => x.querySelector('title')?.textContent.startsWith('simjob_backward_cpu'));
    g.dispatchEvent(new MouseEvent('click', { bubbles: true }));
  });
  // (d3-flame-graph sets the widths in a transition, even of 0 ms: wait for it.)
  const zoomed = await page.waitForFunction((w) => {
    const g = [...document.querySelectorAll('#flame svg g')].find((x) => x.querySelector('title')?.textContent.startsWith('simjob_backward_cpu'));
    const width = Number(g.querySelector('rect').getAttribute('width'));
    return width >= 0.95 * w ? width : false;
  }, { timeout: 5000 }, Number(widthBefore)).then((h) => h.jsonValue()).catch(() => 0);
  result(zoomed >= Number(widthBefore) * 0.95, `zoom: a clicked frame spans the width (${zoomed.toFixed(0)} of ${widthBefore} px)`);
  noErrors(page, 'CPU flame graph');

  await show(page, `view=flamegraph&kind=gpu-launch&job=${encodeURIComponent(job)}&from=-10m`);
  f = await frames(page);
  result(f.some((x) => x.startsWith('[gpu] ')), `GPU-launch flame graph has [gpu] kernel frames (${f.filter((x) => x.startsWith('[gpu] ')).length})`);
  await show(page, `view=flamegraph&kind=gpu-time&job=${encodeURIComponent(job)}&rank=2&from=-10m`);
  f = await frames(page);
  result(f.length > 0 && f.some((x) => x.startsWith('[gpu] ')) && / ns \(/.test(f[0]), `GPU-time flame graph of rank 2 (filter by rank) in ns (${f.length} frames)`);
  noErrors(page, 'GPU flame graphs');

  await show(page, `view=flamegraph&diff=ranks&job=${encodeURIComponent(job)}&a=0&b=2&from=-10m`);
  const fault = await page.evaluate(() => {
    const g = [...document.querySelectorAll('#flame svg g')].find((x) => x.querySelector('title')?.textContent.startsWith('simjob_fault_extra_cpu'));
    return g ? { title: g.querySelector('title').textContent, fill: g.querySelector('rect').getAttribute('fill') || g.querySelector('rect').style.fill } : null;
  });
  result(fault && /^hsl\(0,|rgb\(2[0-9][0-9], /.test(fault.fill), `differential 0 → 2: simjob_fault_extra_cpu is red (${fault && fault.title}; ${fault && fault.fill})`);
  const blue = await page.$$eval('#flame svg g rect', (rs) => rs.filter((x) => /^hsl\(220,/.test(x.getAttribute('fill') || '')).length);
  diag(`differential 0 → 2: ${blue} frames blue (less on rank 2)`);
  await show(page, `view=flamegraph&diff=time&job=${encodeURIComponent(job)}&from=-10m&to=-1s&from2=-10m&to2=now`);
  result((await frames(page)).length > 0 && /change of share/.test(await text(page, 'main')), 'differential of two time ranges renders');
  noErrors(page, 'differential flame graphs');

  await show(page, `view=job&job=${encodeURIComponent(job)}&from=-10m`);
  const labels = await page.$$eval('.rank-label', (l) => l.map((x) => x.textContent));
  const want = Array.from({ length: Number(opt.ranks || 8) }, (_, i) => `rank ${i}`);
  result(want.every((w) => labels.includes(w)), `job view: the heatmap has a row per rank (${labels.join(', ')})`);
  const canvas = await page.$eval('#heatmap canvas', (c) => [c.width, c.height]).catch(() => [0, 0]);
  result(canvas[0] > 0 && canvas[1] >= want.length * 10, `job view: the heatmap is drawn (${canvas.join('×')} px)`);
  const jobText = await text(page, 'main');
  result(/GPU per rank/.test(jobText) && (await page.$$('table.gpu tbody tr')).length >= want.length, 'job view: the GPU table has a row per rank');
  result(/CPU waterline\s+(No rank above the waterline|RANK)/i.test(jobText), 'job view: the CPU waterline section renders (its flags or that there are none)');
  diag(`job view: waterline flags simjob_fault_extra_cpu: ${/simjob_fault_extra_cpu/.test(jobText)}`);
  noErrors(page, 'job view');

  if (opt.diag) {
    await show(page, `view=diagnosis&id=${opt.diag}`);
    const summary = await text(page, '#diagnosis-summary');
    result(/rank 2/.test(summary), `diagnosis view: the summary names rank 2 ('${summary.slice(0, 100)}')`);
    f = await frames(page, '.flame');
    result(f.some((x) => x.startsWith('simjob_fault_extra_cpu')), `diagnosis view: the CPU differential behind it shows simjob_fault_extra_cpu (${f.length} frames)`);
    result(/Report \(text\)/.test(await text(page, 'main')), 'diagnosis view: the text report is shown');
    noErrors(page, 'diagnosis view');
  }
  // The fragment never leaves the browser; what is sent is the URL without it.
  const leaked = page.urls.map((u) => u.split('#')[0]).filter((u) => u.includes(token));
  result(leaked.length === 0, `the token is in no request URL (${page.urls.length} requests${leaked.length ? ': ' + leaked[0] : ''})`);
}

async function huge(browser) {
  const page = await newPage(browser);
  await login(page, 'view=fleet');
  const r = await show(page, `view=flamegraph&comm=${opt.comm}&limit=${opt.stacks}&from=-1h`, 400000);
  const stat = await page.evaluate(() => window.sysomLastRender);
  result(!r.status && stat && stat.stacks === Number(opt.stacks), `huge profile: ${stat && stat.stacks} distinct stacks rendered (status '${r.status}')`);
  diag(`huge profile: ${stat.stacks} stacks, ${stat.frames} frames: fetch ${stat.fetchMs.toFixed(0)} ms, render ${stat.renderMs.toFixed(0)} ms (chart ${stat.chartMs.toFixed(0)} ms)`);
  const drawn = await page.$$eval('#flame svg g', (g) => g.length);
  diag(`huge profile: ${drawn} frames drawn (those at least 1 px wide)`);
  // Responsive: an input event is handled and a search over every frame answers.
  let t0 = Date.now();
  await page.type('#flame-search', 'libtrainer');
  await page.waitForFunction(() => /frames match|no match/.test(document.querySelector('#flame-details').textContent), { timeout: 30000 });
  const searchMs = Date.now() - t0;
  t0 = Date.now();
  await page.evaluate(() => new Promise((res) => requestAnimationFrame(() => res())));
  const frameMs = Date.now() - t0;
  diag(`huge profile: search answered in ${searchMs} ms, next animation frame after ${frameMs} ms`);
  result(searchMs < 30000 && frameMs < 5000, `huge profile: the page stays responsive (search ${searchMs} ms, frame ${frameMs} ms)`);
  noErrors(page, 'huge profile');
}

async function bench(browser) {
  const page = await newPage(browser);
  await login(page, 'view=fleet');
  const rounds = Number(opt.rounds || 3);
  const out = [];
  for (let i = 0; i < rounds; i++) {
    // (A parameter the view ignores makes each round a new fragment, hence a new render.)
    await show(page, `view=flamegraph&comm=${opt.comm}&limit=100000&from=-1h&round=${i}`, 400000);
    out.push(await page.evaluate(() => window.sysomLastRender));
  }
  const med = (k) => out.map((s) => s[k]).sort((a, b) => a - b)[Math.floor(out.length / 2)];
  diag(`BENCH stacks=${out[0].stacks} frames=${out[0].frames} fetch_ms=${med('fetchMs').toFixed(0)} render_ms=${med('renderMs').toFixed(0)} chart_ms=${med('chartMs').toFixed(0)} rounds=${rounds}`);
  noErrors(page, 'bench');
}

const scenarios = { empty, wrongtoken, views, huge, bench };
if (!scenarios[scenario]) {
  console.error('usage: node ui_browser.mjs empty|wrongtoken|views|huge|bench BASE_URL TOKEN [key=value...]');
  process.exit(2);
}
const launch = {
  chromium: {
    browser: 'chrome',
    executablePath: CHROMIUM,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run'],
  },
  // puppeteer-core 24 speaks WebDriver BiDi to Firefox (its CDP support is gone); it writes
  // a fresh profile with its own preferences into a temporary directory.
  firefox: {
    browser: 'firefox',
    executablePath: FIREFOX,
    headless: true,
  },
}[BROWSER];
if (!launch) {
  console.error(`BROWSER must be chromium or firefox, not '${BROWSER}'`);
  process.exit(2);
}
const browser = await puppeteer.launch(launch);
diag(`browser ${await browser.version()}`);
try {
  await scenarios[scenario](browser);
} catch (e) {
  result(false, `${scenario}: ${e.message.split('\n')[0]}`);
} finally {
  await browser.close();
}
process.exit(0);
