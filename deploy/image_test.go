package deploy_test

import (
	"archive/tar"
	"bytes"
	"crypto/rand"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// containerfile is the image's recipe, relative to the repository's root.
const containerfile = "deploy/Containerfile"

// The image builds from the Containerfile, and the binary in it is
// static, answers --version with the revision it was built from, and
// runs as the user the image names. Machines without a registry build the
// binary on the host and the image with --target prebuilt (the build
// stage needs the golang image); where a registry answers, the whole
// multi-stage build is tried too. Podman here builds images but cannot
// run containers (cgroups), so the binary runs from the image's exported
// filesystem. Slow (a static build of the service, minutes from a cold
// cache): it runs under FLASHSALE_IMAGE=1 or FLASHSALE_E2E=1
// (scripts/e2e.sh), where a missing podman fails rather than skips.
func TestImageBinaryAnswersVersionWithTheRevision(t *testing.T) {
	if os.Getenv("FLASHSALE_IMAGE") != "1" && os.Getenv("FLASHSALE_E2E") != "1" {
		t.Skip("builds the image (minutes): set FLASHSALE_IMAGE=1, or run scripts/e2e.sh")
	}
	engine := containerEngine(t)
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	revision := strings.TrimSpace(run(t, root, "git", "rev-parse", "HEAD"))
	tag := "localhost/flashsale-image-test:" + randomHex(t)

	t.Run("prebuilt binary", func(t *testing.T) {
		ctx := t.TempDir()
		began := time.Now()
		layOut(t, root, filepath.Join(ctx, "out"), revision)
		t.Logf("static build of the service: %s", time.Since(began).Round(time.Second))
		began = time.Now()
		build(t, engine, ctx, tag, "--target", "prebuilt")
		t.Logf("image build: %s", time.Since(began).Round(time.Second))
		checkImage(t, engine, tag, revision)
	})

	t.Run("multi-stage build", func(t *testing.T) {
		began := time.Now()
		cmd := exec.Command(engine, "build", "-f", containerfile, "--build-arg", "REVISION="+revision, "-t", tag+"-full", ".")
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if err != nil && unreachableRegistry(string(out)) {
			t.Skipf("the golang base image cannot be pulled here (%s): %s", time.Since(began).Round(time.Millisecond), lastLine(string(out)))
		}
		t.Cleanup(func() { _ = exec.Command(engine, "rmi", "-f", tag+"-full").Run() })
		if err != nil {
			t.Fatalf("%s build: %v\n%s", engine, err, out)
		}
		t.Logf("multi-stage build: %s", time.Since(began).Round(time.Second))
		checkImage(t, engine, tag+"-full", revision)
	})
}

// containerEngine is podman, or docker where its daemon answers; neither:
// the test skips, or fails under FLASHSALE_E2E=1.
func containerEngine(tb testing.TB) string {
	tb.Helper()
	if p, err := exec.LookPath("podman"); err == nil {
		return p
	}
	if d, err := exec.LookPath("docker"); err == nil && exec.Command(d, "info").Run() == nil {
		return d
	}
	return lookTool(tb, "podman", "apt-get install --no-install-recommends podman")
}

// layOut builds the static binary as the Containerfile's build stage
// does, and lays the tree the image takes from it into out.
func layOut(tb testing.TB, root, out, revision string) {
	tb.Helper()
	for _, dir := range []string{"etc/ssl/certs", "data"} {
		if err := os.MkdirAll(filepath.Join(out, dir), 0o755); err != nil {
			tb.Fatal(err)
		}
	}
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w -X main.linkedRevision="+revision,
		"-o", filepath.Join(out, "flashsale"), ".")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("go build: %v\n%s", err, b)
	}
	files := map[string]string{
		"etc/passwd": "flashsale:x:65532:65532:flashsale:/data:/nonexistent\n",
		"etc/group":  "flashsale:x:65532:\n",
	}
	if ca, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt"); err == nil {
		files["etc/ssl/certs/ca-certificates.crt"] = string(ca)
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(out, name), []byte(body), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
}

