package console_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"flashsale/httpapi/console"
)

func serve(tb testing.TB, h http.Handler, path string) *http.Response {
	tb.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Result()
}

// The page links only to its own embedded files, each served under its
// content hash, and runs no inline script: its policy forbids any script
// or style but its own files, so HTML slipped into the page by a text
// from the API could not run.
func TestPageLinksOnlyItsOwnAssetsUnderAStrictPolicy(t *testing.T) {
	mux := http.NewServeMux()
	mux.Handle("GET /console", console.Handler("/query"))
	mux.Handle("GET "+console.AssetsPath, console.Assets())
	resp := serve(t, mux, "/console")
	body, _ := io.ReadAll(resp.Body)
	page := string(body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, `data-endpoint="/query"`) {
		t.Fatalf("page: %d\n%s", resp.StatusCode, page)
	}
	csp := resp.Header.Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'none'", "script-src 'self'", "style-src 'self';", "frame-ancestors 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("policy %q lacks %q", csp, want)
		}
	}
	if strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "unsafe-eval") {
		t.Errorf("policy %q allows inline code", csp)
	}
	if regexp.MustCompile(`<script>|<style>|\son[a-z]+=`).MatchString(page) {
		t.Error("the page has an inline script, style or handler, which its policy blocks")
	}
	links := regexp.MustCompile(`(?:src|href)="([^"]+)"`).FindAllStringSubmatch(page, -1)
	if len(links) != 3 {
		t.Fatalf("links %v, want the icon, the style and the script", links)
	}
	for _, l := range links {
		if !strings.HasPrefix(l[1], console.AssetsPath) {
			t.Errorf("the page links to %s, outside its assets", l[1])
			continue
		}
		a := serve(t, mux, l[1])
		if a.StatusCode != http.StatusOK || !strings.Contains(a.Header.Get("Cache-Control"), "immutable") {
			t.Errorf("%s: %d %q", l[1], a.StatusCode, a.Header.Get("Cache-Control"))
		}
	}
	if r := serve(t, mux, console.AssetsPath+"console.js"); r.StatusCode != http.StatusNotFound {
		t.Errorf("an asset without its hash: %d, want 404", r.StatusCode)
	}
}

// The script writes what the API answers as text, never as HTML.
func TestScriptWritesNoHTML(t *testing.T) {
	mux := http.NewServeMux()
	mux.Handle("GET /console", console.Handler("/query"))
	mux.Handle("GET "+console.AssetsPath, console.Assets())
	page, _ := io.ReadAll(serve(t, mux, "/console").Body)
	src := regexp.MustCompile(`src="([^"]+console\.[0-9a-f]+\.js)"`).FindSubmatch(page)
	if src == nil {
		t.Fatal("no script link")
	}
	js, _ := io.ReadAll(serve(t, mux, string(src[1])).Body)
	if m := regexp.MustCompile(`innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\(|new Function`).Find(js); m != nil {
		t.Errorf("the script uses %s", m)
	}
}
