package main

import (
	"runtime/debug"
	"strings"
	"testing"
)

// The version names the module version and the VCS revision the
// toolchain stamped, with "(modified)" for a dirty tree; else the revision
// linked in by make build; else it says why there is none.
func TestVersionNamesTheRevision(t *testing.T) {
	t.Parallel()
	stamped := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "flashsale", Version: "v0.0.0-20261126164342-2978f6624a4b+dirty"},
		Settings: []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "2978f6624a4b85f1e89190c15a4118c2a8eb90d1"},
			{Key: "vcs.time", Value: "2026-11-26T16:43:42Z"}, {Key: "vcs.modified", Value: "true"}}}
	bare := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "flashsale", Version: "(devel)"}}
	cases := []struct {
		name   string
		info   *debug.BuildInfo
		linked string
		want   string
	}{
		{"stamped by the toolchain", stamped, "", "flashsale v0.0.0-20261126164342-2978f6624a4b+dirty revision 2978f6624a4b85f1e89190c15a4118c2a8eb90d1 2026-11-26T16:43:42Z (modified) go1.26.8"},
		{"linked in, clean", bare, "abc123", "flashsale (devel) revision abc123 go1.26.8"},
		{"linked in, dirty", bare, "abc123+dirty", "flashsale (devel) revision abc123 (modified) go1.26.8"},
		{"linked outside a repository", bare, "+dirty", "flashsale (devel) (no VCS revision"},
		{"none", bare, "", "flashsale (devel) (no VCS revision"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := describeBuild(tc.info, tc.linked); !strings.HasPrefix(got, tc.want) {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}