// build builds the Containerfile in the context ctx as tag.
func build(tb testing.TB, engine, ctx, tag string, args ...string) {
	tb.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		tb.Fatal(err)
	}
	args = append(append([]string{"build", "-f", filepath.Join(root, containerfile)}, args...), "-t", tag, ctx)
	if filepath.Base(engine) == "podman" {
		// No intermediate image (the shared stage) left behind per run.
		args = append([]string{args[0], "--layers=false"}, args[1:]...)
	}
	if out, err := exec.Command(engine, args...).CombinedOutput(); err != nil {
		tb.Fatalf("%s build: %v\n%s", engine, err, out)
	}
	tb.Cleanup(func() { _ = exec.Command(engine, "rmi", "-f", tag).Run() })
}

// checkImage checks the image's settings, exports its filesystem and
// runs its binary with --version.
func checkImage(t *testing.T, engine, tag, revision string) {
	t.Helper()
	config := run(t, "", engine, "image", "inspect", "--format", "{{.Config.User}}|{{json .Config.Entrypoint}}|{{json .Config.ExposedPorts}}", tag)
	if want := `65532:65532|["/usr/local/bin/flashsale"]|{"8080/tcp":{}}`; strings.TrimSpace(config) != want {
		t.Errorf("image config user|entrypoint|ports: %s, want %s", strings.TrimSpace(config), want)
	}
	name := "flashsale-image-test-" + randomHex(t)
	run(t, "", engine, "create", "--name", name, tag)
	defer func() { _ = exec.Command(engine, "rm", "-f", name).Run() }()
	fsTar := filepath.Join(t.TempDir(), "fs.tar")
	run(t, "", engine, "export", "-o", fsTar, name)
	fs := t.TempDir()
	owners := untar(t, fsTar, fs)

	bin := filepath.Join(fs, "usr/local/bin/flashsale")
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatalf("the image's binary: %v", err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("the image's binary asks for a dynamic loader: not static, it cannot start on an empty base")
		}
	}
	_ = f.Close()
	out := run(t, "", bin, "--version")
	if !strings.Contains(out, "revision "+revision) {
		t.Errorf("--version of the image's binary: %q, want the revision %s", strings.TrimSpace(out), revision)
	}
	t.Logf("--version: %s", strings.TrimSpace(out))
	if passwd, err := os.ReadFile(filepath.Join(fs, "etc/passwd")); err != nil || !strings.Contains(string(passwd), ":65532:65532:") {
		t.Errorf("etc/passwd names no user 65532: %q %v", passwd, err)
	}
	if owners["data/"] != 65532 {
		t.Errorf("/data is owned by %d, want 65532, the user the image runs as", owners["data/"])
	}
}

// untar extracts the tar file into dir and returns each entry's owner.
func untar(tb testing.TB, file, dir string) map[string]int {
	tb.Helper()
	f, err := os.Open(file)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	owners := map[string]int{}
	r := tar.NewReader(f)
	for {
		h, err := r.Next()
		if errors.Is(err, io.EOF) {
			return owners
		}
		if err != nil {
			tb.Fatal(err)
		}
		owners[h.Name] = h.Uid
		path := filepath.Join(dir, filepath.Clean("/"+h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(path, 0o755)
		case tar.TypeReg:
			var out *os.File
			if out, err = os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, h.FileInfo().Mode().Perm()); err == nil {
				_, err = io.Copy(out, r)
				err = errors.Join(err, out.Close())
			}
		}
		if err != nil {
			tb.Fatal(err)
		}
	}
}

// unreachableRegistry says whether a build failed for want of its base
// image's registry.
func unreachableRegistry(out string) bool {
	for _, s := range []string{"pinging container registry", "no such host", "initializing source", "failed to resolve source metadata", "pull access denied"} {
		if strings.Contains(out, s) {
			return true
		}
	}
	return false
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// run runs a command in dir and returns its output; a failure fails the test.
func run(tb testing.TB, dir, name string, args ...string) string {
	tb.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		tb.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out.String())
	}
	return out.String()
}

func randomHex(tb testing.TB) string {
	tb.Helper()
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		tb.Fatal(fmt.Errorf("random name: %w", err))
	}
	return hex.EncodeToString(b)
}
