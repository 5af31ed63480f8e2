package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// scripts/test.sh stops at the first failed step and names it: a failed
// service set-up (say, no root for apt-get) must not run on into minutes
// of unrelated failures. The steps are stubbed (FLASHSALE_TEST_SERVICES,
// and a `go` first on PATH), so the test costs milliseconds.
func TestTestScriptStopsAtTheFirstFailedStep(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	failingServices := write("services-fail", "echo 'test-services: FAILED: need root to run: apt-get update' >&2; exit 1\n")
	goodServices := write("services-ok", "echo \"export TEST_DATABASE_URL='postgres://stub'\"\n")
	stubBin := filepath.Join(dir, "bin")
	if err := os.Mkdir(stubBin, 0o755); err != nil {
		t.Fatal(err)
	}
	// A `go` whose vet fails; anything else it is asked is recorded.
	if err := os.WriteFile(filepath.Join(stubBin, "go"), []byte("#!/bin/sh\necho \"go $*\" >> "+filepath.Join(dir, "go-calls")+"\n[ \"$1\" = vet ] && { echo 'vet: stub failure' >&2; exit 3; }\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, services, path string
		wantErr              []string
		notRun               string
	}{
		// The stub `go` here too: a script that ran on would not start
		// the real suite.
		{"service set-up fails", failingServices, stubBin + string(os.PathListSeparator) + os.Getenv("PATH"),
			[]string{"need root to run: apt-get update", `FAILED at step "services" (exit 1)`}, "== go vet"},
		{"go vet fails", goodServices, stubBin + string(os.PathListSeparator) + os.Getenv("PATH"),
			[]string{"vet: stub failure", `FAILED at step "go vet" (exit 3)`}, "== generated code"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command("bash", "scripts/test.sh")
			cmd.Dir = ".." // the repository's root, where the script runs from
			cmd.Env = append(os.Environ(), "FLASHSALE_TEST_SERVICES="+tc.services, "PATH="+tc.path)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			if err == nil {
				t.Fatalf("test.sh succeeded:\n%s\n%s", stdout.String(), stderr.String())
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr.String())
				}
			}
			if strings.Contains(stdout.String(), tc.notRun) {
				t.Errorf("test.sh ran on past the failed step:\n%s", stdout.String())
			}
		})
	}
	if calls, _ := os.ReadFile(filepath.Join(dir, "go-calls")); strings.TrimSpace(string(calls)) != "go vet ./..." {
		t.Errorf("go was asked more than vet: %q", calls)
	}
}

// What the service, the operations guide's real-mode walk-through and the
// load tool write into the work tree is ignored by git, so that trying
// them leaves `git status` clean.
func TestWorkTreeFilesAreIgnored(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	git := func(args ...string) *exec.Cmd {
		cmd := exec.Command("git", args...)
		cmd.Dir = ".." // the paths below are the repository root's
		return cmd
	}
	if err := git("rev-parse", "--is-inside-work-tree").Run(); err != nil {
		t.Skip("not in a git work tree")
	}
	for _, p := range []string{
		"flashsale",                 // go build -o flashsale .
		"flashsale.db",              // the embedded mode's SQLite file
		"flashsale.db-wal",          // and its write-ahead log
		"flashsale.secret",          // the embedded mode's JWT secret
		"redis-data/appendonly.aof", // real mode's Redis, as the guide starts it
		"flashsale.log",             // real mode's log, as the guide redirects it
		"seckill-bench",             // go build ./cmd/seckill-bench
		"artifacts/e2e.txt",         // what scripts/e2e.sh keeps
	} {
		if err := git("check-ignore", "-q", "--no-index", p).Run(); err != nil {
			t.Errorf("%s is not ignored by .gitignore", p)
		}
	}
}

// The demos (the cluster's, Sentinel's, and the library they share)
// change nothing outside the repository and their temporary directory:
// they install nothing, start no etcd, create or alter no PostgreSQL role,
// write nothing under the home directory (the test command's set-up, which
// may do all of these, is not called), drop the database they create at
// exit, and mint tokens for any user. Their runs are walked by hand (a
// build and several processes take a minute or more); these are the
// promises a reading can check.
func TestClusterDemoPromisesNoSideEffects(t *testing.T) {
	t.Parallel()
	lib, err := os.ReadFile("../scripts/demo-lib.sh")
	if err != nil {
		t.Fatal(err)
	}
	for _, demo := range []string{"cluster-demo.sh", "sentinel-demo.sh"} {
		b, err := os.ReadFile("../scripts/" + demo)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), ". scripts/demo-lib.sh") {
			t.Errorf("scripts/%s does not source scripts/demo-lib.sh", demo)
		}
		// Comments say what the script does not do; only commands count.
		var code strings.Builder
		for _, line := range strings.Split(string(b)+"\n"+string(lib), "\n") {
			if l := strings.TrimSpace(line); !strings.HasPrefix(l, "#") {
				code.WriteString(line + "\n")
			}
		}
		script := strings.ToLower(code.String())
		for _, banned := range []string{"apt", "dpkg", "sudo", "etcd", "test-services.sh", "create role", "alter role", "create user",
			"alter user", "$home", "${home", "~/", "xdg_", ".local/state", "createuser"} {
			if strings.Contains(script, banned) {
				t.Errorf("scripts/%s runs %q", demo, banned)
			}
		}
		for _, want := range []string{"mktemp -d", "trap cleanup int term exit", "drop database if exists $db", "rm -rf \"$work\"",
			"token --user"} {
			if !strings.Contains(script, want) {
				t.Errorf("scripts/%s lacks %q", demo, want)
			}
		}
		if _, err := exec.LookPath("bash"); err == nil {
			if out, err := exec.Command("bash", "-n", "../scripts/"+demo).CombinedOutput(); err != nil {
				t.Errorf("bash -n %s: %v\n%s", demo, err, out)
			}
		}
	}
	if b, _ := os.ReadFile("../scripts/cluster-demo.sh"); !strings.Contains(strings.ToLower(string(b)), "jwt secret: $secret") {
		t.Error("scripts/cluster-demo.sh does not print the JWT secret")
	}
}
