package e2e

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The playground in a real browser, because only a browser runs its
// scripts: headless Chromium, with no network beyond loopback, loads `/`,
// finds the sample operations and the demo token the embedded mode opens it
// with, runs a query, then a subscription that updates live after a grab
// made over HTTP, and saves a screenshot of the live update. It drives
// Chromium through chromedriver (WebDriver: plain HTTP and JSON, see
// webDriver) and skips where either is missing, unless FLASHSALE_E2E=1
// (scripts/e2e.sh) makes that a failure.
func TestPlaygroundInChromiumShowsALiveUpdate(t *testing.T) {
	wd := mustWebDriver(t)
	base, _, banner := startServiceOut(t, map[string]string{
		"HTTP_ADDR":   "127.0.0.1:0",
		"SQLITE_PATH": filepath.Join(t.TempDir(), "flashsale.db"),
	})
	user := userRe.FindStringSubmatch(banner)[1]

	wd.open(base + "/")
	// GraphiQL is up when its editors are; the page opens with the sample
	// operations and the demo token (nothing below sets headers).
	wd.waitFor("GraphiQL's query editor with the sample operations", `
		var cm = document.querySelector('.graphiql-query-editor .CodeMirror');
		return cm ? cm.CodeMirror.getValue() : '';`, "subscription WatchStock")
	wd.waitFor("the demo token in the headers editor", `
		return Array.from(document.querySelectorAll('.CodeMirror'))
			.map(function (e) { return e.CodeMirror.getValue(); }).join('\n');`, `"Bearer ey`)

	// Everything the page loaded came from the service itself.
	var foreign []any
	wd.exec(`return performance.getEntriesByType('resource')
		.map(function (e) { return e.name; })
		.filter(function (u) { return !u.startsWith(location.origin + '/'); });`, &foreign)
	if len(foreign) > 0 {
		t.Errorf("the page loaded resources from elsewhere: %v", foreign)
	}

	wd.run("E2EVouchers", `query E2EVouchers { vouchers(first: 10) { edges { node { id title seckill { remaining } } } } }`)
	wd.waitFor("the query's result", resultScript, "Demo flash-sale voucher")

	wd.run("E2EWatchStock", `subscription E2EWatchStock { stockChanged(voucherId: "1") { remaining sold soldOut } }`)
	wd.waitForMatch("the subscription's first event", resultScript, regexp.MustCompile(`"remaining": 100,`))

	out := postQuery(t, base, user, `mutation { seckillVoucher(voucherId: "1") { code } }`)
	if code := out["seckillVoucher"].(map[string]any)["code"]; code != "OK" {
		t.Fatalf("grab answered %v", code)
	}
	wd.waitForMatch("the live update after the grab", resultScript, regexp.MustCompile(`"remaining": 99,\s*"sold": 1,`))
	path := wd.screenshot("playground-live-update.png")
	t.Logf("screenshot of the live update: %s", path)
}

// resultScript reads GraphiQL's result pane.
const resultScript = `
	var cm = document.querySelector('.result-window .CodeMirror');
	return cm ? cm.CodeMirror.getValue() : '';`

// webDriver is a WebDriver session on a headless Chromium, spoken to in
// plain HTTP and JSON: a handful of endpoints need no client library.
type webDriver struct {
	t       testing.TB
	session string // base URL of the session
}

// browserWait bounds every wait on the page; generous, because the test
// shares small machines and a cold Chromium is slow to start.
const browserWait = 60 * time.Second

// mustWebDriver starts chromedriver and a headless Chromium with no
// network (loopback only), and stops both at the test's end. It skips
// where they are not installed, or fails under FLASHSALE_E2E=1.
func mustWebDriver(tb testing.TB) *webDriver {
	tb.Helper()
	browser, err := lookPath("chromium", "chromium-browser", "google-chrome")
	if err == nil {
		var driver string
		if driver, err = lookPath("chromedriver"); err == nil {
			return startWebDriver(tb, driver, browser)
		}
	}
	if os.Getenv("FLASHSALE_E2E") == "1" {
		tb.Fatalf("FLASHSALE_E2E=1 but %v (scripts/e2e.sh installs chromium and chromium-driver)", err)
	}
	tb.Skipf("%v: the playground's browser test needs chromium and chromium-driver (scripts/e2e.sh installs them)", err)
	return nil
}

func lookPath(names ...string) (string, error) {
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("none of %s on PATH", strings.Join(names, ", "))
}

