package e2e

import (
	"database/sql"
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	saletool "flashsale/bench/sale"
	"flashsale/config"
	"flashsale/internal/auth"
)

// The console in headless Chromium, with no network beyond loopback,
// against a node in embedded mode: a user's token is refused, an admin's
// signs in (kept in the tab's sessionStorage only); a sale run by the
// load tool (bench/sale, at a steady rate) shows in the live charts,
// whose lines move; the demo voucher is paused, resumed and restocked
// from the vouchers table; a dead letter (put in the database as the
// order writer would, its detail holding HTML that must stay text) and a
// block added from the page are listed; the cluster view shows the node.
// Screenshots of each step land in artifacts/ (console-*.png).
func TestConsoleInChromiumSignsInAndSteersASale(t *testing.T) {
	wd := mustWebDriver(t)
	dbPath := filepath.Join(t.TempDir(), "flashsale.db")
	base, admin, banner := startServiceOut(t, map[string]string{"HTTP_ADDR": "127.0.0.1:0", "SQLITE_PATH": dbPath})
	user := userRe.FindStringSubmatch(banner)[1]
	secret, err := auth.SecretFromFile(config.SecretPath(dbPath))
	if err != nil {
		t.Fatal(err)
	}

	wd.open(base + "/console")
	// A user's token is refused, with why, and not kept.
	wd.setValue("#token", user)
	wd.click("#signin-go")
	wd.waitFor("the refusal of a user's token", `return document.getElementById('signin-msg').textContent;`, "not an admin")
	wd.screenshot("console-user-refused.png")
	var kept string
	wd.exec(`return sessionStorage.getItem('flashsale.console.token') || '';`, &kept)
	if kept != "" {
		t.Fatal("the refused token was kept")
	}

	wd.setValue("#token", admin)
	wd.click("#signin-go")
	wd.waitFor("the signed-in console", `return document.getElementById('tabs').hidden ? 'signed out' : 'signed in';`, "signed in")
	wd.exec(`return (sessionStorage.getItem('flashsale.console.token') === arguments[0]) + ' ' + localStorage.length;`, &kept, admin)
	if kept != "true 0" {
		t.Fatalf("the token is not kept in the tab's session only: %s", kept)
	}

	// A sale from the load tool, at a steady rate for a few seconds.
	attack := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		rep, err := saletool.Run(t.Context(), saletool.Config{
			Endpoint: saletool.Endpoint{Name: "service", API: saletool.GraphQL, URLs: []string{base}},
			Scenario: saletool.Mixed, Users: 900, Attempts: 1, Stock: 600, Concurrency: 16, Rate: 150,
			Secret: secret, RequestIDs: true, MaxDuration: 30 * time.Second, LagTimeout: 10 * time.Second,
			OnAttack: func() { close(attack) },
		})
		if err == nil && rep.OK == 0 {
			err = fmt.Errorf("the sale sold nothing: %v", rep.Codes)
		}
		done <- err
	}()
	select {
	case <-attack:
	case err := <-done:
		t.Fatalf("the load tool stopped before its attack: %v", err)
	case <-time.After(browserWait):
		t.Fatal("the load tool did not start its attack")
	}
	// The newest voucher is the sale's: watch it.
	wd.click(`#tabs button[data-tab="vouchers"]`)
	wd.click(`#tabs button[data-tab="live"]`)
	var sold string
	wd.waitForMatch("the sale's voucher in the picker", `
		var s = document.getElementById('live-voucher');
		if (s.options.length < 2) { return ''; }
		s.value = s.options[0].value;
		return s.value;`, regexp.MustCompile(`^[2-9]|^\d\d`))
	wd.exec(`return document.getElementById('live-voucher').value;`, &sold)
	wd.click("#live-watch")
	figures := `return Array.from(document.querySelectorAll('#live-figures .figure'))
		.map(function (f) { return f.querySelector('span').textContent + '=' + f.querySelector('b').textContent; }).join('; ');`
	wd.waitForMatch("grabs answered OK in the live figures", figures, regexp.MustCompile(`grabs/s=[1-9]`))
	lines := `return Array.from(document.querySelectorAll('#chart-stock path.line, #chart-grabs path.line'))
		.map(function (p) { return p.getAttribute('data-series') + ':' + p.getAttribute('data-points') + ':' + p.getAttribute('d'); }).join('\n');`
	var before string
	wd.exec(lines, &before)
	after := wd.waitChange("the charts to move", lines, before)
	if !regexp.MustCompile(`remaining:[2-9]\d*:M`).MatchString(after) {
		t.Errorf("the stock chart has fewer than two points:\n%s", after)
	}
	wd.screenshot("console-live-sale.png")
	t.Logf("charts before:\n%s\nafter:\n%s", short(before), short(after))

	// Pause, resume and restock the demo voucher from its row.
	wd.click(`#tabs button[data-tab="vouchers"]`)
	row := `#voucher-table tr[data-voucher="1"] `
	cell := func(name string) string {
		return `var c = document.querySelector('` + row + name + `'); return c ? c.textContent : '';`
	}
	wd.waitFor("the demo voucher's row", cell(".status-cell"), "ACTIVE")
	wd.click(row + "button.status")
	wd.waitFor("the voucher paused", cell(".status-cell"), "PAUSED")
	if s := voucherStatus(t, base, admin, "1"); s != "PAUSED" {
		t.Fatalf("after pause the API says %s", s)
	}
	wd.click(row + "button.status")
	wd.waitFor("the voucher resumed", cell(".status-cell"), "ACTIVE")
	wd.setValue(row+"input.restock-amount", "25")
	wd.click(row + "button.restock")
	wd.waitFor("the restocked voucher", cell(".stock-cell"), "/ 125")
	wd.waitForMatch("a countdown", cell(".countdown"), regexp.MustCompile(`on sale, ends in|begins in`))
	// A voucher made from the form, beginning in an hour: its countdown.
	wd.setValue("#nv-title", "Made in the console")
	wd.setValue("#nv-begin", "3600")
	wd.click("#nv-go")
	wd.waitForMatch("the new voucher's countdown", `
		return Array.from(document.querySelectorAll('#voucher-table tbody tr')).map(function (r) { return r.textContent; }).join('\n');`,
		regexp.MustCompile(`Made in the consoleACTIVE100 / 100begins in (59m|1h)`))
	wd.screenshot("console-vouchers.png")

	// Orders: the demo user's grab, by its id and by the user.
	grab := postQuery(t, base, user, `mutation { seckillVoucher(voucherId: "1") { code orderId } }`)["seckillVoucher"].(map[string]any)
	orderID, _ := grab["orderId"].(string)
	if grab["code"] != "OK" || orderID == "" {
		t.Fatalf("the demo user's grab: %v", grab)
	}
	wd.click(`#tabs button[data-tab="orders"]`)
	wd.setValue("#ord-id", orderID)
	wd.click("#ord-id-go")
	orders := `return document.querySelector('#order-table tbody').textContent;`
	wd.waitFor("the order by id", orders, orderID)
	var buyer string
	wd.exec(`return document.querySelector('#order-table tbody td:nth-child(2)').textContent;`, &buyer)
	wd.setValue("#ord-user", buyer)
	wd.click("#ord-user-go")
	wd.waitFor("the user's orders", `return document.getElementById('orders-msg').textContent + ' ' + document.querySelector('#order-table tbody').textContent;`, "1 order(s).")
	wd.waitFor("the order's state", orders, "UNPAID")
	wd.screenshot("console-orders.png")

	// A dead letter, as the order writer records one; its detail is
	// HTML that must show as text.
	const evil = `<img src=x onerror="document.title='pwned'">refused`
	db, err := sql.Open("sqlite", "file:"+dbPath+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	_, err = db.Exec(`INSERT INTO tb_order_dead_letter (key, order_id, user_id, voucher_id, reason, detail, entry, create_time)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, "{v1}:log/1700000000000-0", 9000001, 42, 1, "over_user_limit", evil, "{}",
		time.Now().UTC().Format("2006-01-02 15:04:05.999999-07:00"))
	if err != nil {
		t.Fatal(err)
	}
	wd.click(`#tabs button[data-tab="dead"]`)
	wd.waitFor("the dead letter with its reason", `return document.querySelector('#dead-table tbody').textContent;`, "over_user_limit")
	var escaped string
	wd.exec(`var t = document.getElementById('dead-table');
		return t.querySelectorAll('img').length + ' ' + t.textContent.includes(arguments[0]) + ' ' + document.title;`, &escaped, evil)
	if escaped != "0 true flashsale console" {
		t.Fatalf("the dead letter's HTML was not kept as text: %s", escaped)
	}
	wd.screenshot("console-dead-letters.png")

	// A block added from the page is listed, and in force.
	wd.click(`#tabs button[data-tab="blocks"]`)
	wd.setValue("#blk-user", "4242")
	wd.click("#blk-go")
	wd.waitFor("the block in the list", `return document.querySelector('#block-table tbody').textContent;`, "4242")
	wd.screenshot("console-blocks.png")

	wd.click(`#tabs button[data-tab="cluster"]`)
	wd.waitFor("this node in the cluster view", `return document.querySelector('#cluster-table tbody').textContent;`, "no cluster")
	wd.screenshot("console-cluster.png")

	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the load tool: %v", err)
		}
	case <-time.After(browserWait):
		t.Fatal("the load tool did not finish")
	}
	var foreign []any
	wd.exec(`return performance.getEntriesByType('resource').map(function (e) { return e.name; })
		.filter(function (u) { return !u.startsWith(location.origin + '/') && !u.startsWith('ws'); });`, &foreign)
	if len(foreign) > 0 {
		t.Errorf("the console loaded resources from elsewhere: %v", foreign)
	}
	t.Logf("sale voucher %s; screenshots in the artifacts directory", sold)
}

