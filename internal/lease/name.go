package lease

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// A log writer's consumer name is its node's identity in every log's
// consumer group (NODE_ID): stable across restarts, so that a restarted
// node re-reads its own pending entries at once instead of waiting for
// another node to take them over. Two running processes must not share
// it. Sharing loses nothing (both would read the same pending list and
// insert the same orders, which the database's conflict clause makes
// no-ops), but it doubles their work and hides which node holds what. So
// a writer holds a lease on its name while it runs, and a second process
// with the same name refuses to start.

// ErrInUse says another running process holds a name's lease: two nodes
// were given the same NODE_ID.
var ErrInUse = errors.New("in use by another running process")

// Named is where the lease on a name lives (persistence.ConsumerName).
// Each call is one round trip.
type Named interface {
	// Key names the lease where it lives.
	Key() string
	// Holder returns the lease's value, "" when free.
	Holder(ctx context.Context) (string, error)
	// Take sets the lease to value for ttl if it still holds seen ("" =
	// free), and reports whether it did.
	Take(ctx context.Context, value, seen string, ttl time.Duration) (bool, error)
	// Renew extends the lease held under value, or takes it again if it
	// lapsed; false when another holder has it.
	Renew(ctx context.Context, value string, ttl time.Duration) (bool, error)
	// Release drops the lease if it is still held under value.
	Release(ctx context.Context, value string) error
}

// held are the keys of the names this process holds: a lease left by an
// earlier process with this process's id (a restarted container is pid 1
// again) is told apart from one of our own.
var held sync.Map

// TakeName takes the lease on a name. A lease left by a process that
// died (killed without releasing it) is taken at once when that process
// ran on this host and is gone, and otherwise once it expires (ttl); a
// lease that stays held that long belongs to a live process, and TakeName
// returns an error wrapping ErrInUse ("in use by another running process
// (host h, pid p)", for the caller to prefix with what it names).
func TakeName(ctx context.Context, store Named, ttl time.Duration) (*Lease, error) {
	key := store.Key()
	value := holderValue()
	deadline := time.Now().Add(ttl + time.Second)
	for {
		seen, err := store.Holder(ctx)
		if err != nil {
			return nil, err
		}
		expect := seen
		if seen != "" && !deadHolder(seen, key) {
			expect = "\x00" // never the value: a live holder's lease is free only once it expires
		}
		took, err := store.Take(ctx, value, expect, ttl)
		if err != nil {
			return nil, err
		}
		if took {
			held.Store(key, value)
			return Held(key, ttl, &nameClaim{store: store, value: value, ttl: ttl}), nil
		}
		if time.Now().After(deadline) {
			host, pid := "?", "?"
			if parts := strings.Fields(seen); len(parts) == 3 {
				host, pid = parts[0], parts[1]
			}
			return nil, fmt.Errorf("%w (host %s, pid %s)", ErrInUse, host, pid)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("take lease %s: %w", key, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// nameClaim is a held name.
type nameClaim struct {
	store Named
	value string
	ttl   time.Duration
}

func (c *nameClaim) Renew(ctx context.Context) error {
	ok, err := c.store.Renew(ctx, c.value, c.ttl)
	if err != nil {
		return err
	}
	if !ok {
		holder, _ := c.store.Holder(ctx)
		return fmt.Errorf("held by %q: %w", holder, ErrLost)
	}
	return nil
}

func (c *nameClaim) Release(ctx context.Context) error {
	held.Delete(c.store.Key())
	return c.store.Release(ctx, c.value)
}

// holderValue names the holder: its host, its process id and a random
// token, so that a restarted node can tell a lease left by its own dead
// predecessor from one held by a live process.
func holderValue() string {
	host, _ := os.Hostname()
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return strings.Join([]string{host, strconv.Itoa(os.Getpid()), hex.EncodeToString(b)}, " ")
}

// deadHolder tells whether a lease value names a process of this host that
// is gone: no such process, or our own process id while this process holds
// no lease on the name (a restarted container has the same pid as the one
// that died). key is the lease's key.
func deadHolder(value, key string) bool {
	parts := strings.Fields(value)
	if len(parts) != 3 {
		return false
	}
	host, _ := os.Hostname()
	pid, err := strconv.Atoi(parts[1])
	if parts[0] != host || err != nil || pid <= 0 {
		return false
	}
	if pid == os.Getpid() {
		_, ours := held.Load(key)
		return !ours
	}
	if zombie(pid) {
		return true
	}
	p, err := os.FindProcess(pid)
	if err != nil {
		return true
	}
	err = p.Signal(syscall.Signal(0))
	return err != nil && !errors.Is(err, syscall.EPERM)
}

// zombie tells whether a process has exited and only waits for its parent
// to reap it (a node killed by a supervisor that has not waited for it
// yet), which signal 0 still reaches. Linux's /proc says so; elsewhere it
// reports false and the lease is waited out.
func zombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// "pid (command) state ...": the command may hold spaces and brackets.
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] == 'Z'
}
