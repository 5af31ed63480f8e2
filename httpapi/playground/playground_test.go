package playground

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"path"
	"regexp"
	"strings"
	"testing"
)

// newMux mounts the package as its documentation says to.
func newMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /{$}", Handler("flashsale", "/query"))
	mux.Handle("GET "+AssetsPath, Assets())
	return mux
}

func do(t *testing.T, h http.Handler, method, target string, header http.Header) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, target, nil)
	for k, vs := range header {
		req.Header[k] = vs
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

var refPattern = regexp.MustCompile(`(?i)\b(?:src|href)\s*=\s*["']?([^"'\s>]+)`)

// pageRefs fetches the page and returns the URLs its src and href
// attributes reference.
func pageRefs(t *testing.T, h http.Handler) []string {
	t.Helper()
	rec := do(t, h, http.MethodGet, "/", nil)
	if rec.Code != http.StatusOK {
		t.Fatalf("GET / = %d, want 200", rec.Code)
	}
	var refs []string
	for _, m := range refPattern.FindAllStringSubmatch(rec.Body.String(), -1) {
		refs = append(refs, m[1])
	}
	return refs
}

func TestPage(t *testing.T) {
	mux := newMux()
	rec := do(t, mux, http.MethodGet, "/", nil)
	body := rec.Body.String()

	checks := []struct {
		name string
		ok   bool
	}{
		{"status 200", rec.Code == http.StatusOK},
		{"content type text/html", rec.Header().Get("Content-Type") == "text/html; charset=utf-8"},
		{"revalidated", rec.Header().Get("Cache-Control") == "no-cache"},
		{"has ETag", rec.Header().Get("ETag") != ""},
		{"has CSP", strings.Contains(rec.Header().Get("Content-Security-Policy"), "script-src 'self';")},
		{"nosniff", rec.Header().Get("X-Content-Type-Options") == "nosniff"},
		{"no http:// anywhere", !strings.Contains(body, "http://")},
		{"no https:// anywhere", !strings.Contains(body, "https://")},
		{"no protocol-relative URL", !strings.Contains(body, `"//`)},
		{"no inline script", !regexp.MustCompile(`<script>`).MatchString(body)},
		{"title", strings.Contains(body, "<title>flashsale</title>")},
		{"endpoint", strings.Contains(body, `data-endpoint="/query"`)},
	}
	for _, c := range checks {
		if !c.ok {
			t.Errorf("page: %s: failed", c.name)
		}
	}
	if t.Failed() {
		t.Logf("headers: %v\nbody:\n%s", rec.Header(), body)
	}
}

func TestPageReferencesOnlyServedAssets(t *testing.T) {
	mux := newMux()
	refs := pageRefs(t, mux)
	want := []string{"favicon.svg", "graphiql.min.css", "react.production.min.js", "react-dom.production.min.js", "graphiql.min.js", "playground.js"}
	if len(refs) != len(want) {
		t.Fatalf("page references %q, want one URL for each of %q", refs, want)
	}
	for i, ref := range refs {
		t.Run(ref, func(t *testing.T) {
			if !strings.HasPrefix(ref, AssetsPath) {
				t.Fatalf("reference %q is not under %s", ref, AssetsPath)
			}
			if stem := strings.TrimSuffix(want[i], path.Ext(want[i])); !strings.HasPrefix(path.Base(ref), stem+".") {
				t.Errorf("reference %d is %q, want %s with a content hash", i, ref, want[i])
			}
			rec := do(t, mux, http.MethodGet, ref, nil)
			if rec.Code != http.StatusOK {
				t.Fatalf("GET %s = %d, want 200", ref, rec.Code)
			}
			if rec.Body.Len() == 0 {
				t.Errorf("GET %s: empty body", ref)
			}
			wantType := map[string]string{
				".js":  "text/javascript; charset=utf-8",
				".css": "text/css; charset=utf-8",
				".svg": "image/svg+xml",
			}[path.Ext(ref)]
			if got := rec.Header().Get("Content-Type"); got != wantType {
				t.Errorf("GET %s: Content-Type %q, want %q", ref, got, wantType)
			}
			if got := rec.Header().Get("Cache-Control"); !strings.Contains(got, "immutable") {
				t.Errorf("GET %s: Cache-Control %q, want immutable", ref, got)
			}
			if rec.Header().Get("ETag") == "" {
				t.Errorf("GET %s: no ETag", ref)
			}
			if rec.Header().Get("Content-Encoding") != "" {
				t.Errorf("GET %s without Accept-Encoding: Content-Encoding %q", ref, rec.Header().Get("Content-Encoding"))
			}
			sum := sha256.Sum256(rec.Body.Bytes())
			if hash := hex.EncodeToString(sum[:])[:12]; !strings.Contains(ref, "."+hash+".") {
				t.Errorf("GET %s: body hash %s is not the one in the URL", ref, hash)
			}
		})
	}
}

func TestAssetsNotFound(t *testing.T) {
	mux := newMux()
	graphiqlJS := assets.ByName["graphiql.min.js"].URL
	tests := []struct {
		name, target string
	}{
		{"unknown file", AssetsPath + "nope.js"},
		{"name without its hash", AssetsPath + "graphiql.min.js"},
		{"wrong hash", AssetsPath + "graphiql.min.000000000000.js"},
		{"hashed URL with a suffix", graphiqlJS + ".map"},
		{"hashed URL in a sub-folder", AssetsPath + "x/" + path.Base(graphiqlJS)},
		{"versions file", AssetsPath + "VERSIONS"},
		{"licence", AssetsPath + "LICENSE.react"},
		{"the folder itself", AssetsPath},
		{"path traversal", AssetsPath + "..%2fplayground.go"},
		{"upper-case name", strings.ToUpper(graphiqlJS)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Both through the documented mux and bare, as Assets promises
			// the 404 itself for callers that mount it more broadly.
			for name, h := range map[string]http.Handler{"mux": mux, "bare": Assets()} {
				if rec := do(t, h, http.MethodGet, tt.target, nil); rec.Code != http.StatusNotFound {
					t.Errorf("%s: GET %s = %d, want 404", name, tt.target, rec.Code)
				}
			}
		})
	}
}

