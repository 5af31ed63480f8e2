package main

import (
	"os/exec"
	"runtime/debug"
	"strings"
	"testing"
)

// The version names the module version and the VCS revision the
// toolchain stamped, with "(modified)" for a dirty tree; else the revision
// linked in by make build; else the checkout's (go run); else it says why
// there is none. "(devel)", the toolchain's word for "no version", is not
// shown.
func TestVersionNamesTheRevision(t *testing.T) {
	t.Parallel()
	stamped := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "flashsale", Version: "v0.0.0-20261126164342-2978f6624a4b+dirty"},
		Settings: []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "2978f6624a4b85f1e89190c15a4118c2a8eb90d1"},
			{Key: "vcs.time", Value: "2026-11-26T16:43:42Z"}, {Key: "vcs.modified", Value: "true"}}}
	bare := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "flashsale", Version: "(devel)"}}
	clean := func() (string, bool, bool) { return "def456", false, true }
	dirty := func() (string, bool, bool) { return "def456", true, true }
	none := func() (string, bool, bool) { return "", false, false }
	cases := []struct {
		name     string
		info     *debug.BuildInfo
		linked   string
		checkout func() (string, bool, bool)
		want     string
	}{
		{"stamped by the toolchain", stamped, "abc123", clean, "flashsale v0.0.0-20261126164342-2978f6624a4b+dirty revision 2978f6624a4b85f1e89190c15a4118c2a8eb90d1 2026-11-26T16:43:42Z (modified) go1.26.8"},
		{"linked in, clean", bare, "abc123", dirty, "flashsale revision abc123 go1.26.8"},
		{"linked in, dirty", bare, "abc123+dirty", clean, "flashsale revision abc123 (modified) go1.26.8"},
		{"go run, clean", bare, "", clean, "flashsale revision def456 (read from its checkout at run time) go1.26.8"},
		{"go run, dirty", bare, "+dirty", dirty, "flashsale revision def456 (modified; read from its checkout at run time) go1.26.8"},
		{"none", bare, "", none, "flashsale (no VCS revision"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := describeBuild(tc.info, tc.linked, tc.checkout)
			if !strings.HasPrefix(got, tc.want) {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
			if strings.Contains(got, "(devel)") {
				t.Fatalf("got %q: (devel) says nothing", got)
			}
		})
	}
}

// Under go run the revision comes from the checkout: the one this test
// was built in, as git names it.
func TestCheckoutRevisionIsGits(t *testing.T) {
	t.Parallel()
	want, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("not a git checkout, or no git: %v", err)
	}
	rev, _, ok := checkoutRevision()
	if !ok || rev != strings.TrimSpace(string(want)) {
		t.Fatalf("checkoutRevision() = %q, %v; want git's %q", rev, ok, strings.TrimSpace(string(want)))
	}
}