func startWebDriver(tb testing.TB, driver, browser string) *webDriver {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	var log bytes.Buffer
	cmd := exec.Command(driver, "--port="+strconv.Itoa(port))
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start chromedriver: %v", err)
	}
	tb.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	root := "http://127.0.0.1:" + strconv.Itoa(port)
	deadline := time.Now().Add(browserWait)
	for {
		resp, err := http.Get(root + "/status")
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			tb.Fatalf("chromedriver did not answer: %v\n%s", err, log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	wd := &webDriver{t: tb, session: root}
	var created struct {
		SessionID string `json:"sessionId"`
	}
	wd.call(http.MethodPost, "/session", map[string]any{
		"capabilities": map[string]any{"alwaysMatch": map[string]any{
			"browserName": "chrome",
			"goog:chromeOptions": map[string]any{
				"binary": browser,
				"args": []string{
					"--headless", "--no-sandbox", "--disable-gpu",
					"--window-size=1400,900",
					// No network: every host but loopback (which Chromium never
					// proxies) goes to a proxy
					// that does not exist, names do not resolve, and
					// Chromium's own background traffic is off.
					"--proxy-server=http://127.0.0.1:9",
					"--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
					"--disable-background-networking", "--disable-component-update",
					"--disable-sync", "--disable-extensions", "--no-first-run",
					"--disable-dev-shm-usage",
				},
			},
		}},
	}, &created)
	if created.SessionID == "" {
		tb.Fatalf("chromedriver made no session\n%s", log.String())
	}
	wd.session = root + "/session/" + created.SessionID
	tb.Cleanup(func() { wd.call(http.MethodDelete, "", nil, nil) })
	return wd
}

// call sends one WebDriver command and decodes its value into out.
func (wd *webDriver) call(method, path string, in, out any) {
	wd.t.Helper()
	var body bytes.Buffer
	if in != nil {
		if err := json.NewEncoder(&body).Encode(in); err != nil {
			wd.t.Fatal(err)
		}
	}
	req, err := http.NewRequest(method, wd.session+path, &body)
	if err != nil {
		wd.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		wd.t.Fatalf("webdriver %s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	var answer struct {
		Value json.RawMessage `json:"value"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil {
		wd.t.Fatalf("webdriver %s %s: %v", method, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		wd.t.Fatalf("webdriver %s %s: %s %s", method, path, resp.Status, answer.Value)
	}
	if out != nil {
		if err := json.Unmarshal(answer.Value, out); err != nil {
			wd.t.Fatalf("webdriver %s %s: %v in %s", method, path, err, answer.Value)
		}
	}
}

func (wd *webDriver) open(url string) {
	wd.t.Helper()
	wd.call(http.MethodPost, "/url", map[string]any{"url": url}, nil)
}

// exec runs a script in the page and decodes what it returns into out.
func (wd *webDriver) exec(script string, out any, args ...any) {
	wd.t.Helper()
	if args == nil {
		args = []any{}
	}
	wd.call(http.MethodPost, "/execute/sync", map[string]any{"script": script, "args": args}, out)
}

// run puts the operation called name in GraphiQL's query editor and
// presses its run button as a user would (a WebDriver click, not a
// script's). GraphiQL parses the editor 100 ms after a change: until then
// the button would run the operation the editor had before, or, for the
// sample operations, open a menu asking which to run. So it first waits
// for the editor to know the new operation's name and for the button to
// be a plain button.
func (wd *webDriver) run(name, operation string) {
	wd.t.Helper()
	wd.exec(`document.querySelector('.graphiql-query-editor .CodeMirror').CodeMirror.setValue(arguments[0]);`, nil, operation)
	wd.waitFor("GraphiQL to parse "+name, `
		var cm = document.querySelector('.graphiql-query-editor .CodeMirror').CodeMirror;
		var button = document.querySelector('.graphiql-execute-button');
		return cm.operationName + ' ' + (button && !button.hasAttribute('aria-haspopup') ? 'ready' : 'menu');`, name+" ready")
	var el map[string]string
	wd.call(http.MethodPost, "/element", map[string]any{"using": "css selector", "value": ".graphiql-execute-button"}, &el)
	for _, id := range el { // the one key is WebDriver's element identifier
		wd.call(http.MethodPost, "/element/"+id+"/click", map[string]any{}, nil)
	}
}

// waitFor waits until script returns text containing want.
func (wd *webDriver) waitFor(what, script, want string) {
	wd.t.Helper()
	wd.waitForMatch(what, script, regexp.MustCompile(regexp.QuoteMeta(want)))
}

// waitForMatch waits until script returns text that re matches; it fails
// with the last text seen and a screenshot.
func (wd *webDriver) waitForMatch(what, script string, re *regexp.Regexp) {
	wd.t.Helper()
	deadline := time.Now().Add(browserWait)
	var got string
	for {
		wd.exec(script, &got)
		if re.MatchString(got) {
			return
		}
		if time.Now().After(deadline) {
			path := wd.screenshot("playground-failed.png")
			wd.t.Fatalf("waited %v for %s (screenshot %s); last seen:\n%s", browserWait, what, path, got)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// screenshot saves the page as a PNG in the artifacts directory
// ($FLASHSALE_ARTIFACTS, else the repository's ignored artifacts/) and
// returns its path.
func (wd *webDriver) screenshot(name string) string {
	wd.t.Helper()
	var b64 string
	wd.call(http.MethodGet, "/screenshot", nil, &b64)
	png, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		wd.t.Fatal(err)
	}
	dir := os.Getenv("FLASHSALE_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join("..", "artifacts") // the test runs in e2e/
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		wd.t.Fatal(err)
	}
	path, err := filepath.Abs(filepath.Join(dir, name))
	if err != nil {
		wd.t.Fatal(err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		wd.t.Fatal(err)
	}
	return path
}