func TestMethods(t *testing.T) {
	asset := assets.ByName["graphiql.min.css"].URL
	tests := []struct {
		name     string
		h        http.Handler
		method   string
		target   string
		want     int
		wantBody bool
	}{
		{"page HEAD", Handler("", "/query"), http.MethodHead, "/", http.StatusOK, false},
		{"page POST", Handler("", "/query"), http.MethodPost, "/", http.StatusMethodNotAllowed, true},
		{"asset HEAD", Assets(), http.MethodHead, asset, http.StatusOK, false},
		{"asset DELETE", Assets(), http.MethodDelete, asset, http.StatusMethodNotAllowed, true},
		{"mux POST page", newMux(), http.MethodPost, "/", http.StatusMethodNotAllowed, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := do(t, tt.h, tt.method, tt.target, nil)
			if rec.Code != tt.want {
				t.Fatalf("%s %s = %d, want %d", tt.method, tt.target, rec.Code, tt.want)
			}
			if got := rec.Body.Len() > 0; got != tt.wantBody {
				t.Errorf("%s %s: body present = %v, want %v", tt.method, tt.target, got, tt.wantBody)
			}
			if tt.want == http.StatusMethodNotAllowed && rec.Header().Get("Allow") == "" {
				t.Errorf("%s %s: 405 without Allow", tt.method, tt.target)
			}
		})
	}
}

func TestConditionalRequests(t *testing.T) {
	mux := newMux()
	for _, target := range []string{"/", assets.ByName["graphiql.min.js"].URL} {
		t.Run(target, func(t *testing.T) {
			first := do(t, mux, http.MethodGet, target, nil)
			etag := first.Header().Get("ETag")
			if etag == "" {
				t.Fatal("no ETag")
			}
			rec := do(t, mux, http.MethodGet, target, http.Header{"If-None-Match": {etag}})
			if rec.Code != http.StatusNotModified || rec.Body.Len() != 0 {
				t.Errorf("If-None-Match %s = %d with %d bytes, want 304 and none", etag, rec.Code, rec.Body.Len())
			}
			rec = do(t, mux, http.MethodGet, target, http.Header{"If-None-Match": {`"other"`}})
			if rec.Code != http.StatusOK {
				t.Errorf("If-None-Match other = %d, want 200", rec.Code)
			}
		})
	}
}

func TestAssetGzip(t *testing.T) {
	mux := newMux()
	for name, a := range assets.ByName {
		t.Run(name, func(t *testing.T) {
			plain := do(t, mux, http.MethodGet, a.URL, nil)
			rec := do(t, mux, http.MethodGet, a.URL, http.Header{"Accept-Encoding": {"br, gzip"}})
			if rec.Code != http.StatusOK {
				t.Fatalf("GET %s = %d", a.URL, rec.Code)
			}
			if rec.Header().Get("Vary") != "Accept-Encoding" {
				t.Errorf("Vary = %q", rec.Header().Get("Vary"))
			}
			if rec.Header().Get("Content-Encoding") != "gzip" {
				if len(a.Body) > 1024 {
					t.Fatalf("a %d-byte asset was not gzipped", len(a.Body))
				}
				return
			}
			if rec.Header().Get("ETag") == plain.Header().Get("ETag") {
				t.Error("gzip and plain responses share an ETag")
			}
			zr, err := gzip.NewReader(rec.Body)
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(zr)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, plain.Body.Bytes()) {
				t.Error("gunzipped body differs from the plain one")
			}
		})
	}
}