// short cuts each line of the charts' paths for the log.
func short(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if len(l) > 120 {
			l = l[:120] + "…"
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}

// voucherStatus reads a voucher's status over the API.
func voucherStatus(t *testing.T, base, token, id string) string {
	t.Helper()
	var out struct {
		Data struct{ Voucher struct{ Status string } }
	}
	postGraphQL(t, base, token, map[string]any{"query": `query($id: ID!) { voucher(id: $id) { status } }`, "variables": map[string]any{"id": id}}, &out)
	return out.Data.Voucher.Status
}

// click clicks the element css selects, as a user would (a WebDriver
// click, not a script's). The console re-renders a table when it loads
// it again, so an element found just before may be gone: it is found
// again, a few times.
func (wd *webDriver) click(css string) {
	wd.t.Helper()
	for try := 0; ; try++ {
		var el map[string]string
		wd.call(http.MethodPost, "/element", map[string]any{"using": "css selector", "value": css}, &el)
		var status int
		for _, id := range el { // the one key is WebDriver's element identifier
			status = wd.post("/element/" + id + "/click")
		}
		if status == http.StatusOK || try == 5 {
			if status != http.StatusOK {
				wd.t.Fatalf("click %s: %d", css, status)
			}
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// post sends a WebDriver command without a body and returns its status.
func (wd *webDriver) post(path string) int {
	wd.t.Helper()
	resp, err := http.Post(wd.session+path, "application/json", strings.NewReader("{}"))
	if err != nil {
		wd.t.Fatalf("webdriver POST %s: %v", path, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// setValue sets an input's value.
func (wd *webDriver) setValue(css, value string) {
	wd.t.Helper()
	wd.exec(`var e = document.querySelector(arguments[0]); e.value = arguments[1];`, nil, css, value)
}

// waitChange waits until script returns other text than before, and
// returns it.
func (wd *webDriver) waitChange(what, script, before string) string {
	wd.t.Helper()
	deadline := time.Now().Add(browserWait)
	var got string
	for {
		wd.exec(script, &got)
		if got != before {
			return got
		}
		if time.Now().After(deadline) {
			path := wd.screenshot("console-failed.png")
			wd.t.Fatalf("waited %v for %s (screenshot %s); it stayed:\n%s", browserWait, what, path, got)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
