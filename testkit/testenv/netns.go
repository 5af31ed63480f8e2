package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// IPv6Link is a network of a test's own: two network namespaces joined
// by a veth pair, one holding the server's address and the other Clients,
// addresses of the same /64 (Prefix). A server listens in the first
// (Listen) and clients dial from the second (Dial), while the test
// process, its stores and its handlers stay where they are: a socket
// belongs to the namespace of the thread that created it, whichever
// thread uses it later. Nothing of the machine's own network changes, so
// runs on one machine cannot collide.
//
// Loopback cannot stand in for it: ::1 is a single address, and the
// per-address limits group IPv6 by /64.
type IPv6Link struct {
	Prefix  netip.Prefix
	Server  netip.Addr
	Clients []netip.Addr
	server  string // namespace names
	clients string
}

// MustIPv6Link makes a link with n client addresses and removes it when
// the test ends. It skips the test, saying why, when it cannot run: not
// root, no ip command (iproute2; scripts/test-services.sh installs it), or
// a machine where the first namespace cannot be made. Anything else that
// fails, fails the test.
func MustIPv6Link(tb testing.TB, n int) *IPv6Link {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("needs root to make network namespaces (ip netns); the test command's scripts run as root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		tb.Skip("needs the ip command (iproute2) to make network namespaces; scripts/test-services.sh installs it")
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	id := hex.EncodeToString(b)
	l := &IPv6Link{
		Prefix:  netip.MustParsePrefix("fd00:37::/64"),
		Server:  netip.MustParseAddr("fd00:37::1"),
		server:  "flashsale-s-" + id,
		clients: "flashsale-c-" + id,
	}
	for i := range n {
		l.Clients = append(l.Clients, netip.MustParseAddr(fmt.Sprintf("fd00:37::%x", 0x10+i)))
	}
	ip := func(args ...string) {
		tb.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			tb.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	// ipIn runs ip inside ns from a thread that entered it (inNetns), not
	// with ip -n, which remounts /sys and fails where / is no mount point
	// of its own (a chroot, the fresh-machine check).
	ipIn := func(ns string, args ...string) {
		tb.Helper()
		var out []byte
		err := inNetns(ns, func() (err error) {
			out, err = exec.Command("ip", args...).CombinedOutput()
			return err
		})
		if err != nil {
			tb.Fatalf("ip %s in %s: %v: %s", strings.Join(args, " "), ns, err, out)
		}
	}
	// A container or chroot may forbid namespaces even to root (no
	// /run/netns to mount): that machine cannot run the test at all.
	if out, err := exec.Command("ip", "netns", "add", l.server).CombinedOutput(); err != nil {
		tb.Skipf("this machine does not allow network namespaces (ip netns add: %v: %s)", err, strings.TrimSpace(string(out)))
	}
	tb.Cleanup(func() { _ = exec.Command("ip", "netns", "del", l.server).Run() })
	ip("netns", "add", l.clients)
	tb.Cleanup(func() { _ = exec.Command("ip", "netns", "del", l.clients).Run() })
	// Made in both namespaces at once; deleting them deletes it.
	ip("link", "add", "vs", "netns", l.server, "type", "veth", "peer", "name", "vc", "netns", l.clients)
	// nodad: usable at once, without duplicate address detection's wait.
	ipIn(l.server, "-6", "addr", "add", l.Server.String()+"/64", "dev", "vs", "nodad")
	for _, a := range l.Clients {
		ipIn(l.clients, "-6", "addr", "add", a.String()+"/64", "dev", "vc", "nodad")
	}
	ipIn(l.server, "link", "set", "vs", "up")
	ipIn(l.clients, "link", "set", "vc", "up")
	return l
}

// Listen listens on the server's address, on a port of the system's
// choice, in the server's namespace.
func (l *IPv6Link) Listen() (net.Listener, error) {
	var ln net.Listener
	err := inNetns(l.server, func() (err error) {
		ln, err = net.Listen("tcp", netip.AddrPortFrom(l.Server, 0).String())
		return err
	})
	return ln, err
}

// Dial is a DialContext (http.Transport's, websocket's) that connects
// from the client address from, in the clients' namespace.
func (l *IPv6Link) Dial(from netip.Addr) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		err := inNetns(l.clients, func() (err error) {
			d := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(from, 0))}
			c, err = d.DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}
}

// inNetns runs f on an OS thread moved into the network namespace ns
// for as long as f runs, and moved back before the runtime may use the
// thread for anything else. The thread is not let to end: a child
// process started with Pdeathsig (redis-server, the service) dies with
// the thread that started it, and that may be any thread.
func inNetns(ns string, f func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// Unlocked only once back home: if that fails, the thread ends
		// with this goroutine rather than serve others in ns.
		home, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("this thread's namespace: %w", err)
			return
		}
		defer unix.Close(home)
		fd, err := unix.Open("/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("open namespace %s: %w", ns, err)
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("enter namespace %s: %w", ns, err)
			return
		}
		err = f()
		if unix.Setns(home, unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		done <- err
	}()
	return <-done
}