func TestHandlerEscapes(t *testing.T) {
	tests := []struct {
		name, title, endpoint string
		want, notWant         []string
	}{
		{
			name:  "default title",
			title: "", endpoint: "/query",
			want: []string{"<title>GraphiQL</title>"},
		},
		{
			name:  "markup in title",
			title: `</title><script>alert(1)</script>`, endpoint: "/query",
			want:    []string{"&lt;/title&gt;&lt;script&gt;"},
			notWant: []string{"<script>alert"},
		},
		{
			name:  "quote in endpoint",
			title: "x", endpoint: `/q" onload="alert(1)`,
			want:    []string{`data-endpoint="/q&#34; onload=&#34;alert(1)"`},
			notWant: []string{`" onload="`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := do(t, Handler(tt.title, tt.endpoint), http.MethodGet, "/", nil).Body.String()
			for _, s := range tt.want {
				if !strings.Contains(body, s) {
					t.Errorf("page lacks %q:\n%s", s, body)
				}
			}
			for _, s := range tt.notWant {
				if strings.Contains(body, s) {
					t.Errorf("page contains %q:\n%s", s, body)
				}
			}
		})
	}
}

func TestContentSecurityPolicy(t *testing.T) {
	tests := []struct {
		endpoint string
		connect  string
	}{
		{"/query", "connect-src 'self' ws: wss:;"},
		{"https://api.example.com/query", "connect-src 'self' ws: wss: https://api.example.com;"},
		{"ftp://x/query", "connect-src 'self' ws: wss:;"},
	}
	for _, tt := range tests {
		csp := do(t, Handler("", tt.endpoint), http.MethodGet, "/", nil).Header().Get("Content-Security-Policy")
		if !strings.Contains(csp, tt.connect) || !strings.HasPrefix(csp, "default-src 'none';") {
			t.Errorf("endpoint %q: CSP %q, want default-src 'none' and %q", tt.endpoint, csp, tt.connect)
		}
	}
}

// ownFiles are the files in assets/ that this package wrote rather than
// scripts/update-playground.sh.
var ownFiles = map[string]bool{"playground.js": true, "favicon.svg": true}

// TestVendoredFilesMatchVersions keeps assets/VERSIONS honest: every
// vendored file is listed with the hash the update script recorded, so a
// hand edit or a partial update shows up here.
func TestVendoredFilesMatchVersions(t *testing.T) {
	f, err := embedded.Open("assets/VERSIONS")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	listed := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 4 {
			t.Errorf("VERSIONS line %q: want package@version license file sha256", line)
			continue
		}
		spec, file, want := fields[0], fields[2], fields[3]
		if !strings.Contains(spec[1:], "@") {
			t.Errorf("VERSIONS line %q: %q is not package@version", line, spec)
		}
		body, err := fs.ReadFile(embedded, "assets/"+file)
		if err != nil {
			t.Errorf("VERSIONS lists %s: %v", file, err)
			continue
		}
		if sum := sha256.Sum256(body); hex.EncodeToString(sum[:]) != want {
			t.Errorf("%s: sha256 differs from VERSIONS; re-run scripts/update-playground.sh", file)
		}
		listed[file] = true
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	total := 0
	for name, a := range assets.ByName {
		total += len(a.Body)
		if !ownFiles[name] && !listed[name] {
			t.Errorf("%s is served but not listed in VERSIONS", name)
		}
	}
	if const3MB := 3 << 20; total > const3MB {
		t.Errorf("embedded assets total %d bytes, over the 3 MiB budget", total)
	}
}

// The page carries the sample operation and the headers it is given, as
// escaped data- attributes for playground.js, and no headers attribute
// when none are given (the real mode's page holds no token).
func TestPageCarriesQueryAndHeadersOnlyWhenGiven(t *testing.T) {
	query := `mutation Grab { seckillVoucher(voucherId: "1") { code } }`
	with := do(t, Handler("x", "/query", WithQuery(query), WithHeaders(map[string]string{"Authorization": "Bearer abc.def"})), http.MethodGet, "/", nil).Body.String()
	for _, s := range []string{
		`data-query="mutation Grab { seckillVoucher(voucherId: &#34;1&#34;) { code } }"`,
		`data-headers="{`,
		`&#34;Authorization&#34;: &#34;Bearer abc.def&#34;`,
	} {
		if !strings.Contains(with, s) {
			t.Errorf("page lacks %q:\n%s", s, with)
		}
	}
	without := do(t, Handler("x", "/query", WithQuery(query)), http.MethodGet, "/", nil).Body.String()
	if strings.Contains(without, "data-headers") || strings.Contains(without, "Bearer") {
		t.Errorf("page without headers has some:\n%s", without)
	}
	js, err := embedded.ReadFile("assets/playground.js")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"root.dataset.query", "props.defaultQuery", "root.dataset.headers", "props.headers"} {
		if !strings.Contains(string(js), s) {
			t.Errorf("playground.js does not use %s", s)
		}
	}
}
