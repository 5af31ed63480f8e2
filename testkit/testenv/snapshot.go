package testenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// Snapshots make Redis go back in time with its keys present: a copy of
// a server's files taken mid-sale, and the server killed and started
// again from that copy. That is what a restart from an older RDB file, an
// everysec AOF that lost its last second in a crash, or the promotion of
// a lagging replica does to the data: every key is there, at an older
// value.

// SaveSnapshot copies the server's files, as they are now, into dir. A
// server without an append-only file writes its dataset first (SAVE);
// a durable one's append-only files are copied as they are, which is what
// a crash would leave (Redis loads a last command cut short, if any,
// without it: aof-load-truncated).
func (s *RedisServer) SaveSnapshot(ctx context.Context, dir string) error {
	if !s.durable {
		c := s.newClient()
		err := c.Save(ctx).Err()
		_ = c.Close()
		if err != nil {
			return fmt.Errorf("snapshot redis: SAVE: %w", err)
		}
	}
	if err := copyTree(s.dir, dir); err != nil {
		return fmt.Errorf("snapshot redis: %w", err)
	}
	return nil
}

// RestartFromSnapshot kills the server (SIGKILL), replaces its files by
// the snapshot in dir and starts it again on its port: it comes back with
// what it held when the snapshot was taken.
func (s *RedisServer) RestartFromSnapshot(dir string) error {
	s.Kill()
	if err := s.Wipe(); err != nil {
		return err
	}
	if err := copyTree(dir, s.dir); err != nil {
		return fmt.Errorf("restore redis snapshot: %w", err)
	}
	return s.Start()
}

// RollBackInPlace makes the running server go back to its last SAVE
// (DEBUG RELOAD NOSAVE) without a restart: the same process, so the same
// run id. No crash or failover does that; an operator who loads older
// data into a running server does, and the service's last lines of
// defence against a Redis that went back in time (fences, claim nonces,
// the record of sales) are tested with it.
func (s *RedisServer) RollBackInPlace(ctx context.Context) error {
	c := s.newClient()
	defer c.Close()
	if err := c.Do(ctx, "DEBUG", "RELOAD", "NOSAVE").Err(); err != nil {
		return fmt.Errorf("roll redis back in place: DEBUG RELOAD NOSAVE: %w", err)
	}
	return nil
}

// copyTree copies the regular files under src into dst, which it creates.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(to, 0o700)
		case !d.Type().IsRegular():
			return nil
		}
		return copyFile(path, to)
	})
}

func copyFile(from, to string) (err error) {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, out.Close()) }()
	_, err = io.Copy(out, in)
	return err
}
