// Package hashed serves a page's embedded files under content-hashed URLs
// (name.<12 hex of SHA-256>.ext), cached for a year as immutable, gzipped
// where the client accepts it and that makes them smaller: the playground
// and the console each serve theirs through one Set.
package hashed

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/http"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"
)

// contentTypes lists the file kinds a Set serves; other files in the
// directory (VERSIONS, licences) are kept in the source tree, not served.
var contentTypes = map[string]string{
	".js":  "text/javascript; charset=utf-8",
	".css": "text/css; charset=utf-8",
	".svg": "image/svg+xml",
}

// File is one served file.
type File struct {
	URL  string // the Set's prefix + the content-hashed name
	Body []byte

	contentType string
	etag        string
	gzipOnce    sync.Once
	gzipped     []byte // nil when gzip does not make it smaller
}

// Set is the files of one directory, by name and by URL path.
type Set struct {
	ByName map[string]*File
	byURL  map[string]*File
}

// Load reads dir's servable files from fsys, to be served under prefix.
func Load(fsys fs.FS, dir, prefix string) (*Set, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("read embedded assets: %w", err)
	}
	s := &Set{ByName: map[string]*File{}, byURL: map[string]*File{}}
	for _, e := range entries {
		ext := path.Ext(e.Name())
		ctype, ok := contentTypes[ext]
		if e.IsDir() || !ok {
			continue
		}
		body, err := fs.ReadFile(fsys, path.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("read embedded asset %s: %w", e.Name(), err)
		}
		sum := sha256.Sum256(body)
		hash := hex.EncodeToString(sum[:])
		f := &File{
			URL:         prefix + strings.TrimSuffix(e.Name(), ext) + "." + hash[:12] + ext,
			Body:        body,
			contentType: ctype,
			etag:        `"` + hash[:32] + `"`,
		}
		s.ByName[e.Name()], s.byURL[f.URL] = f, f
	}
	return s, nil
}

// MustLoad is Load for files compiled in: only a broken build fails.
func MustLoad(fsys fs.FS, dir, prefix string) *Set {
	s, err := Load(fsys, dir, prefix)
	if err != nil {
		panic(err)
	}
	return s
}

// URL is the path a page links name by; an error for a name not in the
// set, so that a page template cannot ship a dead link.
func (s *Set) URL(name string) (string, error) {
	f, ok := s.ByName[name]
	if !ok {
		return "", fmt.Errorf("no embedded asset %q", name)
	}
	return f.URL, nil
}

// ServeHTTP serves GET and HEAD of the set's URLs; any other path, a
// file's name without its hash among them, is 404, so a stale URL never
// receives content it was not cached with.
func (s *Set) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, http.StatusText(http.StatusMethodNotAllowed), http.StatusMethodNotAllowed)
		return
	}
	f, ok := s.byURL[r.URL.Path]
	if !ok {
		http.NotFound(w, r)
		return
	}
	h := w.Header()
	h.Set("Content-Type", f.contentType)
	h.Set("Cache-Control", "public, max-age=31536000, immutable")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Vary", "Accept-Encoding")
	body, etag := f.Body, f.etag
	if acceptsGzip(r.Header.Get("Accept-Encoding")) {
		if gz := f.gzipBody(); gz != nil {
			body = gz
			etag = strings.TrimSuffix(f.etag, `"`) + `-gzip"`
			h.Set("Content-Encoding", "gzip")
		}
	}
	h.Set("ETag", etag)
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(body))
}

// gzipBody compresses the file once, on first demand (graphiql's bundle
// shrinks to about a third, and most clients accept gzip).
func (f *File) gzipBody() []byte {
	f.gzipOnce.Do(func() {
		var buf bytes.Buffer
		zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		if err != nil {
			return // cannot happen with a valid level; serve it plain
		}
		if _, err := zw.Write(f.Body); err != nil {
			return
		}
		if err := zw.Close(); err != nil {
			return
		}
		if buf.Len() < len(f.Body) {
			f.gzipped = buf.Bytes()
		}
	})
	return f.gzipped
}

// acceptsGzip reports whether an Accept-Encoding header value allows gzip,
// by name or by "*", with a non-zero quality.
func acceptsGzip(header string) bool {
	gzipQ, starQ := -1.0, -1.0
	for part := range strings.SplitSeq(header, ",") {
		coding, params, _ := strings.Cut(part, ";")
		q := 1.0
		if v, ok := strings.CutPrefix(strings.TrimSpace(params), "q="); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				continue
			}
			q = f
		}
		switch strings.ToLower(strings.TrimSpace(coding)) {
		case "gzip", "x-gzip":
			gzipQ = q
		case "*":
			starQ = q
		}
	}
	if gzipQ >= 0 {
		return gzipQ > 0
	}
	return starQ > 0
}
